//===- MissingGradientTest.cpp - Parameters without a gradient ------------===//
//
// torch skips a parameter whose grad is None: no decay, no momentum change,
// no AdamW step. The runtime does the same when every rank that holds a
// piece of the parameter binds no gradient: the ranks agree on the set in
// the step's agreement, and that step's exchanges and Newton-Schulz leave
// those matrices out. A parameter with a gradient on some of its holders
// only is refused on every rank, naming both sides.
//
//===----------------------------------------------------------------------===//
#include "EveryRank.h"
#include "muon/Compiler/Compile.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Runtime/Testing/Synthetic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <thread>

using namespace muon;
using namespace muon::runtime;
using muon::testing::onEveryRank;
namespace mc = muon::compiler;

namespace {

/// Matrices split over a 2 x 2 (fsdp, tp) mesh, one of them a Partial sum
/// over tp, and AdamW vectors, one of them with a partial gradient too.
Plan meshPlan(bool withTiny = false) {
  mc::Model model;
  auto param = [&](std::string name, std::vector<int64_t> shape,
                   std::vector<mc::Placement> placements) {
    mc::Param p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.placements = std::move(placements);
    model.params.push_back(p);
  };
  using P = mc::Placement;
  param("wq", {24, 20}, {P::shard(0), P::shard(1)});
  param("w1", {20, 36}, {P::shard(1), P::shard(0)});
  param("wo", {17, 20}, {P::shard(0), P::partial()});
  param("w2", {20, 20}, {P::shard(0), P::replicate()});
  param("norm", {20}, {P::replicate(), P::replicate()});
  param("bias", {36}, {P::shard(0), P::partial()});
  if (withTiny) // one element: the fsdp axis's second half holds nothing
    param("tiny", {1}, {P::shard(0), P::replicate()});
  mc::DistributedConfig config =
      mc::createDTensorConfig({{2, 2}, {"fsdp", "tp"}});
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

int64_t paramIndex(const Plan &plan, const std::string &name) {
  for (size_t i = 0; i < plan.params.size(); ++i)
    if (plan.params[i].name == name)
      return static_cast<int64_t>(i);
  ADD_FAILURE() << "no parameter " << name;
  return 0;
}

/// How many ranks hold a piece of parameter `name`.
int64_t holderCount(const Plan &plan, const std::string &name) {
  const PlanParam &param = plan.params[paramIndex(plan, name)];
  int64_t count = 0;
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    bool holds = param.layout.inSubmesh(plan.mesh.coordsOfRank(r));
    for (const Range &range :
         param.layout.localBox(plan.mesh, plan.mesh.coordsOfRank(r)))
      holds = holds && range.size() > 0;
    count += holds;
  }
  return count;
}

/// Per step, the parameters without a gradient.
using Missing = std::map<int64_t, std::set<std::string>>;

/// Trains `plan`'s synthetic problem for `steps` steps on one optimizer,
/// binding no gradient for the parameters `missing` names at each step;
/// records the counters of every step.
void train(const Plan &plan, Optimizer &opt, SyntheticModel &model,
           int64_t steps, const Missing &missing,
           std::vector<StepCounters> *counters) {
  for (int64_t s = 0; s < steps; ++s) {
    model.makeGradients(s, 1, {});
    auto it = missing.find(s);
    for (size_t i = 0; i < plan.params.size(); ++i) {
      const bool without =
          it != missing.end() && it->second.count(plan.params[i].name);
      ASSERT_TRUE(model.setHasGradient(static_cast<int64_t>(i), !without).ok());
    }
    std::vector<std::vector<float>> before;
    for (size_t i = 0; i < plan.params.size(); ++i)
      before.push_back(model.values(static_cast<int64_t>(i)));
    StepResult result;
    Status status = opt.step(result);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_TRUE(result.applied);
    // What was left out did not move; everything else did.
    for (size_t i = 0; i < plan.params.size(); ++i) {
      const bool without =
          it != missing.end() && it->second.count(plan.params[i].name);
      if (model.values(static_cast<int64_t>(i)).empty())
        continue; // this rank holds none of it
      if (without)
        EXPECT_EQ(model.values(static_cast<int64_t>(i)), before[i])
            << plan.params[i].name << " at step " << s;
      else
        EXPECT_NE(model.values(static_cast<int64_t>(i)), before[i])
            << plan.params[i].name << " at step " << s;
    }
    if (counters)
      counters->push_back(opt.counters());
  }
}

/// Whether one rank's values of `param` may differ from the distributed
/// run's in the last bits: a Muon matrix with a partial gradient keeps its
/// momentum as summands that its owner sums (docs/architecture.md), the
/// same sum as one rank's momentum of the summed gradient, rounded in
/// another order. In f32 Newton-Schulz that shows (about one unit in the
/// last place); bf16's rounding of the input hides it.
bool roundedInAnotherOrder(const PlanParam &param) {
  return param.orthogonalized() && param.layout.isPartial();
}

/// Every element of `got` within `ulps` units in the last place of
/// `want`'s largest magnitude: an update's rounding is on the scale of the
/// matrix, not of each element (a value near zero moves by as much).
void expectWithinUlps(const std::vector<float> &got,
                      const std::vector<float> &want, int ulps,
                      const std::string &name) {
  ASSERT_EQ(got.size(), want.size()) << name;
  float largest = 0;
  for (float v : want)
    largest = std::max(largest, std::fabs(v));
  const float ulp = std::nextafter(largest, INFINITY) - largest;
  for (size_t k = 0; k < want.size(); ++k)
    EXPECT_LE(std::fabs(got[k] - want[k]), ulps * ulp)
        << name << "[" << k << "]: " << got[k] << " against " << want[k];
}

/// Trains `plan` on every rank and on one rank with the same parameters
/// left out at the same steps; expects the same values (bit for bit, but
/// for roundedInAnotherOrder's: within 4 units in the last place). Returns
/// every rank's counters of every step.
std::vector<std::vector<StepCounters>>
expectEqualsOneRank(const Plan &plan, int64_t steps, const Missing &missing) {
  std::vector<std::vector<float>> distributed = wholeTensors(plan);
  std::vector<std::vector<StepCounters>> counters(plan.worldSize);
  onEveryRank(plan, [&](int64_t r, Optimizer &opt, Device &device) {
    SyntheticModel model(opt, device, 7, summandCounts(plan));
    train(plan, opt, model, steps, missing, &counters[r]);
    EXPECT_EQ(opt.stepsTaken(), steps);
    model.copyInto(distributed);
  });
  const Plan reference = referencePlan(plan);
  SingleRankCommunicator self;
  cpu::CpuDevice device;
  std::unique_ptr<Optimizer> one;
  EXPECT_TRUE(Optimizer::create(reference, self, device, {}, one).ok());
  SyntheticModel model(*one, device, 7, summandCounts(plan));
  train(reference, *one, model, steps, missing, nullptr);
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const std::vector<float> alone = model.values(static_cast<int64_t>(i));
    if (roundedInAnotherOrder(plan.params[i]))
      expectWithinUlps(distributed[i], alone, 4, plan.params[i].name);
    else
      EXPECT_EQ(distributed[i], alone) << plan.params[i].name;
  }
  return counters;
}

