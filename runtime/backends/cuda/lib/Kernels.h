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
#include "muon/Runtime/MatrixStep.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace muon::runtime::cuda {

/// Whether this build holds kernels that run on the current GPU (the
/// library is built for sm_80 and sm_90). False with `error`.
Status kernelsLoadable();

/// Sets `*nonFinite` (device memory) to 1 when one of `n` values is NaN or
/// infinite; leaves it alone otherwise.
void launchFindNonFinite(cudaStream_t stream, const void *x, DType type,
                         int64_t n, int *nonFinite);

/// The kernel of a registered per-element step (ElementStep.h), made from
/// its op (ElementMath.h, every op of ElementOps has one: KernelBodies.h's
/// ElementStepKernel) over `operands` in device memory. With `scalarsAt`
/// (device memory, the op's Scalars), the kernel reads its scalars there
/// when it runs, not `scalars`: a step graph replays it with each step's
/// (CudaDevice.h). False when the build has no kernel for the step: the
/// device's default then runs it.
bool launchElementStep(cudaStream_t stream, const ElementStep &step,
                       const ElementOperands &operands,
                       const StepScalars &scalars,
                       const void *scalarsAt = nullptr);

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
/// out = x / norms[matrix]: f32, with outType BF16 bf16(bf16(x) / norm) as
/// bf16 bits, with F16 f16(x / norm) as f16 bits; matrix i of `out`
/// starts at i * outStride.
void launchNormalize(cudaStream_t stream, const float *x, int64_t count,
                     int64_t elements, const float *norms, void *out,
                     int64_t outStride, DType outType);
/// Matrices `inStride` apart (f32, or bf16 or f16 widened to f32) into
/// `out`, one after another.
void launchCopyOut(cudaStream_t stream, const void *in, int64_t inStride,
                   DType inType, float *out, int64_t count, int64_t elements);
/// Copies the lower triangle of each column-major m x m matrix (`stride`
/// elements apart) onto its strict upper triangle (F32, BF16 or F16
/// elements).
void launchMirrorLower(cudaStream_t stream, void *matrices, int64_t count,
                       int64_t m, int64_t stride, DType type);

/// The Gram form's polynomial H = a I + b R + c R R before its product:
/// f = b r + a I over `count` column-major m x m matrices `stride`
/// elements apart, r in `rType` (F32, or BF16 or F16 bits), f in f32.
void launchPolynomialBase(cudaStream_t stream, const void *r, DType rType,
                          float *f, int64_t count, int64_t m, int64_t stride,
                          float a, float b);
/// out = `type`(in) (BF16 or F16 bits) over `count` matrices of
/// `elements` values, `stride` elements apart in both.
void launchRoundToHalf(cudaStream_t stream, const float *in, uint16_t *out,
                       DType type, int64_t count, int64_t elements,
                       int64_t stride);

/// The kernels of a registered per-matrix step (MatrixStep.h), found by the
/// step's name: the bytes of device scratch one call on a rows x cols
/// matrix needs, -1 when the build has no kernel for the step (the device's
/// default then runs it on host copies).
int64_t matrixStepScratchBytes(const MatrixStep &step, int64_t rows,
                               int64_t cols);
/// Runs the step on one rows x cols f32 matrix `x` with its per-row state,
/// using `scratch` (matrixStepScratchBytes of it, released by the caller in
/// stream order). False when the build has no kernel for the step.
bool launchMatrixStep(cudaStream_t stream, const MatrixStep &step, float *x,
                      int64_t rows, int64_t cols, float *state,
                      const StepScalars &scalars, void *scratch);

/// normuonStep (ElementMath.h) on one rows x cols f32 matrix with its
/// per-row state `v`, each row's sum of squares by a fixed tree (so the
/// same on every run, not the CPU's order): `sums` is 2 * rows doubles and
/// `scale` one float of device scratch. NorMuon's entry in
/// launchMatrixStep's table.
void launchNormuon(cudaStream_t stream, float *x, int64_t rows, int64_t cols,
                   float *v, const NormuonScalars &scalars, double *sums,
                   float *scale);

} // namespace muon::runtime::cuda

#endif // MUON_RUNTIME_CUDA_KERNELS_H
