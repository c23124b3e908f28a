//===- HostDevice.h - Code compiled for the CPU and the GPU -----*- C++ -*-===//
//
// MUON_HOST_DEVICE marks the inline functions that every device runs from
// one source: the CPU device and the reference compile them as plain C++,
// the CUDA backend's kernels with nvcc. One source is one sequence of
// roundings, so a GPU stores what the CPU stores bit for bit, provided that
// neither compiler contracts a * b + c into one FMA (the runtime is built
// with -ffp-contract=off, Kernels.cu with -fmad=false).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_HOSTDEVICE_H
#define MUON_RUNTIME_HOSTDEVICE_H

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MUON_HOST_DEVICE __host__ __device__
#else
#define MUON_HOST_DEVICE
#endif

namespace muon::runtime {

/// The bits of an f32, and back.
MUON_HOST_DEVICE inline uint32_t floatBits(float value) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(value);
#else
  uint32_t bits;
  std::memcpy(&bits, &value, 4);
  return bits;
#endif
}

MUON_HOST_DEVICE inline float floatFromBits(uint32_t bits) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(bits);
#else
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
#endif
}

} // namespace muon::runtime

#endif // MUON_RUNTIME_HOSTDEVICE_H
