//===- NewtonSchulzTest.cpp - Symmetric CPU Newton-Schulz vs dense --------===//
//
// CpuDevice runs Newton-Schulz with symmetric products: on BLAS (ssyrk for
// X X^T and A A, ssymm for B X; f32, and bf16 where the CPU has no bf16
// products) and on oneDNN (bf16 products over the Gram matrix's lower block
// columns, where the CPU has AVX512_BF16 or AMX). This checks both against
// the plain dense algorithm written here with three sgemm products per
// iteration, as the CPU backend ran it before, for square, wide and tall
// shapes, f32, bf16 and f16 (kF16Bound), and both coefficient presets; the oneDNN kernel
// with block columns narrower than the matrices (several blocks and a
// partial last one), bit for bit the same from one call to the next; and
// the choice between the kernels, which needs no particular CPU.
//
// Tolerances (relative Frobenius error against the dense result): the two
// algorithms differ only in the summation order inside the products. In
// f32 that is a few ulps (6e-8) amplified by the iteration, up to about 20x
// per step for Polar Express's first polynomials: 5e-5 (measured: at most
// 2.5e-6 on the shapes below, 1.2e-5 for the 1 x 33 row, whose Gram
// matrix is a single dot product). In bf16 an order difference can flip a
// rounding by one bf16 ulp (2^-8 relative), and the later steps carry and
// amplify the flips: 1e-2 (measured: at most 4e-3), and the symmetric bf16
// result must be as close to the f32 result as the dense bf16 one is
// (within 10%; measured: equal to 3 digits). oneDNN's bf16 products sum
// in yet another order (pairs of products per instruction), so flips are
// more frequent: 2e-2 against the dense bf16 result (measured: at most
// 8e-3), and the same 10% bound against the f32 result (measured: within
// 2%).
//
//===----------------------------------------------------------------------===//
#include "RoundHalf.h"

#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Support/NsCoefficients.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>

using namespace muon;
using namespace muon::runtime;
using muon::runtime::cpu::CpuDevice;
using muon::runtime::cpu::CpuDeviceOptions;
using muon::runtime::cpu::CpuNsKernel;

/// Whether this process runs bf16 products on oneDNN (the build has it and
/// the CPU has bf16 dot products).
bool haveOneDnnBf16() {
  return cpu::oneDnnBuilt() && cpu::cpuHasBf16Products();
}

namespace {

std::vector<float> randomMatrix(int64_t rows, int64_t cols, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0, 1);
  std::vector<float> x(rows * cols);
  for (float &v : x)
    v = g(rng);
  return x;
}

void roundAll(std::vector<float> &x, DType precision) {
  for (float &v : x)
    v = roundTo(precision, v);
}

/// The dense algorithm of Device::newtonSchulz's contract, one plain sgemm
/// per product: A = X X^T, B = c A A + b A, X = a X + B X (on the
/// transpose for a tall matrix), rounding every product to `precision`
/// (bf16: the input and the norm too; f16: the normalized input).
void denseNewtonSchulz(std::vector<float> &x, int64_t rows, int64_t cols,
                       const std::vector<std::array<double, 3>> &abc,
                       double eps, DType precision) {
  const bool bf16 = precision == DType::BF16;
  const bool tall = rows > cols;
  const int m = static_cast<int>(tall ? cols : rows);
  const int n = static_cast<int>(tall ? rows : cols);
  // Work on the wide form X (m x n).
  std::vector<float> w(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      (tall ? w[c * rows + r] : w[r * cols + c]) = x[r * cols + c];
  if (bf16)
    roundAll(w, precision);
  double sumSq = 0;
  for (float v : w)
    sumSq += double(v) * v;
  float norm = static_cast<float>(std::sqrt(sumSq));
  if (bf16)
    norm = roundToBf16(norm);
  norm = std::max(norm, static_cast<float>(eps));
  for (float &v : w)
    v /= norm;
  roundAll(w, precision);
  std::vector<float> A(size_t(m) * m), B(size_t(m) * m), next(w.size());
  for (const std::array<double, 3> &k : abc) {
    const float a = float(k[0]), b = float(k[1]), c = float(k[2]);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, m, n, 1.0f,
                w.data(), n, w.data(), n, 0.0f, A.data(), m);
    roundAll(A, precision);
    B = A;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, m, m, c,
                A.data(), m, A.data(), m, b, B.data(), m);
    roundAll(B, precision);
    next = w;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, m, 1.0f,
                B.data(), m, w.data(), n, a, next.data(), n);
    w = next;
    roundAll(w, precision);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x[r * cols + c] = tall ? w[c * rows + r] : w[r * cols + c];
}

