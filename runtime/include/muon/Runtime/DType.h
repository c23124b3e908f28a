//===- DType.h - Storage element types --------------------------*- C++ -*-===//
//
// The element types of parameter and gradient storage (a spec's `dtype`)
// and of the wire: f32, bf16 and f16. Optimizer state is f32 on every
// device, Newton-Schulz f32, bf16 or f16 (the plan's ns_dtype); values are
// converted on load and rounded to nearest even on store, the same way on
// every rank and in the reference.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_DTYPE_H
#define MUON_RUNTIME_DTYPE_H

#include "muon/Runtime/HostDevice.h"

#include <cstdint>
#include <optional>
#include <string>

namespace muon::runtime {

enum class DType : uint8_t { F32, BF16, F16 };

int64_t dtypeBytes(DType type);
const char *dtypeName(DType type);
/// "f32", "bf16", "f16"; nothing for anything else.
std::optional<DType> parseDType(const std::string &name);

// The conversions, inline and MUON_HOST_DEVICE: the CUDA kernels store
// with this code too, so every device rounds alike (HostDevice.h).

/// f32 to bf16, round to nearest even; a NaN stays a quiet NaN.
MUON_HOST_DEVICE inline uint16_t toBf16Bits(float value) {
  uint32_t bits = floatBits(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) // NaN: set the quiet bit
    return static_cast<uint16_t>((bits >> 16) | 0x40u);
  uint32_t roundingBias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + roundingBias) >> 16);
}

MUON_HOST_DEVICE inline float fromBf16Bits(uint16_t half) {
  return floatFromBits(static_cast<uint32_t>(half) << 16);
}

MUON_HOST_DEVICE inline float roundToBf16(float value) {
  return fromBf16Bits(toBf16Bits(value));
}

/// f32 to f16, round to nearest even (subnormals included); beyond 65504
/// rounds to infinity; a NaN stays a quiet NaN.
MUON_HOST_DEVICE inline uint16_t toF16Bits(float value) {
  uint32_t bits = floatBits(value);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  uint32_t magnitude = bits & 0x7FFFFFFFu;
  if (magnitude > 0x7F800000u) // NaN: keep it a quiet NaN
    return sign | 0x7E00u;
  if (magnitude >= 0x477FF000u) // rounds to beyond 65504: infinity
    return sign | 0x7C00u;
  if (magnitude < 0x38800000u) {
    // Subnormal half (or zero): value / 2^-24, rounded to nearest even.
    if (magnitude < 0x33000000u) // below half of the smallest subnormal
      return sign;
    uint32_t mantissa = (magnitude & 0x7FFFFFu) | 0x800000u;
    int shift = 126 - static_cast<int>(magnitude >> 23); // 14..24
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1u);
    uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1u)))
      ++half;
    return sign | static_cast<uint16_t>(half);
  }
  // Normal: rebias the exponent and round the mantissa to 10 bits.
  uint32_t rebased = magnitude - 0x38000000u;
  uint32_t roundingBias = 0xFFFu + ((rebased >> 13) & 1u);
  return sign | static_cast<uint16_t>((rebased + roundingBias) >> 13);
}

MUON_HOST_DEVICE inline float fromF16Bits(uint16_t half) {
  uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1Fu;
  uint32_t mantissa = half & 0x3FFu;
  if (exponent == 0x1F)
    return floatFromBits(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0)
    return floatFromBits(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0)
    return floatFromBits(sign);
  // Subnormal: exactly mantissa * 2^-24.
  float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return floatFromBits(floatBits(value) | sign);
}

MUON_HOST_DEVICE inline float roundToF16(float value) {
  return fromF16Bits(toF16Bits(value));
}

/// The value at `data[i]`, as f32.
MUON_HOST_DEVICE inline float loadAs(const void *data, DType type, int64_t i) {
  switch (type) {
  case DType::F32:
    return static_cast<const float *>(data)[i];
  case DType::BF16:
    return fromBf16Bits(static_cast<const uint16_t *>(data)[i]);
  case DType::F16:
    return fromF16Bits(static_cast<const uint16_t *>(data)[i]);
  }
  return 0;
}

/// Stores `value` at `data[i]`, rounded to the type.
MUON_HOST_DEVICE inline void storeAs(void *data, DType type, int64_t i, float value) {
  switch (type) {
  case DType::F32:
    static_cast<float *>(data)[i] = value;
    return;
  case DType::BF16:
    static_cast<uint16_t *>(data)[i] = toBf16Bits(value);
    return;
  case DType::F16:
    static_cast<uint16_t *>(data)[i] = toF16Bits(value);
    return;
  }
}

/// `value` after a store and load in `type`.
MUON_HOST_DEVICE inline float roundTo(DType type, float value) {
  switch (type) {
  case DType::F32:
    return value;
  case DType::BF16:
    return roundToBf16(value);
  case DType::F16:
    return roundToF16(value);
  }
  return value;
}

} // namespace muon::runtime

#endif // MUON_RUNTIME_DTYPE_H
