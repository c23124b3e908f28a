//===- RoundHalf.h - bf16 and f16 rounding for whole-matrix passes -*- C++ -*-===//
//
// roundToBf16 and roundToF16 (muon/Runtime/DType.h: to nearest even, NaN
// stays a quiet NaN, f16 beyond 65504 becomes infinity) without their
// branches, so that the CPU's rounding passes over whole matrices
// vectorize. The same bits as DType.h's functions (RoundHalfTest checks
// them against each other).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CPU_ROUNDHALF_H
#define MUON_RUNTIME_CPU_ROUNDHALF_H

#include "muon/Runtime/DType.h"

#include <cstdint>
#include <cstring>

namespace muon::runtime::cpu {

inline float roundBf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  bits = value != value ? (bits | 0x00400000u) & 0xFFFF0000u
                        : (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
  std::memcpy(&value, &bits, 4);
  return value;
}

inline float roundF16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  const uint32_t sign = bits & 0x80000000u, magnitude = bits & 0x7FFFFFFFu;
  // f16's normal range: the mantissa rounded to 10 bits (a carry moves the
  // exponent up, as it should).
  const uint32_t normal =
      (magnitude + 0xFFFu + ((magnitude >> 13) & 1u)) & 0xFFFFE000u;
  // Below 2^-14, f16's subnormals are the multiples of 2^-24: adding 0.5f,
  // whose neighbours are 2^-24 apart, rounds to one of them (to nearest
  // even, the FPU's mode), and subtracting it again is exact.
  float absolute;
  std::memcpy(&absolute, &magnitude, 4);
  const float subnormal = (absolute + 0.5f) - 0.5f;
  uint32_t subnormalBits;
  std::memcpy(&subnormalBits, &subnormal, 4);
  uint32_t out = magnitude < 0x38800000u ? subnormalBits : normal;
  // From 65520 (half-way to 2^16) on: infinity; a NaN: the quiet NaN
  // roundToF16 gives.
  out = magnitude >= 0x477FF000u ? 0x7F800000u : out;
  out = magnitude > 0x7F800000u ? 0x7FC00000u : out;
  out |= sign;
  std::memcpy(&value, &out, 4);
  return value;
}

/// `value` rounded to `P`'s values (F32: unchanged).
template <DType P> inline float roundAs(float value) {
  if constexpr (P == DType::BF16)
    return roundBf16(value);
  else if constexpr (P == DType::F16)
    return roundF16(value);
  else
    return value;
}

/// Every one of `n` values rounded to `precision`'s (a no-op for F32).
inline void roundValues(float *x, int64_t n, DType precision) {
  if (precision == DType::BF16)
    for (int64_t i = 0; i < n; ++i)
      x[i] = roundBf16(x[i]);
  else if (precision == DType::F16)
    for (int64_t i = 0; i < n; ++i)
      x[i] = roundF16(x[i]);
}

} // namespace muon::runtime::cpu

#endif // MUON_RUNTIME_CPU_ROUNDHALF_H
