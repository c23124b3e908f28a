//===- NewtonSchulz.cpp - Newton-Schulz on cuBLAS -------------------------===//
//
// The runner's workspace, pointer arrays and products, and the standard
// step. The Gram form's phase is in GramNewtonSchulz.cpp.
//
//===----------------------------------------------------------------------===//
#include "NewtonSchulz.h"

#include "CublasLibrary.h"
#include "CudaSupport.h"
#include "Kernels.h"

#include <climits>
#include <string>

namespace muon::runtime::cuda {

namespace {

int64_t alignUp(int64_t bytes) { return (bytes + 255) / 256 * 256; }

/// Elements per workspace matrix: a multiple of 8, so that with tile sides
/// that are multiples of 8 every operand of a batched call starts 16-byte
/// aligned. cuBLAS cannot see the pointers of a batched call, and its bf16
/// kernels assume that alignment.
int64_t padded(int64_t elements) { return (elements + 7) / 8 * 8; }

cublasOperation_t op(bool transpose) {
  return transpose ? CUBLAS_OP_T : CUBLAS_OP_N;
}

int toInt(int64_t value, const char *what) {
  if (value < 0 || value > INT_MAX) {
    recordFailure("Newton-Schulz",
                  std::string(what) + " of " + std::to_string(value) +
                      " exceeds cuBLAS's int range",
                  __FILE__, __LINE__);
    return 0;
  }
  return static_cast<int>(value);
}

cudaDataType_t dataType(DType type) {
  switch (type) {
  case DType::BF16:
    return CUDA_R_16BF;
  case DType::F16:
    return CUDA_R_16F;
  case DType::F32:
    break;
  }
  return CUDA_R_32F;
}

} // namespace

cudaDataType_t gemmDataType(DType precision) { return dataType(precision); }

cublasComputeType_t gemmComputeType(DType precision) {
  return roundsToHalf(precision) ? CUBLAS_COMPUTE_32F
                                 : CUBLAS_COMPUTE_32F_PEDANTIC;
}

NewtonSchulzRunner::NewtonSchulzRunner(StreamMemory memory, cublasHandle_t blas,
                                       NewtonSchulzOptions options)
    : memory(memory), stream(memory.stream), blas(blas), options(options) {}

NewtonSchulzRunner::~NewtonSchulzRunner() {
  dropPlans();
  memory.release(workspace);
}

int64_t NewtonSchulzRunner::Chunk::stride(Slot slot) const {
  return slot == Slot::X0 || slot == Slot::X1 ? layout.xStride
                                              : layout.squareStride;
}

DType NewtonSchulzRunner::Chunk::type(Slot slot) const {
  return slot == Slot::PolyF32 ? DType::F32 : precision;
}

NewtonSchulzRunner::Layout
NewtonSchulzRunner::layoutFor(int64_t count, int64_t rows, int64_t cols,
                              DType precision, bool gram) const {
  const int64_t width = dtypeBytes(precision);
  const int64_t m = gramSide(rows, cols);
  Layout layout;
  layout.xStride = padded(rows * cols);
  layout.squareStride = padded(m * m);
  const int64_t xBytes = alignUp(count * layout.xStride * width);
  const int64_t squareBytes = alignUp(count * layout.squareStride * width);
  int64_t at = 0;
  auto place = [&](Slot slot, int64_t bytes) {
    layout.offset[static_cast<int>(slot)] = at;
    at += bytes;
  };
  place(Slot::X0, xBytes);
  place(Slot::X1, xBytes);
  place(Slot::Gram, squareBytes);
  place(Slot::Poly, squareBytes);
  if (gram) {
    place(Slot::Product, squareBytes);
    place(Slot::Scratch, squareBytes);
    // bf16's and f16's H is rounded from an f32 sum; f32's is computed in
    // place.
    if (roundsToHalf(precision))
      place(Slot::PolyF32, alignUp(count * layout.squareStride * 4));
  }
  layout.partials = at;
  layout.norms = at + alignUp(count * sumSquaresParts(rows * cols) * 8);
  layout.total = layout.norms + alignUp(count * 4);
  return layout;
}

int64_t NewtonSchulzRunner::tileFor(int64_t m) const {
  int64_t tile = m;
  if (m >= options.symmetricMin)
    tile = options.tile > 0 ? (options.tile + 7) / 8 * 8 // see padded()
                            : symmetricTile(m);
  return tile >= m ? m : tile; // one tile: the plain product
}

bool NewtonSchulzRunner::usesGramForm(
    int64_t rows, int64_t cols, const std::vector<std::array<double, 3>> &abc,
    DType precision) const {
  const int64_t m = gramSide(rows, cols);
  // A symmetric product over T x T tiles computes T (T + 1) / 2 of them.
  const int64_t tiles = m > 0 ? (m + tileFor(m) - 1) / tileFor(m) : 1;
  const double half = (tiles + 1.0) / (2.0 * tiles);
  return runtime::usesGramForm(options.form, precision, rows, cols, abc,
                               half);
}

std::string NewtonSchulzRunner::lastPath() const {
  return std::string(path) + (lastGram ? ", Gram form" : "");
}

void NewtonSchulzRunner::failRecording(const std::string &reason) {
  if (captureFailure.empty())
    captureFailure = "Newton-Schulz: " + reason;
}

bool NewtonSchulzRunner::reserve(int64_t bytes) {
  if (bytes <= capacity)
    return true;
  if (recording) {
    failRecording("its workspace must grow to " + std::to_string(bytes) +
                  " bytes, which a graph cannot record");
    return false;
  }
  // Released after the queued products that still read them.
  dropPlans();
  memory.release(workspace);
  ++workspaceGeneration;
  workspace = static_cast<char *>(memory.allocate(static_cast<size_t>(bytes)));
  capacity = workspace ? bytes : 0;
  return workspace != nullptr;
}

void NewtonSchulzRunner::dropPlans() {
  for (auto &entry : plans) {
    TiledPlan &p = entry.second;
    for (TiledCall &call : p.gram)
      memory.release(call.arrays);
    for (auto &square : p.squares)
      memory.release(square.second.arrays);
  }
  if (!plans.empty())
    ++workspaceGeneration;
  plans.clear();
}

bool NewtonSchulzRunner::upload(TiledCall &call, const Chunk &chunk,
                                const char *aBase, int64_t aStride, DType aType,
                                const char *bBase, int64_t bStride, DType bType,
                                char *cBase, int64_t cStride, DType cType) {
  if (recording) {
    failRecording("a new tiled product's pointer arrays must be uploaded, "
                  "which a graph cannot record");
    return false;
  }
  std::vector<const void *> a, b, c;
  for (const TileGroup &group : call.groups)
    for (const TileOffsets &at : group.tiles)
      for (int64_t j = 0; j < chunk.count; ++j) {
        a.push_back(aBase + (j * aStride + at.a) * dtypeBytes(aType));
        b.push_back(bBase + (j * bStride + at.b) * dtypeBytes(bType));
        c.push_back(cBase + (j * cStride + at.c) * dtypeBytes(cType));
      }
  std::vector<const void *> host = a;
  host.insert(host.end(), b.begin(), b.end());
  host.insert(host.end(), c.begin(), c.end());
  const size_t bytes = host.size() * sizeof(void *);
  call.arrays = memory.allocate(bytes);
  if (!call.arrays) {
    recordFailure("Newton-Schulz",
                  "no room on the GPU for " + std::to_string(bytes) +
                      " bytes of tile pointers",
                  __FILE__, __LINE__);
    return false;
  }
  MUON_CUDA_CHECK(cudaMemcpyAsync(call.arrays, host.data(), bytes,
                                  cudaMemcpyHostToDevice, stream));
  MUON_CUDA_CHECK(cudaStreamSynchronize(stream)); // `host` goes away
  auto **arrays = static_cast<void **>(call.arrays);
  call.a = const_cast<const void **>(arrays);
  call.b = const_cast<const void **>(arrays + a.size());
  call.c = arrays + a.size() + b.size();
  return true;
}

NewtonSchulzRunner::TiledPlan *NewtonSchulzRunner::plan(const Chunk &chunk,
                                                        bool gram) {
  PlanKey key{chunk.rows, chunk.cols, chunk.count, chunk.precision, chunk.tile,
              gram};
  auto found = plans.find(key);
  if (found != plans.end())
    return &found->second;
  TiledPlan p;
  const Slot xs[2] = {Slot::X0, Slot::X1};
  for (int i = 0; i < 2; ++i) {
    p.gram[i].groups = gramTiles(chunk.rows, chunk.cols, chunk.tile);
    if (!upload(p.gram[i], chunk, chunk.at(xs[i]), chunk.stride(xs[i]),
                chunk.precision, chunk.at(xs[i]), chunk.stride(xs[i]),
                chunk.precision, chunk.at(Slot::Gram),
                chunk.stride(Slot::Gram), chunk.precision)) {
      for (TiledCall &call : p.gram)
        memory.release(call.arrays);
      return nullptr;
    }
  }
  return &plans.emplace(key, std::move(p)).first->second;
}

void NewtonSchulzRunner::gemm(const GemmShape &s, float alpha, const void *a,
                              int64_t strideA, const void *b, int64_t strideB,
                              float beta, void *c, int64_t strideC,
                              int64_t count, DType precision, DType cType) {
  const cudaDataType_t type = dataType(precision);
  MUON_CUDA_CHECK(cublas::api().cublasGemmStridedBatchedEx(
      blas, op(s.transA), op(s.transB), toInt(s.m, "m"), toInt(s.n, "n"),
      toInt(s.k, "k"), &alpha, a, type, toInt(s.lda, "lda"), strideA, b, type,
      toInt(s.ldb, "ldb"), strideB, &beta, c, dataType(cType),
      toInt(s.ldc, "ldc"), strideC, toInt(count, "a batch"),
      gemmComputeType(precision), CUBLAS_GEMM_DEFAULT));
}

void NewtonSchulzRunner::gemmTiles(const TiledCall &call, float alpha,
                                   float beta, int64_t count, DType precision,
                                   DType cType) {
  const cudaDataType_t type = dataType(precision);
  const cudaDataType_t resultType = dataType(cType);
  const cublasComputeType_t compute = gemmComputeType(precision);
  const size_t groups = call.groups.size();
  auto works = groupedWorks.emplace(std::make_pair(precision, cType), true);
  bool &groupedWorksHere = works.first->second;
  if (options.grouped && groupedWorksHere) {
    std::vector<cublasOperation_t> transA, transB;
    std::vector<int> m, n, k, lda, ldb, ldc, sizes;
    std::vector<float> alphas(groups, alpha), betas(groups, beta);
    for (const TileGroup &group : call.groups) {
      const GemmShape &s = group.shape;
      transA.push_back(op(s.transA));
      transB.push_back(op(s.transB));
      m.push_back(toInt(s.m, "m"));
      n.push_back(toInt(s.n, "n"));
      k.push_back(toInt(s.k, "k"));
      lda.push_back(toInt(s.lda, "lda"));
      ldb.push_back(toInt(s.ldb, "ldb"));
      ldc.push_back(toInt(s.ldc, "ldc"));
      sizes.push_back(toInt(static_cast<int64_t>(group.tiles.size()) * count,
                            "a tile group"));
    }
    cublasStatus_t status = cublas::api().cublasGemmGroupedBatchedEx(
        blas, transA.data(), transB.data(), m.data(), n.data(), k.data(),
        alphas.data(), call.a, type, lda.data(), call.b, type, ldb.data(),
        betas.data(), call.c, resultType, ldc.data(), static_cast<int>(groups),
        sizes.data(), compute);
    if (status == CUBLAS_STATUS_SUCCESS) {
      path = "grouped";
      return;
    }
    // cuBLAS does not take this type combination grouped (its support
    // varies by version): the same tiles, one batched call per shape.
    if (status != CUBLAS_STATUS_NOT_SUPPORTED &&
        status != CUBLAS_STATUS_INVALID_VALUE)
      check(status, "cublasGemmGroupedBatchedEx", __FILE__, __LINE__);
    groupedWorksHere = false;
  }
  path = "batched per tile shape";
  int64_t first = 0;
  for (const TileGroup &group : call.groups) {
    const GemmShape &s = group.shape;
    const int64_t size = static_cast<int64_t>(group.tiles.size()) * count;
    MUON_CUDA_CHECK(cublas::api().cublasGemmBatchedEx(
        blas, op(s.transA), op(s.transB), toInt(s.m, "m"), toInt(s.n, "n"),
        toInt(s.k, "k"), &alpha, call.a + first, type, toInt(s.lda, "lda"),
        call.b + first, type, toInt(s.ldb, "ldb"), &beta, call.c + first,
        resultType, toInt(s.ldc, "ldc"), toInt(size, "a tile group"), compute,
        CUBLAS_GEMM_DEFAULT));
    first += size;
  }
}

void NewtonSchulzRunner::gramMatrix(const Chunk &chunk, Slot from, Slot to,
                                    bool mirror) {
  const DType type = chunk.precision;
  if (chunk.tiles && to == Slot::Gram) {
    gemmTiles(chunk.tiles->gram[from == Slot::X0 ? 0 : 1], 1.0f, 0.0f,
              chunk.count, type, type);
    mirror = true;
  } else {
    const GemmShape shape = gramTiles(chunk.rows, chunk.cols, chunk.m)
                                .front()
                                .shape;
    gemm(shape, 1.0f, chunk.at(from), chunk.stride(from), chunk.at(from),
         chunk.stride(from), 0.0f, chunk.at(to), chunk.stride(to), chunk.count,
         type, type);
  }
  if (mirror)
    launchMirrorLower(stream, chunk.at(to), chunk.count, chunk.m,
                      chunk.stride(to), type);
}

void NewtonSchulzRunner::symmetricProduct(const Chunk &chunk, float alpha,
                                          Slot a, Slot b, float beta, Slot to,
                                          bool mirror) {
  const DType type = chunk.precision, cType = chunk.type(to);
  if (chunk.tiles) {
    TiledCall &call = chunk.tiles->squares[{a, b, to}];
    if (!call.arrays) {
      call.groups = squareTiles(chunk.m, chunk.tile);
      if (!upload(call, chunk, chunk.at(a), chunk.stride(a), type, chunk.at(b),
                  chunk.stride(b), type, chunk.at(to), chunk.stride(to),
                  cType))
        return;
    }
    gemmTiles(call, alpha, beta, chunk.count, type, cType);
    mirror = true;
  } else {
    const GemmShape shape = squareTiles(chunk.m, chunk.m).front().shape;
    gemm(shape, alpha, chunk.at(a), chunk.stride(a), chunk.at(b),
         chunk.stride(b), beta, chunk.at(to), chunk.stride(to), chunk.count,
         type, cType);
  }
  if (mirror)
    launchMirrorLower(stream, chunk.at(to), chunk.count, chunk.m,
                      chunk.stride(to), cType);
}

int64_t NewtonSchulzRunner::run(float *x, int64_t count, int64_t rows,
                                int64_t cols,
                                const std::vector<std::array<double, 3>> &abc,
                                double eps, DType precision) {
  if (count <= 0 || rows <= 0 || cols <= 0)
    return 0;
  toInt(rows, "rows");
  toInt(cols, "cols");
  const int64_t m = gramSide(rows, cols), n = std::max(rows, cols);
  const int64_t steps = static_cast<int64_t>(abc.size());
  const int64_t flops = count * steps * (4 * m * m * n + 2 * m * m * m);
  const bool gram = usesGramForm(rows, cols, abc, precision);
  path = "full";
  lastGram = gram;

  // The largest part of the batch whose workspace the GPU has room for.
  int64_t chunk = count;
  while (!reserve(layoutFor(chunk, rows, cols, precision, gram).total)) {
    if (recording)
      return flops; // the recording failed; nothing is queued
    if (chunk == 1) {
      recordFailure(
          "Newton-Schulz",
          "no room on the GPU for the workspace of one " +
              std::to_string(rows) + " x " + std::to_string(cols) +
              " matrix (" +
              std::to_string(
                  layoutFor(1, rows, cols, precision, gram).total) +
              " bytes)",
          __FILE__, __LINE__);
      return 0;
    }
    chunk = (chunk + 1) / 2;
  }
  for (int64_t first = 0; first < count; first += chunk) {
    Chunk c;
    c.x = x + first * rows * cols;
    c.count = std::min(chunk, count - first);
    c.rows = rows;
    c.cols = cols;
    c.m = m;
    c.tile = tileFor(m);
    c.precision = precision;
    c.layout = layoutFor(c.count, rows, cols, precision, gram);
    c.workspace = workspace;
    if (c.tile < m && !(c.tiles = plan(c, gram)))
      return recording ? flops : 0;
    runChunk(c, abc, static_cast<float>(eps), gram);
  }
  return flops;
}

void NewtonSchulzRunner::normalize(const Chunk &chunk, float eps) {
  const bool bf16 = chunk.precision == DType::BF16;
  const int64_t elements = chunk.rows * chunk.cols;
  auto *partials =
      reinterpret_cast<double *>(workspace + chunk.layout.partials);
  auto *norms = reinterpret_cast<float *>(workspace + chunk.layout.norms);
  launchSumSquares(stream, chunk.x, chunk.count, elements, partials, bf16);
  launchFinishNorms(stream, partials, chunk.count, sumSquaresParts(elements),
                    eps, bf16, norms);
  launchNormalize(stream, chunk.x, chunk.count, elements, norms,
                  chunk.at(Slot::X0), chunk.layout.xStride, chunk.precision);
}

void NewtonSchulzRunner::runChunk(const Chunk &chunk,
                                  const std::vector<std::array<double, 3>> &abc,
                                  float eps, bool gram) {
  normalize(chunk, eps);
  Slot current = Slot::X0;
  auto next = [](Slot s) { return s == Slot::X0 ? Slot::X1 : Slot::X0; };
  if (!gram) {
    for (const std::array<double, 3> &k : abc) {
      standardStep(chunk, current, k);
      current = next(current);
    }
  } else {
    // Phases as the CPU runs them (NsForm.h); in bf16 and f16 an odd last
    // step is a standard one.
    size_t at = 0;
    for (int64_t length : gramPhases(chunk.precision,
                                     static_cast<int64_t>(abc.size()))) {
      if (length == 1 && roundsToHalf(chunk.precision))
        standardStep(chunk, current, abc[at]);
      else
        gramPhase(chunk, current, &abc[at], length);
      current = next(current);
      at += static_cast<size_t>(length);
    }
  }
  launchCopyOut(stream, chunk.at(current), chunk.layout.xStride,
                chunk.precision, chunk.x, chunk.count,
                chunk.rows * chunk.cols);
}

void NewtonSchulzRunner::standardStep(const Chunk &chunk, Slot from,
                                      const std::array<double, 3> &k) {
  const float a = static_cast<float>(k[0]), b = static_cast<float>(k[1]),
              c = static_cast<float>(k[2]);
  const int64_t width = dtypeBytes(chunk.precision);
  const Slot to = from == Slot::X0 ? Slot::X1 : Slot::X0;
  // A = X X^T (wide) or X^T X (tall).
  gramMatrix(chunk, from, Slot::Gram, /*mirror=*/false);
  // B = c A A + b A, on a copy of A.
  MUON_CUDA_CHECK(cudaMemcpyAsync(
      chunk.at(Slot::Poly), chunk.at(Slot::Gram),
      chunk.count * chunk.layout.squareStride * width,
      cudaMemcpyDeviceToDevice, stream));
  symmetricProduct(chunk, c, Slot::Gram, Slot::Gram, b, Slot::Poly,
                   /*mirror=*/false);
  // X = a X + B X (wide) or a X + X B (tall), on a copy of X.
  MUON_CUDA_CHECK(cudaMemcpyAsync(chunk.at(to), chunk.at(from),
                                  chunk.count * chunk.layout.xStride * width,
                                  cudaMemcpyDeviceToDevice, stream));
  const UpdateProduct update = updateProduct(chunk.rows, chunk.cols);
  const int64_t xStride = chunk.layout.xStride,
                square = chunk.layout.squareStride;
  if (update.polynomialFirst)
    gemm(update.shape, 1.0f, chunk.at(Slot::Poly), square, chunk.at(from),
         xStride, a, chunk.at(to), xStride, chunk.count, chunk.precision,
         chunk.precision);
  else
    gemm(update.shape, 1.0f, chunk.at(from), xStride, chunk.at(Slot::Poly),
         square, a, chunk.at(to), xStride, chunk.count, chunk.precision,
         chunk.precision);
}

} // namespace muon::runtime::cuda
