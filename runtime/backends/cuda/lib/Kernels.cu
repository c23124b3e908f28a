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
                  std::initializer_list<Span>) {
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

bool kernelsLoadable(std::string &error) {
  cudaFuncAttributes attributes;
  cudaError_t status = cudaFuncGetAttributes(
      &attributes, threadsKernel<kernels::Momentum<DType::F32>>);
  if (status == cudaSuccess)
    return true;
  (void)cudaGetLastError(); // not sticky: clear it for the caller
  error = "this build's kernels do not run on this GPU (" + describe(status) +
          "; MuonRuntimeCuda is built for sm_80 and sm_90)";
  return false;
}

void launchFindNonFinite(cudaStream_t stream, const void *x, DType type,
                         int64_t n, int *nonFinite) {
  CudaLaunch launch{stream};
  kernels::findNonFinite(launch, x, type, n, nonFinite);
}

void launchMomentum(cudaStream_t stream, const void *grad, DType gradType,
                    float *buf, float *update, int64_t n,
                    const MomentumScalars &scalars) {
  CudaLaunch launch{stream};
  kernels::momentum(launch, grad, gradType, buf, update, n, scalars);
}

void launchCopyBox(cudaStream_t stream, const BoxCopy &copy) {
  CudaLaunch launch{stream};
  kernels::copyBox(launch, copy);
}

int sumSquaresParts(int64_t elements) {
  return kernels::sumSquaresParts(elements);
}

void launchSumSquares(cudaStream_t stream, const float *x, int64_t count,
                      int64_t elements, double *partials, bool inBf16) {
  CudaLaunch launch{stream};
  kernels::sumSquares(launch, x, count, elements, partials, inBf16);
}

void launchFinishNorms(cudaStream_t stream, const double *partials,
                       int64_t count, int parts, float eps, bool inBf16,
                       float *norms) {
  CudaLaunch launch{stream};
  kernels::finishNorms(launch, partials, count, parts, eps, inBf16, norms);
}

void launchNormalize(cudaStream_t stream, const float *x, int64_t count,
                     int64_t elements, const float *norms, void *out,
                     int64_t outStride, DType outType) {
  CudaLaunch launch{stream};
  kernels::normalize(launch, x, count, elements, norms, out, outStride,
                     outType);
}

void launchCopyOut(cudaStream_t stream, const void *in, int64_t inStride,
                   DType inType, float *out, int64_t count, int64_t elements) {
  CudaLaunch launch{stream};
  kernels::copyOut(launch, in, inStride, inType, out, count, elements);
}

void launchMirrorLower(cudaStream_t stream, void *matrices, int64_t count,
                       int64_t m, int64_t stride, DType type) {
  CudaLaunch launch{stream};
  kernels::mirrorLower(launch, matrices, count, m, stride, type);
}

void launchNormuon(cudaStream_t stream, float *x, int64_t rows, int64_t cols,
                   float *v, const NormuonScalars &scalars, double *sums,
                   float *scale) {
  CudaLaunch launch{stream};
  kernels::normuon(launch, x, rows, cols, v, scalars, sums, scale);
}

void launchScaleRows(cudaStream_t stream, void *values, DType type,
                     int64_t rows, int64_t cols, const float *factors) {
  CudaLaunch launch{stream};
  kernels::scaleRows(launch, values, type, rows, cols, factors);
}

} // namespace muon::runtime::cuda
