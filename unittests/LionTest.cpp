//===- LionTest.cpp - Lion, an algorithm added through the registry -------===//
//
// Lion (Chen et al. 2023, arXiv 2302.06675) for the non-matrix groups,
// beside AdamW: its registered step against a reference written from the
// paper's Algorithm 2 (in double), a compiled model's steps on one rank
// against the same reference, four ranks equal to one device, and its
// state through a checkpoint.
//
//===----------------------------------------------------------------------===//
#include "muon/Compiler/Compile.h"
#include "muon/Plan/Algorithm.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/ElementStep.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Runtime/Testing/Synthetic.h"
#include "muon/Support/OutputFile.h"
#include "CheckpointTestSupport.h"
#include "ModelParams.h"
#include "OneRankOptimizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

using namespace muon;
using namespace muon::runtime;
namespace mc = muon::compiler;
using muon::testing::addParam;
using muon::testing::compileFor;
using muon::testing::OneRank;
using muon::testing::randomValues;

namespace {

AlgorithmId lionId() {
  std::optional<AlgorithmId> id = findAlgorithm("lion");
  EXPECT_TRUE(id.has_value());
  return id.value_or(kAdamW);
}

/// The paper's Algorithm 2 (decoupled weight decay) on one element, in
/// double: returns the new parameter, updates the momentum `m`.
double paperLion(double p, double g, double &m, double lr, double beta1,
                 double beta2, double wd) {
  const double c = beta1 * m + (1 - beta1) * g;
  const double sign = c > 0 ? 1 : (c < 0 ? -1 : 0);
  p = p - lr * (sign + wd * p);
  m = beta2 * m + (1 - beta2) * g;
  return p;
}

/// A model with Lion on its vectors and embeddings (two groups of their
/// own settings), Muon on its matrices and AdamW on one bias.
mc::Model lionModel() {
  mc::Model model;
  mc::ParamGroup hidden(kMuon), embed(lionId()), norms(lionId()),
      bias(kAdamW);
  hidden.name = "hidden";
  hidden.setNumber("lr", 0.02);
  embed.name = "embed";
  embed.setNumber("lr", 3e-4);
  embed.setNumber("weight_decay", 0.1);
  norms.name = "norms";
  norms.setNumber("lr", 1e-3);
  norms.setNumber("beta1", 0.95);
  norms.setNumber("beta2", 0.98);
  bias.name = "bias";
  model.groups = {hidden, embed, norms, bias};
  auto param = [&](std::string name, std::vector<int64_t> shape,
                   std::string group) {
    addRowShardedParam(model, std::move(name), std::move(shape),
                       std::move(group));
  };
  param("emb", {16, 6}, "embed");
  param("w1", {8, 12}, "hidden");
  param("norm", {12}, "norms");
  param("w2", {12, 8}, "hidden");
  param("b", {8}, "bias");
  return model;
}

TEST(Lion, TheRegistryHasIt) {
  const Algorithm &lion = algorithmOf(lionId());
  EXPECT_FALSE(lion.orthogonalizes);
  EXPECT_STREQ(lion.updateStep, "lion");
  ASSERT_NE(findElementStep("lion"), nullptr);
  ASSERT_EQ(lion.slots.size(), 1u);
  EXPECT_STREQ(lion.slots[0].name, "exp_avg");
  // torch-style defaults: lr 1e-4, betas (0.9, 0.99), no weight decay.
  const PlanGroup g(lionId());
  EXPECT_EQ(g.number("lr"), 1e-4);
  EXPECT_EQ(g.number("beta1"), 0.9);
  EXPECT_EQ(g.number("beta2"), 0.99);
  EXPECT_EQ(g.number("weight_decay"), 0.0);
}

TEST(Lion, TheStepFollowsThePaper) {
  PlanGroup g(lionId());
  g.setNumber("lr", 0.01);
  g.setNumber("beta1", 0.8);
  g.setNumber("beta2", 0.95);
  g.setNumber("weight_decay", 0.5);
  const ElementStep &step = *findElementStep("lion");
  const int64_t n = 64;
  std::vector<float> p = randomValues(n, 1), m(n, 0.0f);
  std::vector<double> refP(p.begin(), p.end()), refM(n, 0.0);
  cpu::CpuDevice device;
  for (int s = 0; s < 6; ++s) {
    std::vector<float> grad = randomValues(n, 10 + s);
    ElementOperands o;
    o.values = p.data();
    o.grad = grad.data();
    o.slots[0] = m.data();
    o.n = n;
    device.runElementStep(step, o, step.scalars({g, s + 1}));
    for (int64_t i = 0; i < n; ++i) {
      refP[i] = paperLion(refP[i], grad[i], refM[i], 0.01, 0.8, 0.95, 0.5);
      // f32 against double: a few roundings per step.
      ASSERT_NEAR(p[i], refP[i], 1e-6) << "step " << s << " element " << i;
      ASSERT_NEAR(m[i], refM[i], 1e-6) << "step " << s << " element " << i;
    }
  }
  // A first step from zero momentum moves every element by lr exactly
  // (after decay) against its gradient's sign; a zero gradient, by nothing.
  g.setNumber("weight_decay", 0);
  float values[3] = {1.0f, 1.0f, 1.0f}, grads[3] = {0.3f, -2.0f, 0.0f},
        moments[3] = {0, 0, 0};
  ElementOperands o;
  o.values = values;
  o.grad = grads;
  o.slots[0] = moments;
  o.n = 3;
  device.runElementStep(step, o, step.scalars({g, 1}));
  EXPECT_EQ(values[0], 1.0f - 0.01f);
  EXPECT_EQ(values[1], 1.0f + 0.01f);
  EXPECT_EQ(values[2], 1.0f);
}

TEST(Lion, OneRankFollowsThePaper) {
  const Plan plan = compileFor(lionModel(), 1);
  OneRank one(plan);
  ASSERT_TRUE(one.opt);
  // The paper's state per Lion parameter, in double.
  std::vector<std::vector<double>> refP(plan.params.size()),
      refM(plan.params.size());
  for (size_t i = 0; i < plan.params.size(); ++i) {
    refP[i].assign(one.values[i].begin(), one.values[i].end());
    refM[i].assign(one.values[i].size(), 0.0);
  }
  for (int64_t s = 0; s < 5; ++s) {
    one.setGrads(plan, s);
    StepResult result;
    ASSERT_TRUE(one.opt->step(result).ok());
    for (size_t i = 0; i < plan.params.size(); ++i) {
      const PlanParam &p = plan.params[i];
      if (p.algorithm != lionId())
        continue;
      const PlanGroup &g = plan.groups[p.group];
      for (size_t e = 0; e < refP[i].size(); ++e) {
        refP[i][e] = paperLion(refP[i][e], one.grads[i][e], refM[i][e],
                               g.number("lr"), g.number("beta1"),
                               g.number("beta2"), g.number("weight_decay"));
        ASSERT_NEAR(one.values[i][e], refP[i][e], 1e-6)
            << p.name << " step " << s << " element " << e;
      }
    }
  }
  // Its state is one slot, by its name.
  EXPECT_NE(one.opt->stateData("emb", "exp_avg"), nullptr);
  EXPECT_EQ(one.opt->stateData("emb", "exp_avg_sq"), nullptr);
}

/// `steps` steps of `plan` on all its ranks, the synthetic model's
/// gradients; every parameter whole afterwards.
std::vector<std::vector<float>> run(const Plan &plan, int64_t steps) {
  std::vector<std::vector<float>> whole = wholeTensors(plan);
  muon::testing::onEveryRank(plan.worldSize, [&](int64_t, Communicator &comm) {
    cpu::CpuDevice device;
    std::unique_ptr<Optimizer> opt;
    Status s = Optimizer::create(plan, comm, device, {20.0}, opt);
    ASSERT_TRUE(s.ok()) << s.message();
    SyntheticModel model(*opt, device, 5, summandCounts(plan));
    for (int64_t k = 0; k < steps; ++k) {
      model.makeGradients(k, 1, {});
      StepResult result;
      Status status = opt->step(result);
      ASSERT_TRUE(status.ok()) << status.message();
    }
    model.copyInto(whole);
  });
  return whole;
}

TEST(Lion, FourRanksEqualOneDevice) {
  const Plan four = compileFor(lionModel(), 4);
  const std::vector<std::vector<float>> a = run(four, 4),
                                        b = run(referencePlan(four), 4);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].size(), b[i].size());
    EXPECT_EQ(std::memcmp(a[i].data(), b[i].data(), a[i].size() * 4), 0)
        << four.params[i].name;
  }
  // Lion moved its parameters (every element by about lr a step).
  const std::vector<std::vector<float>> start = run(four, 0);
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_NE(a[i], start[i]) << four.params[i].name;
}

