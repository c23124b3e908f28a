//===- BenchDevice.cpp - A device to measure, with its GEMM rate ----------===//
#include "BenchDevice.h"

#include "muon/Runtime/Backends.h"
#include "muon/Runtime/BuiltBackends.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#ifdef MUON_HAVE_CUDA
#include "muon/Runtime/Cuda/CudaBackend.h"
#endif

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <random>
#include <time.h>

namespace muon::bench {

static bool cpuClock = false;

void useCpuClock(bool cpu) { cpuClock = cpu; }

double clockSeconds() {
  if (cpuClock) {
    timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  }
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

namespace {

class CpuBench final : public BenchDevice {
public:
  CpuBench(std::unique_ptr<runtime::Device> cpu, int threads)
      : threads(threads), cpu(std::move(cpu)) {}
  runtime::Device &device() override { return *cpu; }
  std::string describe() const override {
    return "cpu (" + std::string(runtime::cpu::blasName()) + ", " +
           std::to_string(threads) + " thread" +
           (threads == 1 ? "" : "s") + ")";
  }
  std::string note() const override {
    return runtime::cpu::blasKernelAdvice();
  }
  std::string
  lastNsForm(int64_t rows, int64_t cols, runtime::DType dtype,
             const std::vector<std::array<double, 3>> &abc) const override {
    // The device's options are the defaults (the form from
    // MUON_CPU_NS_FORM), and its choice is a function of them.
    return runtime::cpu::usesGramNewtonSchulz(
               runtime::cpu::CpuDeviceOptions(), dtype, rows, cols, abc)
               ? "gram"
               : "standard";
  }
  std::string productRates() const override {
    const runtime::cpu::NsPrecisionFacts &facts =
        runtime::cpu::processNsPrecisionFacts();
    return facts.bf16Products && facts.rates.f32 > 0 && facts.rates.bf16 > 0
               ? runtime::cpu::formatProductRates(facts.rates)
               : "";
  }
  std::string
  nsProducts(runtime::DType dtype,
             const std::vector<std::array<double, 3>> &abc) const override {
    return runtime::cpu::describeNewtonSchulz(
        dtype, runtime::cpu::CpuDeviceOptions().nsForm, abc);
  }
  double gemmSeconds(int64_t m, int64_t n, int64_t k, runtime::DType dtype,
                     int repeats) override {
    // bf16: the CPU's bf16 products (oneDNN), which bf16 Newton-Schulz
    // runs where the CPU has them; elsewhere it runs f32 products, and
    // sgemm is its rate.
    const bool bf16 = dtype == runtime::DType::BF16 &&
                      runtime::cpu::cpuHasBf16Products() &&
                      runtime::cpu::oneDnnBuilt();
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> u(-1, 1);
    std::vector<float> a(m * k), b(k * n), c(m * n);
    for (float &x : a)
      x = u(rng);
    for (float &x : b)
      x = u(rng);
    std::vector<uint16_t> a16, b16, c16;
    if (bf16) {
      for (float x : a)
        a16.push_back(runtime::toBf16Bits(x));
      for (float x : b)
        b16.push_back(runtime::toBf16Bits(x));
      c16.resize(m * n);
    }
    std::vector<double> times;
    for (int r = 0; r <= repeats; ++r) {
      const double start = clockSeconds();
      if (bf16) {
        if (!runtime::cpu::bf16Gemm(a16.data(), b16.data(), c16.data(), m, n,
                                    k)
                 .ok())
          return 0;
      } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                    static_cast<int>(m), static_cast<int>(n),
                    static_cast<int>(k), 1.0f, a.data(), static_cast<int>(k),
                    b.data(), static_cast<int>(n), 0.0f, c.data(),
                    static_cast<int>(n));
      }
      double s = clockSeconds() - start;
      if (r > 0) // the first is the warm-up
        times.push_back(s);
    }
    return median(times);
  }

private:
  int threads;
  std::unique_ptr<runtime::Device> cpu;
};

#ifdef MUON_HAVE_CUDA
class CudaBench final : public BenchDevice {
public:
  explicit CudaBench(std::unique_ptr<runtime::Device> gpu)
      : gpu(std::move(gpu)) {}
  runtime::Device &device() override { return *gpu; }
  std::string describe() const override {
    return runtime::cuda::describeDevice(*gpu);
  }
  std::string
  nsProducts(runtime::DType dtype,
             const std::vector<std::array<double, 3>> &abc) const override {
    return runtime::cuda::describeNewtonSchulz(*gpu, dtype, abc);
  }
  std::string lastNsForm(int64_t, int64_t, runtime::DType,
                         const std::vector<std::array<double, 3>> &)
      const override {
    return runtime::cuda::lastNewtonSchulzPath(*gpu).find("Gram form") !=
                   std::string::npos
               ? "gram"
               : "standard";
  }
  double gemmSeconds(int64_t m, int64_t n, int64_t k, runtime::DType dtype,
                     int repeats) override {
    StatusOr<double> s =
        runtime::cuda::gemmSeconds(*gpu, m, n, k, dtype, repeats);
    return s.ok() && *s > 0 ? *s : 0;
  }

private:
  std::unique_ptr<runtime::Device> gpu;
};
#endif

} // namespace

StatusOr<std::unique_ptr<BenchDevice>>
openBenchDevice(const std::string &backend, int blasThreads) {
  runtime::registerBuiltBackends();
  std::unique_ptr<runtime::Device> device;
  if (backend == "cpu") {
    // The BLAS threads are the process's: the device's option sets them.
    MUON_RETURN_IF_ERROR(runtime::createDevice(
        "cpu", {{"blas_threads", std::to_string(blasThreads)}}, device));
    return std::unique_ptr<BenchDevice>(
        std::make_unique<CpuBench>(std::move(device), blasThreads));
  }
#ifdef MUON_HAVE_CUDA
  if (backend == "cuda") {
    StatusOr<int> gpus = runtime::cuda::deviceCount();
    if (!gpus.ok())
      return unavailable("--backend cuda: no usable GPU here (" +
                         gpus.status().message() + ")");
    MUON_RETURN_IF_ERROR(runtime::createDevice("cuda:0", device));
    return std::unique_ptr<BenchDevice>(
        std::make_unique<CudaBench>(std::move(device)));
  }
#else
  if (backend == "cuda")
    return unimplemented(
        "--backend cuda: this muon-bench is built without the CUDA backend");
#endif
  return invalidArgument("unknown --backend '" + backend +
                         "'; expected cpu or cuda");
}

} // namespace muon::bench
