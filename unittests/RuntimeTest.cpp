//===- RuntimeTest.cpp - Runtime kernels and the one-rank executor --------===//
#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/Kernels.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/NewtonSchulz.h"
#include "muon/Runtime/StepExecutor.h"
#include "muon/Runtime/Synthetic.h"
#include "muon/Planner/Schedule.h"
#include "muon/Plan/Validate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <thread>

using namespace muon;
using namespace muon::runtime;

namespace {

std::vector<float> randomMatrix(int64_t rows, int64_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(rows * cols);
  for (float &v : x)
    v = u(rng);
  return x;
}

TEST(NewtonSchulz, ConvergesToOrthogonalRows) {
  // The classic cubic iteration (1.5, -0.5, 0) converges to the polar
  // factor: rows become orthonormal.
  const int64_t rows = 12, cols = 40;
  std::vector<float> x = randomMatrix(rows, cols, 1);
  std::vector<std::array<double, 3>> cubic(40, {1.5, -0.5, 0.0});
  NsWorkspace ws;
  newtonSchulz(x.data(), rows, cols, cubic, 1e-7, ws);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < rows; ++j) {
      double dot = 0;
      for (int64_t k = 0; k < cols; ++k)
        dot += double(x[i * cols + k]) * x[j * cols + k];
      EXPECT_NEAR(dot, i == j ? 1.0 : 0.0, 1e-4) << i << "," << j;
    }
}

