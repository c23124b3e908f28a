//===- GramNewtonSchulzTest.cpp - Gram-form Newton-Schulz vs f64 ---------===//
//
// The CPU backend can run Newton-Schulz on wide and tall matrices in its
// Gram form: the same polynomials, applied through the m x m Gram matrix
// and restarted from X every few steps; f32 in GramNewtonSchulz.h (phases
// of 2 and 3 steps), bf16 in phases of 2 on oneDNN (OneDnnNewtonSchulz.h,
// CPUs with bf16 products) and on BLAS (GramNewtonSchulz.h, f32 products
// rounded to bf16); bf16's bounds are kBf16Bound and the ratios below.
// For f32 this checks it and the standard form against the standard
// iteration in double, on a Gaussian matrix and on a skewed spectrum (rank
// 8 with singular values from 100 to 0.5, plus 5% noise: the case where
// R's rounding errors grow most), both coefficient presets, wide and tall,
// with sides that give several 64-row product blocks and a partial last
// one.
//
// Tolerance: 2e-5 relative Frobenius error against double for the Gram
// form, 5e-5 for the standard one, and the Gram form within 5x of the
// standard form's error. Measured here: standard 1.7e-6 to 4.5e-6, Gram
// 1.5e-6 to 7.6e-6 (worst: Jordan, skewed, 2.7x the standard form). With
// phases of 3 and 2 steps instead of 2 and 3, Polar Express's skewed case
// reached 3.1e-5 (8.4x), and with no restart at all 1.4e-3 (numpy,
// 768x3072): the bounds catch both. The Gram form must also differ from
// the standard one (so that it ran).
//
//===----------------------------------------------------------------------===//
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/DType.h"
#include "muon/Support/NsCoefficients.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>

using namespace muon;
using namespace muon::runtime;
using muon::runtime::cpu::CpuDevice;
using muon::runtime::cpu::CpuDeviceOptions;
using muon::runtime::cpu::NsForm;

namespace {

/// A Gaussian matrix, or (skewed) a rank-8 one with singular-value-like
/// weights 100 ... 0.5 plus 5% Gaussian noise.
std::vector<float> testMatrix(int64_t rows, int64_t cols, bool skewed,
                              unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<double> g(0, 1);
  std::vector<double> x(rows * cols);
  for (double &v : x)
    v = g(rng);
  if (skewed) {
    const double weights[8] = {100, 50, 20, 10, 5, 2, 1, 0.5};
    std::vector<double> low(rows * cols, 0.0);
    for (double w : weights) {
      std::vector<double> u(rows), v(cols);
      for (double &e : u)
        e = g(rng) / std::sqrt(double(rows));
      for (double &e : v)
        e = g(rng) / std::sqrt(double(cols));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          low[r * cols + c] += w * u[r] * v[c];
    }
    double lowNorm = 0, noiseNorm = 0;
    for (int64_t i = 0; i < rows * cols; ++i) {
      lowNorm += low[i] * low[i];
      noiseNorm += x[i] * x[i];
    }
    const double scale = 0.05 * std::sqrt(lowNorm / noiseNorm);
    for (int64_t i = 0; i < rows * cols; ++i)
      x[i] = low[i] + scale * x[i];
  }
  return std::vector<float>(x.begin(), x.end());
}

/// The standard iteration in double on the wide form: X / ||X||, then
/// X <- a X + (b A + c A A) X with A = X X^T.
std::vector<double> referenceNewtonSchulz(
    const std::vector<float> &input, int64_t rows, int64_t cols,
    const std::vector<std::array<double, 3>> &abc) {
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;
  std::vector<double> x(m * n);
  double norm = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double v = input[r * cols + c];
      (tall ? x[c * n + r] : x[r * n + c]) = v;
      norm += v * v;
    }
  norm = std::sqrt(norm);
  for (double &v : x)
    v /= norm;
  std::vector<double> a(m * m), b(m * m), next(m * n);
  for (const std::array<double, 3> &k : abc) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t l = 0; l < n; ++l)
          s += x[i * n + l] * x[j * n + l];
        a[i * m + j] = s;
      }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < m; ++j) {
        double s = 0;
        for (int64_t l = 0; l < m; ++l)
          s += a[i * m + l] * a[l * m + j];
        b[i * m + j] = k[1] * a[i * m + j] + k[2] * s;
      }
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t l = 0; l < n; ++l)
        next[i * n + l] = k[0] * x[i * n + l];
      for (int64_t j = 0; j < m; ++j) {
        const double bij = b[i * m + j];
        for (int64_t l = 0; l < n; ++l)
          next[i * n + l] += bij * x[j * n + l];
      }
    }
    x.swap(next);
  }
  std::vector<double> out(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      out[r * cols + c] = tall ? x[c * n + r] : x[r * n + c];
  return out;
}

