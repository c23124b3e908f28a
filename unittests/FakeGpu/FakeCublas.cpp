//===- FakeCublas.cpp - cuBLAS's GEMMs on the fake GPU ---------------------===//
//
// The cuBLAS calls of the CUDA backend's Newton-Schulz, as reference
// arithmetic on host memory: column-major C = alpha op(A) op(B) + beta C
// per product, op(A)(i, l) times op(B)(l, j) summed for l = 0, 1, ... in
// f32 (bf16 and f16 operands are exact in f32, and so are their pairwise
// products: 16 and 22 significant bits), then alpha and beta applied in f32
// and the result rounded to C's type once, to nearest even (bf16; f16, as
// cuBLAS converts, values from 65520 on becoming infinity). With beta = 0, C is not read, as cuBLAS
// documents. The summation order is not cuBLAS's (nor OpenBLAS's): results
// agree with a GPU's to rounding, not bit for bit.
//
// Checked at the call, as cuBLAS checks them (CUBLAS_STATUS_INVALID_VALUE,
// NOT_INITIALIZED or NOT_SUPPORTED, each a misuse): the handle and its
// stream, sizes, transposes, leading dimensions against op's rows, batch
// and group counts, alpha and beta, the type and compute-type combination.
// Checked when the stream reaches the product, as a GPU would fault on them
// or leave their result undefined (a misuse, and the GPU is then broken as
// by an illegal address): every operand inside one live device allocation
// (pointer arrays included), pointers of pointer-array calls 16-byte
// aligned (what cuBLAS's batched bf16 kernels assume and the backend's
// workspace layout promises), no element of any C written twice in one
// call, and no C overlapping an A or a B of the call. Grouped calls the
// configured cuBLAS does not take are refused with NOT_SUPPORTED and
// counted, not misused (the backend then falls back to one batched call
// per tile shape).
//
//===----------------------------------------------------------------------===//
#include "FakeGpuState.h"

#include "muon/Runtime/DType.h"

#include <cublas_v2.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

using namespace muon::fakegpu;
using muon::runtime::fromBf16Bits;
using muon::runtime::fromF16Bits;
using muon::runtime::toBf16Bits;
using muon::runtime::toF16Bits;

