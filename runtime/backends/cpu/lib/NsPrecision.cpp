//===- NsPrecision.cpp - What ns_dtype "auto" is on this CPU --------------===//
#include "muon/Runtime/Cpu/NsPrecision.h"
#include "muon/Runtime/Cpu/CpuDevice.h"

#ifdef MUON_HAVE_ONEDNN
#include "OneDnnNewtonSchulz.h"
#endif

#include <cblas.h>
#ifdef MUON_BLAS_BLIS
#include <blis.h>
#endif

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <sstream>
#include <thread>
#include <time.h>
#include <vector>

namespace muon::runtime::cpu {
namespace {

/// "2.14x" and "224.1 GFLOP/s": the figures a reason quotes.
std::string formatRatio(double ratio) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2fx", ratio);
  return text;
}

std::string formatGflops(double flopsPerSecond) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f GFLOP/s", flopsPerSecond / 1e9);
  return text;
}

/// The CPU time of the calling thread: the time the work itself took,
/// without the time another process held the core.
double threadSeconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

/// BLAS on one thread while in scope (its count is the process's, so the
/// previous one is put back).
class OneBlasThread {
public:
#ifdef MUON_BLAS_BLIS
  OneBlasThread() : saved(static_cast<int>(bli_thread_get_num_threads())) {
    bli_thread_set_num_threads(1);
  }
  ~OneBlasThread() { bli_thread_set_num_threads(saved); }
#else
  OneBlasThread() : saved(openblas_get_num_threads()) {
    openblas_set_num_threads(1);
  }
  ~OneBlasThread() { openblas_set_num_threads(saved); }
#endif
  OneBlasThread(const OneBlasThread &) = delete;
  OneBlasThread &operator=(const OneBlasThread &) = delete;

private:
  int saved;
};

#ifdef MUON_HAVE_ONEDNN
/// Large enough that both products run near their large-matrix rate (the
/// ratio measured here at 256, 384 and 512 is within 2% of the one at
/// 1024 x 1024 and 768 x 3072 x 768), small enough to cost about 1 ms.
constexpr int64_t kProbeSide = 384;
/// Timed runs of each product after a warm-up (oneDNN's JIT); the best one
/// counts, so that a run that shared its core's caches is dropped.
constexpr int kProbeRuns = 5;

/// The probe's body, on the calling thread (a thread of its own).
StatusOr<ProductRates> timeProducts() {
  const int64_t n = kProbeSide;
  // Values in [-1, 1) from a fixed LCG: never zeros, which run faster.
  std::vector<float> a(n * n), b(n * n), c(n * n);
  uint32_t state = 12345;
  for (std::vector<float> *v : {&a, &b})
    for (float &x : *v) {
      state = state * 1664525u + 1013904223u;
      x = static_cast<float>(state >> 8) / 8388608.0f - 1.0f;
    }
  std::vector<uint16_t> a16(n * n), b16(n * n), c16(n * n);
  for (int64_t i = 0; i < n * n; ++i) {
    a16[i] = toBf16Bits(a[i]);
    b16[i] = toBf16Bits(b[i]);
  }
  OneDnnNewtonSchulz products;
  OneBlasThread oneThread;
  const int N = static_cast<int>(n);
  double f32Best = std::numeric_limits<double>::infinity();
  double bf16Best = f32Best;
  for (int run = 0; run <= kProbeRuns; ++run) {
    double start = threadSeconds();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, N, N, N, 1.0f,
                a.data(), N, b.data(), N, 0.0f, c.data(), N);
    const double f32 = threadSeconds() - start;
    start = threadSeconds();
    MUON_RETURN_IF_ERROR(products.gemm(a16.data(), b16.data(), c16.data(), n,
                                       n, n, /*threads=*/1));
    const double bf16 = threadSeconds() - start;
    if (run == 0)
      continue;
    f32Best = std::min(f32Best, f32);
    bf16Best = std::min(bf16Best, bf16);
  }
  const double flops = 2.0 * static_cast<double>(n) * n * n;
  ProductRates rates;
  rates.f32 = f32Best > 0 ? flops / f32Best : 0;
  rates.bf16 = bf16Best > 0 ? flops / bf16Best : 0;
  if (rates.f32 <= 0 || rates.bf16 <= 0)
    return unavailable("the thread CPU clock did not advance");
  return rates;
}
#endif

