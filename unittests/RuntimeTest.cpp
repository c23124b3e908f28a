//===- RuntimeTest.cpp - Runtime kernels and the one-rank executor --------===//
#include "StatusTesting.h"
#include "muon/Plan/GroupSettings.h"
#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/Validate.h"
#include "muon/Planner/Schedule.h"
#include "muon/Runtime/Backends.h"
#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/HostStagedCommunicator.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/MatrixStep.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Runtime/StepExecutor.h"
#include "muon/Runtime/Testing/Synthetic.h"
#include "muon/Support/OutputFile.h"

#include "ElementSteps.h"
#include "PlanModel.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <mutex>
#include <random>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

using namespace muon;
using namespace muon::runtime;
using muon::runtime::cpu::CpuDevice;

namespace {

std::vector<float> randomMatrix(int64_t rows, int64_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> x(rows * cols);
  for (float &v : x)
    v = u(rng);
  return x;
}

/// Every per-matrix step is turned on by a flag of the settings table that
/// the plan fixes (it decides which matrices carry the step's state), and
/// follows that flag.
TEST(MatrixStep, EachStepFollowsAFixedFlagOfTheSettingsTable) {
  ASSERT_FALSE(matrixSteps().empty());
  for (const MatrixStep &step : matrixSteps()) {
    const GroupSetting *flag = findGroupSetting(kMuon, step.setting);
    ASSERT_NE(flag, nullptr) << step.setting;
    EXPECT_EQ(flag->kind, GroupSetting::Kind::Flag) << step.setting;
    EXPECT_TRUE(flag->fixed) << step.setting;
    PlanGroup group(kMuon);
    EXPECT_FALSE(step.enabled(group)) << step.setting;
    setSettingValue(*flag, group, 1.0);
    EXPECT_TRUE(step.enabled(group)) << step.setting;
    EXPECT_EQ(matrixStepOfState(step.state),
              &step - matrixSteps().data());
  }
}

TEST(NewtonSchulz, ConvergesToOrthogonalRows) {
  // The classic cubic iteration (1.5, -0.5, 0) converges to the polar
  // factor: rows become orthonormal.
  const int64_t rows = 12, cols = 40;
  std::vector<float> x = randomMatrix(rows, cols, 1);
  std::vector<std::array<double, 3>> cubic(40, {1.5, -0.5, 0.0});
  CpuDevice device;
  device.newtonSchulz(x.data(), 1, rows, cols, cubic, 1e-7, DType::F32);
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
  CpuDevice device;
  int64_t tallFlops = device.newtonSchulz(tall.data(), 1, rows, cols, jordan, 1e-7,
                                          DType::F32);
  int64_t wideFlops = device.newtonSchulz(wide.data(), 1, cols, rows, jordan, 1e-7,
                                          DType::F32);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      EXPECT_NEAR(tall[r * cols + c], wide[c * rows + r], 1e-5);
  // The flops it ran are the contract's count.
  EXPECT_EQ(tallFlops, nsFlops(rows, cols, 5));
  EXPECT_EQ(wideFlops, nsFlops(cols, rows, 5));
}

TEST(NewtonSchulz, Bf16RoundsLikeTorchAndStaysClose) {
  // bf16 Newton-Schulz returns bf16 values, near the f32 result but not
  // equal to it (so the setting really takes effect).
  const int64_t rows = 16, cols = 48;
  std::vector<float> f32 = randomMatrix(rows, cols, 5), bf16 = f32;
  std::vector<std::array<double, 3>> jordan(5, {3.4445, -4.775, 2.0315});
  CpuDevice device;
  device.newtonSchulz(f32.data(), 1, rows, cols, jordan, 1e-7, DType::F32);
  device.newtonSchulz(bf16.data(), 1, rows, cols, jordan, 1e-7, DType::BF16);
  double diff = 0, norm = 0;
  bool differs = false;
  for (size_t i = 0; i < f32.size(); ++i) {
    EXPECT_EQ(bf16[i], roundToBf16(bf16[i])) << i;
    differs |= bf16[i] != f32[i];
    diff += (double(bf16[i]) - f32[i]) * (double(bf16[i]) - f32[i]);
    norm += double(f32[i]) * f32[i];
  }
  EXPECT_TRUE(differs);
  EXPECT_LT(std::sqrt(diff / norm), 5e-2);
}

TEST(NewtonSchulz, ABatchIsItsMatricesOneByOne) {
  // Matrices one after another in one call give what separate calls give.
  const int64_t rows = 7, cols = 5, count = 3;
  std::vector<float> batch = randomMatrix(count * rows, cols, 6);
  std::vector<float> single = batch;
  std::vector<std::array<double, 3>> jordan(5, {3.4445, -4.775, 2.0315});
  CpuDevice device;
  int64_t flops = device.newtonSchulz(batch.data(), count, rows, cols, jordan,
                                      1e-7, DType::F32);
  for (int64_t k = 0; k < count; ++k)
    device.newtonSchulz(single.data() + k * rows * cols, 1, rows, cols, jordan,
                        1e-7, DType::F32);
  EXPECT_EQ(batch, single);
  EXPECT_EQ(flops, count * nsFlops(rows, cols, 5));
}

TEST(NewtonSchulz, ZeroMatrixStaysZero) {
  std::vector<float> x(6 * 4, 0.0f);
  CpuDevice device;
  device.newtonSchulz(x.data(), 1, 6, 4, {{3.4445, -4.775, 2.0315}}, 1e-7,
                      DType::F32);
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

TEST(Kernels, F16RoundsToNearestEven) {
  // Every f16 value converts to f32 and back unchanged.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = fromF16Bits(static_cast<uint16_t>(h));
    if (std::isnan(f))
      continue;
    EXPECT_EQ(toF16Bits(f), h) << h;
  }
  // Against the compiler's own conversion (round to nearest even), on
  // normals, subnormals, ties, overflow and underflow.
  std::mt19937 rng(5);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t b = bits(rng);
    float f;
    std::memcpy(&f, &b, 4);
    if (std::isnan(f))
      continue;
    _Float16 expected = static_cast<_Float16>(f);
    uint16_t e;
    std::memcpy(&e, &expected, 2);
    EXPECT_EQ(toF16Bits(f), e) << f;
  }
  EXPECT_EQ(roundToF16(65520.0f), INFINITY); // the tie above 65504
  EXPECT_EQ(roundToF16(std::ldexp(1.0f, -25)), 0.0f); // tie with zero
  EXPECT_EQ(roundToF16(std::ldexp(1.5f, -25)), std::ldexp(1.0f, -24));
}

