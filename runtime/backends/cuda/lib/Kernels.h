//===- Kernels.h - The CUDA backend's kernels, as launches ------*- C++ -*-===//
//
// Host-side launchers of the kernels in KernelBodies.h, for code compiled
// without nvcc: Kernels.cu launches them on the GPU, and the host stand-in
// of the GPU (unittests/FakeGpu/FakeKernels.cpp) runs the same bodies over
// the same geometry on the host. Each queues its work on `stream` and
// returns; launch errors are fatal (CudaSupport.h). The elementwise ones
// compute exactly what CpuDevice computes, operation for operation:
// Kernels.cu is compiled without contracting multiplies and adds into FMAs,
// with IEEE division and square roots, and scalars derived from the
// settings are computed on the host, once, as the CPU device computes them.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_KERNELS_H
#define MUON_RUNTIME_CUDA_KERNELS_H

#include "muon/Runtime/Device.h"
#include "muon/Runtime/ElementMath.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace muon::runtime::cuda {

/// Whether this build holds kernels that run on the current GPU (the
/// library is built for sm_80 and sm_90). False with `error`.
bool kernelsLoadable(std::string &error);

/// Sets `*nonFinite` (device memory) to 1 when one of `n` values is NaN or
/// infinite; leaves it alone otherwise.
void launchFindNonFinite(cudaStream_t stream, const void *x, DType type,
                         int64_t n, int *nonFinite);

/// momentumStep (ElementMath.h) on every element: buf in place, the
/// update into `update`.
void launchMomentum(cudaStream_t stream, const void *grad, DType gradType,
                    float *buf, float *update, int64_t n,
                    const MomentumScalars &scalars);

/// values = updatedValue(values, orth) (ElementMath.h). With `scalarsAt`
/// (device memory), the kernel reads its scalars there when it runs, not
/// `scalars`: a step graph replays it with each step's (CudaDevice.h).
void launchApplyUpdate(cudaStream_t stream, void *values, DType type,
                       const float *orth, int64_t n,
                       const UpdateScalars &scalars,
                       const UpdateScalars *scalarsAt = nullptr);

/// adamwStep (ElementMath.h) on every element; `scalarsAt` as above.
void launchAdamW(cudaStream_t stream, void *values, DType type,
                 const void *grad, DType gradType, float *expAvg,
                 float *expAvgSq, int64_t n, const AdamWScalars &scalars,
                 const AdamWScalars *scalarsAt = nullptr);

/// A box copy element by element, with the conversions and the `through`
/// rounding (`accumulate` adds to an f32 destination).
void launchCopyBox(cudaStream_t stream, const BoxCopy &copy);

// Newton-Schulz's elementwise steps, over `count` matrices of `elements`
// values: stored one after another in the caller's f32 buffer, and
// `stride` elements apart in the workspace (padded so that every matrix
// starts 16-byte aligned, as cuBLAS's batched bf16 kernels need).

/// How many partial sums per matrix launchSumSquares writes.
int sumSquaresParts(int64_t elements);
/// partials[i * parts + p]: part p of matrix i's sum of squares, in double,
/// of the values rounded to bf16 first when `inBf16`. Deterministic:
/// the same order on every run.
void launchSumSquares(cudaStream_t stream, const float *x, int64_t count,
                      int64_t elements, double *partials, bool inBf16);
/// norms[i] = max(f32(sqrt(sum of matrix i's parts)), eps), the norm rounded
/// to bf16 before the max when `inBf16`.
void launchFinishNorms(cudaStream_t stream, const double *partials,
                       int64_t count, int parts, float eps, bool inBf16,
                       float *norms);
/// out = x / norms[matrix]: f32, or with outType BF16 bf16(bf16(x) / norm)
/// as bf16 bits; matrix i of `out` starts at i * outStride.
void launchNormalize(cudaStream_t stream, const float *x, int64_t count,
                     int64_t elements, const float *norms, void *out,
                     int64_t outStride, DType outType);
/// Matrices `inStride` apart (f32, or bf16 widened to f32) into `out`, one
/// after another.
void launchCopyOut(cudaStream_t stream, const void *in, int64_t inStride,
                   DType inType, float *out, int64_t count, int64_t elements);
/// Copies the lower triangle of each column-major m x m matrix (`stride`
/// elements apart) onto its strict upper triangle (F32 or BF16 elements).
void launchMirrorLower(cudaStream_t stream, void *matrices, int64_t count,
                       int64_t m, int64_t stride, DType type);

/// The Gram form's polynomial H = a I + b R + c R R before its product:
/// f = b r + a I over `count` column-major m x m matrices `stride`
/// elements apart, r in `rType` (F32, or BF16 bits), f in f32.
void launchPolynomialBase(cudaStream_t stream, const void *r, DType rType,
                          float *f, int64_t count, int64_t m, int64_t stride,
                          float a, float b);
/// out = bf16(in) (bits) over `count` matrices of `elements` values,
/// `stride` elements apart in both.
void launchRoundToBf16(cudaStream_t stream, const float *in, uint16_t *out,
                       int64_t count, int64_t elements, int64_t stride);

/// normuonStep (ElementMath.h) on one rows x cols f32 matrix with its
/// per-row state `v`, each row's sum of squares by a fixed tree (so the
/// same on every run, not the CPU's order): `sums` is 2 * rows doubles and
/// `scale` one float of device scratch.
void launchNormuon(cudaStream_t stream, float *x, int64_t rows, int64_t cols,
                   float *v, const NormuonScalars &scalars, double *sums,
                   float *scale);
/// Row i of a stored rows x cols piece times factors[i] (device memory),
/// as qkClipped rounds it; rows with a factor of 1 keep their bits.
void launchScaleRows(cudaStream_t stream, void *values, DType type,
                     int64_t rows, int64_t cols, const float *factors);

} // namespace muon::runtime::cuda

#endif // MUON_RUNTIME_CUDA_KERNELS_H
