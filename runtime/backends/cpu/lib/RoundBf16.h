//===- RoundBf16.h - bf16 rounding for whole-matrix passes -------*- C++ -*-===//
//
// roundToBf16 (muon/Runtime/DType.h: to nearest even, NaN stays a quiet
// NaN) without its branch, so that the CPU's rounding passes over whole
// matrices vectorize. The same bits as roundToBf16.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CPU_ROUNDBF16_H
#define MUON_RUNTIME_CPU_ROUNDBF16_H

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

} // namespace muon::runtime::cpu

#endif // MUON_RUNTIME_CPU_ROUNDBF16_H