/// ||x - reference||_F / ||reference||_F, accumulated in double.
double relativeError(const std::vector<float> &x,
                     const std::vector<float> &reference) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff += (double(x[i]) - reference[i]) * (double(x[i]) - reference[i]);
    norm += double(reference[i]) * reference[i];
  }
  return std::sqrt(diff / norm);
}

/// f16 against the dense f16 result: f16 rounds to 11 bits where bf16
/// rounds to 8, so an order difference flips a rounding by a step 8 times
/// smaller (measured: at most 1.1e-3; against f32 1.5-1.7e-3, 5.5e-3 for
/// the 1 x 33 row with Polar Express's, where bf16 is 1.1-1.8e-2 and
/// 1.2e-1).
constexpr double kF16Bound = 3e-3;

struct Case {
  int64_t rows, cols;
  DType precision;
  const char *preset;
  bool oneDnn = false; // bf16 on oneDNN (else on BLAS)
  int64_t tile = 64;   // oneDNN's block column width
};

class SymmetricNewtonSchulz : public ::testing::TestWithParam<Case> {};

TEST_P(SymmetricNewtonSchulz, MatchesDense) {
  const Case c = GetParam();
  std::optional<std::vector<NsTriple>> table = nsPreset(c.preset, 5);
  ASSERT_TRUE(table);
  std::vector<std::array<double, 3>> abc = *table;
  abc.resize(5, abc.back());
  if (c.oneDnn && !haveOneDnnBf16())
    GTEST_SKIP() << "UNSUPPORTED: no bf16 products here ("
                 << cpu::describeNewtonSchulz(DType::BF16) << ")";
  CpuDeviceOptions options;
  options.oneDnn = c.oneDnn;
  options.bf16Tile = c.tile;
  options.nsForm = cpu::NsForm::Standard; // the Gram form: GramNewtonSchulzTest
  CpuDevice device(options);
  ASSERT_EQ(device.nsKernel(c.precision),
            c.oneDnn ? CpuNsKernel::OneDnnBf16 : CpuNsKernel::Blas);
  std::vector<float> sym = randomMatrix(c.rows, c.cols, 11), dense = sym;
  int64_t flops = device.newtonSchulz(sym.data(), 1, c.rows, c.cols, abc,
                                      1e-7, c.precision);
  denseNewtonSchulz(dense, c.rows, c.cols, abc, 1e-7, c.precision);
  // The count is still the contract's dense one.
  const int64_t m = std::min(c.rows, c.cols), n = std::max(c.rows, c.cols);
  EXPECT_EQ(flops, 5 * (4 * m * m * n + 2 * m * m * m));
  for (size_t i = 0; i < sym.size(); ++i) {
    ASSERT_TRUE(std::isfinite(sym[i])) << i;
    ASSERT_EQ(sym[i], roundTo(c.precision, sym[i])) << i;
  }
  const double relative = relativeError(sym, dense);
  const double bound = c.oneDnn                        ? 2e-2
                       : c.precision == DType::BF16 ? 1e-2
                       : c.precision == DType::F16  ? kF16Bound
                                                    : 5e-5;
  EXPECT_LT(relative, bound) << c.rows << "x" << c.cols << " " << c.preset;
  if (c.precision != DType::F32) {
    // Both half results are as close to the f32 one: the symmetric
    // products lose nothing the dense ones keep.
    std::vector<float> f32 = randomMatrix(c.rows, c.cols, 11);
    denseNewtonSchulz(f32, c.rows, c.cols, abc, 1e-7, DType::F32);
    const double symToF32 = relativeError(sym, f32);
    const double denseToF32 = relativeError(dense, f32);
    EXPECT_LT(symToF32, 1.1 * denseToF32);
    std::printf("[ measured ] %s %lldx%lld %s: against the dense %s %.2e, "
                "against f32 %.2e\n",
                dtypeName(c.precision), static_cast<long long>(c.rows),
                static_cast<long long>(c.cols), c.preset,
                dtypeName(c.precision), relative, symToF32);
  }
}

