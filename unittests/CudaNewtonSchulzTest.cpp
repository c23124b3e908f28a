//===- CudaNewtonSchulzTest.cpp - The GPU's Newton-Schulz on the fake GPU -===//
//
// CudaDevice's Newton-Schulz, both forms (muon/Runtime/NsForm.h), on the
// fake GPU, against an emulation of the fake's own arithmetic written here
// from the algorithm alone: every product summed in order in f32 with its
// alpha and beta epilogue and one rounding to its result's type, every
// kernel's expression, the norm's reduction tree. The GPU's results must be
// those bits exactly, whatever path its products take (plain GEMMs, lower
// tiles batched per shape or grouped, a batch split into parts), for every
// matrix of a batch: a wrong offset, stride, buffer or phase changes bits.
// Against the CPU backend's Gram form (OneDNN's and OpenBLAS's summation
// orders) the distance is a tolerance, measured and bounded here. A batch is
// one strided batched call per product, however many matrices it holds.
//
//===----------------------------------------------------------------------===//
#include "CudaDevice.h"
#include "FakeGpu/FakeGpu.h"
#include "KernelBodies.h"

#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/Cuda/CudaBackend.h"
#include "muon/Runtime/DType.h"
#include "muon/Runtime/NsForm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace muon;
using namespace muon::runtime;
namespace fake = muon::fakegpu;

namespace {

using Coefficients = std::vector<std::array<double, 3>>;
const Coefficients kJordan(5, {3.4445, -4.775, 2.0315});
// Polar Express's first steps: a > 4, which auto keeps standard.
const Coefficients kLargeA = {{8.2872, -23.5959, 17.3004},
                              {4.1071, -2.9478, 0.5448},
                              {3.9487, -2.9089, 0.5518},
                              {3.3184, -2.4885, 0.5100},
                              {2.3007, -1.6689, 0.4188}};

/// The fake GPU's arithmetic, from the algorithm (not from the runner's
/// code): row-major rows x cols X, m x m matrices indexed (i, j).
class Emulation {
public:
  Emulation(int64_t rows, int64_t cols, DType precision)
      : rows(rows), cols(cols), m(std::min(rows, cols)), precision(precision),
        bf16(precision == DType::BF16), tall(rows > cols) {}

  /// Newton-Schulz on one matrix, as CudaDevice runs it in `gram` form.
  std::vector<float> run(std::vector<float> x, const Coefficients &abc,
                         float eps, bool gram) const {
    normalize(x, eps);
    const int64_t steps = static_cast<int64_t>(abc.size());
    if (!gram) {
      for (const auto &k : abc)
        x = standardStep(x, k);
      return x;
    }
    size_t at = 0;
    for (int64_t length : gramPhases(precision, steps)) {
      x = length == 1 && roundsToHalf(precision)
              ? standardStep(x, abc[at])
              : gramPhase(x, &abc[at], length);
      at += static_cast<size_t>(length);
    }
    return x;
  }

private:
  using Square = std::vector<float>; // (i, j) at i + j * m

  float round(float v) const { return roundTo(precision, v); }
  float x(const std::vector<float> &X, int64_t r, int64_t c) const {
    return X[r * cols + c];
  }

  /// The norm as the sum-of-squares kernels reduce it: parts of the
  /// matrix, 256 strided partial sums per part, a halving tree, the parts
  /// added in order. bf16 rounds the input and the norm first; f16 rounds
  /// only the quotient.
  void normalize(std::vector<float> &X, float eps) const {
    const int64_t n = rows * cols;
    const int parts = cuda::kernels::sumSquaresParts(n);
    const int64_t chunk = (n + parts - 1) / parts;
    double total = 0;
    for (int p = 0; p < parts; ++p) {
      const int64_t begin = p * chunk, end = std::min(n, begin + chunk);
      std::vector<double> sums(256, 0.0);
      for (int t = 0; t < 256; ++t)
        for (int64_t i = begin + t; i < end; i += 256) {
          const float v = bf16 ? roundToBf16(X[i]) : X[i];
          sums[t] += static_cast<double>(v) * static_cast<double>(v);
        }
      for (int half = 128; half > 0; half /= 2)
        for (int t = 0; t < half; ++t)
          sums[t] += sums[t + half];
      total += sums[0];
    }
    float norm = static_cast<float>(std::sqrt(total));
    if (bf16)
      norm = roundToBf16(norm);
    norm = norm < eps ? eps : norm;
    for (float &v : X)
      v = round((bf16 ? roundToBf16(v) : v) / norm);
  }

