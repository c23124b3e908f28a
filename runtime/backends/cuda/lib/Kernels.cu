//===- Kernels.cu - The CUDA backend's kernels ----------------------------===//
//
// Grid-stride loops over 64-bit indices, one template instance per storage
// type. Built with -fmad=false (CMakeLists.txt): a contracted a * b + c
// rounds once where the CPU rounds twice, and the elementwise steps must
// match CpuDevice bit for bit.
//
//===----------------------------------------------------------------------===//
#include "Kernels.h"

#include "CudaSupport.h"
#include "DTypeDevice.cuh"

#include <algorithm>
#include <type_traits>

namespace muon::runtime::cuda {
namespace {

constexpr int kThreads = 256;
// Enough blocks to fill any GPU; the grid-stride loops do the rest.
constexpr int64_t kMaxBlocks = 8192;

dim3 blocksFor(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  return dim3(
      static_cast<unsigned>(std::clamp<int64_t>(blocks, 1, kMaxBlocks)));
}

__device__ inline int64_t firstIndex() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ inline int64_t gridStride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

/// Calls `f` with std::integral_constant<DType, type>.
template <typename F> void withType(DType type, F &&f) {
  switch (type) {
  case DType::F32:
    f(std::integral_constant<DType, DType::F32>());
    return;
  case DType::BF16:
    f(std::integral_constant<DType, DType::BF16>());
    return;
  case DType::F16:
    f(std::integral_constant<DType, DType::F16>());
    return;
  }
}

template <DType T>
__global__ void findNonFiniteKernel(const void *x, int64_t n, int *nonFinite) {
  for (int64_t i = firstIndex(); i < n; i += gridStride())
    if (!isFiniteValue(loadElement<T>(x, i)))
      *nonFinite = 1; // every writer writes the same value
}

template <DType G>
__global__ void momentumKernel(const void *grad, float *buf, float *update,
                               int64_t n, MomentumScalars s) {
  for (int64_t i = firstIndex(); i < n; i += gridStride())
    update[i] = momentumStep(loadElement<G>(grad, i), buf[i], s);
}

template <DType T>
__global__ void applyUpdateKernel(void *values, const float *orth, int64_t n,
                                  UpdateScalars s) {
  for (int64_t i = firstIndex(); i < n; i += gridStride())
    storeElement<T>(values, i, updatedValue(loadElement<T>(values, i), orth[i], s));
}

template <DType T, DType G>
__global__ void adamwKernel(void *values, const void *grad, float *expAvg,
                            float *expAvgSq, int64_t n, AdamWScalars s) {
  for (int64_t i = firstIndex(); i < n; i += gridStride()) {
    // Through registers: the moments are read and written once.
    float m = expAvg[i], v = expAvgSq[i];
    float p = adamwStep(loadElement<T>(values, i), loadElement<G>(grad, i), m,
                        v, s);
    expAvg[i] = m;
    expAvgSq[i] = v;
    storeElement<T>(values, i, p);
  }
}

/// Rows over gridDim.y, columns over x. `Accumulate` adds to an f32
/// destination whatever `D` says, as CpuDevice does.
template <DType S, DType D, bool Accumulate>
__global__ void copyBoxKernel(const void *src, int64_t srcStride, void *dst,
                              int64_t dstStride, int64_t rows, int64_t cols,
                              DType through) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t from = r * srcStride, to = r * dstStride;
    for (int64_t c = firstIndex(); c < cols; c += gridStride()) {
      float v = roundTo(through, loadElement<S>(src, from + c));
      if (Accumulate)
        static_cast<float *>(dst)[to + c] += v;
      else
        storeElement<D>(dst, to + c, v);
    }
  }
}

// Newton-Schulz.

constexpr int64_t kElementsPerPart = 16384;
constexpr int kMaxParts = 64;

/// One block per (matrix, part); a fixed tree in shared memory, so that
/// every run sums in the same order.
template <bool RoundToBf16>
__global__ void sumSquaresKernel(const float *x, int64_t count,
                                 int64_t elements, int parts,
                                 double *partials) {
  __shared__ double sums[kThreads];
  const int64_t chunk = (elements + parts - 1) / parts;
  for (int64_t block = blockIdx.x; block < count * parts; block += gridDim.x) {
    const int64_t matrix = block / parts, part = block % parts;
    const int64_t begin = part * chunk;
    const int64_t end = begin + chunk < elements ? begin + chunk : elements;
    const float *values = x + matrix * elements;
    double sum = 0;
    for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
      float v = RoundToBf16 ? roundToBf16(values[i]) : values[i];
      sum += static_cast<double>(v) * static_cast<double>(v);
    }
    sums[threadIdx.x] = sum;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
      if (threadIdx.x < half)
        sums[threadIdx.x] += sums[threadIdx.x + half];
      __syncthreads();
    }
    if (threadIdx.x == 0)
      partials[block] = sums[0];
    __syncthreads(); // sums is rewritten by the next block of the loop
  }
}