double relativeError(const std::vector<float> &x,
                     const std::vector<double> &reference) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    diff += (x[i] - reference[i]) * (x[i] - reference[i]);
    norm += reference[i] * reference[i];
  }
  return std::sqrt(diff / norm);
}

/// bf16 bounds for the Gram form against double: absolute (the standard
/// bf16 form's own error is 1.2-1.4e-2 on the Gaussian inputs and
/// 5.1-5.5e-2 on the skewed ones), and against the standard bf16 form's
/// error on the same input. Measured on the cases below: with Jordan's
/// coefficients (what auto runs in the Gram form) 0.80-0.99x Gaussian,
/// 0.96-0.97x skewed (1.03-1.15x Gaussian while H's a was added after its
/// rounding); with Polar Express's 1.7-2.8x Gaussian, 1.08-1.12x skewed
/// (why auto keeps the standard form for them). On BLAS (AVX2, OpenBLAS's
/// Zen kernels): Jordan's 0.82-0.99x Gaussian, 0.96-0.97x skewed; Polar
/// Express's 1.7-2.8x Gaussian, 1.08-1.12x skewed. Phases of 3 steps
/// diverged on skewed inputs (docs/performance.md): the bounds catch that.
constexpr double kBf16Bound = 8e-2, kBf16JordanRatio = 1.2, kBf16Ratio = 3.0;

/// `steps` steps of Jordan's coefficients.
std::vector<std::array<double, 3>> jordanSteps(int64_t steps) {
  return std::vector<std::array<double, 3>>(steps, {3.4445, -4.775, 2.0315});
}

/// Whether `steps` steps of Jordan's coefficients run in the Gram form.
bool usesWithJordan(const CpuDeviceOptions &options, DType precision,
                    int64_t rows, int64_t cols, int64_t steps) {
  return cpu::usesGramNewtonSchulz(options, precision, rows, cols,
                                   jordanSteps(steps));
}

struct Case {
  int64_t rows, cols;
  const char *preset;
  bool skewed;
  bool oneDnn = false; // bf16: on oneDNN's bf16 products, else on BLAS
};

class GramNewtonSchulz : public ::testing::TestWithParam<Case> {};

TEST_P(GramNewtonSchulz, MatchesDoubleLikeTheStandardForm) {
  const Case c = GetParam();
  std::optional<std::vector<NsTriple>> table = nsPreset(c.preset, 5);
  ASSERT_TRUE(table);
  std::vector<std::array<double, 3>> abc = *table;
  abc.resize(5, abc.back()); // Jordan's preset is one triple for every step
  const std::vector<float> input = testMatrix(c.rows, c.cols, c.skewed, 7);
  const std::vector<double> reference =
      referenceNewtonSchulz(input, c.rows, c.cols, abc);

  CpuDeviceOptions gramOptions, standardOptions;
  gramOptions.nsForm = NsForm::Gram;
  standardOptions.nsForm = NsForm::Standard;
  ASSERT_TRUE(
      cpu::usesGramNewtonSchulz(gramOptions, DType::F32, c.rows, c.cols, abc));
  ASSERT_FALSE(cpu::usesGramNewtonSchulz(standardOptions, DType::F32, c.rows,
                                         c.cols, abc));
  CpuDevice gramDevice(gramOptions), standardDevice(standardOptions);
  std::vector<float> gram = input, standard = input;
  const int64_t m = std::min(c.rows, c.cols), n = std::max(c.rows, c.cols);
  // The count is the contract's dense one either way.
  EXPECT_EQ(gramDevice.newtonSchulz(gram.data(), 1, c.rows, c.cols, abc,
                                    1e-7, DType::F32),
            5 * (4 * m * m * n + 2 * m * m * m));
  standardDevice.newtonSchulz(standard.data(), 1, c.rows, c.cols, abc, 1e-7,
                              DType::F32);
  ASSERT_TRUE(gramDevice.takeError().ok());

  const double gramError = relativeError(gram, reference);
  const double standardError = relativeError(standard, reference);
  EXPECT_LT(gramError, 2e-5);
  EXPECT_LT(standardError, 5e-5);
  EXPECT_LT(gramError, 5 * std::max(standardError, 1e-6))
      << "standard " << standardError;
  EXPECT_NE(gram, standard); // the Gram form ran
  // Deterministic: a second run gives the same bits (a verified run's
  // reference computes every matrix again).
  std::vector<float> again = input;
  gramDevice.newtonSchulz(again.data(), 1, c.rows, c.cols, abc, 1e-7,
                          DType::F32);
  EXPECT_EQ(again, gram);
}

