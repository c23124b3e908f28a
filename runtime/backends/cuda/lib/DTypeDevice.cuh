//===- DTypeDevice.cuh - Element access by storage type in kernels -*- CUDA -*-===//
//
// One kernel instance per storage type, so that no switch on the type runs
// per element: Element<T> names the storage and converts with DType.h's
// MUON_HOST_DEVICE functions, the code the CPU device and the reference
// run (round to nearest even, NaNs included). MUON_HOST_DEVICE as well, so
// that the kernels' bodies (KernelBodies.h) also run on the host.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_DTYPEDEVICE_CUH
#define MUON_RUNTIME_CUDA_DTYPEDEVICE_CUH

#include "muon/Runtime/DType.h"

#include <cstdint>

namespace muon::runtime::cuda {

/// Element access by storage type: T's bits in memory, f32 in registers.
template <DType T> struct Element;
template <> struct Element<DType::F32> {
  using Storage = float;
  MUON_HOST_DEVICE static float load(float v) { return v; }
  MUON_HOST_DEVICE static float store(float v) { return v; }
};
template <> struct Element<DType::BF16> {
  using Storage = uint16_t;
  MUON_HOST_DEVICE static float load(uint16_t v) { return fromBf16Bits(v); }
  MUON_HOST_DEVICE static uint16_t store(float v) { return toBf16Bits(v); }
};
template <> struct Element<DType::F16> {
  using Storage = uint16_t;
  MUON_HOST_DEVICE static float load(uint16_t v) { return fromF16Bits(v); }
  MUON_HOST_DEVICE static uint16_t store(float v) { return toF16Bits(v); }
};

template <DType T>
MUON_HOST_DEVICE inline float loadElement(const void *data, int64_t i) {
  using E = Element<T>;
  return E::load(static_cast<const typename E::Storage *>(data)[i]);
}

template <DType T>
MUON_HOST_DEVICE inline void storeElement(void *data, int64_t i, float value) {
  using E = Element<T>;
  static_cast<typename E::Storage *>(data)[i] = E::store(value);
}

} // namespace muon::runtime::cuda

#endif // MUON_RUNTIME_CUDA_DTYPEDEVICE_CUH