std::vector<Case> cases() {
  std::vector<Case> all;
  // Square, wide and tall, with sides off the 64-element mirror tile.
  for (auto [rows, cols] : {std::pair<int64_t, int64_t>{96, 96},
                            {130, 130},
                            {72, 200},
                            {200, 72},
                            {1, 33}})
    for (DType precision : {DType::F32, DType::BF16, DType::F16})
      for (const char *preset : {"jordan", "polar_express"}) {
        all.push_back({rows, cols, precision, preset});
        // oneDNN with 32-wide block columns: 3 to 7 of them (1 for 1 x 33),
        // the last one partial.
        if (precision == DType::BF16)
          all.push_back({rows, cols, precision, preset, true, 32});
      }
  // One block column (the default width covers the matrix), and the
  // default width over several.
  all.push_back({48, 100, DType::BF16, "jordan", true, 64});
  all.push_back({300, 200, DType::BF16, "jordan", true, 64});
  return all;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, SymmetricNewtonSchulz, ::testing::ValuesIn(cases()),
    [](const ::testing::TestParamInfo<Case> &info) {
      const Case &c = info.param;
      return std::to_string(c.rows) + "x" + std::to_string(c.cols) + "_" +
             dtypeName(c.precision) + "_" + c.preset +
             (c.oneDnn ? "_onednn" + std::to_string(c.tile) : "");
    });

/// The oneDNN kernel gives the same bits every time: a second call on the
/// same input, from a buffer at another alignment and after other shapes
/// have run (the reference of a verified run computes every matrix again,
/// in another order than the ranks), and on a second device.
TEST(OneDnnNewtonSchulz, Deterministic) {
  if (!haveOneDnnBf16())
    GTEST_SKIP() << "UNSUPPORTED: no bf16 products here ("
                 << cpu::describeNewtonSchulz(DType::BF16) << ")";
  std::optional<std::vector<NsTriple>> table = nsPreset("jordan", 5);
  ASSERT_TRUE(table);
  std::vector<std::array<double, 3>> abc = *table;
  abc.resize(5, abc.back());
  const int64_t rows = 200, cols = 136;
  const std::vector<float> input = randomMatrix(rows, cols, 5);
  CpuDevice device;
  std::vector<float> first = input;
  device.newtonSchulz(first.data(), 1, rows, cols, abc, 1e-7, DType::BF16);
  // Something else in between, on the same workspace.
  std::vector<float> other = randomMatrix(64, 300, 6);
  device.newtonSchulz(other.data(), 1, 64, 300, abc, 1e-7, DType::BF16);
  std::vector<float> shifted(input.size() + 3);
  std::copy(input.begin(), input.end(), shifted.begin() + 3);
  device.newtonSchulz(shifted.data() + 3, 1, rows, cols, abc, 1e-7,
                      DType::BF16);
  CpuDevice second;
  std::vector<float> again = input;
  second.newtonSchulz(again.data(), 1, rows, cols, abc, 1e-7, DType::BF16);
  ASSERT_TRUE(device.takeError().ok());
  ASSERT_TRUE(second.takeError().ok());
  EXPECT_NE(first, input);
  for (size_t i = 0; i < input.size(); ++i) {
    ASSERT_EQ(first[i], shifted[i + 3]) << i;
    ASSERT_EQ(first[i], again[i]) << i;
  }
}

