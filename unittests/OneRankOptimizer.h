//===- OneRankOptimizer.h - One rank's optimizer, for tests -----*- C++ -*-===//
//
// What the checkpoint and QK-clip tests both run as their reference: a
// plan's optimizer on one rank, every parameter whole in its own storage,
// values and gradients from one seeded generator; and the models they
// build (addParam).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_UNITTESTS_ONERANKOPTIMIZER_H
#define MUON_UNITTESTS_ONERANKOPTIMIZER_H

#include "muon/Compiler/Compile.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/Optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace muon::testing {

/// `n` values in [-1, 1) from `seed` (a 64-bit LCG): the same on every
/// rank and in every test binary.
inline std::vector<float> randomValues(int64_t n, unsigned seed) {
  std::vector<float> x(n);
  uint64_t s = seed * 2654435761u + 1;
  for (float &v : x) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<double>(s >> 11) * 0x1.0p-53 * 2 - 1);
  }
  return x;
}

/// Adds a parameter to a test model.
inline void addParam(compiler::Model &model, std::string name,
                     std::vector<int64_t> shape,
                     std::vector<compiler::Placement> placements,
                     std::string optimizer = "") {
  compiler::Param p{std::move(name), std::move(shape)};
  p.placements = std::move(placements);
  p.optimizer = std::move(optimizer);
  model.params.push_back(std::move(p));
}

inline int64_t elementsOf(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// One rank's optimizer of `plan` on explicit storage: every parameter
/// whole (values from seed 100 + its index), its gradient set by the
/// caller or by setGrads.
struct OneRank {
  runtime::SingleRankCommunicator comm;
  runtime::cpu::CpuDevice device;
  std::unique_ptr<runtime::Optimizer> opt;
  std::vector<std::vector<float>> values, grads;
  explicit OneRank(const Plan &plan) {
    muon::Status s = runtime::Optimizer::create(plan, comm, device, {}, opt);
    EXPECT_TRUE(opt) << s.message();
    for (size_t i = 0; opt && i < plan.params.size(); ++i) {
      int64_t n = elementsOf(plan.params[i].layout.shape);
      values.push_back(randomValues(n, 100 + i));
      grads.emplace_back(n);
      EXPECT_TRUE(opt->bind(plan.params[i].name, values[i].data(),
                            grads[i].data(), runtime::DType::F32, n)
                      .ok());
    }
  }
  /// Step `step`'s gradients (seed 1000 (step + 1) + index), written into
  /// the bound storage.
  void setGrads(const Plan &plan, int64_t step) {
    for (size_t i = 0; i < plan.params.size(); ++i) {
      std::vector<float> g = randomValues(
          static_cast<int64_t>(grads[i].size()), 1000 * (step + 1) + i);
      std::copy(g.begin(), g.end(), grads[i].begin());
    }
  }
};

} // namespace muon::testing

#endif // MUON_UNITTESTS_ONERANKOPTIMIZER_H
