//===- NewtonSchulz.cpp - Newton-Schulz on cuBLAS -------------------------===//
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

int64_t tileCount(const std::vector<TileGroup> &groups) {
  int64_t tiles = 0;
  for (const TileGroup &group : groups)
    tiles += static_cast<int64_t>(group.tiles.size());
  return tiles;
}

} // namespace

cudaDataType_t gemmDataType(DType precision) {
  return precision == DType::BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

cublasComputeType_t gemmComputeType(DType precision) {
  return precision == DType::BF16 ? CUBLAS_COMPUTE_32F
                                  : CUBLAS_COMPUTE_32F_PEDANTIC;
}

NewtonSchulzRunner::NewtonSchulzRunner(StreamMemory memory, cublasHandle_t blas,
                                       NewtonSchulzOptions options)
    : memory(memory), stream(memory.stream), blas(blas), options(options) {}

NewtonSchulzRunner::~NewtonSchulzRunner() {
  dropPlans();
  memory.release(workspace);
}

NewtonSchulzRunner::Layout
NewtonSchulzRunner::layoutFor(int64_t count, int64_t rows, int64_t cols,
                              DType precision) const {
  const int64_t width = dtypeBytes(precision);
  const int64_t m = gramSide(rows, cols);
  Layout layout;
  layout.xStride = padded(rows * cols);
  layout.squareStride = padded(m * m);
  const int64_t xBytes = alignUp(count * layout.xStride * width);
  const int64_t squareBytes = alignUp(count * layout.squareStride * width);
  layout.x[0] = 0;
  layout.x[1] = xBytes;
  layout.gram = 2 * xBytes;
  layout.poly = layout.gram + squareBytes;
  layout.partials = layout.poly + squareBytes;
  layout.norms =
      layout.partials + alignUp(count * sumSquaresParts(rows * cols) * 8);
  layout.total = layout.norms + alignUp(count * 4);
  return layout;
}

bool NewtonSchulzRunner::reserve(int64_t bytes) {
  if (bytes <= capacity)
    return true;
  // Released after the queued products that still read them.
  dropPlans();
  memory.release(workspace);
  workspace = static_cast<char *>(memory.allocate(static_cast<size_t>(bytes)));
  capacity = workspace ? bytes : 0;
  return workspace != nullptr;
}

void NewtonSchulzRunner::dropPlans() {
  for (auto &entry : plans)
    memory.release(entry.second.arrays);
  plans.clear();
}

NewtonSchulzRunner::TiledPlan &
NewtonSchulzRunner::plan(int64_t count, int64_t rows, int64_t cols,
                         DType precision, int64_t tile, const Layout &layout) {
  PlanKey key{rows, cols, count, precision, tile};
  auto found = plans.find(key);
  if (found != plans.end())
    return found->second;

  TiledPlan p;
  const int64_t width = dtypeBytes(precision);
  const int64_t m = gramSide(rows, cols);
  p.gram[0].groups = gramTiles(rows, cols, tile);
  p.gram[1].groups = p.gram[0].groups;
  p.square.groups = squareTiles(m, tile);

  // Host copies of the three arrays of each call, then one upload.
  std::vector<const void *> host;
  std::vector<size_t> starts; // where each call's a, b, c arrays begin
  auto add = [&](const TiledCall &call, const char *aBase, int64_t aStride,
                 const char *bBase, int64_t bStride, char *cBase,
                 int64_t cStride) {
    std::vector<const void *> a, b, c;
    for (const TileGroup &group : call.groups)
      for (const TileOffsets &at : group.tiles)
        for (int64_t j = 0; j < count; ++j) {
          a.push_back(aBase + (j * aStride + at.a) * width);
          b.push_back(bBase + (j * bStride + at.b) * width);
          c.push_back(cBase + (j * cStride + at.c) * width);
        }
    for (const std::vector<const void *> *array : {&a, &b, &c}) {
      starts.push_back(host.size());
      host.insert(host.end(), array->begin(), array->end());
    }
  };
  const int64_t xStride = layout.xStride, square = layout.squareStride;
  for (int i = 0; i < 2; ++i)
    add(p.gram[i], workspace + layout.x[i], xStride, workspace + layout.x[i],
        xStride, workspace + layout.gram, square);
  add(p.square, workspace + layout.gram, square, workspace + layout.gram,
      square, workspace + layout.poly, square);

  const size_t bytes = host.size() * sizeof(void *);
  p.arrays = memory.allocate(bytes);
  if (!p.arrays)
    recordFailure("Newton-Schulz",
                  "no room on the GPU for " + std::to_string(bytes) +
                      " bytes of tile pointers",
                  __FILE__, __LINE__);
  MUON_CUDA_CHECK(cudaMemcpyAsync(p.arrays, host.data(), bytes,
                                  cudaMemcpyHostToDevice, stream));
  MUON_CUDA_CHECK(cudaStreamSynchronize(stream)); // `host` goes away
  auto at = [&](size_t index) {
    return static_cast<void **>(p.arrays) + starts[index];
  };
  TiledCall *calls[] = {&p.gram[0], &p.gram[1], &p.square};
  for (int i = 0; i < 3; ++i) {
    calls[i]->a = const_cast<const void **>(at(3 * i));
    calls[i]->b = const_cast<const void **>(at(3 * i + 1));
    calls[i]->c = at(3 * i + 2);
  }
  return plans.emplace(key, std::move(p)).first->second;
}

void NewtonSchulzRunner::gemm(const GemmShape &s, float alpha, const void *a,
                              int64_t strideA, const void *b, int64_t strideB,
                              float beta, void *c, int64_t strideC,
                              int64_t count, DType precision) {
  const cudaDataType_t type = gemmDataType(precision);
  MUON_CUDA_CHECK(cublas::api().cublasGemmStridedBatchedEx(
      blas, op(s.transA), op(s.transB), toInt(s.m, "m"), toInt(s.n, "n"),
      toInt(s.k, "k"), &alpha, a, type, toInt(s.lda, "lda"), strideA, b, type,
      toInt(s.ldb, "ldb"), strideB, &beta, c, type, toInt(s.ldc, "ldc"),
      strideC, toInt(count, "a batch"), gemmComputeType(precision),
      CUBLAS_GEMM_DEFAULT));
}

void NewtonSchulzRunner::gemmTiles(const TiledCall &call, float alpha,
                                   float beta, int64_t count, DType precision) {
  const cudaDataType_t type = gemmDataType(precision);
  const cublasComputeType_t compute = gemmComputeType(precision);
  const size_t groups = call.groups.size();
  bool &groupedWorksHere = groupedWorks[precision == DType::BF16 ? 1 : 0];
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
        betas.data(), call.c, type, ldc.data(), static_cast<int>(groups),
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
        call.b + first, type, toInt(s.ldb, "ldb"), &beta, call.c + first, type,
        toInt(s.ldc, "ldc"), toInt(size, "a tile group"), compute,
        CUBLAS_GEMM_DEFAULT));
    first += size;
  }
}