TEST(Kernels, MomentumAndNesterov) {
  CpuDevice device;
  PlanGroup s(kMuon);
  s.setNumber("momentum", 0.95);
  float grad = 1, buf = 0, update = 0;
  calls::runMomentum(device, &grad, DType::F32, &buf, &update, 1, s);
  EXPECT_NEAR(buf, 0.05f, 1e-7);
  EXPECT_NEAR(update, 0.0975f, 1e-7); // grad.lerp(buf, 0.95)
  s.setFlag("nesterov", false);
  calls::runMomentum(device, &grad, DType::F32, &buf, &update, 1, s);
  EXPECT_NEAR(buf, 0.0975f, 1e-7);
  EXPECT_EQ(update, buf);
}

TEST(Kernels, AdjustedLrAndUpdate) {
  PlanGroup s(kMuon);
  s.setNumber("lr", 0.02);
  s.setNumber("weight_decay", 0.1);
  EXPECT_DOUBLE_EQ(adjustedLr(s, 64, 32), 0.02 * std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(adjustedLr(s, 32, 64), 0.02);
  s.setText("adjust_lr", "match_rms_adamw");
  EXPECT_DOUBLE_EQ(adjustedLr(s, 32, 64), 0.02 * 0.2 * 8);
  // The scale modes of NVIDIA's Emerging-Optimizers and torch.optim.Muon,
  // from their formulas (docs/spec-format.md 1.3), both orientations.
  s.setText("adjust_lr", "spectral"); // sqrt(max(rows, cols))
  EXPECT_DOUBLE_EQ(adjustedLr(s, 32, 64), 0.02 * 8);
  EXPECT_DOUBLE_EQ(adjustedLr(s, 64, 32), 0.02 * 8);
  for (const char *name : {"unit_rms_norm", "spectral_unclamped"}) {
    s.setText("adjust_lr", name); // sqrt(rows/cols), not clamped at 1
    EXPECT_DOUBLE_EQ(adjustedLr(s, 64, 32), 0.02 * std::sqrt(2.0)) << name;
    EXPECT_DOUBLE_EQ(adjustedLr(s, 32, 64), 0.02 * std::sqrt(0.5)) << name;
  }
  s.setText("adjust_lr", "original");
  float p = 1.0f, x = 0.5f;
  CpuDevice device;
  calls::runMuonUpdate(device, &p, DType::F32, &x, 1, s, 0.1);
  EXPECT_NEAR(p, 1.0f * (1 - 0.002f) - 0.05f, 1e-7);
  // extra_scale_factor multiplies the update's lr after the mode's factor
  // (Megatron-LM: lr * scale_factor * extra_scale_factor), and not the
  // decay's: 1 * (1 - lr wd) - lr * 2.5 * orth.
  s.setNumber("extra_scale_factor", 2.5);
  EXPECT_DOUBLE_EQ(adjustedLr(s, 64, 32), 0.02 * std::sqrt(2.0) * 2.5);
  s.setText("adjust_lr", "spectral");
  EXPECT_DOUBLE_EQ(adjustedLr(s, 32, 64), 0.02 * 8 * 2.5);
  p = 1.0f;
  calls::runMuonUpdate(device, &p, DType::F32, &x, 1, s, adjustedLr(s, 1, 1));
  EXPECT_NEAR(p, 1.0f * (1 - 0.002f) - 0.5f * 0.02f * 2.5f, 1e-7);
}

TEST(Kernels, WeightDecayModes) {
  // From the formulas (docs/spec-format.md 1.3): decoupled scales every
  // value by 1 - lr * wd; cautious (arXiv 2510.12402) only where the update
  // orth (subtracted) and the value agree in sign, orth * value >= 0, a
  // zero agreeing; none never.
  PlanGroup s(kMuon);
  s.setNumber("lr", 0.02);
  s.setNumber("weight_decay", 0.5);
  const double alr = 0.03;
  const float values[] = {1.5f, -2.0f, 0.75f, -0.25f, 0.0f, 3.0f, -1.0f, 0.0f};
  const float orth[] = {0.4f, -0.1f, -0.3f, 0.2f, 0.5f, 0.0f, -0.0f, -0.2f};
  const int64_t n = 8;
  const float decay = static_cast<float>(1.0 - 0.02 * 0.5);
  const float step = static_cast<float>(alr);
  CpuDevice device;
  for (const char *mode : {"decoupled", "cautious", "none"}) {
    s.setText("weight_decay_mode", mode);
    float p[n];
    std::copy(values, values + n, p);
    calls::runMuonUpdate(device, p, DType::F32, orth, n, s, alr);
    for (int64_t i = 0; i < n; ++i) {
      const double product = static_cast<double>(orth[i]) * values[i];
      const bool decays = std::string(mode) == "decoupled" ||
                          (std::string(mode) == "cautious" && product >= 0);
      const float expected = (decays ? values[i] * decay : values[i]) -
                             step * orth[i];
      EXPECT_EQ(p[i], expected) << mode << " element " << i;
    }
  }
  // Mixed signs above: cautious decays elements 0, 1, 4, 5, 6, 7 and keeps
  // 2 and 3.
  s.setText("weight_decay_mode", "cautious");
  float p[n];
  std::copy(values, values + n, p);
  calls::runMuonUpdate(device, p, DType::F32, orth, n, s, alr);
  EXPECT_EQ(p[2], values[2] - step * orth[2]);
  EXPECT_EQ(p[0], values[0] * decay - step * orth[0]);
}

TEST(Kernels, AdamWFirstStepMovesByLr) {
  // With bias correction, AdamW's first step is lr * sign(grad) (eps aside).
  PlanGroup s(kAdamW);
  s.setNumber("lr", 0.01);
  s.setNumber("weight_decay", 0);
  float p[2] = {1, 1}, g[2] = {0.3f, -2}, m[2] = {0, 0}, v[2] = {0, 0};
  CpuDevice device;
  calls::runAdamW(device, p, DType::F32, g, DType::F32, m, v, 2, s, 1);
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
    p.algorithm = muon ? kMuon : kAdamW;
    p.group = muon ? 0 : 1;
    p.layout.shape = shape;
    p.layout.splitAxes.assign(shape.size(), {});
    plan.params.push_back(p);
  };
  param("w", {8, 12}, true);
  param("stack", {2, 5, 6}, true);
  param("bias", {5}, false);
  plan.ns.configs[0].coefficients.assign(5, {3.4445, -4.775, 2.0315});
  plan.matrices.push_back({"w", 0, -1, 8, 12, -1, nsFlops(8, 12, 5)});
  for (int64_t s = 0; s < 2; ++s)
    plan.matrices.push_back({"stack", 1, s, 5, 6, -1, nsFlops(5, 6, 5)});
  return referencePlan(plan);
}

