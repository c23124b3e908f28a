//===- GradientsReducedToOwnersTest.cpp - Zero gradients off the owners ---===//
//
// A trainer that reduces each matrix's gradient to its owner (muonc.torch's
// owner reduction under DDP) leaves zero on the other ranks, whose momentum
// of it then stays zero. setGradientsReducedToOwners lets the step skip
// that momentum and that NaN check. Training must be the same bits as with
// the whole gradient on every rank, and what is skipped must be skipped.
//
//===----------------------------------------------------------------------===//
#include "EveryRank.h"
#include "muon/Compiler/Compile.h"
#include "muon/Runtime/Optimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <string>
#include <vector>

using namespace muon;
using namespace muon::runtime;
using muon::testing::onEveryRank;
namespace mc = muon::compiler;

namespace {

/// Three matrices and an AdamW vector, replicated over 2 data-parallel
/// ranks (DDP).
Plan ddpPlan() {
  mc::Model model;
  auto param = [&](std::string name, std::vector<int64_t> shape) {
    mc::Param p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.placements = {mc::Placement::replicate()};
    model.params.push_back(p);
  };
  param("wq", {24, 20});
  param("w1", {20, 36});
  param("w2", {20, 20});
  param("norm", {20});
  mc::DistributedConfig config = mc::createDTensorConfig({{2}, {"dp"}});
  Plan plan;
  std::string error;
  {
    auto compiled = mc::compile(model, &config);
    EXPECT_TRUE(compiled.ok()) << compiled.status().text();
    if (compiled.ok())
      plan = std::move(compiled).value();
  }
  return plan;
}

/// The owner of 2-D parameter `name` (-1 for the AdamW one).
int64_t ownerOf(const Plan &plan, const std::string &name) {
  for (const PlanMatrix &m : plan.matrices)
    if (m.param == name)
      return m.owner;
  return -1;
}

float gradientAt(int64_t step, size_t param, size_t i) {
  return std::sin(0.37f * float(i) + 1.3f * float(param) + 0.7f * float(step));
}

struct RankResult {
  std::map<std::string, std::vector<float>> values, momentum;
  std::vector<bool> applied;
};

/// Trains `steps` steps on both ranks. `reduced`: each matrix's gradient
/// is bound on its owner only (`elsewhere` on the other rank), otherwise
/// whole everywhere; `promise`: with setGradientsReducedToOwners. At step
/// `poisonOwnedAt` the owner's gradient of every matrix holds a NaN.
std::map<int64_t, RankResult> train(const Plan &plan, bool reduced,
                                    bool promise, float elsewhere,
                                    int64_t steps, int64_t poisonOwnedAt = -1) {
  std::map<int64_t, RankResult> results;
  std::mutex lock;
  onEveryRank(plan, [&](int64_t rank, Optimizer &opt, Device &) {
    opt.setGradientsReducedToOwners(promise);
    std::map<std::string, std::vector<float>> values, grads;
    for (const ParamSlot &p : opt.params()) {
      values[p.name].assign(p.elements, 0.25f);
      grads[p.name].assign(p.elements, 0.0f);
    }
    RankResult mine;
    for (int64_t s = 0; s < steps; ++s) {
      for (size_t i = 0; i < plan.params.size(); ++i) {
        const std::string &name = plan.params[i].name;
        const int64_t owner = ownerOf(plan, name);
        std::vector<float> &g = grads[name];
        for (size_t e = 0; e < g.size(); ++e)
          g[e] = !reduced || owner < 0 || owner == rank ? gradientAt(s, i, e)
                                                        : elsewhere;
        if (s == poisonOwnedAt && owner == rank)
          g[3] = std::numeric_limits<float>::quiet_NaN();
        ASSERT_TRUE(opt.bind(name, values[name].data(), g.data(), DType::F32,
                             static_cast<int64_t>(g.size()))
                        .ok());
      }
      StepResult result;
      Status status = opt.step(result);
      ASSERT_TRUE(status.ok()) << status.message();
      mine.applied.push_back(result.applied);
    }
    mine.values = values;
    for (const PlanParam &p : plan.params)
      if (const float *m = opt.stateData(p.name, "momentum"))
        mine.momentum[p.name].assign(m, m + values[p.name].size());
    std::lock_guard<std::mutex> hold(lock);
    results[rank] = std::move(mine);
  });
  return results;
}

TEST(GradientsReducedToOwners, TrainsAsTheWholeGradientEverywhere) {
  const Plan plan = ddpPlan();
  ASSERT_NE(ownerOf(plan, "wq"), -1);
  auto whole = train(plan, false, false, 0.0f, 4);
  auto reduced = train(plan, true, true, 0.0f, 4);
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(reduced[r].values, whole[r].values) << "rank " << r;
    EXPECT_EQ(reduced[r].applied, std::vector<bool>(4, true));
    for (const auto &[name, momentum] : reduced[r].momentum) {
      if (ownerOf(plan, name) == r)
        EXPECT_EQ(momentum, whole[r].momentum[name]) << name;
      else
        EXPECT_EQ(momentum, std::vector<float>(momentum.size(), 0.0f))
            << name << " on rank " << r;
    }
  }
}

TEST(GradientsReducedToOwners, LeavesTheOtherRanksMatricesAlone) {
  // What a rank binds for a matrix it does not own is not read: neither a
  // non-zero gradient (its momentum stays zero) nor a NaN (no skip).
  const Plan plan = ddpPlan();
  const float nanValue = std::numeric_limits<float>::quiet_NaN();
  auto zero = train(plan, true, true, 0.0f, 3);
  auto ones = train(plan, true, true, 1.0f, 3);
  auto nan = train(plan, true, true, nanValue, 3);
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(ones[r].values, zero[r].values);
    EXPECT_EQ(ones[r].momentum, zero[r].momentum);
    EXPECT_EQ(nan[r].values, zero[r].values);
    EXPECT_EQ(nan[r].applied, std::vector<bool>(3, true));
  }
  // Without the promise the same NaN skips every step, and the non-zero
  // gradient moves the other rank's momentum.
  auto unpromised = train(plan, true, false, nanValue, 2);
  for (int64_t r = 0; r < 2; ++r)
    EXPECT_EQ(unpromised[r].applied, std::vector<bool>(2, false));
  auto counted = train(plan, true, false, 1.0f, 1);
  EXPECT_NE(counted[0].momentum, zero[0].momentum);
  auto told = train(plan, true, true, 0.0f, 3, /*poisonOwnedAt=*/1);
  // A NaN in an owner's gradient still skips the step on every rank.
  for (int64_t r = 0; r < 2; ++r)
    EXPECT_EQ(told[r].applied, (std::vector<bool>{true, false, true}))
        << "rank " << r;
}

} // namespace