  /// R = X X^T (wide) or X^T X (tall), summed along X's long side.
  Square gramOf(const std::vector<float> &X) const {
    const int64_t k = std::max(rows, cols);
    Square r(m * m);
    for (int64_t j = 0; j < m; ++j)
      for (int64_t i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (int64_t l = 0; l < k; ++l)
          acc += tall ? x(X, l, i) * x(X, l, j) : x(X, i, l) * x(X, j, l);
        r[i + j * m] = round(acc);
      }
    return r;
  }

  /// c = alpha a b + beta c, the result in f32 (`f32Result`) or rounded.
  void product(float alpha, const Square &a, const Square &b, float beta,
               Square &c, bool f32Result) const {
    Square out(m * m);
    for (int64_t j = 0; j < m; ++j)
      for (int64_t i = 0; i < m; ++i) {
        float acc = 0.0f;
        for (int64_t l = 0; l < m; ++l)
          acc += a[i + l * m] * b[l + j * m];
        float value = alpha * acc;
        if (beta != 0.0f)
          value = value + beta * c[i + j * m];
        out[i + j * m] = f32Result ? value : round(value);
      }
    c = out;
  }

  void mirror(Square &s) const {
    for (int64_t c = 0; c < m; ++c)
      for (int64_t r = 0; r < c; ++r)
        s[r + c * m] = s[c + r * m];
  }

  /// X' = alpha P X (wide) or X P (tall) + beta X, P read as the GPU's
  /// column-major buffer.
  std::vector<float> update(const Square &p, const std::vector<float> &X,
                            float beta) const {
    std::vector<float> out(X.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        float acc = 0.0f;
        if (tall)
          for (int64_t l = 0; l < m; ++l)
            acc += p[c + l * m] * x(X, r, l);
        else
          for (int64_t l = 0; l < m; ++l)
            acc += x(X, l, c) * p[l + r * m];
        float value = 1.0f * acc;
        if (beta != 0.0f)
          value = value + beta * x(X, r, c);
        out[r * cols + c] = round(value);
      }
    return out;
  }

  std::vector<float> standardStep(const std::vector<float> &X,
                                  const std::array<double, 3> &k) const {
    const float a = static_cast<float>(k[0]), b = static_cast<float>(k[1]),
                c = static_cast<float>(k[2]);
    Square A = gramOf(X), B = A;
    product(c, A, A, b, B, false);
    return update(B, X, a);
  }

  std::vector<float> gramPhase(const std::vector<float> &X,
                               const std::array<double, 3> *steps,
                               int64_t length) const {
    Square R = gramOf(X);
    mirror(R);
    Square Q, H;
    for (int64_t s = 0; s < length; ++s) {
      const float a = static_cast<float>(steps[s][0]),
                  b = static_cast<float>(steps[s][1]),
                  c = static_cast<float>(steps[s][2]);
      Square F(m * m);
      for (int64_t j = 0; j < m; ++j)
        for (int64_t i = 0; i < m; ++i)
          F[i + j * m] = b * R[i + j * m] + (i == j ? a : 0.0f);
      product(c, R, R, 1.0f, F, /*f32Result=*/true);
      mirror(F);
      H = F;
      for (float &v : H)
        v = round(v);
      if (s == 0) {
        Q = H;
      } else {
        Square T(m * m);
        product(1.0f, H, Q, 0.0f, T, false);
        mirror(T);
        Q = T;
      }
      if (s + 1 < length) {
        Square T(m * m);
        product(1.0f, H, R, 0.0f, T, false);
        mirror(T);
        Square next(m * m);
        product(1.0f, H, T, 0.0f, next, false);
        mirror(next);
        R = next;
      }
    }
    return update(Q, X, 0.0f);
  }