Plan fsdpModel();

std::unique_ptr<Optimizer> makeOptimizer(const Plan &plan, Communicator &comm,
                                         Device &device) {
  std::string error;
  std::unique_ptr<Optimizer> opt;
  error = Optimizer::create(plan, comm, device, {}, opt).message();
  EXPECT_TRUE(opt) << error;
  return opt;
}

TEST(Optimizer, NonFiniteGradientChangesNothing) {
  Plan plan = smallModel();
  SingleRankCommunicator comm;
  CpuDevice device;
  std::unique_ptr<Optimizer> opt = makeOptimizer(plan, comm, device);
  SyntheticModel model(*opt, device, 3, {1, 1, 1});
  std::vector<std::vector<float>> before;
  for (size_t i = 0; i < plan.params.size(); ++i)
    before.push_back(model.values(i));

  model.makeGradients(0, 1, {{"stack", 0}});
  StepResult result;
  std::string error;
  ASSERT_TRUE((error = opt->step(result).message()).empty()) << error;
  EXPECT_FALSE(result.applied);
  EXPECT_EQ(result.nonFiniteParam, 1);
  EXPECT_EQ(opt->stepsTaken(), 0);
  for (size_t i = 0; i < plan.params.size(); ++i)
    EXPECT_EQ(model.values(i), before[i]);

  // The next step applies, and counts the work it ran.
  model.makeGradients(1, 1, {});
  ASSERT_TRUE((error = opt->step(result).message()).empty()) << error;
  EXPECT_TRUE(result.applied);
  for (size_t i = 0; i < plan.params.size(); ++i)
    EXPECT_NE(model.values(i), before[i]);
  EXPECT_EQ(opt->counters().nsFlops,
            nsFlops(8, 12, 5) + 2 * nsFlops(5, 6, 5));
  EXPECT_EQ(opt->counters().bytesSent, 0);
}

TEST(Optimizer, SkippedStepLeavesMomentumUntouched) {
  // Two runs: one with a NaN step in the middle, one without that step. The
  // optimizer state must not remember the skipped step.
  Plan plan = smallModel();
  SingleRankCommunicator comm;
  CpuDevice device;
  auto run = [&](std::vector<int64_t> steps,
                 std::vector<NonFiniteInjection> faults) {
    std::unique_ptr<Optimizer> opt = makeOptimizer(plan, comm, device);
    SyntheticModel model(*opt, device, 5, {1, 1, 1});
    std::string error;
    for (int64_t s : steps) {
      model.makeGradients(s, 1, faults);
      StepResult result;
      EXPECT_TRUE((error = opt->step(result).message()).empty()) << error;
    }
    std::vector<std::vector<float>> values;
    for (size_t i = 0; i < plan.params.size(); ++i)
      values.push_back(model.values(i));
    return values;
  };
  EXPECT_EQ(run({0, 1, 2}, {{"w", 1}}), run({0, 2}, {}));
}

TEST(Optimizer, RefusesAPlanForAnotherWorldSize) {
  Plan plan = smallModel();
  plan.worldSize = 2;
  plan.mesh.shape = {2};
  plan.nsMatrices.push_back({0, 1, 2});
  plan.nsBatches.push_back(plan.nsBatches[0]);
  SingleRankCommunicator comm;
  CpuDevice device;
  std::unique_ptr<Optimizer> opt;
  Status status = Optimizer::create(plan, comm, device, {}, opt);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  EXPECT_EQ(status.message(),
            "the plan is for 2 ranks but the communicator has 1");
  EXPECT_FALSE(opt);
}

