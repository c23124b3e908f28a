//===- CudaFakeGpuTest.cpp - The fake GPU's cuBLAS, kernels and memory ----===//
//
// The host stand-in for a GPU that make check runs the CUDA backend on
// (FakeGpu/): its reference products must compute what cuBLAS's op flags
// and leading dimensions say, refuse what cuBLAS refuses and catch what a
// GPU would fault on; the kernels' bodies, run over their launch geometry,
// must match CpuDevice bit for bit beyond one grid and at every mirror
// size; and CudaDevice's Newton-Schulz must run a batch in parts when its
// workspace does not fit, with the same bits. The muon-run and
// muon-cuda-check runs over the fake are in test/Runtime/*fake-gpu*.test.
//
//===----------------------------------------------------------------------===//
#include "CudaDevice.h"
#include "FakeGpu/FakeGpu.h"
#include "KernelBodies.h"
#include "Kernels.h"

#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/Cuda/CudaBackend.h"
#include "muon/Runtime/DType.h"
#include "ElementSteps.h"

#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace muon;
using namespace muon::runtime;
namespace fake = muon::fakegpu;

namespace {

/// Device memory of the fake GPU holding `host`'s bytes.
template <typename T> T *upload(const std::vector<T> &host) {
  void *memory = nullptr;
  EXPECT_EQ(cudaMalloc(&memory, std::max<size_t>(host.size(), 1) * sizeof(T)),
            cudaSuccess);
  if (!host.empty()) {
    EXPECT_EQ(cudaMemcpyAsync(memory, host.data(), host.size() * sizeof(T),
                              cudaMemcpyHostToDevice, nullptr),
              cudaSuccess);
  }
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  return static_cast<T *>(memory);
}

template <typename T> std::vector<T> download(const T *memory, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpyAsync(host.data(), memory, n * sizeof(T),
                            cudaMemcpyDeviceToHost, nullptr),
            cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
  return host;
}

/// `values` as `type` stores them (f32, or bf16 bits).
std::vector<uint8_t> storedAs(const std::vector<float> &values, DType type) {
  std::vector<uint8_t> bytes(values.size() * dtypeBytes(type));
  for (size_t i = 0; i < values.size(); ++i)
    storeAs(bytes.data(), type, static_cast<int64_t>(i), values[i]);
  return bytes;
}

std::vector<float> randomFloats(size_t n, std::mt19937 &rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float &x : v)
    x = u(rng);
  return v;
}

class FakeGpuTest : public ::testing::Test {
protected:
  void SetUp() override {
    fake::reset();
    fake::setGroupedSupport(fake::GroupedSupport::Documented);
    fake::setMemoryLimit(int64_t(80) << 30);
    ASSERT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamDefault),
              cudaSuccess);
    ASSERT_EQ(cublasSetStream(blas, stream), CUBLAS_STATUS_SUCCESS);
    ASSERT_EQ(cublasSetMathMode(
                  blas, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION),
              CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(cublasDestroy(blas), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    for (void *p : allocations)
      EXPECT_EQ(cudaFree(p), cudaSuccess);
    fake::Counters c = fake::counters();
    EXPECT_EQ(c.misuses, 0) << c.lastMisuse;
    EXPECT_EQ(c.liveAllocations, 0);
    EXPECT_EQ(c.liveBlasHandles, 0);
    EXPECT_EQ(c.liveStreams, 0);
    fake::reset();
  }
  template <typename T> T *device(const std::vector<T> &host) {
    T *p = upload(host);
    allocations.push_back(p);
    return p;
  }
  /// Expects exactly one new misuse mentioning `what`, then forgets it.
  void expectMisuse(const std::string &what) {
    fake::Counters c = fake::counters();
    EXPECT_EQ(c.misuses, 1) << c.lastMisuse;
    EXPECT_NE(c.lastMisuse.find(what), std::string::npos) << c.lastMisuse;
    fake::reset();
  }

  /// The momentum step's kernel (launchElementStep) on `stream`.
  void launchMomentum(const void *grad, DType gradType, float *buf,
                      float *update, int64_t n, const MomentumScalars &s) {
    ElementOperands o;
    o.grad = grad;
    o.gradType = gradType;
    o.output = update;
    o.slots[0] = buf;
    o.n = n;
    EXPECT_TRUE(runtime::cuda::launchElementStep(
        stream, runtime::calls::stepNamed(MomentumOp::kName), o,
        StepScalars::of(s)));
  }

  cublasHandle_t blas = nullptr;
  cudaStream_t stream = nullptr;
  std::vector<void *> allocations;
};