/// Both presets, Gaussian and skewed, on each shape.
std::vector<Case> casesOf(std::vector<std::pair<int64_t, int64_t>> shapes) {
  std::vector<Case> all;
  for (auto [rows, cols] : shapes)
    for (const char *preset : {"jordan", "polar_express"})
      for (bool skewed : {false, true})
        all.push_back({rows, cols, preset, skewed});
  return all;
}

std::string caseName(const ::testing::TestParamInfo<Case> &info) {
  const Case &c = info.param;
  return std::to_string(c.rows) + "x" + std::to_string(c.cols) + "_" +
         c.preset + (c.skewed ? "_skewed" : "_gaussian");
}

// 1:3 and 1:2.5 with 64-row blocks: 2 full and a partial one (160), and 3
// full (192); wide and tall.
INSTANTIATE_TEST_SUITE_P(Shapes, GramNewtonSchulz,
                         ::testing::ValuesIn(casesOf(
                             {{160, 480}, {480, 160}, {192, 480}})),
                         caseName);

/// bf16 on oneDNN and on BLAS (f32 products rounded to bf16, what CPUs
/// without bf16 products run): the Gram form in phases of 2 steps (the
/// default, auto) against the same kernel's standard form, both against
/// the iteration in double.
class GramNewtonSchulzBf16 : public ::testing::TestWithParam<Case> {};

TEST_P(GramNewtonSchulzBf16, AgainstDoubleAndTheStandardForm) {
  const Case c = GetParam();
  if (c.oneDnn && (!cpu::oneDnnBuilt() || !cpu::cpuHasBf16Products()))
    GTEST_SKIP() << "UNSUPPORTED: no bf16 products here ("
                 << cpu::describeNewtonSchulz(DType::BF16) << ")";
  std::optional<std::vector<NsTriple>> table = nsPreset(c.preset, 5);
  ASSERT_TRUE(table);
  std::vector<std::array<double, 3>> abc = *table;
  abc.resize(5, abc.back());
  const bool jordan = std::string(c.preset) == "jordan";
  const std::vector<float> input = testMatrix(c.rows, c.cols, c.skewed, 7);
  const std::vector<double> reference =
      referenceNewtonSchulz(input, c.rows, c.cols, abc);

  CpuDeviceOptions autoOptions, gramOptions, standardOptions;
  autoOptions.nsForm = NsForm::Auto;
  gramOptions.nsForm = NsForm::Gram;
  standardOptions.nsForm = NsForm::Standard;
  for (CpuDeviceOptions *o : {&autoOptions, &gramOptions, &standardOptions})
    o->oneDnn = c.oneDnn;
  ASSERT_EQ(CpuDevice(gramOptions).nsKernel(DType::BF16),
            c.oneDnn ? cpu::CpuNsKernel::OneDnnBf16 : cpu::CpuNsKernel::Blas);
  // auto: the Gram form with Jordan's coefficients, not Polar Express's.
  ASSERT_EQ(
      cpu::usesGramNewtonSchulz(autoOptions, DType::BF16, c.rows, c.cols, abc),
      jordan);
  ASSERT_TRUE(
      cpu::usesGramNewtonSchulz(gramOptions, DType::BF16, c.rows, c.cols, abc));
  ASSERT_FALSE(cpu::usesGramNewtonSchulz(standardOptions, DType::BF16, c.rows,
                                         c.cols, abc));
  CpuDevice autoDevice(autoOptions), gramDevice(gramOptions),
      standardDevice(standardOptions);
  std::vector<float> automatic = input, gram = input, standard = input;
  const int64_t m = std::min(c.rows, c.cols), n = std::max(c.rows, c.cols);
  EXPECT_EQ(gramDevice.newtonSchulz(gram.data(), 1, c.rows, c.cols, abc,
                                    1e-7, DType::BF16),
            5 * (4 * m * m * n + 2 * m * m * m));
  standardDevice.newtonSchulz(standard.data(), 1, c.rows, c.cols, abc, 1e-7,
                              DType::BF16);
  autoDevice.newtonSchulz(automatic.data(), 1, c.rows, c.cols, abc, 1e-7,
                          DType::BF16);
  ASSERT_TRUE(gramDevice.takeError().ok());
  ASSERT_TRUE(standardDevice.takeError().ok());
  ASSERT_TRUE(autoDevice.takeError().ok());
  for (size_t i = 0; i < gram.size(); ++i)
    ASSERT_EQ(gram[i], roundToBf16(gram[i])) << i;
  EXPECT_NE(gram, standard); // the Gram form ran
  EXPECT_EQ(automatic, jordan ? gram : standard);

  const double gramError = relativeError(gram, reference);
  const double standardError = relativeError(standard, reference);
  EXPECT_LT(gramError, kBf16Bound) << "standard " << standardError;
  EXPECT_LT(gramError, (jordan ? kBf16JordanRatio : kBf16Ratio) *
                           standardError)
      << "standard " << standardError;
  // Deterministic, on this device and on another one.
  std::vector<float> again = input, elsewhere = input;
  gramDevice.newtonSchulz(again.data(), 1, c.rows, c.cols, abc, 1e-7,
                          DType::BF16);
  CpuDevice(gramOptions)
      .newtonSchulz(elsewhere.data(), 1, c.rows, c.cols, abc, 1e-7,
                    DType::BF16);
  EXPECT_EQ(again, gram);
  EXPECT_EQ(elsewhere, gram);
}