TEST(Optimizer, BindingErrorsChangeNothing) {
  Plan plan = smallModel();
  SingleRankCommunicator comm;
  CpuDevice device;
  std::unique_ptr<Optimizer> opt = makeOptimizer(plan, comm, device);
  std::string error;
  std::vector<float> values(96, 1.0f), grads(96, 0.5f);
  EXPECT_FALSE(
      (error = opt->bind("nope", values.data(), grads.data(), DType::F32, 96)
                   .message())
          .empty());
  EXPECT_EQ(error, "no parameter named 'nope' in the plan");
  EXPECT_FALSE(
      (error = opt->bind("w", values.data(), grads.data(), DType::BF16, 96)
                   .message())
          .empty());
  EXPECT_EQ(error, "parameter 'w' is stored as f32 in the plan, not bf16");
  EXPECT_FALSE(
      (error = opt->bind("w", values.data(), grads.data(), DType::F32, 95)
                   .message())
          .empty());
  EXPECT_EQ(error, "parameter 'w': rank 0 holds 96 elements of it, not 95");
  ASSERT_TRUE(
      (error = opt->bind("w", values.data(), grads.data(), DType::F32, 96)
                   .message())
          .empty());
  // A step before every parameter is bound: an error, nothing changes.
  StepResult result;
  EXPECT_FALSE((error = opt->step(result).message()).empty());
  EXPECT_EQ(error, "rank 0 has not bound every parameter it holds; nothing "
                   "was changed (this rank has not bound 'stack')");
  EXPECT_EQ(values, std::vector<float>(96, 1.0f));
  EXPECT_EQ(opt->stepsTaken(), 0);
}

TEST(Optimizer, AssignmentsNameTheMatrices) {
  Plan plan = fsdpModel();
  LocalWorld world(4);
  std::vector<std::map<int64_t, std::vector<std::string>>> seen(4);
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < 4; ++r)
    ranks.emplace_back([&, r] {
      LocalCommunicator comm(world, r);
      CpuDevice device;
      std::string error;
      std::unique_ptr<Optimizer> opt;
      error = Optimizer::create(plan, comm, device, {10.0}, opt).message();
      if (opt) {
        seen[r] = opt->assignments();
        EXPECT_EQ(opt->currentRank(), r);
        EXPECT_EQ(opt->param("w")->box[0].begin, 2 * r);
      }
    });
  for (std::thread &t : ranks)
    t.join();
  std::map<int64_t, std::vector<std::string>> expected = {
      {0, {}}, {1, {}}, {2, {"w"}}, {3, {}}};
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(seen[r], expected);
}

/// One 8x4 Muon matrix FSDP-split over four ranks, owned by rank 2, and a
/// 4-element AdamW vector sharded the same way.
Plan fsdpModel() {
  Plan plan;
  plan.worldSize = 4;
  plan.distributed = true;
  plan.mesh.shape = {4};
  plan.params.push_back({"w", "f32", kMuon, 0, {{8, 4}, {{0}, {}}, {}, {}}});
  plan.params.push_back({"b", "f32", kAdamW, 1, {{4}, {{0}}, {}, {}}});
  plan.ns.configs[0].coefficients.assign(5, {3.4445, -4.775, 2.0315});
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
  EXPECT_OK(schedulePlan(plan, {}));
  return plan;
}

/// Runs fsdpModel() on 4 threads (through a host-staged transport over
/// the thread one when `staged`) and expects the reference's parameters.
static void runFsdpOnThreads(bool staged) {
  Plan plan = fsdpModel();
  ASSERT_TRUE(validatePlan(plan).ok()) << json::describe(validatePlan(plan));
  const int64_t steps = 3;
  // Every rank in a thread of its own; each writes its pieces back into
  // whole tensors (disjoint elements).
  std::vector<std::vector<float>> distributed = wholeTensors(plan);
  LocalWorld world(4);
  std::vector<std::string> errors(4);
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < 4; ++r)
    ranks.emplace_back([&, r] {
      LocalCommunicator local(world, r);
      CpuDevice device;
      HostStagedCommunicator hostStaged(local, device);
      Communicator &comm =
          staged ? static_cast<Communicator &>(hostStaged) : local;
      std::unique_ptr<Optimizer> opt;
      errors[r] = Optimizer::create(plan, comm, device, {10.0}, opt).message();
      if (!opt)
        return;
      SyntheticModel model(*opt, device, 11, {1, 1});
      for (int64_t s = 0; s < steps; ++s) {
        model.makeGradients(s, 1, {});
        StepResult result;
        if (!(errors[r] = opt->step(result).message()).empty())
          return;
      }
      model.copyInto(distributed);
    });
  for (std::thread &t : ranks)
    t.join();
  for (const std::string &e : errors)
    ASSERT_EQ(e, "");

  CpuDevice device;
  std::vector<std::vector<float>> reference;
  std::string error;
  ASSERT_OK_AND_ASSIGN(reference, runReference(plan, device, 11, steps, 1, {}));
  for (size_t i = 0; i < plan.params.size(); ++i)
    EXPECT_EQ(distributed[i], reference[i]) << plan.params[i].name;
}

TEST(LocalCommunicator, ThreadsRunAPlanLikeOneDevice) {
  runFsdpOnThreads(/*staged=*/false);
}

TEST(HostStagedCommunicator, RunsAPlanLikeOneDevice) {
  runFsdpOnThreads(/*staged=*/true);
}

