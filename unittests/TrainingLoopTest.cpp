//===- TrainingLoopTest.cpp - What a trainer needs around the step --------===//
//
// Storage as trainers have it (gradients of another type than the weights),
// whole parameters for evaluation and export (gatherParameter), and the
// optimizer's working memory held to what the plan allows.
//
//===----------------------------------------------------------------------===//
#include "EveryRank.h"
#include "muon/Compiler/Compile.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Runtime/Testing/Synthetic.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <thread>

using namespace muon;
using namespace muon::runtime;
using muon::testing::onEveryRank;
namespace mc = muon::compiler;

namespace {

/// A small model on a 2 x 2 (fsdp, tp) mesh: matrices split both ways
/// (uneven), a replicated Partial matrix, and AdamW vectors.
mc::Model meshModel(const std::string &dtype = "f32") {
  mc::Model model;
  auto param = [&](std::string name, std::vector<int64_t> shape,
                   std::vector<mc::Placement> placements) {
    mc::Param p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.dtype = dtype;
    p.placements = std::move(placements);
    model.params.push_back(p);
  };
  using P = mc::Placement;
  param("wq", {24, 20}, {P::shard(0), P::shard(1)});
  param("w1", {20, 36}, {P::shard(1), P::shard(0)});
  param("wo", {17, 20}, {P::shard(0), P::partial()});
  param("norm", {20}, {P::replicate(), P::replicate()});
  param("bias", {36}, {P::shard(0), P::replicate()});
  return model;
}

Plan compileOn(const mc::Model &model, std::vector<int64_t> mesh) {
  mc::DistributedConfig config = mc::createDTensorConfig(
      {mesh, mesh.size() == 2 ? std::vector<std::string>{"fsdp", "tp"}
                              : std::vector<std::string>{"dp"}});
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

TEST(TrainingLoop, GatherParameterAssemblesTheWholeTensor) {
  const Plan plan = compileOn(meshModel(), {2, 2});
  std::vector<std::vector<float>> whole = wholeTensors(plan);
  std::vector<std::vector<std::vector<float>>> gathered(plan.worldSize);
  std::vector<std::vector<float>> atRoot(plan.worldSize);
  onEveryRank(plan, [&](int64_t r, Optimizer &opt, Device &device) {
    SyntheticModel model(opt, device, 5, summandCounts(plan));
    for (int64_t s = 0; s < 2; ++s) {
      model.makeGradients(s, 1, {});
      StepResult result;
      ASSERT_TRUE(opt.step(result).ok());
    }
    model.copyInto(whole);
    for (const PlanParam &p : plan.params) {
      int64_t n = 1;
      for (int64_t d : p.layout.shape)
        n *= d;
      gathered[r].emplace_back(n, -1.0f);
      Status s = opt.gatherParameter(p.name, gathered[r].back().data());
      EXPECT_TRUE(s.ok()) << s.message();
    }
    // To one rank: the others pass no destination and get nothing.
    if (r == 2)
      atRoot[r].assign(24 * 20, -1.0f);
    Status s = opt.gatherParameter("wq", r == 2 ? atRoot[r].data() : nullptr,
                                   /*root=*/2);
    EXPECT_TRUE(s.ok()) << s.message();
    // A bad root is refused on every rank alike, before any traffic.
    EXPECT_EQ(opt.gatherParameter("wq", nullptr, 4).code(),
              StatusCode::InvalidArgument);
  });
  for (int64_t r = 0; r < plan.worldSize; ++r)
    for (size_t i = 0; i < plan.params.size(); ++i)
      EXPECT_EQ(gathered[r][i], whole[i])
          << "rank " << r << ", '" << plan.params[i].name << "'";
  EXPECT_EQ(atRoot[2], whole[0]);
}

TEST(TrainingLoop, GradientsOfTheirOwnType) {
  // f32 weights with bf16 gradients step exactly as f32 gradients holding
  // the same (bf16-representable) values: the gradient is read through its
  // own type, nothing else changes.
  const Plan plan = compileOn(meshModel(), {2, 2});
  auto run = [&](bool bf16Grads) {
    std::vector<std::vector<float>> result(plan.params.size());
    std::vector<std::vector<std::vector<float>>> perRank(plan.worldSize);
    onEveryRank(plan, [&](int64_t r, Optimizer &opt, Device &) {
      std::vector<std::vector<float>> values;
      std::vector<std::vector<float>> grads32;
      std::vector<std::vector<uint16_t>> grads16;
      for (const ParamSlot &slot : opt.params()) {
        values.emplace_back(slot.elements, 0.5f);
        grads32.emplace_back(slot.elements, 0.0f);
        grads16.emplace_back(slot.elements, 0);
        Status s =
            bf16Grads
                ? opt.bind(slot.name, values.back().data(), DType::F32,
                           grads16.back().data(), DType::BF16, slot.elements)
                : opt.bind(slot.name, values.back().data(),
                           grads32.back().data(), DType::F32, slot.elements);
        ASSERT_TRUE(s.ok()) << s.message();
        EXPECT_EQ(opt.params()[values.size() - 1].gradType,
                  bf16Grads ? DType::BF16 : DType::F32);
      }
      for (int64_t step = 0; step < 3; ++step) {
        for (size_t i = 0; i < values.size(); ++i) {
          std::mt19937 rng(static_cast<unsigned>(100 * step + i + 7 * r));
          std::normal_distribution<float> dist(0.0f, 1.0f);
          for (size_t e = 0; e < values[i].size(); ++e) {
            const float g = roundToBf16(dist(rng));
            grads32[i][e] = g;
            grads16[i][e] = toBf16Bits(g);
          }
        }
        StepResult result;
        Status s = opt.step(result);
        ASSERT_TRUE(s.ok()) << s.message();
      }
      perRank[r] = values;
    });
    return perRank;
  };
  EXPECT_EQ(run(true), run(false));
}

TEST(TrainingLoop, WorkingMemoryStaysWithinThePlansBound) {
  // Sixteen matrices on four ranks in several rounds, none prefetched: the
  // state and the buffers of the rounds alive at once, never more.
  mc::Model model;
  for (int i = 0; i < 16; ++i) {
    mc::Param p;
    p.name = "w" + std::to_string(i);
    p.shape = {32 + 4 * i, 28};
    p.placements = {mc::Placement::shard(i % 2)};
    model.params.push_back(p);
  }
  mc::Param norm;
  norm.name = "norm";
  norm.shape = {28};
  model.params.push_back(norm);
  mc::DistributedConfig config = mc::createDTensorConfig({{4}, {"dp"}});
  config.prefetchCount = 0;
  config.maxRounds = 4;
  Plan plan;
  std::string error;
  {
    auto compiled = mc::compile(model, &config);
    ASSERT_TRUE(compiled.ok()) << compiled.status().text();
    plan = std::move(compiled).value();
  }
  ASSERT_GE(plan.rounds.size(), 3u);
  std::vector<StepCounters> counters(plan.worldSize);
  onEveryRank(plan, [&](int64_t r, Optimizer &opt, Device &device) {
    SyntheticModel synthetic(opt, device, 9, summandCounts(plan));
    for (int64_t s = 0; s < 3; ++s) {
      synthetic.makeGradients(s, 1, {});
      StepResult result;
      ASSERT_TRUE(opt.step(result).ok());
    }
    counters[r] = opt.counters();
  });
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    const StepCounters &c = counters[r];
    // The state alone is 3 f32 buffers per Muon element held.
    EXPECT_GT(c.peakWorkingBytes, 0) << "rank " << r;
    EXPECT_LE(c.peakWorkingBytes, c.workingBytesBound) << "rank " << r;
    std::printf("rank %lld: peak working memory %lld bytes, bound %lld\n",
                static_cast<long long>(r),
                static_cast<long long>(c.peakWorkingBytes),
                static_cast<long long>(c.workingBytesBound));
  }
}

} // namespace
