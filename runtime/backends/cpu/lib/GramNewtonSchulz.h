//===- GramNewtonSchulz.h - Newton-Schulz on the Gram matrix, BLAS -*- C++ -*-===//
//
// Every Newton-Schulz step X <- a X + (b R + c R^2) X, R = X X^T, is
// X <- H X with H a polynomial in R, so a run of steps is X <- Q X with Q
// the product of the H's, and R follows as R <- H R H. For an m x n X
// (m <= n) the steps then cost m x m products instead of m x n ones, and X
// is touched once per phase (R = X X^T at its start, X <- Q X at its end).
// Phases restart from X every few steps (gramPhases, muon/Runtime/NsForm.h):
// R's rounding errors grow with each step's a^2 (docs/performance.md, "Gram
// Newton-Schulz").
//
// f32 BLAS products. In bf16 (on CPUs without bf16 products, where the
// standard form also emulates bf16 on f32 products) and in f16 (on every
// CPU: CpuDevice.h) every product's f32 result is rounded to the half type
// once, at the points where the GPU (backends/cuda: GramNewtonSchulz.cpp)
// and oneDNN (OneDnnNewtonSchulz.cpp) round theirs: R, each H (from
// (b R + a I) + c R R summed in f32), Q, R's two updates and X. The
// operands are then bf16 (f16) values, whose pairwise products f32 holds
// exactly, so each product is a bf16 (f16) product with f32 sums, as the
// contract says (Device.h); only the order of the sums is BLAS's.
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
  /// Whether the Gram form does fewer flops than the standard one by a
  /// margin that survives its smaller products: `steps` steps in
  /// `precision` on an m x n matrix, m <= n (gramPays in
  /// muon/Runtime/NsForm.h; f32 with syrk's half-cost symmetric products,
  /// bf16 and f16 with oneDNN's model at its default block width, so that
  /// a CPU with bf16 products and one without choose the same form).
  static bool pays(DType precision, int64_t m, int64_t n, int64_t steps);

  /// Whether a Gram form stays in its precision's accuracy class with these
  /// coefficients, so that ns_form auto may take it (in f32 here, in bf16
  /// on oneDNN and on a GPU): every a at most kMaxA (gramKeepsAccuracy,
  /// muon/Runtime/NsForm.h; docs/performance.md).
  static constexpr double kMaxA = kGramMaxA;
  static bool keepsAccuracy(const std::vector<std::array<double, 3>> &abc);

  /// The steps `abc` on x (rows x cols, row-major, already normalized and,
  /// in bf16 or f16, rounded to it), in place, in `precision`'s Gram
  /// phases. Returns how many steps ran: all of them, but for bf16's and
  /// f16's odd last step, which is a standard one and the caller's to run.
  int64_t run(float *x, int64_t rows, int64_t cols,
              const std::vector<std::array<double, 3>> &abc,
              DType precision);

private:
  std::vector<float> gram, poly, product, scratch, next; // workspace
};

} // namespace muon::runtime::cpu

#endif // MUON_RUNTIME_CPU_GRAMNEWTONSCHULZ_H