namespace {

/// One product of a call.
struct Problem {
  bool transA = false, transB = false;
  int m = 0, n = 0, k = 0;
  float alpha = 0, beta = 0;
  const void *a = nullptr, *b = nullptr;
  void *c = nullptr;
  int lda = 0, ldb = 0, ldc = 0;
};

/// The types of a call.
struct Types {
  cudaDataType a, b, c;
  cublasComputeType_t compute;
};

int width(cudaDataType type) {
  return type == CUDA_R_16BF || type == CUDA_R_16F ? 2 : 4;
}

const char *typeName(cudaDataType type) {
  switch (type) {
  case CUDA_R_32F:
    return "CUDA_R_32F";
  case CUDA_R_16BF:
    return "CUDA_R_16BF";
  case CUDA_R_16F:
    return "CUDA_R_16F";
  default:
    return "another type";
  }
}

/// The combinations cublasGemmEx and its batched forms take that the fake
/// computes: f32 operands and result, or bf16 (f16) operands with a bf16
/// (f16) or f32 result, accumulated in f32.
bool supported(const Types &t) {
  const bool f32Compute = t.compute == CUBLAS_COMPUTE_32F ||
                          t.compute == CUBLAS_COMPUTE_32F_PEDANTIC;
  if (!f32Compute)
    return false;
  if (t.a == CUDA_R_32F && t.b == CUDA_R_32F && t.c == CUDA_R_32F)
    return true;
  const bool half = t.a == CUDA_R_16BF || t.a == CUDA_R_16F;
  return half && t.b == t.a && (t.c == t.a || t.c == CUDA_R_32F);
}

bool halfType(cudaDataType type) {
  return type == CUDA_R_16BF || type == CUDA_R_16F;
}

/// Whether the configured cuBLAS takes this grouped call. "Documented":
/// cuBLAS 12.5+'s table for cublasGemmGroupedBatchedEx lists f32, bf16 and
/// f16 operands with CUBLAS_COMPUTE_32F and the same result type (and TF32
/// and f64 variants), and not CUBLAS_COMPUTE_32F_PEDANTIC, which the
/// backend's f32 products ask for.
bool groupedTakes(GroupedSupport support, const Types &t) {
  switch (support) {
  case GroupedSupport::All:
    return true;
  case GroupedSupport::None:
    return false;
  case GroupedSupport::Documented:
    return t.compute == CUBLAS_COMPUTE_32F && t.a == t.b && t.b == t.c &&
           (t.a == CUDA_R_32F || halfType(t.a));
  }
  return false;
}

float load(const void *p, cudaDataType type, int64_t i) {
  switch (type) {
  case CUDA_R_16BF:
    return fromBf16Bits(static_cast<const uint16_t *>(p)[i]);
  case CUDA_R_16F:
    return fromF16Bits(static_cast<const uint16_t *>(p)[i]);
  default:
    return static_cast<const float *>(p)[i];
  }
}

void store(void *p, cudaDataType type, int64_t i, float value) {
  switch (type) {
  case CUDA_R_16BF:
    static_cast<uint16_t *>(p)[i] = toBf16Bits(value);
    return;
  case CUDA_R_16F:
    static_cast<uint16_t *>(p)[i] = toF16Bits(value);
    return;
  default:
    static_cast<float *>(p)[i] = value;
  }
}

/// The reference product. op(A) is packed column-major first, so that the
/// inner loop runs down a column of it and of C: every C(i, j) still sums
/// its k products in order, one f32 rounding per product and per sum.
void compute(const Problem &p, const Types &t) {
  const int64_t m = p.m, n = p.n, k = p.k;
  if (m == 0 || n == 0)
    return;
  thread_local std::vector<float> a, acc;
  a.resize(static_cast<size_t>(m * k));
  acc.resize(static_cast<size_t>(m));
  for (int64_t l = 0; l < k; ++l)
    for (int64_t i = 0; i < m; ++i)
      a[i + l * m] = p.transA ? load(p.a, t.a, l + i * p.lda)
                              : load(p.a, t.a, i + l * p.lda);
  for (int64_t j = 0; j < n; ++j) {
    std::fill(acc.begin(), acc.end(), 0.0f);
    for (int64_t l = 0; l < k; ++l) {
      const float b = p.transB ? load(p.b, t.b, j + l * p.ldb)
                               : load(p.b, t.b, l + j * p.ldb);
      const float *column = &a[l * m];
      for (int64_t i = 0; i < m; ++i)
        acc[i] += column[i] * b;
    }
    for (int64_t i = 0; i < m; ++i) {
      float value = p.alpha * acc[i];
      if (p.beta != 0.0f)
        value = value + p.beta * load(p.c, t.c, i + j * p.ldc);
      store(p.c, t.c, i + j * p.ldc, value);
    }
  }
}

/// A column of an operand: [begin, end) bytes.
struct Column {
  const char *begin, *end;
  bool written;
};

/// The columns a product reads (A, B) and writes (C).
void columnsOf(const Problem &p, const Types &t, std::vector<Column> &out) {
  auto add = [&](const void *base, int64_t columns, int64_t length,
                 int64_t ld, int w, bool written) {
    for (int64_t j = 0; j < columns; ++j) {
      const char *begin = static_cast<const char *>(base) + j * ld * w;
      out.push_back({begin, begin + length * w, written});
    }
  };
  if (p.m == 0 || p.n == 0)
    return;
  if (p.k > 0) {
    // op(A) is m x k: A is m x k (N) or k x m (T); op(B) k x n likewise.
    add(p.a, p.transA ? p.m : p.k, p.transA ? p.k : p.m, p.lda, width(t.a),
        false);
    add(p.b, p.transB ? p.k : p.n, p.transB ? p.n : p.k, p.ldb, width(t.b),
        false);
  }
  add(p.c, p.n, p.m, p.ldc, width(t.c), true);
}

/// Bytes from an operand's first element to the end of its last.
int64_t extent(int64_t columns, int64_t length, int64_t ld, int w) {
  return columns <= 0 || length <= 0 ? 0 : ((columns - 1) * ld + length) * w;
}

/// A call's checks when the stream reaches it: memory, alignment, overlap.
/// Empty when the products may run; else what is wrong.
std::string checkMemory(State &s, const std::vector<Problem> &problems,
                        const Types &t, bool pointerArrays) {
  std::vector<Column> columns;
  for (size_t index = 0; index < problems.size(); ++index) {
    const Problem &p = problems[index];
    const std::string which = "product " + std::to_string(index) + " of " +
                              std::to_string(problems.size()) + ": ";
    struct Operand {
      const char *name;
      const void *data;
      int64_t bytes;
      int w;
    } operands[] = {
        {"A", p.a,
         p.k && p.m && p.n ? extent(p.transA ? p.m : p.k, p.transA ? p.k : p.m,
                                    p.lda, width(t.a))
                           : 0,
         width(t.a)},
        {"B", p.b,
         p.k && p.m && p.n ? extent(p.transB ? p.k : p.n, p.transB ? p.n : p.k,
                                    p.ldb, width(t.b))
                           : 0,
         width(t.b)},
        {"C", p.c, extent(p.n, p.m, p.ldc, width(t.c)), width(t.c)}};
    for (const Operand &o : operands) {
      if (o.bytes == 0)
        continue;
      const uintptr_t address = reinterpret_cast<uintptr_t>(o.data);
      if (!insideAllocation(s, o.data, o.bytes)) {
        const Allocation *a = findAllocation(s, o.data);
        return which + o.name + " (" + std::to_string(o.bytes) +
               " bytes) is not inside one allocation" +
               (a ? " (it starts at offset " +
                        std::to_string(static_cast<const char *>(o.data) -
                                       a->data) +
                        " of " + std::to_string(a->bytes) + " bytes)"
                  : std::string(" (it starts outside every allocation)"));
      }
      if (address % static_cast<uintptr_t>(o.w) != 0 ||
          (pointerArrays && address % 16 != 0))
        return which + o.name + " is not " +
               (pointerArrays ? "16-byte" : "element") + " aligned";
    }
    columnsOf(p, t, columns);
  }
  // Writes must not overlap each other or any read.
  std::vector<const Column *> writes;
  for (const Column &c : columns)
    if (c.written)
      writes.push_back(&c);
  std::sort(writes.begin(), writes.end(),
            [](const Column *x, const Column *y) { return x->begin < y->begin; });
  for (size_t i = 1; i < writes.size(); ++i)
    if (writes[i]->begin < writes[i - 1]->end)
      return "two products of the call write the same elements of C";
  for (const Column &c : columns) {
    if (c.written || c.begin == c.end)
      continue;
    auto after = std::upper_bound(
        writes.begin(), writes.end(), c.begin,
        [](const char *at, const Column *w) { return at < w->begin; });
    if ((after != writes.end() && (*after)->begin < c.end) ||
        (after != writes.begin() && (*(after - 1))->end > c.begin))
      return "a product's C overlaps an A or a B of the call (cuBLAS does "
             "not compute in place)";
  }
  return "";
}

cublasContext *findHandle(State &s, cublasHandle_t handle) {
  for (auto &h : s.blasHandles)
    if (h.get() == handle && h->live)
      return h.get();
  return nullptr;
}

/// The checks cuBLAS makes at the call; CUBLAS_STATUS_SUCCESS or what it
/// returns, with the misuse counted. Caller holds the mutex.
cublasStatus_t checkCall(State &s, const char *call, cublasContext *handle,
                         const std::vector<Problem> &problems, const Types &t,
                         int64_t count, bool grouped) {
  auto refuse = [&](cublasStatus_t status, const std::string &why) {
    misuse(s, std::string(call) + ": " + why);
    return status;
  };
  if (!handle)
    return refuse(CUBLAS_STATUS_NOT_INITIALIZED, "an unknown handle");
  CUstream_st *stream = findStream(s, handle->stream);
  if (!stream || !stream->live)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "the handle's stream was destroyed");
  if (count < 0)
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  "a negative batch or group count");
  for (const Problem &p : problems) {
    if (p.m < 0 || p.n < 0 || p.k < 0)
      return refuse(CUBLAS_STATUS_INVALID_VALUE, "a negative size");
    const int rowsA = p.transA ? p.k : p.m, rowsB = p.transB ? p.n : p.k;
    if (p.lda < std::max(1, rowsA) || p.ldb < std::max(1, rowsB) ||
        p.ldc < std::max(1, p.m))
      return refuse(CUBLAS_STATUS_INVALID_VALUE,
                    "a leading dimension below its operand's rows (m " +
                        std::to_string(p.m) + ", n " + std::to_string(p.n) +
                        ", k " + std::to_string(p.k) + ", lda " +
                        std::to_string(p.lda) + ", ldb " +
                        std::to_string(p.ldb) + ", ldc " +
                        std::to_string(p.ldc) + ")");
  }
  if (grouped ? !groupedTakes(s.config.grouped, t) || !supported(t)
              : !supported(t)) {
    if (grouped && supported(t)) {
      ++s.counters.groupedRefused; // this cuBLAS has no such grouped GEMM
      return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED,
                  std::string("types ") + typeName(t.a) + ", " +
                      typeName(t.b) + ", " + typeName(t.c) +
                      " with compute type " +
                      std::to_string(static_cast<int>(t.compute)));
  }
  // An injected fault (MUON_FAKE_CUBLAS_FAIL_AT): not a misuse, what a GPU
  // that faults during a product reports.
  static int64_t products = 0;
  const char *rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (s.config.failProduct > 0 && ++products == s.config.failProduct &&
      (s.config.failRank < 0 ||
       (rank && std::atoll(rank) == s.config.failRank))) {
    std::fprintf(stderr,
                 "fake GPU: %s: injected CUBLAS_STATUS_EXECUTION_"
                 "FAILED at product call %lld\n",
                 call, static_cast<long long>(products));
    return CUBLAS_STATUS_EXECUTION_FAILED;
  }
  if (halfType(t.c) &&
      !(handle->mathMode & CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION))
    return refuse(CUBLAS_STATUS_INVALID_VALUE,
                  std::string(typeName(t.c)) +
                      " results with reduced-precision reductions allowed "
                      "(the backend's numerics need "
                      "CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)");
  return CUBLAS_STATUS_SUCCESS;
}