__global__ void finishNormsKernel(const double *partials, int64_t count,
                                  int parts, float eps, bool inBf16,
                                  float *norms) {
  for (int64_t i = firstIndex(); i < count; i += gridStride()) {
    double sum = 0;
    for (int p = 0; p < parts; ++p)
      sum += partials[i * parts + p];
    float norm = static_cast<float>(sqrt(sum));
    if (inBf16)
      norm = roundToBf16(norm);
    norms[i] = norm < eps ? eps : norm; // std::max(norm, eps)
  }
}

template <DType Out>
__global__ void normalizeKernel(const float *x, int64_t count, int64_t elements,
                                const float *norms, void *out,
                                int64_t outStride) {
  const int64_t total = count * elements;
  for (int64_t i = firstIndex(); i < total; i += gridStride()) {
    const int64_t matrix = i / elements;
    float v = Out == DType::BF16 ? roundToBf16(x[i]) : x[i];
    storeElement<Out>(out, i + matrix * (outStride - elements),
                      v / norms[matrix]);
  }
}

template <DType In>
__global__ void copyOutKernel(const void *in, int64_t inStride, float *out,
                              int64_t count, int64_t elements) {
  const int64_t total = count * elements;
  for (int64_t i = firstIndex(); i < total; i += gridStride())
    out[i] = loadElement<In>(in, i + i / elements * (inStride - elements));
}

constexpr int kTile = 32, kTileRows = 8;

/// Per 32 x 32 tile of the strict upper triangle: read the mirrored lower
/// tile along columns (coalesced), write it transposed through shared
/// memory. A diagonal tile reads all of itself before writing its upper
/// half from its lower half.
template <typename T>
__global__ void mirrorLowerKernel(T *matrices, int64_t count, int64_t m,
                                  int64_t stride) {
  __shared__ T tile[kTile][kTile + 1];
  const int64_t tiles = (m + kTile - 1) / kTile;
  for (int64_t matrix = blockIdx.y; matrix < count; matrix += gridDim.y) {
    T *a = matrices + matrix * stride;
    for (int64_t t = blockIdx.x; t < tiles * tiles; t += gridDim.x) {
      const int64_t tileRow = t / tiles, tileCol = t % tiles;
      if (tileRow > tileCol)
        continue; // a lower tile: a source, never written
      const int64_t row0 = tileRow * kTile, col0 = tileCol * kTile;
      for (int k = threadIdx.y; k < kTile; k += kTileRows) {
        const int64_t r = col0 + threadIdx.x, c = row0 + k;
        if (r < m && c < m)
          tile[k][threadIdx.x] = a[r + c * m];
      }
      __syncthreads();
      for (int k = threadIdx.y; k < kTile; k += kTileRows) {
        const int64_t r = row0 + threadIdx.x, c = col0 + k;
        if (r < c && c < m)
          a[r + c * m] = tile[threadIdx.x][k];
      }
      __syncthreads();
    }
  }
}

} // namespace

bool kernelsLoadable(std::string &error) {
  cudaFuncAttributes attributes;
  cudaError_t status =
      cudaFuncGetAttributes(&attributes, momentumKernel<DType::F32>);
  if (status == cudaSuccess)
    return true;
  (void)cudaGetLastError(); // not sticky: clear it for the caller
  error = "this build's kernels do not run on this GPU (" + describe(status) +
          "; MuonRuntimeCuda is built for sm_80 and sm_90)";
  return false;
}

void launchFindNonFinite(cudaStream_t stream, const void *x, DType type,
                         int64_t n, int *nonFinite) {
  if (n <= 0)
    return;
  withType(type, [&](auto t) {
    findNonFiniteKernel<decltype(t)::value>
        <<<blocksFor(n), kThreads, 0, stream>>>(x, n, nonFinite);
  });
  MUON_CUDA_CHECK_LAUNCH("findNonFiniteKernel");
}

void launchMomentum(cudaStream_t stream, const void *grad, DType gradType,
                    float *buf, float *update, int64_t n,
                    const MomentumScalars &scalars) {
  if (n <= 0)
    return;
  withType(gradType, [&](auto g) {
    momentumKernel<decltype(g)::value><<<blocksFor(n), kThreads, 0, stream>>>(
        grad, buf, update, n, scalars);
  });
  MUON_CUDA_CHECK_LAUNCH("momentumKernel");
}

void launchApplyUpdate(cudaStream_t stream, void *values, DType type,
                       const float *orth, int64_t n,
                       const UpdateScalars &scalars) {
  if (n <= 0)
    return;
  withType(type, [&](auto t) {
    applyUpdateKernel<decltype(t)::value>
        <<<blocksFor(n), kThreads, 0, stream>>>(values, orth, n, scalars);
  });
  MUON_CUDA_CHECK_LAUNCH("applyUpdateKernel");
}