TEST(MissingGradient, LeftOutOnEveryRankEqualsOneRankLeavingItOut) {
  const Plan plan = meshPlan();
  // A Muon matrix and an AdamW vector, then a Partial matrix and a partial
  // AdamW vector, then everything but one matrix.
  const Missing missing = {{1, {"w1", "norm"}},
                           {2, {"wo", "bias"}},
                           {3, {"wq", "w1", "wo", "norm", "bias"}}};
  std::vector<std::vector<StepCounters>> counters =
      expectEqualsOneRank(plan, 4, missing);

  // Left out, a parameter's matrices cost nothing: at step 3 only w2's
  // pieces cross (to its owner and back) and only its owner runs
  // Newton-Schulz, on it alone.
  int64_t flops = 0, bytes = 0, allBytes = 0;
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    flops += counters[r][3].nsFlops;
    bytes += counters[r][3].bytesSent;
    allBytes += counters[r][0].bytesSent;
  }
  int64_t w2 = -1, w2Elements = 0;
  for (size_t k = 0; k < plan.matrices.size(); ++k)
    if (plan.matrices[k].param == "w2")
      w2 = static_cast<int64_t>(k);
  ASSERT_GE(w2, 0);
  for (const Exchange &ex : plan.exchanges)
    for (const Transfer &t : ex.transfers)
      if (t.matrix == w2)
        w2Elements += t.elements();
  EXPECT_EQ(flops, plan.matrices[w2].nsFlops);
  EXPECT_EQ(bytes, w2Elements * 4);
  EXPECT_GT(w2Elements, 0);
  EXPECT_LT(bytes, allBytes);
}

TEST(MissingGradient, ListsTheSameOnEveryRankNeedNoSecondExchange) {
  // Every rank holds every parameter of this plan, so every rank's list is
  // the step's set: the step's one control all-gather (and the
  // device-error check after the work) is all it takes, whether the set
  // changes or not. The values still equal one rank's.
  const Plan plan = meshPlan();
  const Missing missing = {{1, {"w1", "norm"}}, {2, {"w1", "norm"}},
                           {3, {"w1", "norm"}}, {5, {"wo"}},
                           {6, {"wo"}}};
  std::vector<std::vector<StepCounters>> counters =
      expectEqualsOneRank(plan, 7, missing);
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    ASSERT_EQ(counters[r].size(), 7u);
    for (size_t s = 0; s < 7; ++s)
      EXPECT_EQ(counters[r][s].controlCollectives, 2)
          << "rank " << r << ", step " << s;
  }
}