  int64_t rows, cols, m;
  DType precision;
  bool bf16, tall;
};

std::vector<float> gaussian(int64_t n, std::mt19937 &rng) {
  std::normal_distribution<float> normal;
  std::vector<float> v(static_cast<size_t>(n));
  for (float &x : v)
    x = normal(rng);
  return v;
}

/// Sets the backend's product knobs for the devices made in its scope.
class Knobs {
public:
  Knobs(const char *symmetricMin, const char *tile, const char *grouped) {
    set("MUON_CUDA_SYMMETRIC_MIN", symmetricMin);
    set("MUON_CUDA_SYMMETRIC_TILE", tile);
    set("MUON_CUDA_GROUPED_GEMM", grouped);
  }
  ~Knobs() {
    unsetenv("MUON_CUDA_SYMMETRIC_MIN");
    unsetenv("MUON_CUDA_SYMMETRIC_TILE");
    unsetenv("MUON_CUDA_GROUPED_GEMM");
  }

private:
  static void set(const char *name, const char *value) {
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
};

std::unique_ptr<Device> gpuWithForm(NsForm form) {
  cuda::DeviceOptions options;
  options.nsForm = form;
  StatusOr<std::unique_ptr<Device>> gpu = cuda::createDevice(0, options);
  EXPECT_TRUE(gpu.ok()) << gpu.status().text();
  return gpu.ok() ? std::move(gpu).value() : nullptr;
}

/// `x` (count matrices) through the GPU's Newton-Schulz; the path it took.
std::vector<float> onGpu(Device &gpu, const std::vector<float> &x,
                         int64_t count, int64_t rows, int64_t cols,
                         const Coefficients &abc, DType precision,
                         std::string *path = nullptr) {
  DeviceBuffer buffer(gpu, static_cast<int64_t>(x.size() * 4));
  EXPECT_TRUE(buffer.ok());
  gpu.copyToDevice(buffer.data(), x.data(), buffer.size());
  gpu.newtonSchulz(buffer.floats(), count, rows, cols, abc, 1e-7, precision);
  std::vector<float> out(x.size());
  gpu.copyToHost(out.data(), buffer.data(), buffer.size());
  EXPECT_TRUE(gpu.takeError().ok());
  if (path)
    *path = static_cast<cuda::CudaDevice &>(gpu).lastNewtonSchulzPath();
  return out;
}

/// The emulation of every matrix of the batch, one after another.
std::vector<float> emulated(const std::vector<float> &x, int64_t count,
                            int64_t rows, int64_t cols,
                            const Coefficients &abc, DType precision,
                            bool gram) {
  Emulation e(rows, cols, precision);
  std::vector<float> out;
  for (int64_t k = 0; k < count; ++k) {
    std::vector<float> one(x.begin() + k * rows * cols,
                           x.begin() + (k + 1) * rows * cols);
    std::vector<float> done = e.run(one, abc, 1e-7f, gram);
    out.insert(out.end(), done.begin(), done.end());
  }
  return out;
}

/// The first element where two results differ, for the failure message.
std::string firstDifference(const std::vector<float> &got,
                            const std::vector<float> &want,
                            int64_t elements) {
  for (size_t i = 0; i < want.size(); ++i)
    if (std::memcmp(&got[i], &want[i], 4) != 0)
      return "matrix " + std::to_string(i / elements) + " element " +
             std::to_string(i % elements) + ": gpu " +
             std::to_string(got[i]) + ", emulation " +
             std::to_string(want[i]);
  return "none";
}

double relativeDifference(const std::vector<float> &got,
                          const std::vector<float> &want) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) *
            (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return std::sqrt(diff / norm);
}

class CudaNewtonSchulzTest : public ::testing::Test {
protected:
  void SetUp() override {
    fake::reset();
    fake::setGroupedSupport(fake::GroupedSupport::Documented);
  }
  void TearDown() override {
    fake::Counters c = fake::counters();
    EXPECT_EQ(c.misuses, 0) << c.lastMisuse;
    EXPECT_EQ(c.liveAllocations, 0);
    fake::reset();
  }
};

struct Shape {
  int64_t count, rows, cols;
};

// Wide 1:3 and 1:4.5, tall 4:1, wide 1:28 (the norm in three parts), a
// single row: each takes the Gram form where asked.
const Shape kShapes[] = {
    {3, 24, 72}, {2, 16, 72}, {2, 132, 33}, {1, 36, 1000}, {3, 1, 40}};

struct PathCase {
  const char *label, *symmetricMin, *tile, *grouped;
  fake::GroupedSupport support;
};
const PathCase kPaths[] = {
    {"plain GEMMs", "1000000", nullptr, nullptr,
     fake::GroupedSupport::Documented},
    {"tiles of 8, batched per tile shape", "0", "8", "0",
     fake::GroupedSupport::Documented},
    {"tiles of 16, grouped", "0", "16", "1", fake::GroupedSupport::All},
};

/// Bit for bit against the emulation, in both forms, every product path,
/// f32, bf16 and f16, each matrix of a batch.
TEST_F(CudaNewtonSchulzTest, BothFormsMatchTheFakesArithmeticBitForBit) {
  std::mt19937 rng(38);
  for (const PathCase &p : kPaths) {
    Knobs knobs(p.symmetricMin, p.tile, p.grouped);
    fake::setGroupedSupport(p.support);
    for (NsForm form : {NsForm::Standard, NsForm::Gram}) {
      std::unique_ptr<Device> gpu = gpuWithForm(form);
      ASSERT_TRUE(gpu);
      for (const Shape &s : kShapes)
        for (DType precision : {DType::F32, DType::BF16, DType::F16}) {
          const std::vector<float> x = gaussian(s.count * s.rows * s.cols, rng);
          std::string path;
          const int64_t kernelsBefore =
              fake::counters().kernels["polynomialBaseKernel"];
          std::vector<float> got =
              onGpu(*gpu, x, s.count, s.rows, s.cols, kJordan, precision,
                    &path);
          const bool gram = form == NsForm::Gram;
          EXPECT_EQ(path.find("Gram form") != std::string::npos, gram)
              << path;
          EXPECT_EQ(fake::counters().kernels["polynomialBaseKernel"] >
                        kernelsBefore,
                    gram);
          std::vector<float> want = emulated(x, s.count, s.rows, s.cols,
                                             kJordan, precision, gram);
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
              << p.label << ", " << nsFormName(form) << ", "
              << dtypeName(precision) << ", " << s.count << " x " << s.rows
              << "x" << s.cols << " [" << path << "]: first difference at "
              << firstDifference(got, want, s.rows * s.cols);
        }
    }
  }
}

/// A batch too large for the workspace runs in parts with the same bits.
TEST_F(CudaNewtonSchulzTest, GramFormInPartsKeepsItsBits) {
  const int64_t count = 6, rows = 20, cols = 80;
  std::mt19937 rng(5);
  const std::vector<float> x = gaussian(count * rows * cols, rng);
  std::unique_ptr<Device> gpu = gpuWithForm(NsForm::Gram);
  ASSERT_TRUE(gpu);
  DeviceBuffer buffer(*gpu, count * rows * cols * 4);
  gpu->copyToDevice(buffer.data(), x.data(), buffer.size());
  // Room for about two matrices' workspace (bf16: X twice, five m x m,
  // one f32 m x m).
  const int64_t perMatrix = (2 * rows * cols + 5 * rows * rows) * 2 +
                            rows * rows * 4 + 1024;
  fake::setMemoryLimit(fake::counters().deviceBytes + 2 * perMatrix);
  const int64_t before = fake::counters().kernels["sumSquaresKernel"];
  gpu->newtonSchulz(buffer.floats(), count, rows, cols, kJordan, 1e-7,
                    DType::BF16);
  std::vector<float> got(x.size());
  gpu->copyToHost(got.data(), buffer.data(), buffer.size());
  fake::setMemoryLimit(int64_t(80) << 30);
  EXPECT_GT(fake::counters().kernels["sumSquaresKernel"] - before, 1);
  const std::vector<float> want =
      emulated(x, count, rows, cols, kJordan, DType::BF16, true);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4))
      << firstDifference(got, want, rows * cols);
}