TEST(NewtonSchulz, TallIsTheTransposeOfWide) {
  // A tall matrix runs through the transposed BLAS path; its result is the
  // transpose of the wide path's on the transposed input.
  const int64_t rows = 30, cols = 9;
  std::vector<float> tall = randomMatrix(rows, cols, 2), wide(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      wide[c * rows + r] = tall[r * cols + c];
  std::vector<std::array<double, 3>> jordan(5, {3.4445, -4.775, 2.0315});
  NsWorkspace ws;
  int64_t tallFlops = newtonSchulz(tall.data(), rows, cols, jordan, 1e-7, ws);
  int64_t wideFlops = newtonSchulz(wide.data(), cols, rows, jordan, 1e-7, ws);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_NEAR(tall[r * cols + c], wide[c * rows + r], 1e-5);
  // The flops it ran are the contract's count.
  EXPECT_EQ(tallFlops, nsFlops(rows, cols, 5));
  EXPECT_EQ(wideFlops, nsFlops(cols, rows, 5));
}

TEST(NewtonSchulz, ZeroMatrixStaysZero) {
  std::vector<float> x(6 * 4, 0.0f);
  NsWorkspace ws;
  newtonSchulz(x.data(), 6, 4, {{3.4445, -4.775, 2.0315}}, 1e-7, ws);
  for (float v : x)
    EXPECT_EQ(v, 0.0f);
}

TEST(Kernels, Bf16RoundsToNearestEven) {
  EXPECT_EQ(toBf16Bits(1.0f), 0x3F80);
  EXPECT_EQ(roundToBf16(1.0f + std::ldexp(1.0f, -8)), 1.0f); // tie: even
  EXPECT_EQ(roundToBf16(1.0f + 3 * std::ldexp(1.0f, -9)),
            1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(roundToBf16(-2.5f), -2.5f);
  EXPECT_TRUE(std::isnan(roundToBf16(NAN)));
  EXPECT_TRUE(std::isinf(roundToBf16(INFINITY)));
}

TEST(Kernels, MomentumAndNesterov) {
  MuonSettings s;
  s.momentum = 0.95;
  float grad = 1, buf = 0, update = 0;
  momentumUpdate(&grad, &buf, &update, 1, s);
  EXPECT_NEAR(buf, 0.05f, 1e-7);
  EXPECT_NEAR(update, 0.0975f, 1e-7); // grad.lerp(buf, 0.95)
  s.nesterov = false;
  momentumUpdate(&grad, &buf, &update, 1, s);
  EXPECT_NEAR(buf, 0.0975f, 1e-7);
  EXPECT_EQ(update, buf);
}

TEST(Kernels, AdjustedLrAndUpdate) {
  MuonSettings s;
  s.lr = 0.02;
  s.weightDecay = 0.1;
  EXPECT_DOUBLE_EQ(adjustedLr(s, 64, 32), 0.02 * std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(adjustedLr(s, 32, 64), 0.02);
  s.adjustLr = "match_rms_adamw";
  EXPECT_DOUBLE_EQ(adjustedLr(s, 32, 64), 0.02 * 0.2 * 8);
  float p = 1.0f, x = 0.5f;
  applyMuonUpdate(&p, &x, 1, s, 0.1);
  EXPECT_NEAR(p, 1.0f * (1 - 0.002f) - 0.05f, 1e-7);
}

TEST(Kernels, AdamWFirstStepMovesByLr) {
  // With bias correction, AdamW's first step is lr * sign(grad) (eps aside).
  AdamWSettings s;
  s.lr = 0.01;
  s.weightDecay = 0;
  float p[2] = {1, 1}, g[2] = {0.3f, -2}, m[2] = {0, 0}, v[2] = {0, 0};
  adamwUpdate(p, g, m, v, 2, s, 1);
  EXPECT_NEAR(p[0], 0.99f, 1e-6);
  EXPECT_NEAR(p[1], 1.01f, 1e-6);
}

TEST(Synthetic, ElementsKnowTheirGlobalIndex) {
  std::vector<int64_t> shape = {3, 4, 5};
  std::vector<Range> box = {{1, 3}, {2, 4}, {0, 5}};
  std::vector<int64_t> globals;
  forEachElement(shape, box, [&](int64_t local, int64_t global) {
    EXPECT_EQ(local, static_cast<int64_t>(globals.size()));
    globals.push_back(global);
  });
  ASSERT_EQ(globals.size(), 20u);
  EXPECT_EQ(globals.front(), 1 * 20 + 2 * 5);
  EXPECT_EQ(globals.back(), 2 * 20 + 3 * 5 + 4);
  // Outside the sub-mesh (no box) there is nothing.
  int calls = 0;
  forEachElement(shape, {}, [&](int64_t, int64_t) { ++calls; });
  EXPECT_EQ(calls, 0);
  // Values depend on what they are, not on who asks.
  EXPECT_EQ(syntheticValue(7, "w", 3, 11, 0), syntheticValue(7, "w", 3, 11, 0));
  EXPECT_NE(syntheticValue(7, "w", 3, 11, 0), syntheticValue(7, "w", 3, 11, 1));
  float v = syntheticValue(7, "w", 3, 11, 0);
  EXPECT_GE(v, -1.0f);
  EXPECT_LT(v, 1.0f);
}

/// A model of one 8x12 Muon matrix, a 2x5x6 Muon stack and a 5-element
/// AdamW vector, in its single-device form.
Plan smallModel() {
  Plan plan;
  auto param = [&](std::string name, std::vector<int64_t> shape, bool muon) {
    PlanParam p;
    p.name = std::move(name);
    p.muon = muon;
    p.layout.shape = shape;
    p.layout.splitAxes.assign(shape.size(), {});
    plan.params.push_back(p);
  };
  param("w", {8, 12}, true);
  param("stack", {2, 5, 6}, true);
  param("bias", {5}, false);
  plan.muon.coefficients.assign(plan.muon.nsSteps, {3.4445, -4.775, 2.0315});
  plan.matrices.push_back({"w", 0, -1, 8, 12, -1, nsFlops(8, 12, 5)});
  for (int64_t s = 0; s < 2; ++s)
    plan.matrices.push_back({"stack", 1, s, 5, 6, -1, nsFlops(5, 6, 5)});
  return referencePlan(plan);
}

TEST(StepExecutor, NonFiniteGradientChangesNothing) {
  Plan plan = smallModel();
  SingleRankCommunicator comm;
  StepExecutor executor(plan, comm);
  std::string error;
  ASSERT_TRUE(executor.initialize(error)) << error;
  SyntheticModel model(executor, 3, {1, 1, 1});
  std::vector<std::vector<float>> before;
  for (size_t i = 0; i < plan.params.size(); ++i)
    before.push_back(model.values(i));

  model.makeGradients(0, 1, {{"stack", 0}});
  StepResult result;
  ASSERT_TRUE(executor.step(result, error)) << error;
  EXPECT_FALSE(result.applied);
  EXPECT_EQ(result.nonFiniteParam, 1);
  for (size_t i = 0; i < plan.params.size(); ++i)
    EXPECT_EQ(model.values(i), before[i]);

  // The next step applies, and counts the work it ran.
  model.makeGradients(1, 1, {});
  ASSERT_TRUE(executor.step(result, error)) << error;
  EXPECT_TRUE(result.applied);
  for (size_t i = 0; i < plan.params.size(); ++i)
    EXPECT_NE(model.values(i), before[i]);
  EXPECT_EQ(executor.counters().nsFlops,
            nsFlops(8, 12, 5) + 2 * nsFlops(5, 6, 5));
  EXPECT_EQ(executor.counters().bytesSent, 0);
}

TEST(StepExecutor, SkippedStepLeavesMomentumUntouched) {
  // Two runs: one with a NaN step in the middle, one without that step. The
  // optimizer state must not remember the skipped step.
  Plan plan = smallModel();
  SingleRankCommunicator comm;
  auto run = [&](std::vector<int64_t> steps,
                 std::vector<NonFiniteInjection> faults) {
    StepExecutor executor(plan, comm);
    std::string error;
    EXPECT_TRUE(executor.initialize(error)) << error;
    SyntheticModel model(executor, 5, {1, 1, 1});
    for (int64_t s : steps) {
      model.makeGradients(s, 1, faults);
      StepResult result;
      EXPECT_TRUE(executor.step(result, error)) << error;
    }
    std::vector<std::vector<float>> values;
    for (size_t i = 0; i < plan.params.size(); ++i)
      values.push_back(model.values(i));
    return values;
  };
  EXPECT_EQ(run({0, 1, 2}, {{"w", 1}}), run({0, 2}, {}));
}

TEST(StepExecutor, RefusesAPlanForAnotherWorldSize) {
  Plan plan = smallModel();
  plan.worldSize = 2;
  SingleRankCommunicator comm;
  StepExecutor executor(plan, comm);
  std::string error;
  EXPECT_FALSE(executor.initialize(error));
  EXPECT_EQ(error, "the plan is for 2 ranks but the run has 1");
}

/// One 8x4 Muon matrix FSDP-split over four ranks, owned by rank 2, and a
/// 4-element AdamW vector sharded the same way.
Plan fsdpModel() {
  Plan plan;
  plan.worldSize = 4;
  plan.distributed = true;
  plan.mesh.shape = {4};
  plan.params.push_back({"w", "f32", true, {{8, 4}, {{0}, {}}, {}, {}}});
  plan.params.push_back({"b", "f32", false, {{4}, {{0}}, {}, {}}});
  plan.muon.coefficients.assign(5, {3.4445, -4.775, 2.0315});
  plan.matrices.push_back({"w", 0, -1, 8, 4, 2, nsFlops(8, 4, 5)});
  plan.nsMatrices = {{}, {}, {0}, {}};
  Exchange gather{Exchange::Phase::Gather, 0, {}, {}};
  Exchange scatter{Exchange::Phase::Scatter, 0, {}, {}};
  for (int64_t r = 0; r < 4; ++r)
    if (r != 2) {
      gather.transfers.push_back({r, 2, 0, {2 * r, 2 * r + 2}, {0, 4}, 0});
      scatter.transfers.push_back({2, r, 0, {2 * r, 2 * r + 2}, {0, 4}, 0});
    }
  plan.exchanges = {gather, scatter};
  std::string error;
  EXPECT_TRUE(schedulePlan(plan, {}, error)) << error;
  return plan;
}

TEST(LocalCommunicator, ThreadsRunAPlanLikeOneDevice) {
  Plan plan = fsdpModel();
  ASSERT_TRUE(validatePlan(plan).empty()) << validatePlan(plan).str();
  const int64_t steps = 3;
  // Every rank in a thread of its own; each writes its pieces back into
  // whole tensors (disjoint elements).
  std::vector<std::vector<float>> distributed = {std::vector<float>(32),
                                                 std::vector<float>(4)};
  LocalWorld world(4);
  std::vector<std::string> errors(4);
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < 4; ++r)
    ranks.emplace_back([&, r] {
      LocalCommunicator comm(world, r);
      StepExecutor executor(plan, comm, {10.0});
      if (!executor.initialize(errors[r]))
        return;
      SyntheticModel model(executor, 11, {1, 1});
      for (int64_t s = 0; s < steps; ++s) {
        model.makeGradients(s, 1, {});
        StepResult result;
        if (!executor.step(result, errors[r]))
          return;
      }
      for (size_t i = 0; i < plan.params.size(); ++i)
        forEachElement(plan.params[i].layout.shape, executor.localBox(i),
                       [&](int64_t local, int64_t global) {
                         distributed[i][global] = model.values(i)[local];
                       });
    });
  for (std::thread &t : ranks)
    t.join();
  for (const std::string &e : errors)
    ASSERT_EQ(e, "");

  Plan ref = referencePlan(plan);
  SingleRankCommunicator self;
  StepExecutor executor(ref, self);
  std::string error;
  ASSERT_TRUE(executor.initialize(error)) << error;
  SyntheticModel model(executor, 11, {1, 1});
  for (int64_t s = 0; s < steps; ++s) {
    model.makeGradients(s, 1, {});
    StepResult result;
    ASSERT_TRUE(executor.step(result, error)) << error;
  }
  for (size_t i = 0; i < plan.params.size(); ++i)
    EXPECT_EQ(distributed[i], model.values(i)) << plan.params[i].name;
}

TEST(LocalCommunicator, AStalledPeerTimesOut) {
  LocalWorld world(2);
  LocalCommunicator comm(world, 0);
  int64_t result = 0;
  std::string error;
  EXPECT_FALSE(comm.allReduceMin(1, result, 0.05, error));
  EXPECT_EQ(error, "no answer within 0.05 s (a peer died or stalled; see "
                   "--timeout)");
}

} // namespace