/// bf16 runs on oneDNN only where it is built in and the CPU has bf16 dot
/// products (what "auto" is: NsPrecisionTest.cpp). Holds on any CPU.
TEST(CpuNsKernel, Choice) {
  using cpu::chooseNsKernel;
  EXPECT_EQ(chooseNsKernel(DType::BF16, true, true), CpuNsKernel::OneDnnBf16);
  EXPECT_EQ(chooseNsKernel(DType::BF16, true, false), CpuNsKernel::Blas);
  EXPECT_EQ(chooseNsKernel(DType::BF16, false, true), CpuNsKernel::Blas);
  EXPECT_EQ(chooseNsKernel(DType::F32, true, true), CpuNsKernel::Blas);
  // f16 on BLAS everywhere: oneDNN 2.x has no f16 products on the CPU.
  EXPECT_EQ(chooseNsKernel(DType::F16, true, true), CpuNsKernel::Blas);
  // This process: the device agrees with the choice for what is here.
  const bool here = haveOneDnnBf16();
  CpuDevice device;
  EXPECT_EQ(device.nsKernel(DType::BF16),
            here ? CpuNsKernel::OneDnnBf16 : CpuNsKernel::Blas);
  EXPECT_EQ(device.nsKernel(DType::F32), CpuNsKernel::Blas);
  CpuDeviceOptions blasOnly;
  blasOnly.oneDnn = false;
  CpuDevice noOneDnn(blasOnly);
  EXPECT_EQ(noOneDnn.defaultNsDtype(), DType::F32);
  EXPECT_EQ(noOneDnn.nsKernel(DType::BF16), CpuNsKernel::Blas);
  // The summary names what runs.
  const std::string bf16 = cpu::describeNewtonSchulz(DType::BF16);
  EXPECT_NE(bf16.find(here ? "bf16 products, f32 accumulation (oneDNN"
                           : "f32 products rounded to bf16"),
            std::string::npos)
      << bf16;
  EXPECT_EQ(cpu::describeNewtonSchulz(DType::F16, cpu::NsForm::Standard),
            std::string("f32 products rounded to f16 (") + cpu::blasKernels() +
                "; the CPU backend has no f16 kernel)");
  // f32 takes the Gram form by default too (ns_form auto, Jordan's steps).
  EXPECT_EQ(cpu::describeNewtonSchulz(DType::F32, cpu::NsForm::Standard),
            std::string("f32 products (") + cpu::blasKernels() + ")");
  EXPECT_EQ(cpu::describeNewtonSchulz(DType::F32),
            std::string("f32 products (") + cpu::blasKernels() +
                "); Gram form on wide and tall matrices");
  EXPECT_EQ(cpu::describeNewtonSchulz(DType::F32, cpu::NsForm::Gram),
            std::string("f32 products (") + cpu::blasKernels() +
                "); Gram form on wide and tall matrices");
}

/// OpenBLAS's kernels are named ("OpenBLAS, SkylakeX kernels"); the advice
/// to choose them is given only where the user has not, and names the
/// kernels this CPU's features call for.
TEST(CpuBlasKernels, NamedAndAdvised) {
  const std::string kernels = cpu::blasKernels();
  EXPECT_EQ(kernels.rfind(cpu::blasName(), 0), 0u) << kernels;
  const std::string preferred = cpu::preferredBlasKernels();
  EXPECT_TRUE(preferred.empty() || preferred == "SkylakeX" ||
              preferred == "Haswell")
      << preferred;
  const std::string advice = cpu::blasKernelAdvice();
  if (std::getenv("OPENBLAS_CORETYPE") || preferred.empty()) {
    EXPECT_EQ(advice, "");
  }
  if (!advice.empty()) {
    EXPECT_NE(advice.find("OPENBLAS_CORETYPE=" + preferred), std::string::npos)
        << advice;
    EXPECT_EQ(kernels.find(preferred + " kernels"), std::string::npos);
  }
}