void launchAdamW(cudaStream_t stream, void *values, DType type,
                 const void *grad, DType gradType, float *expAvg,
                 float *expAvgSq, int64_t n, const AdamWScalars &scalars) {
  if (n <= 0)
    return;
  withType(type, [&](auto t) {
    withType(gradType, [&](auto g) {
      adamwKernel<decltype(t)::value, decltype(g)::value>
          <<<blocksFor(n), kThreads, 0, stream>>>(values, grad, expAvg,
                                                  expAvgSq, n, scalars);
    });
  });
  MUON_CUDA_CHECK_LAUNCH("adamwKernel");
}

void launchCopyBox(cudaStream_t stream, const BoxCopy &c) {
  if (c.rows <= 0 || c.cols <= 0)
    return;
  dim3 grid = blocksFor(c.cols);
  grid.x = std::min<unsigned>(grid.x, 64); // rows bring the parallelism
  grid.y = static_cast<unsigned>(std::min<int64_t>(c.rows, 65535));
  withType(c.srcType, [&](auto s) {
    constexpr DType S = decltype(s)::value;
    if (c.accumulate) {
      copyBoxKernel<S, DType::F32, true><<<grid, kThreads, 0, stream>>>(
          c.src, c.srcStride, c.dst, c.dstStride, c.rows, c.cols, c.through);
      return;
    }
    withType(c.dstType, [&](auto d) {
      copyBoxKernel<S, decltype(d)::value, false>
          <<<grid, kThreads, 0, stream>>>(c.src, c.srcStride, c.dst,
                                          c.dstStride, c.rows, c.cols,
                                          c.through);
    });
  });
  MUON_CUDA_CHECK_LAUNCH("copyBoxKernel");
}

int sumSquaresParts(int64_t elements) {
  return static_cast<int>(std::clamp<int64_t>(
      (elements + kElementsPerPart - 1) / kElementsPerPart, 1, kMaxParts));
}

void launchSumSquares(cudaStream_t stream, const float *x, int64_t count,
                      int64_t elements, double *partials, bool inBf16) {
  if (count <= 0 || elements <= 0)
    return;
  const int parts = sumSquaresParts(elements);
  dim3 grid(static_cast<unsigned>(std::min<int64_t>(count * parts, 65536)));
  if (inBf16)
    sumSquaresKernel<true>
        <<<grid, kThreads, 0, stream>>>(x, count, elements, parts, partials);
  else
    sumSquaresKernel<false>
        <<<grid, kThreads, 0, stream>>>(x, count, elements, parts, partials);
  MUON_CUDA_CHECK_LAUNCH("sumSquaresKernel");
}

void launchFinishNorms(cudaStream_t stream, const double *partials,
                       int64_t count, int parts, float eps, bool inBf16,
                       float *norms) {
  if (count <= 0)
    return;
  finishNormsKernel<<<blocksFor(count), kThreads, 0, stream>>>(
      partials, count, parts, eps, inBf16, norms);
  MUON_CUDA_CHECK_LAUNCH("finishNormsKernel");
}

void launchNormalize(cudaStream_t stream, const float *x, int64_t count,
                     int64_t elements, const float *norms, void *out,
                     int64_t outStride, DType outType) {
  const int64_t total = count * elements;
  if (total <= 0)
    return;
  if (outType == DType::BF16)
    normalizeKernel<DType::BF16><<<blocksFor(total), kThreads, 0, stream>>>(
        x, count, elements, norms, out, outStride);
  else
    normalizeKernel<DType::F32><<<blocksFor(total), kThreads, 0, stream>>>(
        x, count, elements, norms, out, outStride);
  MUON_CUDA_CHECK_LAUNCH("normalizeKernel");
}

void launchCopyOut(cudaStream_t stream, const void *in, int64_t inStride,
                   DType inType, float *out, int64_t count, int64_t elements) {
  const int64_t total = count * elements;
  if (total <= 0)
    return;
  if (inType == DType::BF16)
    copyOutKernel<DType::BF16><<<blocksFor(total), kThreads, 0, stream>>>(
        in, inStride, out, count, elements);
  else
    copyOutKernel<DType::F32><<<blocksFor(total), kThreads, 0, stream>>>(
        in, inStride, out, count, elements);
  MUON_CUDA_CHECK_LAUNCH("copyOutKernel");
}

void launchMirrorLower(cudaStream_t stream, void *matrices, int64_t count,
                       int64_t m, int64_t stride, DType type) {
  if (count <= 0 || m <= 1)
    return;
  const int64_t tiles = (m + kTile - 1) / kTile;
  dim3 grid(static_cast<unsigned>(std::min<int64_t>(tiles * tiles, 65536)),
            static_cast<unsigned>(std::min<int64_t>(count, 65535)));
  dim3 block(kTile, kTileRows);
  if (type == DType::F32)
    mirrorLowerKernel<float><<<grid, block, 0, stream>>>(
        static_cast<float *>(matrices), count, m, stride);
  else
    mirrorLowerKernel<uint16_t><<<grid, block, 0, stream>>>(
        static_cast<uint16_t *>(matrices), count, m, stride);
  MUON_CUDA_CHECK_LAUNCH("mirrorLowerKernel");
}

} // namespace muon::runtime::cuda
