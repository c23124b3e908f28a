//===- DType.cpp - Storage element types ----------------------------------===//
#include "muon/Runtime/DType.h"

#include <cmath>
#include <cstring>

namespace muon::runtime {

int64_t dtypeBytes(DType type) { return type == DType::F32 ? 4 : 2; }

const char *dtypeName(DType type) {
  switch (type) {
  case DType::F32:
    return "f32";
  case DType::BF16:
    return "bf16";
  case DType::F16:
    return "f16";
  }
  return "?";
}

std::optional<DType> parseDType(const std::string &name) {
  if (name == "f32")
    return DType::F32;
  if (name == "bf16")
    return DType::BF16;
  if (name == "f16")
    return DType::F16;
  return std::nullopt;
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

uint16_t toF16Bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  uint32_t magnitude = bits & 0x7FFFFFFF;
  if (magnitude > 0x7F800000) // NaN: keep it a quiet NaN
    return sign | 0x7E00;
  if (magnitude >= 0x477FF000) // rounds to beyond 65504: infinity
    return sign | 0x7C00;
  if (magnitude < 0x38800000) {
    // Subnormal half (or zero): value / 2^-24, rounded to nearest even.
    if (magnitude < 0x33000000) // below half of the smallest subnormal
      return sign;
    uint32_t mantissa = (magnitude & 0x7FFFFF) | 0x800000;
    int shift = 126 - static_cast<int>(magnitude >> 23); // 14..24
    uint32_t half = mantissa >> shift;
    uint32_t rest = mantissa & ((1u << shift) - 1);
    uint32_t midpoint = 1u << (shift - 1);
    if (rest > midpoint || (rest == midpoint && (half & 1)))
      ++half;
    return sign | static_cast<uint16_t>(half);
  }
  // Normal: rebias the exponent and round the mantissa to 10 bits.
  uint32_t rebased = magnitude - 0x38000000;
  uint32_t roundingBias = 0xFFF + ((rebased >> 13) & 1);
  return sign | static_cast<uint16_t>((rebased + roundingBias) >> 13);
}

float fromF16Bits(uint16_t half) {
  uint32_t sign = static_cast<uint32_t>(half & 0x8000) << 16;
  uint32_t exponent = (half >> 10) & 0x1F;
  uint32_t mantissa = half & 0x3FF;
  uint32_t bits;
  if (exponent == 0x1F) {
    bits = sign | 0x7F800000 | (mantissa << 13);
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;
  } else {
    // Subnormal: exactly mantissa * 2^-24.
    float value = std::ldexp(static_cast<float>(mantissa), -24);
    std::memcpy(&bits, &value, 4);
    bits |= sign;
  }
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}

float roundToF16(float value) { return fromF16Bits(toF16Bits(value)); }

} // namespace muon::runtime