TEST(Lion, ACheckpointResumesTheSameRun) {
  // Two ranks: 3 steps, save, 2 more; a fresh optimizer loading the save
  // (on 2 ranks, and resharded onto 1) ends at the same bits.
  const mc::Model model = lionModel();
  const Plan two = compileFor(model, 2), one = compileFor(model, 1);
  const std::string dir = muon::testing::scratchDir("lion");
  std::vector<std::vector<float>> uninterrupted = wholeTensors(two);
  muon::testing::onEveryRank(2, [&](int64_t, Communicator &comm) {
    cpu::CpuDevice device;
    std::unique_ptr<Optimizer> opt;
    ASSERT_TRUE(Optimizer::create(two, comm, device, {20.0}, opt).ok());
    SyntheticModel synthetic(*opt, device, 9, summandCounts(two));
    for (int64_t k = 0; k < 5; ++k) {
      if (k == 3) {
        Status s = opt->saveCheckpoint(dir, true);
        ASSERT_TRUE(s.ok()) << s.message();
      }
      synthetic.makeGradients(k, 1, {});
      StepResult result;
      ASSERT_TRUE(opt->step(result).ok());
    }
    synthetic.copyInto(uninterrupted);
  });
  for (const Plan *plan : {&two, &one}) {
    std::vector<std::vector<float>> resumed = wholeTensors(*plan);
    muon::testing::onEveryRank(
        plan->worldSize, [&](int64_t, Communicator &comm) {
          cpu::CpuDevice device;
          std::unique_ptr<Optimizer> opt;
          ASSERT_TRUE(Optimizer::create(*plan, comm, device, {20.0}, opt).ok());
          SyntheticModel synthetic(*opt, device, 9, summandCounts(*plan));
          Status s = opt->loadCheckpoint(dir, true);
          ASSERT_TRUE(s.ok()) << s.message();
          for (int64_t k = 3; k < 5; ++k) {
            synthetic.makeGradients(k, 1, {});
            StepResult result;
            ASSERT_TRUE(opt->step(result).ok());
          }
          synthetic.copyInto(resumed);
        });
    ASSERT_EQ(resumed.size(), uninterrupted.size());
    for (size_t i = 0; i < resumed.size(); ++i)
      EXPECT_EQ(std::memcmp(resumed[i].data(), uninterrupted[i].data(),
                            resumed[i].size() * 4),
                0)
          << plan->worldSize << " ranks, " << plan->params[i].name;
  }
  removeTree(dir);
}

} // namespace