/// Each case on oneDNN and on BLAS.
std::vector<Case> onBothKernels(std::vector<Case> cases) {
  std::vector<Case> all;
  for (Case c : cases)
    for (bool oneDnn : {true, false}) {
      c.oneDnn = oneDnn;
      all.push_back(c);
    }
  return all;
}

// 1:3 and 1:2.5 with 64-wide block columns or 64-row blocks (2 full and a
// partial one, and 3 full), wide and tall, and 1:3 with 128 rows (2 full).
INSTANTIATE_TEST_SUITE_P(
    Shapes, GramNewtonSchulzBf16,
    ::testing::ValuesIn(onBothKernels(
        casesOf({{160, 480}, {480, 160}, {192, 480}, {128, 384}}))),
    [](const ::testing::TestParamInfo<Case> &info) {
      return caseName(info) + (info.param.oneDnn ? "_onednn" : "_blas");
    });

/// f16 (on BLAS everywhere: f32 products rounded to f16) in both forms,
/// against the iteration in double, against f32 Newton-Schulz (what a run
/// verified with --ns-dtype f16 is compared with), and against bf16's
/// error on the same input. Bounds: kF16Bound against double and against
/// f32, the Gram form within kF16JordanRatio (Jordan's) or kF16Ratio of
/// the standard form's error, and each f16 error below kF16OverBf16 of
/// bf16's (f16 keeps 3 more bits: an f16 run that rounded as bf16 fails
/// it). Measured (printed): standard 1.3-1.6e-3 Gaussian, 4.8-5.0e-3
/// skewed (bf16 1.2-1.35e-2 and 5.1-5.5e-2); the Gram form 0.81-0.95x the
/// standard form's error with Jordan's, 1.13-1.76x with Polar Express's;
/// f16 over bf16 0.09-0.22. f16's distance from f32 equals its distance
/// from double to 3 digits.
constexpr double kF16Bound = 1e-2, kF16JordanRatio = 1.2, kF16Ratio = 3.0,
                 kF16OverBf16 = 0.35;

class GramNewtonSchulzF16 : public ::testing::TestWithParam<Case> {};