TEST(HostStagedCommunicator, CopiesOnlyTheNamedRanges) {
  // Rank 1 receives 2 elements from rank 0 at offset 3 of a 6-element
  // buffer; what lies around them stays as it was.
  LocalWorld world(2);
  std::vector<std::vector<float>> received(2, std::vector<float>(6, -7.0f));
  std::vector<std::string> errors(2);
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      LocalCommunicator local(world, r);
      CpuDevice device;
      HostStagedCommunicator comm(local, device);
      std::vector<float> send = {1, 2, 3, 4};
      AllToAllV x;
      x.sendBuffer = send.data();
      x.recvBuffer = received[r].data();
      x.sendCounts = {0, r == 0 ? 2 : 0};
      x.sendOffsets = {0, 1};
      x.recvCounts = {r == 1 ? 2 : 0, 0};
      x.recvOffsets = {3, 0};
      StatusOr<PendingExchange> pending = comm.start(x);
      Status status = pending.ok() ? comm.wait(*pending, 10) : pending.status();
      errors[r] = status.text();
    });
  for (std::thread &t : ranks)
    t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
  EXPECT_EQ(received[0], std::vector<float>(6, -7.0f));
  EXPECT_EQ(received[1], (std::vector<float>{-7, -7, -7, 2, 3, -7}));
}

/// Data parallelism on 2 ranks: an 8 x 4 Muon matrix whole on both, owned
/// by rank 0, so its gather moves nothing and only the scatter crosses.
Plan replicatedModel() {
  Plan plan;
  plan.worldSize = 2;
  plan.distributed = true;
  plan.mesh.shape = {2};
  plan.params.push_back({"w", "f32", kMuon, 0, {{8, 4}, {{}, {}}, {}, {}}});
  plan.ns.configs[0].coefficients.assign(5, {3.4445, -4.775, 2.0315});
  plan.matrices.push_back({"w", 0, -1, 8, 4, 0, nsFlops(8, 4, 5)});
  plan.nsMatrices = {{0}, {}};
  Exchange gather{Exchange::Phase::Gather, 0, {}, {}};
  Exchange scatter{Exchange::Phase::Scatter, 0, {}, {}};
  scatter.transfers.push_back({0, 1, 0, {0, 8}, {0, 4}, 0});
  plan.exchanges = {gather, scatter};
  std::string error;
  EXPECT_OK(schedulePlan(plan, {}));
  return plan;
}

TEST(Optimizer, AnExchangeThatMovesNothingIsNotRun) {
  // The whole plan says the gather is empty on every rank: no rank calls
  // the transport for it. A rank's slice keeps only its own transfers, so
  // an empty list there proves nothing: both exchanges run.
  const Plan whole = replicatedModel();
  ASSERT_TRUE(validatePlan(whole).ok()) << json::describe(validatePlan(whole));
  for (bool sliced : {false, true}) {
    LocalWorld world(2);
    std::vector<std::string> errors(2);
    std::vector<int64_t> exchanges(2, -1);
    std::vector<std::vector<float>> distributed = wholeTensors(whole);
    std::vector<std::thread> ranks;
    for (int64_t r = 0; r < 2; ++r)
      ranks.emplace_back([&, r] {
        const Plan plan = sliced ? slicePlan(whole, r) : whole;
        LocalCommunicator local(world, r);
        CpuDevice device;
        std::unique_ptr<Optimizer> opt;
        errors[r] =
            Optimizer::create(plan, local, device, {10.0}, opt).message();
        if (!opt)
          return;
        SyntheticModel model(*opt, device, 5, {1});
        for (int64_t s = 0; s < 2; ++s) {
          model.makeGradients(s, 1, {});
          StepResult result;
          if (!(errors[r] = opt->step(result).message()).empty())
            return;
        }
        exchanges[r] = opt->counters().exchanges;
        if (r == 1) // the rank that receives the update
          model.copyInto(distributed);
      });
    for (std::thread &t : ranks)
      t.join();
    for (const std::string &e : errors)
      ASSERT_EQ(e, "");
    EXPECT_EQ(exchanges, std::vector<int64_t>(2, sliced ? 2 : 1))
        << (sliced ? "slices" : "whole plan");
    CpuDevice device;
    std::vector<std::vector<float>> reference;
    std::string error;
    ASSERT_OK_AND_ASSIGN(reference, runReference(whole, device, 5, 2, 1, {}));
    EXPECT_EQ(distributed[0], reference[0]);
  }
}

TEST(LocalCommunicator, AStalledPeerTimesOut) {
  LocalWorld world(2);
  LocalCommunicator comm(world, 0);
  StatusOr<int64_t> result = comm.allReduceMin(1, 0.05);
  ASSERT_FALSE(result.ok());
  // A timeout is told by its code, which context in front of the message
  // keeps; the runtime's words name no tool flag (muon-run adds "see
  // --timeout", by the code).
  EXPECT_EQ(result.status().code(), StatusCode::DeadlineExceeded);
  EXPECT_EQ(result.status().message(),
            "no answer within 0.05 s: a peer died or stalled");
  EXPECT_EQ(
      result.status().withContext("checking gradients for NaN/Inf: ").code(),
      StatusCode::DeadlineExceeded);
  SingleRankCommunicator self;
  AllToAllV x;
  x.sendCounts = x.recvCounts = {1};
  EXPECT_EQ(self.start(x).status().code(), StatusCode::InvalidArgument);
}

