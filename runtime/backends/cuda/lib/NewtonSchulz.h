//===- NewtonSchulz.h - Newton-Schulz on cuBLAS -----------------*- C++ -*-===//
//
// Newton-Schulz on a batch of same-shape matrices (Device::newtonSchulz):
// every product is one cuBLAS call for the whole batch, transposes are op
// flags (SymmetricTiles.h). F32 runs f32 operands with
// CUBLAS_COMPUTE_32F_PEDANTIC (no TF32); BF16 runs bf16 operands and
// results with CUBLAS_COMPUTE_32F and no reduced-precision split-K
// reductions, so each product rounds to bf16 once, as the CPU device
// emulates it. From a Gram side of `symmetricMin` on, the symmetric
// products A and B compute only their lower tiles, issued together (one
// grouped GEMM, or one batched GEMM per tile shape where cuBLAS refuses the
// grouped one), then mirror them.
//
// Workspaces (the normalized batch twice, A, B, the norms) grow to the
// largest batch seen and stay until the runner is destroyed; a batch that
// does not fit runs in parts.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_NEWTONSCHULZ_H
#define MUON_RUNTIME_CUDA_NEWTONSCHULZ_H

#include "Memory.h"
#include "SymmetricTiles.h"

#include "muon/Runtime/DType.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

namespace muon::runtime::cuda {

/// The operand and result type of Newton-Schulz's products in `precision`
/// (BF16, else F32), and the compute type: f32 accumulation, and for F32
/// nothing faster (TF32 would keep 10 mantissa bits).
cudaDataType_t gemmDataType(DType precision);
cublasComputeType_t gemmComputeType(DType precision);

struct NewtonSchulzOptions {
  /// Gram side from which the symmetric products are tiled (0: always).
  int64_t symmetricMin = 2048;
  /// Tile side of that path; 0 chooses one per shape (symmetricTile).
  int64_t tile = 0;
  /// Whether to issue the tiles as one grouped GEMM rather than one
  /// strided batched GEMM per tile shape. Off by default: on an H100
  /// (cuBLAS 13) the grouped call ran the bf16 Newton-Schulz 1.2x to 1.5x
  /// slower (docs/performance.md, bench/gpu/variants.sh).
  bool grouped = false;
};

class NewtonSchulzRunner {
public:
  /// Runs on `memory.stream` with `blas` (already bound to it), on the
  /// current GPU.
  NewtonSchulzRunner(StreamMemory memory, cublasHandle_t blas,
                     NewtonSchulzOptions options);
  ~NewtonSchulzRunner();
  NewtonSchulzRunner(const NewtonSchulzRunner &) = delete;
  NewtonSchulzRunner &operator=(const NewtonSchulzRunner &) = delete;

  /// Device::newtonSchulz, queued on the stream. Returns the dense count.
  int64_t run(float *x, int64_t count, int64_t rows, int64_t cols,
              const std::vector<std::array<double, 3>> &abc, double eps,
              DType precision);

  /// How the last run's symmetric products went: "full" (plain GEMMs),
  /// "grouped" or "batched per tile shape".
  const char *lastPath() const { return path; }

private:
  /// Byte offsets of one chunk's buffers in the workspace, and the
  /// element strides of its matrices (padded to 16-byte boundaries).
  struct Layout {
    int64_t x[2] = {0, 0}, gram = 0, poly = 0, partials = 0, norms = 0;
    int64_t total = 0;
    int64_t xStride = 0, squareStride = 0;
  };
  /// A tiled product's pointer arrays (device memory), one entry per tile
  /// and matrix, group after group.
  struct TiledCall {
    std::vector<TileGroup> groups;
    const void **a = nullptr;
    const void **b = nullptr;
    void **c = nullptr;
  };
  /// The tiled calls of one shape and chunk size, for the current workspace.
  struct TiledPlan {
    TiledCall gram[2]; // reading x[0], x[1]
    TiledCall square;
    void *arrays = nullptr;
  };
  using PlanKey = std::tuple<int64_t, int64_t, int64_t, DType, int64_t>;

  Layout layoutFor(int64_t count, int64_t rows, int64_t cols,
                   DType precision) const;
  /// Grows the workspace to `bytes`; false when the GPU has no room.
  bool reserve(int64_t bytes);
  void dropPlans();
  TiledPlan &plan(int64_t count, int64_t rows, int64_t cols, DType precision,
                  int64_t tile, const Layout &layout);
  void runChunk(float *x, int64_t count, int64_t rows, int64_t cols,
                const std::vector<std::array<double, 3>> &abc, float eps,
                DType precision, int64_t tile);
  /// One strided batched GEMM over `count` matrices.
  void gemm(const GemmShape &shape, float alpha, const void *a, int64_t strideA,
            const void *b, int64_t strideB, float beta, void *c,
            int64_t strideC, int64_t count, DType precision);
  /// All tiles of `call` over `count` matrices.
  void gemmTiles(const TiledCall &call, float alpha, float beta, int64_t count,
                 DType precision);

  StreamMemory memory;
  cudaStream_t stream;
  cublasHandle_t blas;
  NewtonSchulzOptions options;
  // Per precision (F32, BF16): until cuBLAS refuses a grouped call.
  bool groupedWorks[2] = {true, true};
  const char *path = "full";
  char *workspace = nullptr;
  int64_t capacity = 0;
  std::map<PlanKey, TiledPlan> plans;
};

} // namespace muon::runtime::cuda

#endif // MUON_RUNTIME_CUDA_NEWTONSCHULZ_H