TEST(MissingGradient, ListsThatDifferBetweenRanksAreExchanged) {
  // `tiny` (one element over the fsdp axis) is held by ranks 0 and 1 only:
  // without its gradient, their lists name it and the others' do not, so
  // the ranks exchange the lists where they change (step 1), and keep the
  // last set while none does (step 2). Lists that become the same on every
  // rank (empty at step 3, a matrix every rank holds at step 4) need no
  // exchange.
  const Plan plan = meshPlan(/*withTiny=*/true);
  ASSERT_EQ(holderCount(plan, "tiny"), 2);
  const Missing missing = {{1, {"tiny", "w2"}}, {2, {"tiny", "w2"}},
                           {4, {"w1"}}};
  std::vector<std::vector<StepCounters>> counters =
      expectEqualsOneRank(plan, 5, missing);
  const std::vector<int64_t> expected = {2, 3, 2, 2, 2};
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    ASSERT_EQ(counters[r].size(), expected.size());
    for (size_t s = 0; s < expected.size(); ++s)
      EXPECT_EQ(counters[r][s].controlCollectives, expected[s])
          << "rank " << r << ", step " << s;
  }
}

TEST(MissingGradient, OneHolderGettingItsGradientBackIsRefused) {
  // After a step that agreed on leaving wq out everywhere, rank 1 alone
  // has its gradient again: its list changed, so the ranks compare lists,
  // and the step is refused on every rank.
  const Plan plan = meshPlan();
  const int64_t wq = paramIndex(plan, "wq");
  std::vector<Status> statuses(plan.worldSize);
  onEveryRank(plan, [&](int64_t r, Optimizer &opt, Device &device) {
    SyntheticModel model(opt, device, 9, summandCounts(plan));
    model.makeGradients(0, 1, {});
    ASSERT_TRUE(model.setHasGradient(wq, false).ok());
    StepResult result;
    ASSERT_TRUE(opt.step(result).ok());
    model.makeGradients(1, 1, {});
    ASSERT_TRUE(model.setHasGradient(wq, r == 1).ok());
    statuses[r] = opt.step(result);
    EXPECT_EQ(opt.stepsTaken(), 1);
  });
  for (int64_t r = 0; r < plan.worldSize; ++r)
    EXPECT_EQ(statuses[r].message(),
              "parameter 'wq' has a gradient on ranks [1] only, and none "
              "(grad is None) on ranks [0, 2, 3]; every rank that holds a "
              "piece of it must have a gradient, or none (nothing was "
              "changed)");
}

TEST(MissingGradient, SomeHoldersOnlyIsRefusedOnEveryRank) {
  const Plan plan = meshPlan();
  const int64_t wq = paramIndex(plan, "wq");
  std::vector<Status> statuses(plan.worldSize);
  std::vector<bool> unchanged(plan.worldSize, false);
  onEveryRank(plan, [&](int64_t r, Optimizer &opt, Device &device) {
    SyntheticModel model(opt, device, 9, summandCounts(plan));
    model.makeGradients(0, 1, {});
    std::vector<std::vector<float>> before;
    for (size_t i = 0; i < plan.params.size(); ++i)
      before.push_back(model.values(static_cast<int64_t>(i)));
    if (r == 1) {
      ASSERT_TRUE(model.setHasGradient(wq, false).ok());
    }
    StepResult result;
    statuses[r] = opt.step(result);
    bool same = opt.stepsTaken() == 0;
    for (size_t i = 0; i < plan.params.size(); ++i)
      same = same && model.values(static_cast<int64_t>(i)) == before[i];
    unchanged[r] = same;
    // The same step with rank 1's gradient back runs.
    ASSERT_TRUE(model.setHasGradient(wq, true).ok());
    EXPECT_TRUE(opt.step(result).ok());
  });
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    EXPECT_EQ(statuses[r].code(), StatusCode::FailedPrecondition);
    EXPECT_EQ(statuses[r].message(),
              "parameter 'wq' has a gradient on ranks [0, 2, 3] only, and "
              "none (grad is None) on ranks [1]; every rank that holds a "
              "piece of it must have a gradient, or none (nothing was "
              "changed)");
    EXPECT_TRUE(unchanged[r]) << "rank " << r;
  }
}

} // namespace