/// A transport that has only the required collectives: allGatherBytes is
/// the base class's, built from allGather.
class PlainCommunicator final : public Communicator {
public:
  explicit PlainCommunicator(Communicator &inner) : inner(inner) {}
  int64_t rank() const override { return inner.rank(); }
  int64_t size() const override { return inner.size(); }
  StatusOr<PendingExchange> start(const AllToAllV &x) override {
    return inner.start(x);
  }
  Status wait(PendingExchange &p, double t) override {
    return inner.wait(p, t);
  }
  void progress() override { inner.progress(); }
  StatusOr<std::vector<uint64_t>> allGather(uint64_t v, double t) override {
    ++allGathers;
    return inner.allGather(v, t);
  }
  StatusOr<int64_t> allReduceMin(int64_t v, double t) override {
    return inner.allReduceMin(v, t);
  }
  StatusOr<std::vector<std::vector<char>>>
  gatherToRoot(const std::vector<char> &b, double t) override {
    return inner.gatherToRoot(b, t);
  }
  [[noreturn]] void abort(int code) override {
    inner.abort(code);
    __builtin_unreachable();
  }
  int64_t allGathers = 0;

private:
  Communicator &inner;
};

TEST(Communicator, AllGatherBytesOnEveryTransport) {
  // Messages of 0, 5 and 17 bytes (not a multiple of the 8 the default
  // moves per round), through LocalCommunicator's own all-gather and
  // through the base class's default over allGather.
  const std::vector<std::string> sent = {"", "hello", "seventeen bytes!!"};
  for (bool plain : {false, true}) {
    LocalWorld world(3);
    std::vector<std::vector<std::vector<char>>> got(3);
    std::vector<std::string> errors(3);
    std::vector<int64_t> rounds(3);
    std::vector<std::thread> ranks;
    for (int64_t r = 0; r < 3; ++r)
      ranks.emplace_back([&, r] {
        LocalCommunicator local(world, r);
        PlainCommunicator wrapped(local);
        Communicator &comm =
            plain ? static_cast<Communicator &>(wrapped) : local;
        std::vector<char> mine(sent[r].begin(), sent[r].end());
        StatusOr<std::vector<std::vector<char>>> all =
            comm.allGatherBytes(mine, 10);
        errors[r] = all.status().text();
        if (all.ok())
          got[r] = *all;
        // Nothing to send costs one round of lengths.
        int64_t before = wrapped.allGathers;
        StatusOr<std::vector<std::vector<char>>> none =
            comm.allGatherBytes({}, 10);
        rounds[r] = wrapped.allGathers - before;
        ASSERT_TRUE(none.ok()) << none.status().text();
        EXPECT_EQ(*none, std::vector<std::vector<char>>(3));
      });
    for (std::thread &t : ranks)
      t.join();
    for (int64_t r = 0; r < 3; ++r) {
      EXPECT_EQ(errors[r], "") << "rank " << r;
      ASSERT_EQ(got[r].size(), 3u);
      for (int64_t p = 0; p < 3; ++p)
        EXPECT_EQ(std::string(got[r][p].begin(), got[r][p].end()), sent[p])
            << "plain " << plain << ", rank " << r << ", from " << p;
      EXPECT_EQ(rounds[r], plain ? 1 : 0);
    }
  }
}

/// Runs `fn(rank, comm)` on every rank of a `world`-rank LocalWorld, each
/// in a thread of its own.
template <typename Fn> void onEveryRank(int64_t world, Fn fn) {
  LocalWorld local(world);
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      LocalCommunicator comm(local, r);
      fn(r, comm);
    });
  for (std::thread &t : ranks)
    t.join();
}

/// Runs the synthetic problem of `plan` on its ranks: `steps` steps, with
/// optional loading before the first and saving after step `saveAfter`
/// (1-based); returns every parameter, whole.
std::vector<std::vector<float>>
runWithCheckpoints(const Plan &plan, int64_t firstStep, int64_t lastStep,
                   const std::string &loadFrom, const std::string &saveTo,
                   int64_t saveAfter, std::vector<std::string> &errors) {
  std::vector<std::vector<float>> whole = wholeTensors(plan);
  errors.assign(plan.worldSize, "");
  std::mutex mutex;
  onEveryRank(plan.worldSize, [&](int64_t r, Communicator &comm) {
    CpuDevice device;
    std::string &error = errors[r];
    std::unique_ptr<Optimizer> opt;
    error = Optimizer::create(plan, comm, device, {10.0}, opt).message();
    if (!opt)
      return;
    SyntheticModel model(*opt, device, 21, summandCounts(plan));
    if (!loadFrom.empty() &&
        !(error = opt->loadCheckpoint(loadFrom, true).message()).empty())
      return;
    for (int64_t s = firstStep; s < lastStep; ++s) {
      model.makeGradients(s, 1, {});
      StepResult result;
      if (!(error = opt->step(result).message()).empty())
        return;
      if (s + 1 == saveAfter &&
          !(error = opt->saveCheckpoint(saveTo, true).message()).empty())
        return;
    }
    std::lock_guard<std::mutex> lock(mutex);
    model.copyInto(whole);
  });
  return whole;
}

std::string scratchDir(const char *name) {
  std::string dir = ::testing::TempDir() + "muon-" + name + "-" +
                    std::to_string(::getpid());
  removeTree(dir);
  return dir;
}

TEST(Checkpoint, ResumeIsBitExact) {
  Plan plan = fsdpModel();
  std::string dir = scratchDir("resume");
  std::vector<std::string> errors;
  auto straight = runWithCheckpoints(plan, 0, 5, "", dir, 2, errors);
  for (const std::string &e : errors)
    ASSERT_EQ(e, "");
  // Stop after step 2, then resume from the checkpoint on fresh state.
  auto resumed = runWithCheckpoints(plan, 2, 5, dir, "", -1, errors);
  for (const std::string &e : errors)
    ASSERT_EQ(e, "");
  EXPECT_EQ(resumed, straight);
  removeTree(dir);
}

