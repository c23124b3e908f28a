//===- Memory.h - Stream-ordered GPU memory ---------------------*- C++ -*-===//
//
// Allocations of the CUDA backend: from the device's memory pool, ordered on
// its compute stream, so that a release does not wait for the whole GPU
// (cudaFree does) and the NCCL transfers in flight on another stream keep
// going. The pool keeps freed memory for the next allocation; when the GPU
// runs out, it gives that memory back and the allocation is tried again.
// Without pool support (some virtualized GPUs): cudaMalloc and cudaFree.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_MEMORY_H
#define MUON_RUNTIME_CUDA_MEMORY_H

#include <cuda_runtime_api.h>

#include <cstddef>

namespace muon::runtime::cuda {

struct StreamMemory {
  cudaStream_t stream = nullptr;
  cudaMemPool_t pool = nullptr; // null: cudaMalloc

  /// `bytes` (at least 1) of uninitialized memory, usable by work queued on
  /// `stream` from now on; nullptr when the GPU has no room.
  void *allocate(size_t bytes) const;
  /// Frees `memory` once the work queued on `stream` so far is done.
  void release(void *memory) const;
};

} // namespace muon::runtime::cuda

#endif // MUON_RUNTIME_CUDA_MEMORY_H