/// Queues a checked call on the handle's stream. `resolve` makes its
/// problems when the stream reaches it (pointer arrays are read then);
/// false with `why` when it cannot.
cublasStatus_t enqueue(State &s, cublasContext *handle, const char *call,
                       const Types &t, bool pointerArrays,
                       std::function<bool(State &, std::vector<Problem> &,
                                          std::string &)>
                           resolve,
                       int64_t Counters::*counter) {
  CUstream_st *stream = findStream(s, handle->stream);
  if (stream->capture && !handle->workspace) {
    misuse(s, std::string(call) + " captured on a handle without "
                                  "cublasSetWorkspace (cuBLAS would allocate "
                                  "its workspace inside the graph)");
    invalidateCapture(s, stream);
  }
  Op op;
  op.kind = OpKind::Call;
  op.call = [=, call = std::string(call)](State &s) {
    if (s.sticky != cudaSuccess)
      return; // a broken GPU runs nothing more
    std::vector<Problem> problems;
    std::string why;
    if (!resolve(s, problems, why) ||
        !(why = checkMemory(s, problems, t, pointerArrays)).empty()) {
      misuse(s, call + ": " + why);
      s.sticky = cudaErrorIllegalAddress;
      return;
    }
    for (const Problem &p : problems)
      compute(p, t);
    ++(s.counters.*counter);
    s.counters.products += static_cast<int64_t>(problems.size());
    for (const Problem &p : problems) {
      checkRedZones(s, p.c, call);
      checkRedZones(s, p.a, call);
      checkRedZones(s, p.b, call);
    }
  };
  enqueue(s, stream, std::move(op));
  advanceAll(s);
  return CUBLAS_STATUS_SUCCESS;
}