/// Which form runs: standard never takes the Gram form, auto takes it with
/// Jordan's coefficients and not with a > 4, gram whatever the
/// coefficients; squares never (it does not pay); the environment picks
/// the form of a device made without options.
TEST_F(CudaNewtonSchulzTest, FormsAreChosenAsOnTheCpu) {
  std::mt19937 rng(7);
  const std::vector<float> wide = gaussian(24 * 96, rng);
  const std::vector<float> square = gaussian(32 * 32, rng);
  struct Case {
    NsForm form;
    const Coefficients *abc;
    bool wideGram;
  } cases[] = {{NsForm::Standard, &kJordan, false},
               {NsForm::Auto, &kJordan, true},
               {NsForm::Auto, &kLargeA, false},
               {NsForm::Gram, &kLargeA, true}};
  for (const Case &c : cases) {
    std::unique_ptr<Device> gpu = gpuWithForm(c.form);
    ASSERT_TRUE(gpu);
    for (DType precision : {DType::F32, DType::BF16, DType::F16}) {
      std::string path;
      onGpu(*gpu, wide, 1, 24, 96, *c.abc, precision, &path);
      EXPECT_EQ(path.find("Gram") != std::string::npos, c.wideGram)
          << nsFormName(c.form) << " " << dtypeName(precision) << ": "
          << path;
      onGpu(*gpu, square, 1, 32, 32, *c.abc, precision, &path);
      EXPECT_EQ(path.find("Gram"), std::string::npos) << path;
      // The CPU decides the same for these shapes, in bf16 on oneDNN and
      // on BLAS alike, and in f16.
      cpu::CpuDeviceOptions cpuOptions;
      cpuOptions.nsForm = c.form;
      EXPECT_EQ(cpu::usesGramNewtonSchulz(cpuOptions, precision, 24, 96,
                                          *c.abc),
                c.wideGram);
    }
  }
  setenv(cuda::kNsFormVariable, "standard", 1);
  std::string path;
  StatusOr<std::unique_ptr<Device>> fromEnv = cuda::createDevice(0);
  ASSERT_TRUE(fromEnv.ok()) << fromEnv.status().text();
  onGpu(**fromEnv, wide, 1, 24, 96, kJordan, DType::BF16, &path);
  EXPECT_EQ(path.find("Gram"), std::string::npos) << path;
  setenv(cuda::kNsFormVariable, "fastest", 1);
  StatusOr<std::unique_ptr<Device>> refused = cuda::createDevice(0);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::InvalidArgument);
  EXPECT_NE(refused.status().message().find(
                "MUON_CUDA_NS_FORM must be auto, standard or gram"),
            std::string::npos)
      << refused.status().text();
  unsetenv(cuda::kNsFormVariable);
}

