//===- DTypeDevice.cuh - DType's conversions on the GPU --------*- CUDA -*-===//
//
// The same round-to-nearest-even conversions as runtime/lib/DType.cpp, bit
// for bit (NaNs included), so that a GPU stores exactly what the CPU device
// and the reference store. Plain integer code rather than cuda_bf16.h's
// intrinsics, whose NaN encodings differ from DType.cpp's.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_DTYPEDEVICE_CUH
#define MUON_RUNTIME_CUDA_DTYPEDEVICE_CUH

#include "muon/Runtime/DType.h"

#include <cstdint>

namespace muon::runtime::cuda {

__device__ inline uint16_t toBf16(float value) {
  uint32_t bits = __float_as_uint(value);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) // NaN: stay a quiet NaN
    return static_cast<uint16_t>((bits >> 16) | 0x40);
  uint32_t roundingBias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + roundingBias) >> 16);
}

__device__ inline float fromBf16(uint16_t half) {
  return __uint_as_float(static_cast<uint32_t>(half) << 16);
}

__device__ inline uint16_t toF16(float value) {
  uint32_t bits = __float_as_uint(value);
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

__device__ inline float fromF16(uint16_t half) {
  uint32_t sign = static_cast<uint32_t>(half & 0x8000u) << 16;
  uint32_t exponent = (half >> 10) & 0x1Fu;
  uint32_t mantissa = half & 0x3FFu;
  if (exponent == 0x1F)
    return __uint_as_float(sign | 0x7F800000u | (mantissa << 13));
  if (exponent != 0)
    return __uint_as_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
  if (mantissa == 0)
    return __uint_as_float(sign);
  // Subnormal: exactly mantissa * 2^-24.
  float value = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
  return __uint_as_float(__float_as_uint(value) | sign);
}

/// Element access by storage type: T's bits in memory, f32 in registers.
template <DType T> struct Element;
template <> struct Element<DType::F32> {
  using Storage = float;
  __device__ static float load(float v) { return v; }
  __device__ static float store(float v) { return v; }
};
template <> struct Element<DType::BF16> {
  using Storage = uint16_t;
  __device__ static float load(uint16_t v) { return fromBf16(v); }
  __device__ static uint16_t store(float v) { return toBf16(v); }
};
template <> struct Element<DType::F16> {
  using Storage = uint16_t;
  __device__ static float load(uint16_t v) { return fromF16(v); }
  __device__ static uint16_t store(float v) { return toF16(v); }
};

template <DType T>
__device__ inline float loadElement(const void *data, int64_t i) {
  using E = Element<T>;
  return E::load(static_cast<const typename E::Storage *>(data)[i]);
}

template <DType T>
__device__ inline void storeElement(void *data, int64_t i, float value) {
  using E = Element<T>;
  static_cast<typename E::Storage *>(data)[i] = E::store(value);
}

/// `value` after a store and load in `type` (the wire rounding). Names
/// differ from DType.h's host functions, which argument-dependent lookup
/// would otherwise find too.
__device__ inline float roundThrough(DType type, float value) {
  switch (type) {
  case DType::F32:
    return value;
  case DType::BF16:
    return fromBf16(toBf16(value));
  case DType::F16:
    return fromF16(toF16(value));
  }
  return value;
}

} // namespace muon::runtime::cuda

#endif // MUON_RUNTIME_CUDA_DTYPEDEVICE_CUH