/// Reads `count` pointers from a device pointer array; false with `why`
/// when the array is not device memory.
bool readArray(State &s, const void *const *array, int64_t count,
               std::vector<const void *> &out, const char *name,
               std::string &why) {
  if (count > 0 &&
      !insideAllocation(s, array, count * static_cast<int64_t>(sizeof(void *)))) {
    why = std::string("the pointer array ") + name + " (" +
          std::to_string(count) + " pointers) is not in GPU memory";
    return false;
  }
  out.assign(array, array + count);
  return true;
}

bool validOp(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T;
}

/// The backend loads cuBLAS with dlopen (CublasLibrary.h): a process on the
/// fake GPU must load the fake (a real cuBLAS would look for a real GPU), so
/// unless MUON_CUBLAS_LIBRARY says otherwise it names this library's file.
__attribute__((constructor)) void nameThisLibraryAsCublas() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&nameThisLibraryAsCublas), &info) &&
      info.dli_fname)
    setenv("MUON_CUBLAS_LIBRARY", info.dli_fname, 0);
}

} // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *handle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.blasHandles.push_back(std::make_unique<cublasContext>());
  *handle = s.blasHandles.back().get();
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  cublasContext *h = findHandle(s, handle);
  if (!h) {
    misuse(s, "cublasDestroy of an unknown handle");
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  h->live = false;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  cublasContext *h = findHandle(s, handle);
  CUstream_st *st = findStream(s, stream);
  if (!h || !st || !st->live) {
    misuse(s, "cublasSetStream with an unknown handle or stream");
    return h ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_NOT_INITIALIZED;
  }
  h->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t handle, void *workspace,
                                     size_t bytes) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  cublasContext *h = findHandle(s, handle);
  if (!h) {
    misuse(s, "cublasSetWorkspace of an unknown handle");
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  if (bytes && !insideAllocation(s, workspace, static_cast<int64_t>(bytes))) {
    misuse(s, "cublasSetWorkspace with memory that is not a device "
              "allocation of that size");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  h->workspace = bytes ? workspace : nullptr;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  cublasContext *h = findHandle(s, handle);
  if (!h) {
    misuse(s, "cublasSetMathMode of an unknown handle");
    return CUBLAS_STATUS_NOT_INITIALIZED;
  }
  h->mathMode = static_cast<int>(mode);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmStridedBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const void *alpha, const void *A, cudaDataType Atype,
    int lda, long long strideA, const void *B, cudaDataType Btype, int ldb,
    long long strideB, const void *beta, void *C, cudaDataType Ctype, int ldc,
    long long strideC, int batchCount, cublasComputeType_t computeType,
    cublasGemmAlgo_t algo) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const char *call = "cublasGemmStridedBatchedEx";
  cublasContext *h = findHandle(s, handle);
  const Types t{Atype, Btype, Ctype, computeType};
  if (!validOp(transa) || !validOp(transb) || !alpha || !beta ||
      algo != CUBLAS_GEMM_DEFAULT) {
    misuse(s, std::string(call) + ": a transpose, alpha, beta or algorithm "
                                  "it does not take");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Problem p;
  p.transA = transa == CUBLAS_OP_T;
  p.transB = transb == CUBLAS_OP_T;
  p.m = m;
  p.n = n;
  p.k = k;
  p.lda = lda;
  p.ldb = ldb;
  p.ldc = ldc;
  p.alpha = *static_cast<const float *>(alpha);
  p.beta = *static_cast<const float *>(beta);
  cublasStatus_t status = checkCall(s, call, h, {p}, t, batchCount, false);
  if (status != CUBLAS_STATUS_SUCCESS)
    return status;
  return enqueue(
      s, h, call, t, false,
      [=](State &, std::vector<Problem> &problems, std::string &) {
        for (int i = 0; i < batchCount; ++i) {
          Problem q = p;
          q.a = static_cast<const char *>(A) + i * strideA * width(Atype);
          q.b = static_cast<const char *>(B) + i * strideB * width(Btype);
          q.c = static_cast<char *>(C) + i * strideC * width(Ctype);
          problems.push_back(q);
        }
        return true;
      },
      &Counters::stridedCalls);
}

/// One product (the backend's gemmSeconds, muon-bench's rate): the strided
/// call's checks and arithmetic with a batch of one, counted as one.
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa,
                            cublasOperation_t transb, int m, int n, int k,
                            const void *alpha, const void *A,
                            cudaDataType Atype, int lda, const void *B,
                            cudaDataType Btype, int ldb, const void *beta,
                            void *C, cudaDataType Ctype, int ldc,
                            cublasComputeType_t computeType,
                            cublasGemmAlgo_t algo) {
  return cublasGemmStridedBatchedEx(handle, transa, transb, m, n, k, alpha, A,
                                    Atype, lda, 0, B, Btype, ldb, 0, beta, C,
                                    Ctype, ldc, 0, 1, computeType, algo);
}

