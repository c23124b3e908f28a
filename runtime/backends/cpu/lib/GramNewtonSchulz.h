//===- GramNewtonSchulz.h - f32 Newton-Schulz on the Gram matrix -*- C++ -*-===//
//
// Every Newton-Schulz step X <- a X + (b R + c R^2) X, R = X X^T, is
// X <- H X with H a polynomial in R, so a run of steps is X <- Q X with Q
// the product of the H's, and R follows as R <- H R H. For an m x n X
// (m <= n) the steps then cost m x m products instead of m x n ones, and X
// is touched once per phase (R = X X^T at its start, X <- Q X at its end).
// Phases restart from X every few steps (kPhaseSteps): R's rounding errors grow
// with each step's a^2 (docs/performance.md, "Gram Newton-Schulz").
//
// f32. bf16 runs its own Gram form on oneDNN (OneDnnNewtonSchulz.cpp) in
// phases of 2 steps: with this one's 3-step phase R's 2^16 times larger
// bf16 errors grow by a^2 per step and skewed spectra diverge (measured;
// docs/performance.md).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CPU_GRAMNEWTONSCHULZ_H
#define MUON_RUNTIME_CPU_GRAMNEWTONSCHULZ_H

#include "muon/Runtime/NsForm.h"

#include <array>
#include <cstdint>
#include <vector>

namespace muon::runtime::cpu {

class GramNewtonSchulz {
public:
  /// Steps between restarts from X: the first phase is shorter, since
  /// the first steps' large a (8.29 in Polar Express) grow R's errors most.
  static constexpr int64_t kFirstPhaseSteps = 2, kPhaseSteps = 3;
  /// The step after the phase that starts at `start`.
  static int64_t phaseEnd(int64_t start, int64_t steps);

  /// Whether the Gram form does fewer flops than the standard one by a
  /// margin that survives its smaller products: `steps` steps on an
  /// m x n matrix, m <= n (gramPays in muon/Runtime/NsForm.h, with syrk's
  /// half-cost symmetric products).
  static bool pays(int64_t m, int64_t n, int64_t steps);

  /// Whether a Gram form stays in its precision's accuracy class with these
  /// coefficients, so that ns_form auto may take it (in f32 here, in bf16
  /// on oneDNN and on a GPU): every a at most kMaxA (gramKeepsAccuracy,
  /// muon/Runtime/NsForm.h; docs/performance.md).
  static constexpr double kMaxA = kGramMaxA;
  static bool keepsAccuracy(const std::vector<std::array<double, 3>> &abc);

  /// The steps `abc` on x (rows x cols, row-major, already normalized), in
  /// place, with f32 BLAS products.
  void run(float *x, int64_t rows, int64_t cols,
           const std::vector<std::array<double, 3>> &abc);

private:
  std::vector<float> gram, poly, product, scratch, next; // workspace
};

} // namespace muon::runtime::cpu

#endif // MUON_RUNTIME_CPU_GRAMNEWTONSCHULZ_H