int64_t NewtonSchulzRunner::run(float *x, int64_t count, int64_t rows,
                                int64_t cols,
                                const std::vector<std::array<double, 3>> &abc,
                                double eps, DType precision) {
  if (count <= 0 || rows <= 0 || cols <= 0)
    return 0;
  precision = precision == DType::BF16 ? DType::BF16 : DType::F32;
  toInt(rows, "rows");
  toInt(cols, "cols");
  const int64_t m = gramSide(rows, cols), n = std::max(rows, cols);
  int64_t tile = m;
  if (m >= options.symmetricMin)
    tile = options.tile > 0 ? (options.tile + 7) / 8 * 8 // see padded()
                            : symmetricTile(m);
  if (tile >= m)
    tile = m; // one tile: the plain product
  path = "full";

  // The largest part of the batch whose workspace the GPU has room for.
  int64_t chunk = count;
  while (!reserve(layoutFor(chunk, rows, cols, precision).total)) {
    if (chunk == 1) {
      recordFailure(
          "Newton-Schulz",
          "no room on the GPU for the workspace of one " +
              std::to_string(rows) + " x " + std::to_string(cols) +
              " matrix (" +
              std::to_string(layoutFor(1, rows, cols, precision).total) +
              " bytes)",
          __FILE__, __LINE__);
      return 0;
    }
    chunk = (chunk + 1) / 2;
  }
  for (int64_t first = 0; first < count; first += chunk)
    runChunk(x + first * rows * cols, std::min(chunk, count - first), rows,
             cols, abc, static_cast<float>(eps), precision, tile);

  const int64_t steps = static_cast<int64_t>(abc.size());
  return count * steps * (4 * m * m * n + 2 * m * m * m);
}

