//===- Memory.cpp - Stream-ordered GPU memory -----------------------------===//
#include "Memory.h"

#include "CudaSupport.h"

#include <algorithm>

namespace muon::runtime::cuda {

void *StreamMemory::allocate(size_t bytes) const {
  bytes = std::max<size_t>(bytes, 1);
  void *memory = nullptr;
  cudaError_t status;
  if (pool) {
    status = cudaMallocFromPoolAsync(&memory, bytes, pool, stream);
    if (status == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError(); // not sticky: clear it
      // Frees still queued return their memory to the pool when the stream
      // reaches them; then the pool gives back what it keeps.
      MUON_CUDA_CHECK(cudaStreamSynchronize(stream));
      MUON_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
      status = cudaMallocFromPoolAsync(&memory, bytes, pool, stream);
    }
  } else {
    status = cudaMalloc(&memory, bytes);
  }
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  check(status, "allocating GPU memory", __FILE__, __LINE__);
  return memory;
}

void StreamMemory::release(void *memory) const {
  if (!memory)
    return;
  if (pool) {
    MUON_CUDA_CHECK(cudaFreeAsync(memory, stream));
    return;
  }
  MUON_CUDA_CHECK(cudaStreamSynchronize(stream)); // queued work may use it
  MUON_CUDA_CHECK(cudaFree(memory));
}

} // namespace muon::runtime::cuda