TEST_P(GramNewtonSchulzF16, AgainstDoubleF32AndBf16) {
  const Case c = GetParam();
  std::optional<std::vector<NsTriple>> table = nsPreset(c.preset, 5);
  ASSERT_TRUE(table);
  std::vector<std::array<double, 3>> abc = *table;
  abc.resize(5, abc.back());
  const bool jordan = std::string(c.preset) == "jordan";
  const std::vector<float> input = testMatrix(c.rows, c.cols, c.skewed, 7);
  const std::vector<double> reference =
      referenceNewtonSchulz(input, c.rows, c.cols, abc);

  CpuDeviceOptions autoOptions, gramOptions, standardOptions;
  autoOptions.nsForm = NsForm::Auto;
  gramOptions.nsForm = NsForm::Gram;
  standardOptions.nsForm = NsForm::Standard;
  ASSERT_EQ(CpuDevice(autoOptions).nsKernel(DType::F16),
            cpu::CpuNsKernel::Blas);
  ASSERT_EQ(
      cpu::usesGramNewtonSchulz(autoOptions, DType::F16, c.rows, c.cols, abc),
      jordan);
  ASSERT_TRUE(
      cpu::usesGramNewtonSchulz(gramOptions, DType::F16, c.rows, c.cols, abc));
  CpuDevice autoDevice(autoOptions), gramDevice(gramOptions),
      standardDevice(standardOptions);
  auto run = [&](CpuDevice &device, DType precision) {
    std::vector<float> x = input;
    device.newtonSchulz(x.data(), 1, c.rows, c.cols, abc, 1e-7, precision);
    EXPECT_TRUE(device.takeError().ok());
    return x;
  };
  const std::vector<float> gram = run(gramDevice, DType::F16),
                           standard = run(standardDevice, DType::F16),
                           automatic = run(autoDevice, DType::F16),
                           f32 = run(standardDevice, DType::F32),
                           bf16 = run(standardDevice, DType::BF16);
  for (size_t i = 0; i < gram.size(); ++i) {
    ASSERT_EQ(gram[i], roundToF16(gram[i])) << i;
    ASSERT_EQ(standard[i], roundToF16(standard[i])) << i;
  }
  EXPECT_NE(gram, standard); // the Gram form ran
  EXPECT_EQ(automatic, jordan ? gram : standard);

  const double gramError = relativeError(gram, reference);
  const double standardError = relativeError(standard, reference);
  const double bf16Error = relativeError(bf16, reference);
  const std::vector<double> f32Wide(f32.begin(), f32.end());
  const double gramToF32 = relativeError(gram, f32Wide);
  const double standardToF32 = relativeError(standard, f32Wide);
  std::printf("[ measured ] f16 %lldx%lld %s %s: against double standard "
              "%.2e, Gram %.2e (bf16 standard %.2e); against f32 standard "
              "%.2e, Gram %.2e\n",
              static_cast<long long>(c.rows), static_cast<long long>(c.cols),
              c.preset, c.skewed ? "skewed" : "gaussian", standardError,
              gramError, bf16Error, standardToF32, gramToF32);
  EXPECT_LT(gramError, kF16Bound);
  EXPECT_LT(standardError, kF16Bound);
  EXPECT_LT(gramToF32, kF16Bound);
  EXPECT_LT(standardToF32, kF16Bound);
  EXPECT_LT(gramError,
            (jordan ? kF16JordanRatio : kF16Ratio) * standardError);
  EXPECT_LT(standardError, kF16OverBf16 * bf16Error);
  EXPECT_LT(gramError, kF16OverBf16 * bf16Error);
  // Deterministic, on this device and on another one.
  EXPECT_EQ(run(gramDevice, DType::F16), gram);
  CpuDevice elsewhere(gramOptions);
  EXPECT_EQ(run(elsewhere, DType::F16), gram);
}

INSTANTIATE_TEST_SUITE_P(Shapes, GramNewtonSchulzF16,
                         ::testing::ValuesIn(casesOf(
                             {{160, 480}, {480, 160}, {192, 480}, {128, 384}})),
                         caseName);

