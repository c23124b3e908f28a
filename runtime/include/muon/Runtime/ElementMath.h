//===- ElementMath.h - The optimizers' arithmetic per element ---*- C++ -*-===//
//
// What momentum, the Muon update and AdamW compute for one element, written
// once for every device (MUON_HOST_DEVICE): CpuDevice's loops and the CUDA
// kernels call these, so the two can only differ where a compiler does (see
// HostDevice.h). The scalars derived from the settings are computed on the
// host, once per call, in double and then rounded to f32, as here.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_ELEMENTMATH_H
#define MUON_RUNTIME_ELEMENTMATH_H

#include "muon/Plan/Plan.h"
#include "muon/Runtime/HostDevice.h"

#include <cmath>
#include <cstdint>

namespace muon::runtime {

/// torch.lerp's formula in f32 (exact at both ends).
MUON_HOST_DEVICE inline float lerp(float start, float end, float weight) {
  return weight < 0.5f ? start + weight * (end - start)
                       : end - (end - start) * (1.0f - weight);
}

/// Whether an f32 is neither infinite nor NaN (its exponent is not all
/// ones).
MUON_HOST_DEVICE inline bool isFiniteValue(float value) {
  return (floatBits(value) & 0x7F800000u) != 0x7F800000u;
}

struct MomentumScalars {
  float momentum = 0, oneMinusMomentum = 1;
  bool nesterov = false;
};

inline MomentumScalars momentumScalars(const MuonSettings &s) {
  return {static_cast<float>(s.momentum), static_cast<float>(1.0 - s.momentum),
          s.nesterov};
}

/// buf = lerp(buf, grad, 1 - momentum); the returned update is
/// lerp(grad, buf, momentum) with Nesterov, else buf.
MUON_HOST_DEVICE inline float momentumStep(float grad, float &buf,
                                           const MomentumScalars &s) {
  buf = lerp(buf, grad, s.oneMinusMomentum);
  return s.nesterov ? lerp(grad, buf, s.momentum) : buf;
}

/// The Muon update: values * decay - alr * orth, where decay is
/// 1 - lr * weight_decay ("decoupled"), that only where orth * value >= 0
/// and 1 elsewhere ("cautious": Cautious Weight Decay, arXiv 2510.12402),
/// or 1 ("none").
struct UpdateScalars {
  float decay = 1, step = 0;
  bool cautious = false;
};

inline UpdateScalars updateScalars(const MuonSettings &s, double adjustedLr) {
  const bool none = s.weightDecayMode == "none";
  return {none ? 1.0f : static_cast<float>(1.0 - s.lr * s.weightDecay),
          static_cast<float>(adjustedLr), s.weightDecayMode == "cautious"};
}

/// Whether the update `orth` (subtracted) and `value` disagree in sign: the
/// elements cautious weight decay leaves alone (a zero agrees with both).
MUON_HOST_DEVICE inline bool signsDisagree(float orth, float value) {
  return (orth > 0.0f && value < 0.0f) || (orth < 0.0f && value > 0.0f);
}

MUON_HOST_DEVICE inline float updatedValue(float value, float orth,
                                           const UpdateScalars &s) {
  const float decayed =
      s.cautious && signsDisagree(orth, value) ? value : value * s.decay;
  return decayed - s.step * orth;
}

/// AdamW (torch.optim.AdamW, decoupled weight decay, bias-corrected).
struct AdamWScalars {
  float decay = 1, oneMinusBeta1 = 0, beta2 = 0, oneMinusBeta2 = 0;
  float stepSize = 0, bc2Sqrt = 1, eps = 0;
};

/// The scalars of step `step` (1-based).
inline AdamWScalars adamwScalars(const AdamWSettings &s, int64_t step) {
  const double bc1 = 1.0 - std::pow(s.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(s.beta2, static_cast<double>(step));
  AdamWScalars scalars;
  scalars.decay = static_cast<float>(1.0 - s.lr * s.weightDecay);
  scalars.oneMinusBeta1 = static_cast<float>(1.0 - s.beta1);
  scalars.beta2 = static_cast<float>(s.beta2);
  scalars.oneMinusBeta2 = static_cast<float>(1.0 - s.beta2);
  scalars.stepSize = static_cast<float>(s.lr / bc1);
  scalars.bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  scalars.eps = static_cast<float>(s.eps);
  return scalars;
}

/// One element of AdamW: updates the two moments and returns the new value.
MUON_HOST_DEVICE inline float adamwStep(float value, float grad, float &expAvg,
                                        float &expAvgSq,
                                        const AdamWScalars &s) {
  const float decayed = value * s.decay;
  expAvg = lerp(expAvg, grad, s.oneMinusBeta1);
  expAvgSq = expAvgSq * s.beta2 + s.oneMinusBeta2 * grad * grad;
  const float denom = sqrtf(expAvgSq) / s.bc2Sqrt + s.eps;
  return decayed - s.stepSize * (expAvg / denom);
}

} // namespace muon::runtime

#endif // MUON_RUNTIME_ELEMENTMATH_H