/// The GPU's Gram form against the CPU backend's (its own summation
/// orders): f32 within 1e-5, bf16 within 2e-2 and f16 within 5e-3
/// relative, the limits of muon-cuda-check; the measured distances are
/// printed.
TEST_F(CudaNewtonSchulzTest, GramFormAgreesWithTheCpusGramForm) {
  std::mt19937 rng(11);
  cpu::CpuDeviceOptions cpuOptions;
  cpuOptions.nsForm = NsForm::Gram;
  cpu::CpuDevice cpu(cpuOptions);
  std::unique_ptr<Device> gpu = gpuWithForm(NsForm::Gram);
  ASSERT_TRUE(gpu);
  const Shape shapes[] = {{2, 48, 192}, {2, 192, 48}, {1, 64, 256}};
  for (const Shape &s : shapes)
    for (DType precision : {DType::F32, DType::BF16, DType::F16}) {
      if (!cpu::usesGramNewtonSchulz(cpuOptions, precision, s.rows, s.cols,
                                     kJordan))
        continue; // bf16 on a CPU without bf16 products: standard only
      const std::vector<float> x = gaussian(s.count * s.rows * s.cols, rng);
      std::vector<float> want = x;
      cpu.newtonSchulz(want.data(), s.count, s.rows, s.cols, kJordan, 1e-7,
                       precision);
      std::vector<float> got =
          onGpu(*gpu, x, s.count, s.rows, s.cols, kJordan, precision);
      const double relative = relativeDifference(got, want);
      std::printf("[ measured ] Gram form, %s %lld x %lldx%lld: gpu (fake) "
                  "against cpu %.2e\n",
                  dtypeName(precision), static_cast<long long>(s.count),
                  static_cast<long long>(s.rows),
                  static_cast<long long>(s.cols), relative);
      EXPECT_LT(relative, precision == DType::BF16   ? 2e-2
                          : precision == DType::F16 ? 5e-3
                                                    : 1e-5);
    }
}