TEST(Checkpoint, LoadsUnderAnotherLayout) {
  // Saved by 4 FSDP ranks, loaded by one device: the state is re-cut by
  // global box, so the one-device run continues bit for bit.
  Plan plan = fsdpModel();
  std::string dir = scratchDir("relayout");
  std::vector<std::string> errors;
  auto straight = runWithCheckpoints(plan, 0, 4, "", dir, 2, errors);
  for (const std::string &e : errors)
    ASSERT_EQ(e, "");
  auto single = runWithCheckpoints(referencePlan(plan), 2, 4, dir, "", -1,
                                   errors);
  ASSERT_EQ(errors[0], "");
  EXPECT_EQ(single, straight);
  removeTree(dir);
}

TEST(Checkpoint, RefusesDamagedForeignAndIncomplete) {
  Plan plan = fsdpModel();
  std::string dir = scratchDir("damaged");
  std::vector<std::string> errors;
  runWithCheckpoints(plan, 0, 1, "", dir, 1, errors);
  ASSERT_EQ(errors[0], "");
  // A flipped byte in rank 1's data.
  std::string victim;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d))
      if (std::string(e->d_name).find("-rank-1.bin") != std::string::npos)
        victim = dir + "/" + e->d_name;
    closedir(d);
  }
  ASSERT_FALSE(victim.empty());
  {
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-3, std::ios::end);
    f.put('\x7f');
  }
  // Loading refuses on every rank, naming the file, and changes nothing.
  onEveryRank(4, [&](int64_t r, Communicator &comm) {
    CpuDevice device;
    std::string error;
    std::unique_ptr<Optimizer> opt;
    error = Optimizer::create(plan, comm, device, {10.0}, opt).message();
    ASSERT_TRUE(opt) << error;
    SyntheticModel model(*opt, device, 21, {1, 1});
    std::vector<float> before = model.values(0);
    EXPECT_FALSE((error = opt->loadCheckpoint(dir, true).message()).empty());
    EXPECT_NE(error.find("-rank-1.bin' is damaged: the"), std::string::npos)
        << error;
    EXPECT_NE(error.find("does not match its checksum; nothing was changed"),
              std::string::npos)
        << error;
    EXPECT_EQ(model.values(0), before);
  });
  // Another model.
  std::string other = scratchDir("foreign");
  runWithCheckpoints(smallModel(), 0, 1, "", other, 1, errors);
  ASSERT_EQ(errors[0], "");
  runWithCheckpoints(plan, 0, 1, other, "", -1, errors);
  EXPECT_NE(errors[0].find("is of another model: parameter 0 ('w') differs"),
            std::string::npos)
      << errors[0];
  // No manifest: not a checkpoint.
  std::remove((other + "/checkpoint.json").c_str());
  runWithCheckpoints(plan, 0, 1, other, "", -1, errors);
  EXPECT_NE(errors[0].find("no checkpoint in '"), std::string::npos)
      << errors[0];
  removeTree(dir);
  removeTree(other);
}

TEST(Checkpoint, AFailedSaveKeepsThePreviousOne) {
  Plan plan = fsdpModel();
  std::string dir = scratchDir("keep");
  std::vector<std::string> errors;
  auto first = runWithCheckpoints(plan, 0, 2, "", dir, 2, errors);
  ASSERT_EQ(errors[0], "");
  // A save into a path that is a file fails on every rank...
  std::string file = dir + "/checkpoint.json";
  runWithCheckpoints(plan, 0, 1, "", file, 1, errors);
  EXPECT_NE(errors[0].find("saving a checkpoint: "), std::string::npos);
  // ...and the checkpoint in `dir` still loads and resumes.
  auto resumed = runWithCheckpoints(plan, 2, 3, dir, "", -1, errors);
  ASSERT_EQ(errors[0], "");
  auto straight = runWithCheckpoints(plan, 0, 3, "", "", -1, errors);
  EXPECT_EQ(resumed, straight);
  removeTree(dir);
}

TEST(Checkpoint, CreatesMissingParentDirectories) {
  Plan plan = fsdpModel();
  std::string top = scratchDir("parents");
  std::string dir = top + "/a/b/";
  std::vector<std::string> errors;
  auto straight = runWithCheckpoints(plan, 0, 3, "", dir, 2, errors);
  for (const std::string &e : errors)
    ASSERT_EQ(e, "");
  auto resumed = runWithCheckpoints(plan, 2, 3, dir, "", -1, errors);
  for (const std::string &e : errors)
    ASSERT_EQ(e, "");
  EXPECT_EQ(resumed, straight);
  removeTree(top);
}

TEST(Checkpoint, RefusesAnEmptyDirectory) {
  // An empty path would put the manifest at "/checkpoint.json": refused on
  // every rank before anything is written, for saving and for loading.
  Plan plan = fsdpModel();
  struct stat before {};
  bool rootHadOne = ::stat("/checkpoint.json", &before) == 0;
  onEveryRank(4, [&](int64_t r, Communicator &comm) {
    CpuDevice device;
    std::string error;
    std::unique_ptr<Optimizer> opt;
    error = Optimizer::create(plan, comm, device, {10.0}, opt).message();
    ASSERT_TRUE(opt) << error;
    SyntheticModel model(*opt, device, 21, {1, 1});
    EXPECT_FALSE((error = opt->saveCheckpoint("", true).message()).empty());
    EXPECT_EQ(error, "saving a checkpoint: no checkpoint directory given (the "
                     "path is empty); the previous checkpoint in '' is "
                     "unchanged")
        << "rank " << r;
    EXPECT_FALSE((error = opt->loadCheckpoint("", false).message()).empty());
    EXPECT_EQ(error, "loading a checkpoint: no checkpoint directory given "
                     "(the path is empty); nothing was changed")
        << "rank " << r;
  });
  struct stat after {};
  if (!rootHadOne) {
    EXPECT_NE(::stat("/checkpoint.json", &after), 0);
  }
}

} // namespace

