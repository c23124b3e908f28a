//===- Kernels.cu - The CUDA backend's kernels on the GPU -----------------===//
//
// The kernels of KernelBodies.h as CUDA kernels: one __global__ entry per
// body type, launched over the geometry KernelBodies.h computes. Built with
// -fmad=false (CMakeLists.txt): a contracted a * b + c rounds once where
// the CPU rounds twice, and the elementwise steps must match CpuDevice bit
// for bit.
//
//===----------------------------------------------------------------------===//
#include "Kernels.h"

#include "CudaSupport.h"
#include "KernelBodies.h"

#include <string>

namespace muon::runtime::cuda {
namespace {

using kernels::Dim3;
using kernels::Geometry;
using kernels::Span;
using kernels::ThreadIndex;

__device__ inline Dim3 dim(const uint3 &v) { return Dim3{v.x, v.y, v.z}; }
__device__ inline Dim3 dim(const dim3 &v) { return Dim3{v.x, v.y, v.z}; }

__device__ inline ThreadIndex currentThread() {
  return ThreadIndex{dim(threadIdx), dim(blockIdx), dim(blockDim),
                     dim(gridDim)};
}

/// A cooperative body's view of its block: the stretches between barriers
/// run on every thread at once, then __syncthreads().
struct DeviceBlock {
  MUON_HOST_DEVICE Dim3 index() const {
#ifdef __CUDA_ARCH__
    return dim(blockIdx);
#else
    return Dim3();
#endif
  }
  MUON_HOST_DEVICE Dim3 count() const {
#ifdef __CUDA_ARCH__
    return dim(gridDim);
#else
    return Dim3();
#endif
  }
  template <typename F> MUON_HOST_DEVICE void eachThread(F &&f) const {
#ifdef __CUDA_ARCH__
    f(currentThread());
    __syncthreads();
#endif
  }
};

template <typename K> __global__ void threadsKernel(K kernel) {
  kernel(currentThread());
}

template <typename K> __global__ void blocksKernel(K kernel) {
  __shared__ typename K::Shared shared;
  DeviceBlock block;
  kernel(block, shared);
}

/// Launches on a stream; a failed launch is fatal (CudaSupport.h).
struct CudaLaunch {
  cudaStream_t stream;

  template <typename K>
  void operator()(const Geometry &g, const K &kernel, const char *name,
                  std::initializer_list<Span> spans) {
    (*this)(g, kernel, name, spans.begin(), spans.size());
  }
  template <typename K>
  void operator()(const Geometry &g, const K &kernel, const char *name,
                  const Span *, size_t) {
    const dim3 grid(g.grid.x, g.grid.y, g.grid.z);
    const dim3 block(g.block.x, g.block.y, g.block.z);
    if constexpr (kernels::isCooperative<K>())
      blocksKernel<K><<<grid, block, 0, stream>>>(kernel);
    else
      threadsKernel<K><<<grid, block, 0, stream>>>(kernel);
    check(cudaGetLastError(), (std::string("launching ") + name).c_str(),
          __FILE__, __LINE__);
  }
};

} // namespace

using Launcher = CudaLaunch;
#include "KernelLaunches.inc"

Status kernelsLoadable() {
  cudaFuncAttributes attributes;
  cudaError_t status = cudaFuncGetAttributes(
      &attributes,
      threadsKernel<kernels::ElementStepKernel<MomentumOp, DType::F32,
                                                DType::F32>>);
  if (status == cudaSuccess)
    return okStatus();
  (void)cudaGetLastError(); // not sticky: clear it for the caller
  return unavailable("this build's kernels do not run on this GPU (" +
                     describe(status) +
                     "; MuonRuntimeCuda is built for sm_80 and sm_90)");
}

} // namespace muon::runtime::cuda
