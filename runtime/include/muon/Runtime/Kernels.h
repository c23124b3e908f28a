//===- Kernels.h - Elementwise optimizer updates ----------------*- C++ -*-===//
//
// The elementwise parts of a step, written once and used by every rank and
// by the single-device reference, so that both do the same float operations
// in the same order (the basis of bit-exact verification). Each follows
// torch.optim.Muon / torch.optim.AdamW.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_KERNELS_H
#define MUON_RUNTIME_KERNELS_H

#include "muon/Plan/Plan.h"

#include <cstdint>

namespace muon::runtime {

/// buf.lerp_(grad, 1 - momentum); update = nesterov ? grad.lerp(buf,
/// momentum) : buf.
void momentumUpdate(const float *grad, float *buf, float *update, int64_t n,
                    const MuonSettings &settings);

/// The lr Muon applies to an orthogonalized rows x cols matrix
/// ("original": lr * sqrt(max(1, rows/cols)); "match_rms_adamw":
/// lr * 0.2 * sqrt(max(rows, cols))).
double adjustedLr(const MuonSettings &settings, int64_t rows, int64_t cols);

/// param *= 1 - lr * weight_decay; param -= adjusted_lr * orthogonalized.
void applyMuonUpdate(float *param, const float *orthogonalized, int64_t n,
                     const MuonSettings &settings, double adjustedLr);

/// One torch.optim.AdamW step (decoupled decay, bias correction); `step` is
/// the step number after incrementing (1 for the first).
void adamwUpdate(float *param, const float *grad, float *expAvg,
                 float *expAvgSq, int64_t n, const AdamWSettings &settings,
                 int64_t step);

/// Rounds to bfloat16 (nearest even) and back, as a bf16 wire does.
float roundToBf16(float value);
uint16_t toBf16Bits(float value);
float fromBf16Bits(uint16_t bits);

} // namespace muon::runtime

#endif // MUON_RUNTIME_KERNELS_H