cublasStatus_t cublasGemmBatchedEx(
    cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb,
    int m, int n, int k, const void *alpha, const void *const Aarray[],
    cudaDataType Atype, int lda, const void *const Barray[], cudaDataType Btype,
    int ldb, const void *beta, void *const Carray[], cudaDataType Ctype,
    int ldc, int batchCount, cublasComputeType_t computeType,
    cublasGemmAlgo_t algo) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const char *call = "cublasGemmBatchedEx";
  cublasContext *h = findHandle(s, handle);
  const Types t{Atype, Btype, Ctype, computeType};
  if (!validOp(transa) || !validOp(transb) || !alpha || !beta ||
      algo != CUBLAS_GEMM_DEFAULT) {
    misuse(s, std::string(call) + ": a transpose, alpha, beta or algorithm "
                                  "it does not take");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  Problem p;
  p.transA = transa == CUBLAS_OP_T;
  p.transB = transb == CUBLAS_OP_T;
  p.m = m;
  p.n = n;
  p.k = k;
  p.lda = lda;
  p.ldb = ldb;
  p.ldc = ldc;
  p.alpha = *static_cast<const float *>(alpha);
  p.beta = *static_cast<const float *>(beta);
  cublasStatus_t status = checkCall(s, call, h, {p}, t, batchCount, false);
  if (status != CUBLAS_STATUS_SUCCESS)
    return status;
  return enqueue(
      s, h, call, t, true,
      [=](State &s, std::vector<Problem> &problems, std::string &why) {
        std::vector<const void *> as, bs, cs;
        if (!readArray(s, Aarray, batchCount, as, "A", why) ||
            !readArray(s, Barray, batchCount, bs, "B", why) ||
            !readArray(s, reinterpret_cast<const void *const *>(Carray),
                       batchCount, cs, "C", why))
          return false;
        for (int i = 0; i < batchCount; ++i) {
          Problem q = p;
          q.a = as[i];
          q.b = bs[i];
          q.c = const_cast<void *>(cs[i]);
          problems.push_back(q);
        }
        return true;
      },
      &Counters::batchedCalls);
}

