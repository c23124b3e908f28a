//===- NsForm.h - Newton-Schulz's standard and Gram forms -------*- C++ -*-===//
//
// What every backend decides the same way about the form Newton-Schulz's
// steps run in. The Gram form applies each step's polynomial through the
// m x m Gram matrix R = X X^T (m <= n for an m x n X): a phase of steps runs
// H = a I + b R + c R R, Q <- H Q and R <- H R H on m x m matrices and
// touches X once, X <- Q X; phases restart from X. On wide and tall
// matrices that is fewer flops; R carries rounding errors the standard form
// drops every step, so phases are short (bf16 and f16: 2 steps, an odd
// last one standard; f32: 2, then 3) and only coefficients with every a <= 4 may
// take it by default (docs/performance.md, "Gram Newton-Schulz").
//
// The CPU (backends/cpu: GramNewtonSchulz.cpp in f32, OneDnnNewtonSchulz.cpp
// in bf16) and the GPU (backends/cuda: NewtonSchulz.cpp) run the same
// phases and choose them with the same rule and flop model; only what a
// symmetric product costs there (`half` below) is the backend's own.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_NSFORM_H
#define MUON_RUNTIME_NSFORM_H

#include "muon/Runtime/DType.h"

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace muon::runtime {

/// The form of Newton-Schulz's steps (muon-run --ns-form, muonc's
/// ns_form).
enum class NsForm {
  /// The Gram form where it pays and its coefficients keep it in its
  /// precision's accuracy class (gramKeepsAccuracy: Jordan's, not Polar
  /// Express's); else the standard form. The default.
  Auto,
  /// Every step as torch.optim.Muon runs it.
  Standard,
  /// The Gram form wherever it pays, whatever the coefficients.
  Gram,
};

/// Parses "auto", "standard" or "gram": false if unknown.
bool parseNsForm(const std::string &name, NsForm &form);
const char *nsFormName(NsForm form);

/// The largest |a| of a step that ns_form auto lets into the Gram form: a
/// phase's product of H's cancels by up to the product of its a's in
/// X <- Q X, where a standard step cancels by a alone. Jordan's (a = 3.44)
/// pass, Polar Express's (a = 8.2, 4.1, ...) do not.
inline constexpr double kGramMaxA = 4.0;
bool gramKeepsAccuracy(const std::vector<std::array<double, 3>> &abc);

/// Whether Newton-Schulz in `precision` rounds every product to a 16-bit
/// type (BF16, F16). Both run the Gram form alike: H summed in f32 and
/// rounded once, phases of 2 steps, the same margin (f16's 11 bits lie
/// between bf16's 8 and f32's 24, and its products cost a GPU what bf16's
/// do).
inline bool roundsToHalf(DType precision) {
  return precision == DType::BF16 || precision == DType::F16;
}

/// The Gram form's phases for `steps` steps in `precision`, in order.
/// BF16 and F16: phases of 2, an odd last step a phase of 1 that runs as a
/// standard step. F32: 2 first (the first steps' large a grow R's errors
/// most), then 3; a last phase of 1 runs in the Gram form.
std::vector<int64_t> gramPhases(DType precision, int64_t steps);

/// Whether the Gram form's phases do clearly fewer flops than `steps`
/// standard steps on an m x n matrix (m <= n), where a symmetric m x m
/// product costs `half` of a full one (0.5: BLAS's syrk; (1 + T/m) / 2 for
/// lower tiles or block columns of width T; 1: full products). "Clearly":
/// at most 0.8 of them in f32, 0.92 in bf16 and f16, the margins the CPU measured
/// for its smaller products' lower rate (docs/performance.md).
bool gramPays(DType precision, int64_t m, int64_t n, int64_t steps,
              double half);

/// What a symmetric m x m product costs against a full one when it is
/// computed as its lower block columns (or rows) of width `width`:
/// (1 + T/m) / 2 with T = min(width, m); oneDNN's and BLAS's bf16 kernels
/// on the CPU.
double blockedHalf(int64_t m, int64_t width);

/// Whether Newton-Schulz in `precision` with the steps `abc` on a
/// rows x cols matrix runs in the Gram form under `form`, given what a
/// symmetric product costs on the device.
bool usesGramForm(NsForm form, DType precision, int64_t rows, int64_t cols,
                  const std::vector<std::array<double, 3>> &abc, double half);

} // namespace muon::runtime

#endif // MUON_RUNTIME_NSFORM_H