namespace {

TEST(Backends, DevicesAndTransportsByName) {
  std::unique_ptr<Device> device;
  ASSERT_TRUE(createDevice("cpu", device).ok());
  EXPECT_STREQ(device->name(), "cpu");
  Status s = createDevice("tpu:0", device);
  EXPECT_EQ(s.code(), StatusCode::NotFound);
  EXPECT_NE(s.message().find("unknown device 'tpu:0'; this runtime has 'cpu'"),
            std::string::npos)
      << s.message();
  // A backend registers itself under its name; "name:N" reaches it too.
  std::string asked;
  BackendOptions given;
  registerDeviceBackend("mock", [&](const std::string &name,
                                    const BackendOptions &options,
                                    std::unique_ptr<Device> &out) {
    asked = name;
    given = options;
    out = std::make_unique<CpuDevice>();
    return okStatus();
  });
  ASSERT_TRUE(createDevice("mock:3", {{"color", "blue"}}, device).ok());
  EXPECT_EQ(asked, "mock:3");
  EXPECT_EQ(given, (BackendOptions{{"color", "blue"}}));
  // The CPU takes its options by name and refuses the others, naming them.
  ASSERT_TRUE(
      createDevice("cpu", {{"ns_form", "gram"}, {"blas_threads", "1"}}, device)
          .ok());
  s = createDevice("cpu", {{"ns_form", "fast"}}, device);
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_EQ(s.message(),
            "device 'cpu': ns_form 'fast': expected 'auto', 'standard' or "
            "'gram'");
  s = createDevice("cpu", {{"blas_threads", "0"}}, device);
  EXPECT_EQ(s.message(),
            "device 'cpu': blas_threads '0': expected a count in [1, 4096]");
  s = createDevice("cpu", {{"colour", "blue"}}, device);
  EXPECT_EQ(s.message(), "device 'cpu' has no option 'colour'; its options: "
                         "'ns_form', 'blas_threads'");
  std::vector<std::string> names = deviceBackends();
  EXPECT_NE(std::find(names.begin(), names.end(), "mock"), names.end());

  SingleRankCommunicator self;
  CpuDevice cpu;
  std::unique_ptr<Communicator> comm;
  ASSERT_TRUE(createCommunicator("mpi", self, cpu, comm).ok());
  EXPECT_EQ(comm->size(), 1);
  ASSERT_TRUE(createCommunicator("host", self, cpu, comm).ok());
  StatusOr<std::vector<uint64_t>> values = comm->allGather(7, 1.0);
  ASSERT_TRUE(values.ok()) << values.status().text();
  EXPECT_EQ(*values, std::vector<uint64_t>{7});
  s = createCommunicator("smoke-signals", self, cpu, comm);
  EXPECT_EQ(s.code(), StatusCode::NotFound);

  // Process groups: "single" is built in; "mpi" is there only once a
  // program that links MPI registers it (cpu::registerMpiBackend), which
  // this one does not.
  std::unique_ptr<Communicator> ranks;
  ASSERT_TRUE(createProcessGroup("single", {}, ranks).ok());
  EXPECT_EQ(ranks->size(), 1);
  EXPECT_FALSE(ranks->progressThread());
  s = createProcessGroup("single", {{"comm", "0"}}, ranks);
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_EQ(s.message(), "process group 'single' has no option 'comm'; its "
                         "options: none");
  s = createProcessGroup("mpi", {}, ranks);
  EXPECT_EQ(s.code(), StatusCode::NotFound);
  EXPECT_EQ(s.message(),
            "unknown process group 'mpi'; this runtime has 'single'");
  EXPECT_EQ(processGroups(), std::vector<std::string>{"single"});
}

/// Optimizer::load reports the plan reader's code as is: a damaged binary
/// plan is DataLoss, a file that is not there NotFound, a sound plan for
/// another world InvalidArgument.
TEST(Optimizer, LoadReportsThePlanReadersCode) {
  char dir[] = "/tmp/muon-load-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/plan.bin";
  const std::string bytes = renderPlanBinary(planModel());
  SingleRankCommunicator one;
  CpuDevice cpu;
  std::unique_ptr<Optimizer> opt;
  auto loadWith = [&](const std::string &contents) {
    std::ofstream(path, std::ios::binary) << contents;
    return Optimizer::load(path, one, cpu, {}, opt);
  };
  Status damaged = loadWith(bytes.substr(0, bytes.size() - 1));
  EXPECT_EQ(damaged.code(), StatusCode::DataLoss) << damaged.text();
  EXPECT_NE(damaged.message().find("truncated or appended to"),
            std::string::npos)
      << damaged.text();
  Status otherWorld = loadWith(bytes);
  EXPECT_EQ(otherWorld.code(), StatusCode::InvalidArgument)
      << otherWorld.text();
  ::unlink(path.c_str());
  Status missing = Optimizer::load(path, one, cpu, {}, opt);
  EXPECT_EQ(missing.code(), StatusCode::NotFound) << missing.text();
  EXPECT_FALSE(opt);
  ::rmdir(dir);
}

} // namespace