cublasStatus_t cublasGemmGroupedBatchedEx(
    cublasHandle_t handle, const cublasOperation_t transa_array[],
    const cublasOperation_t transb_array[], const int m_array[],
    const int n_array[], const int k_array[], const void *alpha_array,
    const void *const Aarray[], cudaDataType_t Atype, const int lda_array[],
    const void *const Barray[], cudaDataType_t Btype, const int ldb_array[],
    const void *beta_array, void *const Carray[], cudaDataType_t Ctype,
    const int ldc_array[], int group_count, const int group_size[],
    cublasComputeType_t computeType) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  const char *call = "cublasGemmGroupedBatchedEx";
  cublasContext *h = findHandle(s, handle);
  const Types t{Atype, Btype, Ctype, computeType};
  if (group_count < 0 || (group_count > 0 && (!alpha_array || !beta_array))) {
    misuse(s, std::string(call) + ": a negative group count or no alpha "
                                  "or beta");
    return CUBLAS_STATUS_INVALID_VALUE;
  }
  // One problem per group for the checks (group sizes come with them).
  std::vector<Problem> groups;
  int64_t total = 0;
  for (int g = 0; g < group_count; ++g) {
    if (!validOp(transa_array[g]) || !validOp(transb_array[g]) ||
        group_size[g] < 0) {
      misuse(s, std::string(call) + ": group " + std::to_string(g) +
                    " has a transpose it does not take or a negative size");
      return CUBLAS_STATUS_INVALID_VALUE;
    }
    Problem p;
    p.transA = transa_array[g] == CUBLAS_OP_T;
    p.transB = transb_array[g] == CUBLAS_OP_T;
    p.m = m_array[g];
    p.n = n_array[g];
    p.k = k_array[g];
    p.lda = lda_array[g];
    p.ldb = ldb_array[g];
    p.ldc = ldc_array[g];
    p.alpha = static_cast<const float *>(alpha_array)[g];
    p.beta = static_cast<const float *>(beta_array)[g];
    groups.push_back(p);
    total += group_size[g];
  }
  cublasStatus_t status = checkCall(s, call, h, groups, t, group_count, true);
  if (status != CUBLAS_STATUS_SUCCESS)
    return status;
  std::vector<int> sizes(group_size, group_size + group_count);
  return enqueue(
      s, h, call, t, true,
      [=](State &s, std::vector<Problem> &problems, std::string &why) {
        std::vector<const void *> as, bs, cs;
        if (!readArray(s, Aarray, total, as, "A", why) ||
            !readArray(s, Barray, total, bs, "B", why) ||
            !readArray(s, reinterpret_cast<const void *const *>(Carray), total,
                       cs, "C", why))
          return false;
        int64_t at = 0;
        for (size_t g = 0; g < groups.size(); ++g)
          for (int i = 0; i < sizes[g]; ++i, ++at) {
            Problem q = groups[g];
            q.a = as[at];
            q.b = bs[at];
            q.c = const_cast<void *>(cs[at]);
            problems.push_back(q);
          }
        return true;
      },
      &Counters::groupedCalls);
}

// CudaSupport.cpp's describe() of cuBLAS statuses.
const char *cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "CUBLAS_STATUS_SUCCESS";
  case CUBLAS_STATUS_NOT_INITIALIZED:
    return "CUBLAS_STATUS_NOT_INITIALIZED";
  case CUBLAS_STATUS_INVALID_VALUE:
    return "CUBLAS_STATUS_INVALID_VALUE";
  case CUBLAS_STATUS_NOT_SUPPORTED:
    return "CUBLAS_STATUS_NOT_SUPPORTED";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "CUBLAS_STATUS_EXECUTION_FAILED";
  default:
    return "CUBLAS_STATUS_FAKE";
  }
}

const char *cublasGetStatusString(cublasStatus_t status) {
  switch (status) {
  case CUBLAS_STATUS_SUCCESS:
    return "success";
  case CUBLAS_STATUS_EXECUTION_FAILED:
    return "the GPU program failed to execute (injected by the fake cuBLAS)";
  default:
    return "refused by the fake cuBLAS";
  }
}

} // extern "C"
