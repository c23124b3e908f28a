//===- DType.h - Storage element types --------------------------*- C++ -*-===//
//
// The element types of parameter and gradient storage (a spec's `dtype`)
// and of the wire: f32, bf16 and f16. Optimizer state is f32 on every
// device, Newton-Schulz f32 or bf16 (the plan's ns_dtype); values are
// converted on load and rounded to nearest even on store, the same way on
// every rank and in the reference.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_DTYPE_H
#define MUON_RUNTIME_DTYPE_H

#include <cstdint>
#include <optional>
#include <string>

namespace muon::runtime {

enum class DType : uint8_t { F32, BF16, F16 };

int64_t dtypeBytes(DType type);
const char *dtypeName(DType type);
/// "f32", "bf16", "f16"; nothing for anything else.
std::optional<DType> parseDType(const std::string &name);

uint16_t toBf16Bits(float value);
float fromBf16Bits(uint16_t bits);
float roundToBf16(float value);
uint16_t toF16Bits(float value);
float fromF16Bits(uint16_t bits);
float roundToF16(float value);

/// The value at `data[i]`, as f32.
inline float loadAs(const void *data, DType type, int64_t i) {
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
inline void storeAs(void *data, DType type, int64_t i, float value) {
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
inline float roundTo(DType type, float value) {
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
