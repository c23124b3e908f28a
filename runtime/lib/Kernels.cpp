//===- Kernels.cpp - Elementwise optimizer updates ------------------------===//
#include "muon/Runtime/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace muon::runtime {

/// torch.lerp's formula: exact at both ends.
static inline float lerp(float start, float end, float weight) {
  return weight < 0.5f ? start + weight * (end - start)
                       : end - (end - start) * (1.0f - weight);
}

void momentumUpdate(const float *grad, float *buf, float *update, int64_t n,
                    const MuonSettings &s) {
  const float m = static_cast<float>(s.momentum);
  const float oneMinusM = static_cast<float>(1.0 - s.momentum);
  for (int64_t i = 0; i < n; ++i) {
    buf[i] = lerp(buf[i], grad[i], oneMinusM);
    update[i] = s.nesterov ? lerp(grad[i], buf[i], m) : buf[i];
  }
}

double adjustedLr(const MuonSettings &s, int64_t rows, int64_t cols) {
  if (s.adjustLr == "match_rms_adamw")
    return s.lr * 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)));
  return s.lr * std::sqrt(std::max(1.0, static_cast<double>(rows) / cols));
}

void applyMuonUpdate(float *param, const float *orth, int64_t n,
                     const MuonSettings &s, double alr) {
  const float decay = static_cast<float>(1.0 - s.lr * s.weightDecay);
  const float step = static_cast<float>(alr);
  for (int64_t i = 0; i < n; ++i)
    param[i] = param[i] * decay - step * orth[i];
}

void adamwUpdate(float *param, const float *grad, float *expAvg,
                 float *expAvgSq, int64_t n, const AdamWSettings &s,
                 int64_t step) {
  const float decay = static_cast<float>(1.0 - s.lr * s.weightDecay);
  const float oneMinusB1 = static_cast<float>(1.0 - s.beta1);
  const float b2 = static_cast<float>(s.beta2);
  const float oneMinusB2 = static_cast<float>(1.0 - s.beta2);
  const double bc1 = 1.0 - std::pow(s.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(s.beta2, static_cast<double>(step));
  const float stepSize = static_cast<float>(s.lr / bc1);
  const float bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(s.eps);
  for (int64_t i = 0; i < n; ++i) {
    param[i] *= decay;
    expAvg[i] = lerp(expAvg[i], grad[i], oneMinusB1);
    expAvgSq[i] = expAvgSq[i] * b2 + oneMinusB2 * grad[i] * grad[i];
    float denom = std::sqrt(expAvgSq[i]) / bc2Sqrt + eps;
    param[i] -= stepSize * (expAvg[i] / denom);
  }
}

uint16_t toBf16Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  if (std::isnan(value))
    return static_cast<uint16_t>((bits >> 16) | 0x40); // stay a quiet NaN
  uint32_t roundingBias = 0x7FFF + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + roundingBias) >> 16);
}

float fromBf16Bits(uint16_t half) {
  uint32_t bits = static_cast<uint32_t>(half) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

float roundToBf16(float value) { return fromBf16Bits(toBf16Bits(value)); }

} // namespace muon::runtime