/// Where the bf16 Gram form runs: by default (auto, with coefficients
/// whose every a is at most 4) and with gram, on wide and tall matrices
/// from 2:3 on at 5 steps (the run's flops at most 0.92 of the standard
/// form's), never square, never a single step, never with the standard
/// form; on oneDNN (where the CPU has bf16 products) and on BLAS alike.
TEST(GramNewtonSchulzBf16, Choice) {
  CpuDeviceOptions automatic, gram, standard, blas, blasGram;
  automatic.nsForm = NsForm::Auto;
  gram.nsForm = NsForm::Gram;
  standard.nsForm = NsForm::Standard;
  blas.oneDnn = false;
  blasGram.oneDnn = false;
  blasGram.nsForm = NsForm::Gram;
  auto uses = [](const CpuDeviceOptions &o, int64_t rows, int64_t cols,
                 int64_t steps) {
    return usesWithJordan(o, DType::BF16, rows, cols, steps);
  };
  EXPECT_FALSE(uses(standard, 768, 3072, 5));
  // automatic and gram run on oneDNN where the CPU has bf16 products, else
  // on BLAS as blas and blasGram do.
  for (const CpuDeviceOptions &on : {automatic, gram, blas, blasGram}) {
    EXPECT_TRUE(uses(on, 768, 3072, 5));
    EXPECT_TRUE(uses(on, 3072, 768, 5));
    EXPECT_TRUE(uses(on, 768, 2304, 5));
    EXPECT_TRUE(uses(on, 768, 1536, 5));
    EXPECT_TRUE(uses(on, 1024, 1536, 5));
    EXPECT_TRUE(uses(on, 768, 3072, 2));
    EXPECT_FALSE(uses(on, 768, 768, 5));
    EXPECT_FALSE(uses(on, 2048, 2048, 5));
    EXPECT_FALSE(uses(on, 1024, 1280, 5));
    EXPECT_FALSE(uses(on, 768, 3072, 1));
  }
  // Coefficients with an a above 4 (Polar Express's first step, 8.2):
  // auto keeps the standard form; gram runs as asked.
  const std::vector<std::array<double, 3>> polar = *nsPreset("polar_express", 5);
  for (const CpuDeviceOptions *o : {&automatic, &blas})
    EXPECT_FALSE(cpu::usesGramNewtonSchulz(*o, DType::BF16, 768, 3072, polar));
  for (const CpuDeviceOptions *o : {&gram, &blasGram})
    EXPECT_TRUE(cpu::usesGramNewtonSchulz(*o, DType::BF16, 768, 3072, polar));
  // f16 runs the same phases on BLAS with the same model: the same choice
  // as bf16 on every shape.
  for (const CpuDeviceOptions &on : {automatic, gram, standard, blas})
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{768, 3072},
                              {3072, 768},
                              {768, 1536},
                              {1024, 1280},
                              {2048, 2048}})
      EXPECT_EQ(usesWithJordan(on, DType::F16, rows, cols, 5),
                usesWithJordan(on, DType::BF16, rows, cols, 5))
          << rows << "x" << cols;
}

/// Where the f32 Gram form runs: 5 steps from 3:5 on (it does at most 0.8
/// of the standard form's flops there), never on square matrices or a
/// single step; auto takes it where the coefficients keep its accuracy.
TEST(GramNewtonSchulz, Choice) {
  CpuDeviceOptions on, off, automatic;
  on.nsForm = NsForm::Gram;
  off.nsForm = NsForm::Standard;
  automatic.nsForm = NsForm::Auto;
  auto uses = [](const CpuDeviceOptions &o, int64_t rows, int64_t cols,
                 int64_t steps) {
    return usesWithJordan(o, DType::F32, rows, cols, steps);
  };
  EXPECT_TRUE(uses(on, 768, 3072, 5));
  EXPECT_TRUE(uses(on, 3072, 768, 5));
  EXPECT_TRUE(uses(on, 768, 1536, 5));
  EXPECT_TRUE(uses(on, 600, 1000, 5));
  EXPECT_FALSE(uses(on, 600, 990, 5));
  EXPECT_FALSE(uses(on, 768, 768, 5));
  EXPECT_FALSE(uses(on, 768, 3072, 1));
  EXPECT_FALSE(uses(off, 768, 3072, 5));
  // Auto: f32 too, with Jordan's steps (every a <= 4).
  EXPECT_TRUE(uses(automatic, 768, 3072, 5));
  EXPECT_FALSE(uses(automatic, 768, 768, 5));
}

/// The forms' names, as muon-run's --ns-form, muonc's ns_form and
/// MUON_CPU_NS_FORM spell them.
TEST(GramNewtonSchulz, FormNames) {
  for (NsForm f : {NsForm::Auto, NsForm::Standard, NsForm::Gram}) {
    NsForm parsed = f == NsForm::Auto ? NsForm::Gram : NsForm::Auto;
    EXPECT_TRUE(cpu::parseNsForm(cpu::nsFormName(f), parsed));
    EXPECT_EQ(parsed, f);
  }
  NsForm untouched = NsForm::Standard;
  EXPECT_FALSE(cpu::parseNsForm("Gram", untouched));
  EXPECT_FALSE(cpu::parseNsForm("", untouched));
  EXPECT_EQ(untouched, NsForm::Standard);
}

} // namespace