/// f16 on the GPU against its own f32, in both forms: within 1e-2 (the
/// CPU's bound, GramNewtonSchulzTest's kF16Bound) and below 0.35 of bf16's
/// distance from f32 on the same input (f16 keeps 3 more bits: products
/// that rounded as bf16 would fail it). Measured distances are printed.
TEST_F(CudaNewtonSchulzTest, F16IsCloserToF32ThanBf16) {
  std::mt19937 rng(16);
  for (NsForm form : {NsForm::Standard, NsForm::Gram}) {
    std::unique_ptr<Device> gpu = gpuWithForm(form);
    ASSERT_TRUE(gpu);
    for (const Shape &s : {Shape{2, 48, 192}, Shape{2, 192, 48},
                           Shape{1, 64, 64}}) {
      const std::vector<float> x = gaussian(s.count * s.rows * s.cols, rng);
      const std::vector<float> f32 =
          onGpu(*gpu, x, s.count, s.rows, s.cols, kJordan, DType::F32);
      const std::vector<float> f16 =
          onGpu(*gpu, x, s.count, s.rows, s.cols, kJordan, DType::F16);
      const std::vector<float> bf16 =
          onGpu(*gpu, x, s.count, s.rows, s.cols, kJordan, DType::BF16);
      const double f16Distance = relativeDifference(f16, f32);
      const double bf16Distance = relativeDifference(bf16, f32);
      std::printf("[ measured ] %s form %lld x %lldx%lld: f16 against f32 "
                  "%.2e, bf16 against f32 %.2e\n",
                  nsFormName(form), static_cast<long long>(s.count),
                  static_cast<long long>(s.rows),
                  static_cast<long long>(s.cols), f16Distance, bf16Distance);
      EXPECT_LT(f16Distance, 1e-2);
      EXPECT_LT(f16Distance, 0.35 * bf16Distance);
      for (float v : f16)
        ASSERT_EQ(v, roundToF16(v));
    }
  }
}

/// A batch of same-shape matrices (one NsBatch: the layers' wq, ...) is one
/// strided batched call per product, not one per matrix, and each matrix
/// comes out as it would alone.
TEST_F(CudaNewtonSchulzTest, ABatchIsOneCallPerProduct) {
  std::mt19937 rng(13);
  const int64_t rows = 16, cols = 64;
  for (NsForm form : {NsForm::Standard, NsForm::Gram}) {
    std::unique_ptr<Device> gpu = gpuWithForm(form);
    ASSERT_TRUE(gpu);
    std::vector<int64_t> calls;
    std::vector<float> batch = gaussian(8 * rows * cols, rng), alone;
    for (int64_t count : {int64_t(1), int64_t(8)}) {
      const int64_t before = fake::counters().stridedCalls;
      std::vector<float> got =
          onGpu(*gpu, std::vector<float>(batch.begin(),
                                         batch.begin() + count * rows * cols),
                count, rows, cols, kJordan, DType::BF16);
      calls.push_back(fake::counters().stridedCalls - before);
      if (count == 1)
        alone = got;
      else
        EXPECT_EQ(0, std::memcmp(got.data(), alone.data(), alone.size() * 4))
            << "matrix 0 of the batch differs from the same matrix alone";
    }
    EXPECT_EQ(calls[0], calls[1]) << nsFormName(form);
    // Standard: 3 products a step. Gram (bf16): R, R R, H R, H T, R R,
    // H Q, Q X per 2-step phase, then a standard step.
    EXPECT_EQ(calls[0], form == NsForm::Standard ? 15 : 2 * 7 + 3);
  }
}

} // namespace
