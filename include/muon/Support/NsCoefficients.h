//===- NsCoefficients.h - Named Newton-Schulz coefficient tables -*- C++ -*-===//
//
// The presets `optimizer.ns_coefficients` accepts instead of a table, shared
// by the spec importer, the C++ compile API and muon-bench (plain C++, no
// LLVM). A preset resolves to the table the IR and the plan file keep.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_NSCOEFFICIENTS_H
#define MUON_SUPPORT_NSCOEFFICIENTS_H

#include "muon/Support/Status.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace muon {

using NsTriple = std::array<double, 3>; // (a, b, c): a X + b X^3 + c X^5

/// The preset names, in the order errors list them: "jordan",
/// "polar_express".
const std::vector<std::string> &nsPresetNames();

/// "'jordan', 'polar_express'" (for error messages).
std::string nsPresetList();

/// The table of preset `name` for `steps` Newton-Schulz iterations, or
/// nullopt for an unknown name. `steps` must be in [1, 99].
///  - "jordan": [[3.4445, -4.775, 2.0315]], one triple for every step
///    (Keller Jordan's, torch.optim.Muon's default).
///  - "polar_express": one triple per step, Algorithm 1 of Amsel, Persson,
///    Musco, Gower, "The Polar Express: Optimal Matrix Sign Methods and
///    Their Application to the Muon Algorithm" (arXiv:2505.16932, 2025),
///    run for `steps` steps: the paper's degree-5 coefficients for
///    l = 1e-3, the first seven divided by the safety factor (a / 1.01,
///    b / 1.01^3, c / 1.01^5), then (1.875, -1.25, 0.375) for any further
///    step. The default 5 steps are the paper's Muon setting.
std::optional<std::vector<NsTriple>> nsPreset(std::string_view name,
                                              int64_t steps);

/// The largest singular value Newton-Schulz can reach at each of `steps`
/// steps with `table` (one triple for every step, or one per step) from an
/// input normalized by its Frobenius norm (singular values in [0, 1]).
/// Each step maps a singular value s to p(s) = a s + b s^3 + c s^5, so the
/// bound after a step is the largest |p| over [0, bound before]: at an end
/// of the interval or where p' = 0. Exact in real arithmetic; rounding
/// moves the computed iterates by a few units in the last place a step.
std::vector<double> nsSingularValueBounds(const std::vector<NsTriple> &table,
                                          int64_t steps);

/// The largest magnitude an element type holds (FLT_MAX for "f32" and
/// "bf16", 65504 for "f16"), or nullopt for another name.
std::optional<double> nsLargestValue(std::string_view dtype);

/// Whether `table` can run `steps` Newton-Schulz steps in `dtype` without
/// overflow (InvalidArgument saying why not): every coefficient finite,
/// the singular values bounded by kNsBound at every step, and every
/// intermediate product (X X^T, b A + c A^2, that times X) below a
/// sixteenth of the element type's largest value. A table that passes
/// cannot turn a finite input into a non-finite update.
Status checkNsCoefficients(const std::vector<NsTriple> &table,
                                  int64_t steps, std::string_view dtype);

/// The largest singular value a Newton-Schulz step may reach: orthogonal
/// updates have 1; published tables stay below 2.1 (Polar Express's first
/// steps); 1e4 leaves room for any iteration that still converges.
inline constexpr double kNsBound = 1e4;

} // namespace muon

#endif // MUON_SUPPORT_NSCOEFFICIENTS_H