void NewtonSchulzRunner::runChunk(float *x, int64_t count, int64_t rows,
                                  int64_t cols,
                                  const std::vector<std::array<double, 3>> &abc,
                                  float eps, DType precision, int64_t tile) {
  const bool bf16 = precision == DType::BF16;
  const int64_t width = dtypeBytes(precision);
  const int64_t elements = rows * cols, m = gramSide(rows, cols);
  const bool tiled = tile < m;
  const Layout layout = layoutFor(count, rows, cols, precision);
  const int64_t xStride = layout.xStride, square = layout.squareStride;
  char *xs[2] = {workspace + layout.x[0], workspace + layout.x[1]};
  char *gram = workspace + layout.gram, *poly = workspace + layout.poly;
  auto *partials = reinterpret_cast<double *>(workspace + layout.partials);
  auto *norms = reinterpret_cast<float *>(workspace + layout.norms);
  TiledPlan *tiles =
      tiled ? &plan(count, rows, cols, precision, tile, layout) : nullptr;

  // X = x / max(||x||, eps) (bf16: of bf16(x), the norm rounded to bf16).
  launchSumSquares(stream, x, count, elements, partials, bf16);
  launchFinishNorms(stream, partials, count, sumSquaresParts(elements), eps,
                    bf16, norms);
  launchNormalize(stream, x, count, elements, norms, xs[0], xStride, precision);

  const GemmShape gramShape = gramTiles(rows, cols, m).front().shape;
  const GemmShape squareShape = squareTiles(m, m).front().shape;
  const UpdateProduct update = updateProduct(rows, cols);
  int current = 0;
  for (const std::array<double, 3> &k : abc) {
    const float a = static_cast<float>(k[0]), b = static_cast<float>(k[1]),
                c = static_cast<float>(k[2]);
    char *from = xs[current], *to = xs[1 - current];
    // A = X X^T (wide) or X^T X (tall).
    if (tiled) {
      gemmTiles(tiles->gram[current], 1.0f, 0.0f, count, precision);
      launchMirrorLower(stream, gram, count, m, square, precision);
    } else {
      gemm(gramShape, 1.0f, from, xStride, from, xStride, 0.0f, gram, square,
           count, precision);
    }
    // B = c A A + b A, on a copy of A.
    MUON_CUDA_CHECK(cudaMemcpyAsync(poly, gram, count * square * width,
                                    cudaMemcpyDeviceToDevice, stream));
    if (tiled) {
      gemmTiles(tiles->square, c, b, count, precision);
      launchMirrorLower(stream, poly, count, m, square, precision);
    } else {
      gemm(squareShape, c, gram, square, gram, square, b, poly, square, count,
           precision);
    }
    // X = a X + B X (wide) or a X + X B (tall), on a copy of X.
    MUON_CUDA_CHECK(cudaMemcpyAsync(to, from, count * xStride * width,
                                    cudaMemcpyDeviceToDevice, stream));
    if (update.polynomialFirst)
      gemm(update.shape, 1.0f, poly, square, from, xStride, a, to, xStride,
           count, precision);
    else
      gemm(update.shape, 1.0f, from, xStride, poly, square, a, to, xStride,
           count, precision);
    current = 1 - current;
  }

  launchCopyOut(stream, xs[current], xStride, precision, x, count, elements);
}

} // namespace muon::runtime::cuda