/// The facts of this process, gathered once.
NsPrecisionFacts gatherFacts() {
  NsPrecisionFacts facts;
  facts.blas = blasKernels();
#ifdef MUON_HAVE_ONEDNN
  const OneDnnCpu cpu = oneDnnCpu();
  facts.isa = "oneDNN " + cpu.version + " on " + cpu.isa;
  facts.bf16Products = cpu.bf16;
#else
  facts.isa = "built without oneDNN (MUON_ONEDNN=OFF)";
#endif
  if (!facts.bf16Products)
    return facts;
  if (const char *given = std::getenv(kProductRatesVariable)) {
    StatusOr<ProductRates> parsed = parseProductRates(given);
    if (parsed.ok()) {
      facts.rates = *parsed;
      facts.ratesSource = std::string("from ") + kProductRatesVariable;
      return facts;
    }
    // The tools refuse a bad value before they get here (muon-run names
    // it); a library measures instead and says so.
    facts.ratesSource = parsed.status().message() + "; ";
  }
  StatusOr<ProductRates> measured = measureProductRates();
  facts.rates = measured.ok() ? *measured : ProductRates();
  facts.ratesSource += measured.ok()
                           ? "measured on one thread"
                           : "not measured: " + measured.status().message();
  return facts;
}

} // namespace

NsPrecisionChoice chooseDefaultNsPrecision(const NsPrecisionFacts &facts) {
  NsPrecisionChoice choice;
  if (!facts.bf16Products) {
    choice.reason = "f32: no bf16 products here (" + facts.isa +
                    "), so bf16 would run f32 products rounded to bf16, "
                    "never faster";
    return choice;
  }
  const ProductRates &r = facts.rates;
  if (!(r.f32 > 0) || !(r.bf16 > 0)) {
    choice.reason = "f32: the products' rates are unknown (" +
                    facts.ratesSource + ")";
    return choice;
  }
  const double speedup = r.bf16 / r.f32;
  const std::string rates = "bf16 " + formatGflops(r.bf16) + " on " +
                            facts.isa + ", f32 " + formatGflops(r.f32) +
                            " on " + facts.blas + ", " + facts.ratesSource;
  if (speedup >= kBf16MinSpeedup) {
    choice.dtype = DType::BF16;
    choice.reason = "bf16: its products run at " + formatRatio(speedup) +
                    " f32's here (" + rates + "), at least the " +
                    formatRatio(kBf16MinSpeedup) +
                    " at which bf16 Newton-Schulz is the faster";
  } else {
    choice.reason = "f32: bf16 products run at " + formatRatio(speedup) +
                    " f32's here (" + rates + "), under the " +
                    formatRatio(kBf16MinSpeedup) +
                    " bf16 Newton-Schulz needs to be the faster";
  }
  return choice;
}

StatusOr<ProductRates> parseProductRates(const std::string &text) {
  auto bad = [&] {
    return invalidArgument(std::string(kProductRatesVariable) + " '" + text +
                           "': expected f32=RATE,bf16=RATE (flop/s, "
                           "positive, e.g. f32=1.05e11,bf16=2.24e11)");
  };
  ProductRates rates;
  std::stringstream in(text);
  std::string item;
  bool haveF32 = false, haveBf16 = false;
  while (std::getline(in, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      return bad();
    const std::string name = item.substr(0, eq), value = item.substr(eq + 1);
    char *end = nullptr;
    const double rate = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !std::isfinite(rate) || rate <= 0)
      return bad();
    bool &seen = name == "f32" ? haveF32 : haveBf16;
    if ((name != "f32" && name != "bf16") || seen)
      return bad();
    seen = true;
    (name == "f32" ? rates.f32 : rates.bf16) = rate;
  }
  if (!haveF32 || !haveBf16)
    return bad();
  return rates;
}

std::string formatProductRates(const ProductRates &rates) {
  char text[96];
  std::snprintf(text, sizeof(text), "f32=%.17g,bf16=%.17g", rates.f32,
                rates.bf16);
  return text;
}

StatusOr<ProductRates> measureProductRates() {
#ifdef MUON_HAVE_ONEDNN
  if (!oneDnnCpu().bf16)
    return unimplemented("oneDNN runs " + oneDnnCpu().isa +
                         ": no bf16 products");
  // A thread of its own: its CPU clock is the probe's alone, and the
  // OpenMP count oneDNN's product runs on is set for it only.
  StatusOr<ProductRates> rates = unavailable("the probe did not run");
  std::thread probe([&] { rates = timeProducts(); });
  probe.join();
  return rates;
#else
  return unimplemented(
      "built without oneDNN (MUON_ONEDNN=OFF): no bf16 products");
#endif
}

const NsPrecisionFacts &processNsPrecisionFacts() {
  static const NsPrecisionFacts facts = gatherFacts();
  return facts;
}

const NsPrecisionChoice &processDefaultNsPrecision() {
  static const NsPrecisionChoice choice =
      chooseDefaultNsPrecision(processNsPrecisionFacts());
  return choice;
}

void shareProductRates() {
  const NsPrecisionFacts &facts = processNsPrecisionFacts();
  if (!facts.bf16Products || !(facts.rates.f32 > 0) ||
      !(facts.rates.bf16 > 0) || std::getenv(kProductRatesVariable))
    return;
  setenv(kProductRatesVariable, formatProductRates(facts.rates).c_str(), 1);
}

} // namespace muon::runtime::cpu
