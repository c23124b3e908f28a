//===- NewtonSchulz.h - Newton-Schulz on cuBLAS -----------------*- C++ -*-===//
//
// Newton-Schulz on a batch of same-shape matrices (Device::newtonSchulz):
// every product is one cuBLAS call for the whole batch, transposes are op
// flags (SymmetricTiles.h). F32 runs f32 operands with
// CUBLAS_COMPUTE_32F_PEDANTIC (no TF32); BF16 and F16 run bf16 (f16)
// operands and results with CUBLAS_COMPUTE_32F and no reduced-precision
// split-K reductions, so each product rounds to its type once, as the CPU
// device emulates it. F16 normalizes in f32 (Device.h). From a Gram side of `symmetricMin` on, the symmetric
// products compute only their lower tiles, issued together (one grouped
// GEMM, or one batched GEMM per tile shape where cuBLAS refuses the grouped
// one), then mirror them.
//
// Two forms (muon/Runtime/NsForm.h, chosen per call as the CPU chooses):
// the standard steps (A = X X^T, B = c A A + b A, X = a X + B X), and on
// wide and tall matrices the Gram form's phases (GramNewtonSchulz.cpp):
// R = X X^T, then per step H = a I + b R + c R R rounded once, Q <- H Q and
// R <- H (H R), and X <- Q X at the phase's end; every m x m product is
// symmetric, mirrored so that it is exactly so, as on the CPU.
//
// Workspaces (the normalized batch twice, the m x m matrices, the norms)
// grow to the largest batch seen and stay until the runner is destroyed; a
// batch that does not fit runs in parts. While the device records a step
// graph (CudaDevice.h), nothing may grow or be uploaded: a call that would
// need to marks the recording failed instead.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_NEWTONSCHULZ_H
#define MUON_RUNTIME_CUDA_NEWTONSCHULZ_H

#include "Memory.h"
#include "SymmetricTiles.h"

#include "muon/Runtime/DType.h"
#include "muon/Runtime/NsForm.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>
#include <vector>

namespace muon::runtime::cuda {

/// The operand and result type of Newton-Schulz's products in `precision`
/// (BF16, F16 or F32), and the compute type: f32 accumulation, and for F32
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
  /// The form of the steps, as the CPU's ns_form.
  NsForm form = NsForm::Auto;
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

  /// Whether `run` takes the Gram form for this call (NsForm.h's rule, with
  /// this GPU's cost of a symmetric product).
  bool usesGramForm(int64_t rows, int64_t cols,
                    const std::vector<std::array<double, 3>> &abc,
                    DType precision) const;

  /// How the last run's products went: "full" (plain GEMMs), "grouped" or
  /// "batched per tile shape", with ", Gram form" after it when it ran so.
  std::string lastPath() const;

  /// While recording a graph: no workspace growth, no pointer-array
  /// upload; a run that needs either sets `captureFailure` and queues
  /// nothing more.
  void setRecording(bool recording) {
    this->recording = recording;
    captureFailure.clear();
  }
  const std::string &recordingFailure() const { return captureFailure; }
  /// Bumped whenever a workspace or pointer array that queued work may
  /// name is released: a graph recorded before holds stale addresses.
  int64_t generation() const { return workspaceGeneration; }

private:
  /// The buffers of one chunk's workspace.
  enum class Slot { X0, X1, Gram, Poly, Product, Scratch, PolyF32, Count };
  /// Byte offsets of one chunk's buffers in the workspace, and the
  /// element strides of its matrices (padded to 16-byte boundaries).
  struct Layout {
    int64_t offset[static_cast<int>(Slot::Count)] = {};
    int64_t partials = 0, norms = 0, total = 0;
    int64_t xStride = 0, squareStride = 0;
  };
  /// A tiled product's pointer arrays (device memory), one entry per tile
  /// and matrix, group after group.
  struct TiledCall {
    std::vector<TileGroup> groups;
    const void **a = nullptr;
    const void **b = nullptr;
    void **c = nullptr;
    void *arrays = nullptr;
  };
  /// The tiled calls of one shape and chunk size, for the current
  /// workspace: the Gram matrix from either X, and the m x m products by
  /// their (a, b, c) slots, made when first needed.
  struct TiledPlan {
    TiledCall gram[2]; // reading X0, X1
    std::map<std::tuple<Slot, Slot, Slot>, TiledCall> squares;
  };
  using PlanKey = std::tuple<int64_t, int64_t, int64_t, DType, int64_t, bool>;
  /// What one chunk's products need.
  struct Chunk {
    float *x = nullptr;
    int64_t count = 0, rows = 0, cols = 0, m = 0, tile = 0;
    DType precision = DType::F32;
    Layout layout;
    TiledPlan *tiles = nullptr; // null: full products
    char *at(Slot slot) const {
      return workspace + layout.offset[static_cast<int>(slot)];
    }
    int64_t stride(Slot slot) const;
    DType type(Slot slot) const;
    char *workspace = nullptr;
  };