/// op(A) op(B) in double, column-major, as cuBLAS defines it.
double referenceEntry(const std::vector<float> &a, const std::vector<float> &b,
                      bool ta, bool tb, int lda, int ldb, int i, int j,
                      int k) {
  double sum = 0;
  for (int l = 0; l < k; ++l) {
    double x = ta ? a[l + i * lda] : a[i + l * lda];
    double y = tb ? b[j + l * ldb] : b[l + j * ldb];
    sum += x * y;
  }
  return sum;
}

/// Strided batched products with every transpose combination, leading
/// dimensions above the minimum and padded batch strides, against double
/// arithmetic: f32 within a few roundings of the k-term sum; bf16 and f16
/// results (operands of their type) within one rounding of the exact value
/// (2^-8 and 2^-11 relative), and every f16 result an f16 value.
TEST_F(FakeGpuTest, ProductsFollowOpFlagsAndLeadingDimensions) {
  std::mt19937 rng(7);
  const int m = 13, n = 9, k = 21, batch = 3;
  for (DType precision : {DType::F32, DType::BF16, DType::F16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        SCOPED_TRACE(std::string(dtypeName(precision)) + (ta ? " T" : " N") +
                     (tb ? "T" : "N"));
        const bool half = precision != DType::F32;
        const int lda = (ta ? k : m) + 3, ldb = (tb ? n : k) + 2, ldc = m + 1;
        const int64_t strideA = lda * (ta ? m : k) + 8;
        const int64_t strideB = ldb * (tb ? k : n) + 8;
        const int64_t strideC = ldc * n + 8;
        std::vector<float> a = randomFloats(strideA * batch, rng);
        std::vector<float> b = randomFloats(strideB * batch, rng);
        std::vector<float> c = randomFloats(strideC * batch, rng);
        for (std::vector<float> *v : {&a, &b, &c})
          for (float &x : *v)
            x = roundTo(precision, x);
        const float alpha = 0.75f, beta = -0.5f;
        std::vector<uint16_t> a16, b16, c16;
        void *da, *db, *dc;
        if (half) {
          auto bits = [&](const std::vector<float> &v) {
            std::vector<uint16_t> out;
            for (float x : v)
              out.push_back(precision == DType::BF16 ? toBf16Bits(x)
                                                     : toF16Bits(x));
            return out;
          };
          a16 = bits(a), b16 = bits(b), c16 = bits(c);
          da = device(a16), db = device(b16), dc = device(c16);
        } else {
          da = device(a), db = device(b), dc = device(c);
        }
        const cudaDataType type = precision == DType::BF16  ? CUDA_R_16BF
                                  : precision == DType::F16 ? CUDA_R_16F
                                                            : CUDA_R_32F;
        ASSERT_EQ(cublasGemmStridedBatchedEx(
                      blas, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                      tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, da,
                      type, lda, strideA, db, type, ldb, strideB, &beta, dc,
                      type, ldc, strideC, batch,
                      half ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC,
                      CUBLAS_GEMM_DEFAULT),
                  CUBLAS_STATUS_SUCCESS);
        std::vector<float> got(c.size());
        if (half) {
          std::vector<uint16_t> bits =
              download(static_cast<uint16_t *>(dc), c.size());
          for (size_t i = 0; i < bits.size(); ++i)
            got[i] = precision == DType::BF16 ? fromBf16Bits(bits[i])
                                              : fromF16Bits(bits[i]);
        } else {
          got = download(static_cast<float *>(dc), c.size());
        }
        const double rounding = precision == DType::BF16  ? 1.0 / 256
                                : precision == DType::F16 ? 1.0 / 2048
                                                          : 0.0;
        for (int p = 0; p < batch; ++p)
          for (int j = 0; j < n; ++j)
            for (int i = 0; i < ldc; ++i) {
              const int64_t at = p * strideC + i + j * ldc;
              if (i >= m) { // between columns: untouched
                EXPECT_EQ(got[at], c[at]) << "row " << i << " of the gap";
                continue;
              }
              std::vector<float> ap(a.begin() + p * strideA, a.end());
              std::vector<float> bp(b.begin() + p * strideB, b.end());
              const double want =
                  alpha * referenceEntry(ap, bp, ta, tb, lda, ldb, i, j, k) +
                  beta * static_cast<double>(c[at]);
              const double slack =
                  half ? std::fabs(want) * rounding + 1e-6 : 1e-5;
              EXPECT_NEAR(got[at], want, slack) << "C(" << i << ", " << j
                                                << ") of matrix " << p;
              EXPECT_EQ(got[at], roundTo(precision, got[at]));
            }
        // Padding between the batch's matrices: untouched.
        for (int p = 0; p + 1 < batch; ++p)
          for (int64_t at = p * strideC + ldc * n; at < (p + 1) * strideC;
               ++at)
            EXPECT_EQ(got[at], c[at]);
      }
}

/// With beta = 0, C is not read: NaNs there do not reach the result.
TEST_F(FakeGpuTest, BetaZeroDoesNotReadC) {
  std::mt19937 rng(3);
  std::vector<float> a = randomFloats(16, rng), b = randomFloats(16, rng);
  std::vector<float> c(16, std::nanf(""));
  float *da = device(a), *db = device(b), *dc = device(c);
  const float one = 1, zero = 0;
  ASSERT_EQ(cublasGemmStridedBatchedEx(
                blas, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, da, CUDA_R_32F,
                4, 16, db, CUDA_R_32F, 4, 16, &zero, dc, CUDA_R_32F, 4, 16, 1,
                CUBLAS_COMPUTE_32F_PEDANTIC, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  for (float x : download(dc, 16))
    EXPECT_TRUE(std::isfinite(x));
}

/// What cuBLAS itself refuses: each call returns its status and counts one
/// misuse; a grouped GEMM this cuBLAS does not have is refused without one.
TEST_F(FakeGpuTest, RefusesWhatCublasRefuses) {
  std::vector<float> host(4096, 1.0f);
  float *a = device(host), *b = device(host), *c = device(host);
  const float one = 1, zero = 0;
  auto gemm = [&](cublasHandle_t h, cublasOperation_t ta,
                  cublasOperation_t tb, int m, int n, int k, int lda, int ldb,
                  int ldc, cudaDataType type, cublasComputeType_t compute) {
    return cublasGemmStridedBatchedEx(h, ta, tb, m, n, k, &one, a, type, lda,
                                      0, b, type, ldb, 0, &zero, c, type, ldc,
                                      0, 1, compute, CUBLAS_GEMM_DEFAULT);
  };
  const auto N = CUBLAS_OP_N, T = CUBLAS_OP_T;
  const auto f32 = CUBLAS_COMPUTE_32F_PEDANTIC;
  EXPECT_EQ(gemm(blas, N, N, 8, 8, 8, 8, 8, 8, CUDA_R_32F, f32),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(fake::counters().misuses, 0);
  EXPECT_EQ(gemm(blas, N, N, 8, 8, 8, 7, 8, 8, CUDA_R_32F, f32),
            CUBLAS_STATUS_INVALID_VALUE);
  expectMisuse("leading dimension");
  EXPECT_EQ(gemm(blas, T, N, 8, 8, 16, 8, 16, 8, CUDA_R_32F, f32),
            CUBLAS_STATUS_INVALID_VALUE); // A is k x m: lda >= k
  expectMisuse("leading dimension");
  EXPECT_EQ(gemm(blas, N, T, 8, 12, 8, 8, 8, 8, CUDA_R_32F, f32),
            CUBLAS_STATUS_INVALID_VALUE); // B is n x k: ldb >= n
  expectMisuse("leading dimension");
  EXPECT_EQ(gemm(blas, N, N, 8, 8, 8, 8, 8, 4, CUDA_R_32F, f32),
            CUBLAS_STATUS_INVALID_VALUE);
  expectMisuse("leading dimension");
  EXPECT_EQ(gemm(blas, N, N, 8, 8, -1, 8, 8, 8, CUDA_R_32F, f32),
            CUBLAS_STATUS_INVALID_VALUE);
  expectMisuse("negative size");
  EXPECT_EQ(gemm(blas, static_cast<cublasOperation_t>(7), N, 8, 8, 8, 8, 8, 8,
                 CUDA_R_32F, f32),
            CUBLAS_STATUS_INVALID_VALUE);
  expectMisuse("transpose");
  EXPECT_EQ(gemm(blas, N, N, 8, 8, 8, 8, 8, 8, CUDA_R_64F, CUBLAS_COMPUTE_32F),
            CUBLAS_STATUS_NOT_SUPPORTED);
  expectMisuse("types");
  EXPECT_EQ(gemm(blas, N, N, 8, 8, 8, 8, 8, 8, CUDA_R_32F, CUBLAS_COMPUTE_16F),
            CUBLAS_STATUS_NOT_SUPPORTED);
  expectMisuse("types");

  // bf16 and f16 results need the backend's math mode.
  cublasHandle_t plain = nullptr;
  ASSERT_EQ(cublasCreate(&plain), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasSetStream(plain, stream), CUBLAS_STATUS_SUCCESS);
  for (cudaDataType half : {CUDA_R_16BF, CUDA_R_16F}) {
    EXPECT_EQ(gemm(plain, N, N, 8, 8, 8, 8, 8, 8, half, CUBLAS_COMPUTE_32F),
              CUBLAS_STATUS_INVALID_VALUE);
    expectMisuse("reduced-precision");
  }
  ASSERT_EQ(cublasDestroy(plain), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(gemm(plain, N, N, 8, 8, 8, 8, 8, 8, CUDA_R_32F, f32),
            CUBLAS_STATUS_NOT_INITIALIZED);
  expectMisuse("unknown handle");

  // Grouped: the pedantic f32 compute type is not in cuBLAS's table.
  void **arrays = nullptr;
  ASSERT_EQ(cudaMalloc(reinterpret_cast<void **>(&arrays), 3 * sizeof(void *)),
            cudaSuccess);
  allocations.push_back(arrays);
  const void *pointers[3] = {a, b, c};
  ASSERT_EQ(cudaMemcpyAsync(arrays, pointers, sizeof(pointers),
                            cudaMemcpyHostToDevice, stream),
            cudaSuccess);
  const cublasOperation_t ops[1] = {N};
  const int eight[1] = {8}, size[1] = {1};
  const float alphas[1] = {1}, betas[1] = {0};
  auto grouped = [&](cublasComputeType_t compute) {
    return cublasGemmGroupedBatchedEx(
        blas, ops, ops, eight, eight, eight, alphas, arrays, CUDA_R_32F, eight,
        arrays + 1, CUDA_R_32F, eight, betas, arrays + 2, CUDA_R_32F, eight, 1,
        size, compute);
  };
  EXPECT_EQ(grouped(CUBLAS_COMPUTE_32F_PEDANTIC), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(fake::counters().misuses, 0);
  EXPECT_EQ(fake::counters().groupedRefused, 1);
  EXPECT_EQ(grouped(CUBLAS_COMPUTE_32F), CUBLAS_STATUS_SUCCESS);
  fake::setGroupedSupport(fake::GroupedSupport::None);
  EXPECT_EQ(grouped(CUBLAS_COMPUTE_32F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  fake::Counters counted = fake::counters();
  EXPECT_EQ(counted.groupedCalls, 1);
  EXPECT_EQ(counted.groupedRefused, 2);
  EXPECT_EQ(counted.misuses, 0) << counted.lastMisuse;
}

/// What a GPU would fault on or leave undefined, caught when the stream
/// reaches the product: the misuse is counted and the GPU is broken (the
/// next synchronize reports an illegal address) until reset.
TEST_F(FakeGpuTest, CatchesWhatAGpuWouldFaultOn) {
  std::vector<float> host(256, 1.0f);
  float *a = device(host), *b = device(host), *c = device(host);
  const float one = 1, zero = 0;
  auto strided = [&](const float *x, const float *y, float *z, int batch,
                     int64_t strideC) {
    EXPECT_EQ(cublasGemmStridedBatchedEx(
                  blas, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8, &one, x, CUDA_R_32F,
                  8, 64, y, CUDA_R_32F, 8, 64, &zero, z, CUDA_R_32F, 8,
                  strideC, batch, CUBLAS_COMPUTE_32F_PEDANTIC,
                  CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    return cudaStreamSynchronize(stream);
  };
  EXPECT_EQ(strided(a, b, c, 4, 64), cudaSuccess); // exactly the 256 floats
  EXPECT_EQ(strided(a, b, c, 5, 64), cudaErrorIllegalAddress);
  expectMisuse("not inside one allocation");
  EXPECT_EQ(strided(a + 1, b, c, 1, 64), cudaSuccess);
  EXPECT_EQ(strided(a, b, c + 200, 1, 64), cudaErrorIllegalAddress);
  expectMisuse("C (256 bytes) is not inside one allocation");
  EXPECT_EQ(strided(a, b, a + 32, 1, 64), cudaErrorIllegalAddress);
  expectMisuse("overlaps an A or a B");
  EXPECT_EQ(strided(a, b, c, 2, 32), cudaErrorIllegalAddress);
  expectMisuse("write the same elements");
  EXPECT_EQ(strided(a, b, c, 2, 64), cudaSuccess);

  // Pointer arrays: in GPU memory, and every pointer 16-byte aligned.
  auto batched = [&](const void *const *as, const void *const *bs,
                     void *const *cs) {
    EXPECT_EQ(cublasGemmBatchedEx(blas, CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 8,
                                  &one, as, CUDA_R_32F, 8, bs, CUDA_R_32F, 8,
                                  &zero, cs, CUDA_R_32F, 8, 1,
                                  CUBLAS_COMPUTE_32F_PEDANTIC,
                                  CUBLAS_GEMM_DEFAULT),
              CUBLAS_STATUS_SUCCESS);
    return cudaStreamSynchronize(stream);
  };
  const void *hostArray[3] = {a, b, c};
  EXPECT_EQ(batched(hostArray, hostArray + 1,
                    const_cast<void *const *>(hostArray + 2)),
            cudaErrorIllegalAddress);
  expectMisuse("is not in GPU memory");
  for (int offset : {0, 1}) {
    const void *pointers[3] = {a + offset, b, c};
    void **arrays = device(std::vector<void *>(
        {const_cast<void *>(pointers[0]), const_cast<void *>(pointers[1]),
         const_cast<void *>(pointers[2])}));
    cudaError_t status = batched(arrays, arrays + 1, arrays + 2);
    if (offset == 0) {
      EXPECT_EQ(status, cudaSuccess);
    } else {
      EXPECT_EQ(status, cudaErrorIllegalAddress);
      expectMisuse("16-byte aligned");
    }
  }
}

/// Kernels write inside what they were given: memory outside every
/// allocation breaks the GPU; a write into an allocation's red zone is
/// caught after the kernel.
TEST_F(FakeGpuTest, KernelsStayInsideTheirMemory) {
  std::vector<float> host(100, 1.0f);
  float *buf = device(host), *update = device(host);
  std::vector<uint16_t> grad(100, 0x3F80);
  uint16_t *g = device(grad);
  launchMomentum(g, DType::BF16, buf, update, 100,
                 MomentumScalars{0.9f, 0.1f, true});
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(fake::counters().kernels["momentumKernel"], 1);
  launchMomentum(g, DType::BF16, buf, update, 101,
                 MomentumScalars{0.9f, 0.1f, true});
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaErrorIllegalAddress);
  expectMisuse("momentumKernel given 202 bytes");

  ASSERT_EQ(fake::launchKernel(stream, "oneTooFar", {{buf, 400}},
                               [buf] { buf[100] = 0; }),
            cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  expectMisuse("oneTooFar wrote outside its memory");
  ASSERT_EQ(fake::launchKernel(stream, "oneBefore", {{buf, 400}},
                               [buf] { buf[-1] = 0; }),
            cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  expectMisuse("the red zone before");
}

/// Elementwise kernels beyond one grid (grid-stride loops over more than
/// kMaxBlocks x kThreads elements) store what CpuDevice stores.
TEST_F(FakeGpuTest, ElementwiseKernelsMatchCpuBeyondOneGrid) {
  const int64_t n = runtime::cuda::kernels::kMaxBlocks *
                        runtime::cuda::kernels::kThreads * 2 + 5;
  std::mt19937 rng(11);
  std::vector<float> grad = randomFloats(n, rng), buf = randomFloats(n, rng);
  std::vector<float> update(n, std::nanf(""));
  float *dg = device(grad), *db = device(buf), *du = device(update);
  PlanGroup s(kMuon);
  s.setNumber("momentum", 0.95);
  launchMomentum(dg, DType::F32, db, du, n, momentumScalars(s));
  cpu::CpuDevice cpu;
  runtime::calls::runMomentum(cpu, grad.data(), DType::F32, buf.data(),
                              update.data(), n, s);
  std::vector<float> gotBuf = download(db, n), gotUpdate = download(du, n);
  EXPECT_EQ(std::memcmp(gotBuf.data(), buf.data(), n * 4), 0);
  EXPECT_EQ(std::memcmp(gotUpdate.data(), update.data(), n * 4), 0);
}

/// NorMuon's kernels against normuonStep, the CPU's loop: rows longer than
/// a block (the threads' strides wrap) and more rows than one pass of the
/// blocks would take are not needed for the indexing, but short rows (fewer
/// columns than threads) and a single row are. The rows' sums of squares
/// add in another order (a tree, not a loop), so the results agree to a
/// few f32 roundings, not bit for bit: within 1e-6 relative per value of
/// the state and 2e-6 of the update (measured: at most a few ulps).
TEST_F(FakeGpuTest, NormuonKernelsMatchCpu) {
  std::mt19937 rng(3);
  PlanGroup s(kMuon);
  s.setFlag("normuon", true);
  s.setNumber("normuon_beta2", 0.9);
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{1, 7},
                            {5, 300},
                            {37, 600},
                            {300, 24}}) {
    std::vector<float> x = randomFloats(rows * cols, rng);
    std::vector<float> v = randomFloats(rows, rng);
    for (float &e : v)
      e = std::fabs(e) * 1e-3f; // a second moment: non-negative
    float *dx = device(x), *dv = device(v);
    std::vector<double> sums(2 * rows, std::nan(""));
    std::vector<float> scale(1, std::nanf(""));
    double *ds = device(sums);
    float *dscale = device(scale);
    runtime::cuda::launchNormuon(stream, dx, rows, cols, dv,
                                 normuonScalars(s), ds, dscale);
    std::vector<float> gotX = download(dx, x.size()), gotV = download(dv, rows);
    normuonStep(x.data(), rows, cols, v.data(), normuonScalars(s));
    for (int64_t i = 0; i < rows; ++i)
      ASSERT_NEAR(gotV[i], v[i], 1e-6 * std::fabs(v[i])) << rows << "x" << cols;
    double diff = 0, norm = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(gotX[i]));
      diff = std::max(diff, std::fabs(double(gotX[i]) - x[i]));
      norm = std::max(norm, std::fabs(double(x[i])));
    }
    EXPECT_LE(diff, 2e-6 * norm) << rows << "x" << cols;
  }
}

/// The device runs a per-matrix step with the kernels registered for the
/// step's name (NorMuon's: its row kernel launched) and a step this build
/// has no kernels for on host copies with its host loop (bit for bit the
/// CPU's; no kernel launched).
TEST_F(FakeGpuTest, MatrixStepsRunTheKernelsOfTheirName) {
  const int64_t rows = 6, cols = 40;
  std::mt19937 rng(5);
  PlanGroup s(kMuon);
  s.setFlag("normuon", true);
  const std::vector<float> x = randomFloats(rows * cols, rng);
  std::vector<float> v(rows, 1e-3f);
  StatusOr<std::unique_ptr<Device>> made = runtime::cuda::createDevice(0);
  ASSERT_TRUE(made.ok()) << made.status().text();
  std::unique_ptr<Device> gpu = std::move(made).value();
  const MatrixStep &normuon = matrixSteps().at(0);
  ASSERT_STREQ(normuon.name, "normuon");
  MatrixStep unbuilt = normuon;
  unbuilt.name = "normuon-without-kernels";
  for (const MatrixStep *step :
       std::vector<const MatrixStep *>{&normuon, &unbuilt}) {
    DeviceBuffer dx(*gpu, rows * cols * 4), dv(*gpu, rows * 4);
    ASSERT_TRUE(dx.ok() && dv.ok());
    gpu->copyToDevice(dx.data(), x.data(), dx.size());
    gpu->copyToDevice(dv.data(), v.data(), dv.size());
    const int64_t before = fake::counters().kernels["normuonRowsKernel"];
    gpu->runMatrixStep(*step, dx.floats(), rows, cols, dv.floats(),
                       step->scalars(s));
    std::vector<float> gotX(x.size()), gotV(rows);
    gpu->copyToHost(gotX.data(), dx.data(), dx.size());
    gpu->copyToHost(gotV.data(), dv.data(), dv.size());
    gpu->synchronize();
    std::vector<float> wantX = x, wantV = v;
    normuonStep(wantX.data(), rows, cols, wantV.data(), normuonScalars(s));
    const int64_t launched =
        fake::counters().kernels["normuonRowsKernel"] - before;
    if (step == &normuon) {
      EXPECT_EQ(launched, 1);
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_NEAR(gotX[i], wantX[i], 2e-6 * std::fabs(wantX[i]) + 1e-9);
    } else {
      EXPECT_EQ(launched, 0);
      EXPECT_EQ(gotX, wantX);
      EXPECT_EQ(gotV, wantV);
    }
  }
}

/// QK-clip's rescale: rows with a factor of 1 keep their bits, the others
/// equal the CPU's (Device::scaleRows on a host copy) bit for bit, in f32
/// and bf16 storage.
TEST_F(FakeGpuTest, ScaleRowsMatchesCpu) {
  std::mt19937 rng(4);
  const int64_t rows = 9, cols = 70;
  const std::vector<float> factors = {1.0f, 0.5f, 0.73f, 1.0f, 0.999f,
                                      0.1f, 1.0f, 0.25f, 0.6f};
  for (DType type : {DType::F32, DType::BF16}) {
    const int64_t width = dtypeBytes(type);
    std::vector<uint8_t> bytes = storedAs(randomFloats(rows * cols, rng), type);
    uint8_t *d = device(bytes);
    float *df = device(factors);
    {
      ElementOperands o;
      o.values = d;
      o.type = type;
      o.input = df;
      o.rowLength = cols;
      o.n = rows * cols;
      ASSERT_TRUE(runtime::cuda::launchElementStep(
          stream, runtime::calls::stepNamed(QkClipOp::kName), o,
          StepScalars::of(NoScalars{})));
    }
    std::vector<uint8_t> got = download(d, bytes.size());
    cpu::CpuDevice cpu;
    std::vector<uint8_t> want = bytes;
    runtime::calls::runQkClip(cpu, want.data(), type, rows, cols,
                              factors.data(), PlanGroup(kMuon));
    EXPECT_EQ(got, want) << dtypeName(type);
    for (int64_t c = 0; c < cols; ++c) // a factor of 1: untouched
      EXPECT_EQ(std::memcmp(&got[c * width], &bytes[c * width], width), 0);
    EXPECT_NE(got, bytes);
  }
}

/// The mirror of symmetric matrices at every side up to three tiles of 32
/// (short last tiles included), several matrices apart with padding: the
/// upper triangle becomes the lower one's transpose, nothing else changes.
TEST_F(FakeGpuTest, MirrorLowerAtEverySide) {
  std::mt19937 rng(5);
  for (DType type : {DType::F32, DType::BF16})
    for (int64_t m = 1; m <= 97; ++m) {
      const int64_t count = 3, stride = m * m + 8;
      const int64_t width = dtypeBytes(type);
      std::vector<uint8_t> bytes =
          storedAs(randomFloats(count * stride, rng), type);
      uint8_t *d = device(bytes);
      runtime::cuda::launchMirrorLower(stream, d, count, m, stride, type);
      std::vector<uint8_t> got = download(d, bytes.size());
      std::vector<uint8_t> want = bytes;
      for (int64_t k = 0; k < count; ++k)
        for (int64_t c = 0; c < m; ++c)
          for (int64_t r = 0; r < c; ++r) // upper (r < c) from lower (c, r)
            std::memcpy(&want[(k * stride + r + c * m) * width],
                        &bytes[(k * stride + c + r * m) * width], width);
      ASSERT_EQ(got, want) << dtypeName(type) << " m=" << m;
    }
}

/// A batch whose Newton-Schulz workspace does not fit runs in parts, with
/// the bits of the whole batch at once; one that fits runs whole.
TEST_F(FakeGpuTest, NewtonSchulzRunsInPartsWhenTheWorkspaceDoesNotFit) {
  const int64_t count = 8, rows = 48, cols = 40;
  std::mt19937 rng(9);
  std::vector<float> x = randomFloats(count * rows * cols, rng);
  const std::vector<std::array<double, 3>> abc(5, {3.4445, -4.775, 2.0315});
  std::vector<std::vector<float>> results;
  std::vector<int64_t> normLaunches;
  for (bool limited : {false, true}) {
    StatusOr<std::unique_ptr<Device>> made = runtime::cuda::createDevice(0);
    ASSERT_TRUE(made.ok()) << made.status().text();
    std::unique_ptr<Device> gpu = std::move(made).value();
    DeviceBuffer buffer(*gpu, static_cast<int64_t>(x.size() * 4));
    ASSERT_TRUE(buffer.ok());
    gpu->copyToDevice(buffer.data(), x.data(), buffer.size());
    // Room for the workspace of about three of the eight matrices.
    const int64_t perMatrix = (2 * rows * cols + 2 * cols * cols) * 2 + 64;
    if (limited)
      fake::setMemoryLimit(fake::counters().deviceBytes + 3 * perMatrix +
                           4096);
    const int64_t before = fake::counters().kernels["sumSquaresKernel"];
    gpu->newtonSchulz(buffer.floats(), count, rows, cols, abc, 1e-7,
                      DType::BF16);
    std::vector<float> out(x.size());
    gpu->copyToHost(out.data(), buffer.data(), buffer.size());
    normLaunches.push_back(fake::counters().kernels["sumSquaresKernel"] -
                           before);
    results.push_back(out);
    fake::setMemoryLimit(int64_t(80) << 30);
  }
  EXPECT_EQ(normLaunches[0], 1);
  EXPECT_GT(normLaunches[1], 1);
  EXPECT_EQ(results[0], results[1]);
  cpu::CpuDevice cpu;
  std::vector<float> want = x;
  cpu.newtonSchulz(want.data(), count, rows, cols, abc, 1e-7, DType::BF16);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (results[1][i] - want[i]) * (results[1][i] - want[i]);
    norm += want[i] * want[i];
  }
  EXPECT_LT(std::sqrt(diff / norm), 2e-2);
}

/// A device that runs out of memory says so with nullptr, no misuse.
TEST_F(FakeGpuTest, AllocationBeyondTheMemoryFails) {
  StatusOr<std::unique_ptr<Device>> made = runtime::cuda::createDevice(0);
  ASSERT_TRUE(made.ok()) << made.status().text();
  std::unique_ptr<Device> gpu = std::move(made).value();
  fake::setMemoryLimit(fake::counters().deviceBytes + 1000);
  EXPECT_EQ(gpu->allocate(2000), nullptr);
  void *fits = gpu->allocate(500);
  EXPECT_NE(fits, nullptr);
  gpu->release(fits);
  gpu->synchronize();
}

/// A step ordered with the caller's stream (a framework's current stream):
/// the device's work waits for what the caller queued before (a gradient
/// still being written), and what the caller queues after waits for the
/// device's work (reading the new parameters). Each held stream would run
/// the other's write last without the order.
TEST_F(FakeGpuTest, DeviceOrdersWithTheCallersStream) {
  StatusOr<std::unique_ptr<Device>> made = runtime::cuda::createDevice(0);
  ASSERT_TRUE(made.ok()) << made.status().text();
  std::unique_ptr<Device> gpu = std::move(made).value();
  cudaStream_t deviceStream =
      static_cast<runtime::cuda::CudaDevice &>(*gpu).stream();
  uint8_t *buf = device(std::vector<uint8_t>(64, 7));

  fake::holdStream(stream, true); // the caller's write, still queued
  ASSERT_EQ(cudaMemsetAsync(buf, 0x3f, 64, stream), cudaSuccess);
  Status ordered = runtime::cuda::waitForStream(*gpu, stream);
  ASSERT_TRUE(ordered.ok()) << ordered.text();
  gpu->zero(buf, 64);
  fake::holdStream(stream, false);
  gpu->synchronize();
  EXPECT_EQ(download(buf, 64), std::vector<uint8_t>(64, 0));

  fake::holdStream(deviceStream, true); // the device's write, still queued
  gpu->zero(buf, 64);
  ordered = runtime::cuda::streamWaitsForDevice(*gpu, stream);
  ASSERT_TRUE(ordered.ok()) << ordered.text();
  ASSERT_EQ(cudaMemsetAsync(buf, 0x3f, 64, stream), cudaSuccess);
  fake::holdStream(deviceStream, false);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  EXPECT_EQ(download(buf, 64), std::vector<uint8_t>(64, 0x3f));
  EXPECT_EQ(gpu->takeError().code(), StatusCode::Ok);

  cpu::CpuDevice host;
  Status refused = runtime::cuda::waitForStream(host, stream);
  EXPECT_EQ(refused.code(), StatusCode::InvalidArgument);
  EXPECT_NE(refused.message().find("cuda::createDevice, not the cpu device"),
            std::string::npos)
      << refused.text();
  // A failure leaves nothing behind: the next call succeeds.
  EXPECT_TRUE(runtime::cuda::streamWaitsForDevice(*gpu, stream).ok());
  gpu->synchronize();
  gpu.reset();
  EXPECT_EQ(fake::counters().liveEvents, 0);
}

} // namespace