/// The plain bf16 product benchmarks set Newton-Schulz against: exact on
/// small integers (bf16 holds them, f32 sums them exactly), refused where
/// there are no bf16 products.
TEST(OneDnnNewtonSchulz, Gemm) {
  const int64_t m = 5, n = 7, k = 9;
  std::vector<uint16_t> a(m * k), b(k * n), c(m * n);
  for (int64_t i = 0; i < m * k; ++i)
    a[i] = toBf16Bits(static_cast<float>(i % 7) - 3);
  for (int64_t i = 0; i < k * n; ++i)
    b[i] = toBf16Bits(static_cast<float>(i % 5) - 2);
  if (!haveOneDnnBf16()) {
    const Status refused = cpu::bf16Gemm(a.data(), b.data(), c.data(), m, n, k);
    EXPECT_FALSE(refused.ok());
    GTEST_SKIP() << "UNSUPPORTED: no bf16 products here (" << refused.message()
                 << ")";
  }
  const Status done = cpu::bf16Gemm(a.data(), b.data(), c.data(), m, n, k);
  ASSERT_TRUE(done.ok()) << done.message();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      float want = 0;
      for (int64_t l = 0; l < k; ++l)
        want += fromBf16Bits(a[i * k + l]) * fromBf16Bits(b[l * n + j]);
      EXPECT_EQ(fromBf16Bits(c[i * n + j]), want) << i << "," << j;
    }
}

/// The CPU's branchless roundings (RoundHalf.h) give DType.h's bits: on
/// every exponent with the low bits around each rounding point (ties
/// included), on every tie and its neighbours among f16's subnormals, at
/// f16's overflow, on infinities and NaNs, and on a stride through all
/// 2^32 patterns.
TEST(RoundHalf, SameBitsAsDType) {
  auto check = [](uint32_t bits) {
    float v;
    std::memcpy(&v, &bits, 4);
    const float f16 = cpu::roundF16(v), wantF16 = roundToF16(v);
    const float bf16 = cpu::roundBf16(v), wantBf16 = roundToBf16(v);
    ASSERT_EQ(0, std::memcmp(&f16, &wantF16, 4)) << std::hex << bits;
    ASSERT_EQ(0, std::memcmp(&bf16, &wantBf16, 4)) << std::hex << bits;
  };
  const uint32_t lows[] = {0,      1,      0xFFF,  0x1000, 0x1001, 0x1FFF,
                           0x2000, 0x7FFF, 0x8000, 0x8001, 0xFFFF, 0x10000};
  for (uint32_t high = 0; high < (1u << 16); ++high)
    for (uint32_t low : lows)
      check((high << 16) ^ low);
  for (uint32_t j = 0; j < 1024; ++j) {
    const float tie = (static_cast<float>(j) + 0.5f) * 5.9604644775390625e-8f;
    uint32_t bits;
    std::memcpy(&bits, &tie, 4);
    for (uint32_t near : {bits - 1, bits, bits + 1})
      for (uint32_t sign : {0u, 0x80000000u})
        check(near | sign);
  }
  for (uint32_t bits : {0x477FE000u, 0x477FEFFFu, 0x477FF000u, 0x477FF001u,
                        0x7F800000u, 0xFF800000u, 0x7FC00000u, 0x7F800001u,
                        0xFFFFFFFFu, 0x00000001u, 0x80000000u})
    check(bits);
  for (uint64_t bits = 0; bits < (uint64_t(1) << 32); bits += 9973)
    check(static_cast<uint32_t>(bits));
}

} // namespace