  Layout layoutFor(int64_t count, int64_t rows, int64_t cols, DType precision,
                   bool gram) const;
  int64_t tileFor(int64_t m) const;
  /// Grows the workspace to `bytes`; false when the GPU has no room.
  bool reserve(int64_t bytes);
  void dropPlans();
  /// The chunk's tiled plan (null where it cannot be made now).
  TiledPlan *plan(const Chunk &chunk, bool gram);
  /// Uploads `call`'s pointer arrays for the given operands.
  bool upload(TiledCall &call, const Chunk &chunk, const char *a,
              int64_t aStride, DType aType, const char *b, int64_t bStride,
              DType bType, char *c, int64_t cStride, DType cType);
  void runChunk(const Chunk &chunk,
                const std::vector<std::array<double, 3>> &abc, float eps,
                bool gram);
  /// X = x / max(||x||, eps) into X0 (bf16: of bf16(x), the norm rounded;
  /// f16: the f32 quotient rounded once).
  void normalize(const Chunk &chunk, float eps);
  /// One standard step from `from` into the other X.
  void standardStep(const Chunk &chunk, Slot from,
                    const std::array<double, 3> &abc);
  /// One Gram phase (GramNewtonSchulz.cpp) from `from` into the other X.
  void gramPhase(const Chunk &chunk, Slot from,
                 const std::array<double, 3> *steps, int64_t length);
  /// The Gram matrix of `from` into `to`: X X^T or X^T X.
  void gramMatrix(const Chunk &chunk, Slot from, Slot to, bool mirror);
  /// to = alpha a b + beta to for m x m a, b whose product is symmetric:
  /// lower tiles or one full product, then mirrored.
  void symmetricProduct(const Chunk &chunk, float alpha, Slot a, Slot b,
                        float beta, Slot to, bool mirror);
  /// One strided batched GEMM over the chunk's matrices.
  void gemm(const GemmShape &shape, float alpha, const void *a, int64_t strideA,
            const void *b, int64_t strideB, float beta, void *c,
            int64_t strideC, int64_t count, DType precision, DType cType);
  /// All tiles of `call` over `count` matrices.
  void gemmTiles(const TiledCall &call, float alpha, float beta, int64_t count,
                 DType precision, DType cType);
  void failRecording(const std::string &reason);

  StreamMemory memory;
  cudaStream_t stream;
  cublasHandle_t blas;
  NewtonSchulzOptions options;
  // Per (operand type, result type): until cuBLAS refuses a grouped call.
  std::map<std::pair<DType, DType>, bool> groupedWorks;
  const char *path = "full";
  bool lastGram = false;
  char *workspace = nullptr;
  int64_t capacity = 0;
  std::map<PlanKey, TiledPlan> plans;
  bool recording = false;
  std::string captureFailure;
  int64_t workspaceGeneration = 0;
};

} // namespace muon::runtime::cuda

#endif // MUON_RUNTIME_CUDA_NEWTONSCHULZ_H
