//===- CpuDevice.cpp - The CPU backend's device ---------------------------===//
#include "muon/Runtime/Cpu/CpuDevice.h"

#include "GramNewtonSchulz.h"
#include "MirrorLower.h"
#include "RoundHalf.h"
#include "muon/Runtime/MatrixStep.h"

#ifdef MUON_HAVE_ONEDNN
#include "OneDnnNewtonSchulz.h"
#endif

#include <cblas.h>
#ifdef MUON_BLAS_BLIS
#include <blis.h> // bli_thread_set_num_threads
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <unistd.h>

namespace muon::runtime::cpu {

#ifndef MUON_HAVE_ONEDNN
class OneDnnNewtonSchulz {};
#endif

// f16 always runs on BLAS: oneDNN 2.x, which OneDnnNewtonSchulz.cpp is
// written against, lists no x86 ISA with f16 products (its dnnl_cpu_isa_t
// ends at avx512_core_amx; avx512_core_fp16 came later), and 2.6.3 makes no
// f16 matmul on an AVX512_BF16 CPU at all (docs/runtime.md).
CpuNsKernel chooseNsKernel(DType precision, bool oneDnnBuilt, bool cpuBf16) {
  return precision == DType::BF16 && oneDnnBuilt && cpuBf16
             ? CpuNsKernel::OneDnnBf16
             : CpuNsKernel::Blas;
}

bool oneDnnBuilt() {
#ifdef MUON_HAVE_ONEDNN
  return true;
#else
  return false;
#endif
}

bool cpuHasBf16Products() {
#ifdef MUON_HAVE_ONEDNN
  return oneDnnCpu().bf16;
#else
  return false;
#endif
}

std::string describeNewtonSchulz(DType precision, NsForm form,
                                 const std::vector<std::array<double, 3>> &abc) {
  const std::string blas = blasKernels();
  const bool gram = form == NsForm::Gram ||
                    (form == NsForm::Auto &&
                     GramNewtonSchulz::keepsAccuracy(abc));
  const std::string gramNote =
      gram ? "; Gram form on wide and tall matrices" : "";
  if (chooseNsKernel(precision, oneDnnBuilt(), cpuHasBf16Products()) ==
      CpuNsKernel::OneDnnBf16) {
#ifdef MUON_HAVE_ONEDNN
    OneDnnCpu cpu = oneDnnCpu();
    return "bf16 products, f32 accumulation (oneDNN " + cpu.version + ", " +
           cpu.isa + ")" + gramNote;
#endif
  }
  if (precision == DType::F16)
    return "f32 products rounded to f16 (" + blas +
           "; the CPU backend has no f16 kernel)" + gramNote;
  if (precision != DType::BF16)
    return "f32 products (" + blas + ")" + gramNote;
#ifdef MUON_HAVE_ONEDNN
  return "f32 products rounded to bf16 (" + blas +
         "; this CPU has no bf16 products: oneDNN " + oneDnnCpu().version +
         " runs " + oneDnnCpu().isa + ")" + gramNote;
#else
  return "f32 products rounded to bf16 (" + blas +
         "; built without oneDNN, MUON_ONEDNN=OFF)" + gramNote;
#endif
}

NsForm CpuDeviceOptions::nsFormFromEnvironment() {
  // An unknown value keeps the default; the tools refuse it first
  // (muon-run names the variable and its values).
  const char *value = std::getenv(kNsFormVariable);
  NsForm form = NsForm::Auto;
  if (value)
    parseNsForm(value, form);
  return form;
}

bool usesGramNewtonSchulz(const CpuDeviceOptions &options, DType precision,
                          int64_t rows, int64_t cols,
                          const std::vector<std::array<double, 3>> &abc) {
  const int64_t m = std::min(rows, cols), n = std::max(rows, cols);
  const int64_t steps = static_cast<int64_t>(abc.size());
  // Auto only where the Gram form keeps its precision's accuracy; gram as
  // asked.
  const bool wanted = options.nsForm == NsForm::Gram ||
                      (options.nsForm == NsForm::Auto &&
                       GramNewtonSchulz::keepsAccuracy(abc));
  if (!wanted)
    return false;
#ifdef MUON_HAVE_ONEDNN
  if (chooseNsKernel(precision, oneDnnBuilt() && options.oneDnn,
                     cpuHasBf16Products()) == CpuNsKernel::OneDnnBf16)
    return OneDnnNewtonSchulz::gramPays(m, n, steps, options.bf16Tile);
#endif
  // f32, and bf16 and f16 on f32 BLAS products (GramNewtonSchulz.cpp).
  return GramNewtonSchulz::pays(precision, m, n, steps);
}

CpuDevice::CpuDevice(CpuDeviceOptions options) : options(options) {}
CpuDevice::~CpuDevice() = default;

CpuNsKernel CpuDevice::nsKernel(DType precision) const {
  return chooseNsKernel(precision, oneDnnBuilt() && options.oneDnn,
                        cpuHasBf16Products());
}

NsPrecisionChoice CpuDevice::defaultNsPrecision() const {
  if (options.oneDnn)
    return processDefaultNsPrecision();
  NsPrecisionFacts facts;
  facts.isa = "this device's oneDnn option is off";
  return chooseDefaultNsPrecision(facts);
}

DType CpuDevice::defaultNsDtype() const { return defaultNsPrecision().dtype; }

std::string CpuDevice::defaultNsDtypeReason() const {
  return defaultNsPrecision().reason;
}

Status CpuDevice::takeError() {
  Status first = error;
  error = okStatus();
  return first;
}

void *CpuDevice::allocate(int64_t bytes) {
  void *memory = std::calloc(static_cast<size_t>(bytes), 1);
  return memory;
}

void CpuDevice::release(void *memory) { std::free(memory); }

void CpuDevice::zero(void *memory, int64_t bytes) {
  std::memset(memory, 0, static_cast<size_t>(bytes));
}

void CpuDevice::copyToDevice(void *dst, const void *src, int64_t bytes) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

void CpuDevice::copyToHost(void *dst, const void *src, int64_t bytes) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

bool CpuDevice::allFinite(const void *x, DType type, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(loadAs(x, type, i)))
      return false;
  return true;
}

void CpuDevice::runElementStep(const ElementStep &step,
                               const ElementOperands &operands,
                               const StepScalars &scalars) {
  step.hostLoop(operands, scalars);
}

void CpuDevice::runMatrixStep(const MatrixStep &step, float *x, int64_t rows,
                              int64_t cols, float *state,
                              const StepScalars &scalars) {
  step.hostRun(x, rows, cols, state, scalars);
}

void CpuDevice::copyBox(const BoxCopy &c) {
  for (int64_t r = 0; r < c.rows; ++r) {
    int64_t from = r * c.srcStride, to = r * c.dstStride;
    if (c.srcType == c.dstType && c.through == DType::F32 && !c.accumulate) {
      int64_t width = dtypeBytes(c.srcType);
      std::memcpy(static_cast<char *>(c.dst) + to * width,
                  static_cast<const char *>(c.src) + from * width,
                  static_cast<size_t>(c.cols * width));
      continue;
    }
    for (int64_t col = 0; col < c.cols; ++col) {
      float v = roundTo(c.through, loadAs(c.src, c.srcType, from + col));
      if (c.accumulate)
        static_cast<float *>(c.dst)[to + col] += v;
      else
        storeAs(c.dst, c.dstType, to + col, v);
    }
  }
}

int64_t CpuDevice::newtonSchulz(float *x, int64_t count, int64_t rows,
                                int64_t cols,
                                const std::vector<std::array<double, 3>> &abc,
                                double eps, DType precision) {
  int64_t flops = 0;
#ifdef MUON_HAVE_ONEDNN
  if (nsKernel(precision) == CpuNsKernel::OneDnnBf16) {
    if (!oneDnn) {
      oneDnn = std::make_unique<OneDnnNewtonSchulz>();
      oneDnn->setTile(options.bf16Tile);
    }
    const int64_t m = std::min(rows, cols), n = std::max(rows, cols);
    const bool gram =
        usesGramNewtonSchulz(options, DType::BF16, rows, cols, abc);
    for (int64_t i = 0; i < count; ++i) {
      if (Status ran = oneDnn->run(x + i * rows * cols, rows, cols, abc, eps,
                                   gram);
          !ran.ok() && error.ok())
        error = internalError("cpu Newton-Schulz (bf16): " + ran.message());
      // The contract's dense count (Device.h).
      flops += static_cast<int64_t>(abc.size()) *
               (4 * m * m * n + 2 * m * m * m);
    }
    return flops;
  }
#endif
  for (int64_t i = 0; i < count; ++i)
    flops += newtonSchulzOne(x + i * rows * cols, rows, cols, abc, eps,
                             precision);
  return flops;
}

/// X / max(||X||, eps) in place, the result rounded to `precision`. bf16
/// rounds the input and the norm to bf16 too, as torch.optim.Muon does;
/// f16 normalizes in f32 and rounds once, at the end: f16's range
/// (6e-8 to 65504) would flush small gradients' momentum to zero, or
/// overflow large ones, before the division brings them to the unit
/// ball. The Frobenius norm is accumulated in double: the same on every
/// rank and in the reference, since they all run this code on the same
/// values. The bf16 rounding of the input is fused into the same pass.
static void normalize(float *x, int64_t elements, double eps,
                      DType precision) {
  const bool bf16 = precision == DType::BF16;
  double sumSq = 0;
  for (int64_t i = 0; i < elements; ++i) {
    float v = bf16 ? roundBf16(x[i]) : x[i];
    x[i] = v;
    sumSq += static_cast<double>(v) * v;
  }
  float norm = static_cast<float>(std::sqrt(sumSq));
  if (bf16)
    norm = roundBf16(norm);
  norm = std::max(norm, static_cast<float>(eps));
  for (int64_t i = 0; i < elements; ++i)
    x[i] = x[i] / norm;
  roundValues(x, elements, precision);
}

int64_t CpuDevice::newtonSchulzOne(
    float *x, int64_t rows, int64_t cols,
    const std::vector<std::array<double, 3>> &abc, double eps,
    DType precision) {
  const int64_t elements = rows * cols;
  if (elements == 0)
    return 0;
  normalize(x, elements, eps, precision);
  // The Gram form's phases, then (bf16's and f16's odd last step) standard
  // steps.
  size_t first = 0;
  if (usesGramNewtonSchulz(options, precision, rows, cols, abc)) {
    if (!gramForm)
      gramForm = std::make_unique<GramNewtonSchulz>();
    first = static_cast<size_t>(gramForm->run(x, rows, cols, abc, precision));
  }
  if (first < abc.size())
    standardSteps(x, rows, cols, abc, first, precision);
  // The contract's dense count (Device.h), 4 m^2 n + 2 m^3 a step,
  // whichever form ran.
  const int64_t side = std::min(rows, cols);
  return static_cast<int64_t>(abc.size()) *
         (4 * side * elements + 2 * side * side * side);
}

void CpuDevice::standardSteps(float *x, int64_t rows, int64_t cols,
                              const std::vector<std::array<double, 3>> &abc,
                              size_t first, DType precision) {
  const int64_t elements = rows * cols;
  // X is m x n with m <= n; a tall matrix is the transpose of one, read
  // through the BLAS side and transpose flags (no copies): A = X^T X and
  // X' = X B' instead of A = X X^T and X' = B' X.
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows; // Gram side
  const int64_t n = tall ? rows : cols;
  // Workspace kept across calls (one matrix shape after another reuses it).
  gram.resize(m * m);
  poly.resize(m * m);
  next.resize(elements);
  const int R = static_cast<int>(rows), C = static_cast<int>(cols);
  const int M = static_cast<int>(m), N = static_cast<int>(n);
  float *A = gram.data(), *B = poly.data();
  // The iterate alternates between the caller's buffer and `next`: each
  // iteration's last product writes the other one, so nothing is copied
  // until the end (one copy back after an odd number of iterations).
  float *cur = x, *out = next.data();
  for (size_t step = first; step < abc.size(); ++step) {
    const float a = static_cast<float>(abc[step][0]),
                b = static_cast<float>(abc[step][1]),
                c = static_cast<float>(abc[step][2]);
    // A = X X^T, lower triangle: m^2 n flops (a GEMM would take 2 m^2 n).
    cblas_ssyrk(CblasRowMajor, CblasLower, tall ? CblasTrans : CblasNoTrans,
                M, N, 1.0f, cur, C, 0.0f, A, M);
    // The next ssyrk reads A as a general matrix, and its beta term adds
    // b A from B's lower triangle: A's triangle rounded (bf16, f16),
    // mirrored and copied into B's in one pass.
    mirrorLower(A, m, B, precision);
    // B = c A A^T + b B = c A A + b A (A is symmetric), lower triangle:
    // m^3 flops instead of 2 m^3.
    cblas_ssyrk(CblasRowMajor, CblasLower, CblasNoTrans, M, M, c, A, M, b, B,
                M);
    // X' = a X + B X (a X + X B for tall), 2 m^2 n flops: ssymm reads B's
    // lower triangle, so B needs no mirror pass; with `out` holding X, its
    // beta = a term is the same epilogue as torch's addmm. (Measured:
    // ssymm 1-3% faster than mirroring B and calling sgemm on square
    // shapes, as fast on 1:4. Folding a into B's diagonal saves the copy
    // of X but moves a X into the f32 sum, which in bf16 flips noticeably
    // more roundings against torch's order for no measurable gain;
    // docs/performance.md.)
    for (int64_t i = 0; i < m; ++i)
      roundValues(B + i * m, i + 1, precision);
    std::memcpy(out, cur, static_cast<size_t>(elements) * sizeof(float));
    cblas_ssymm(CblasRowMajor, tall ? CblasRight : CblasLeft, CblasLower, R,
                C, 1.0f, B, M, cur, C, a, out, C);
    roundValues(out, elements, precision);
    std::swap(cur, out);
  }
  if (cur != x)
    std::memcpy(x, cur, static_cast<size_t>(elements) * sizeof(float));
}

void setBlasThreads(int threads) {
#ifdef MUON_BLAS_BLIS
  bli_thread_set_num_threads(threads);
#else
  openblas_set_num_threads(threads);
#endif
#ifdef MUON_HAVE_ONEDNN
  setOneDnnThreads(threads);
#endif
}

#ifdef MUON_BLAS_BLIS
const char *blasName() { return "BLIS"; }
#else
const char *blasName() { return "OpenBLAS"; }
#endif

namespace {
/// OpenBLAS's name of the kernels it runs ("" for BLIS).
std::string blasCore() {
#ifdef MUON_BLAS_BLIS
  return "";
#else
  const char *core = openblas_get_corename();
  return core ? core : "";
#endif
}

/// OpenBLAS's kernels from before AVX: what it falls back to on a CPU it
/// does not know.
bool isGenericCore(const std::string &core) {
  static const char *const generic[] = {
      "Unknown", "Prescott", "Core2",   "Penryn",   "Dunnington",
      "Nehalem", "Atom",     "Katmai",  "Coppermine", "Northwood",
      "Banias",  "Athlon",   "Opteron", "Opteron_SSE3"};
  for (const char *name : generic)
    if (core == name)
      return true;
  return false;
}
} // namespace

std::string blasKernels() {
  const std::string core = blasCore();
  return core.empty() ? blasName()
                      : std::string(blasName()) + ", " + core + " kernels";
}

std::string preferredBlasKernels() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (__builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return "Haswell";
#endif
  return "";
}

std::string blasKernelAdvice() {
  const std::string core = blasCore(), better = preferredBlasKernels();
  if (core.empty() || better.empty() || !isGenericCore(core) ||
      std::getenv("OPENBLAS_CORETYPE"))
    return "";
  return "OpenBLAS runs its generic " + core +
         " kernels on this CPU, which it does not know; its " + better +
         " kernels run here and are about 5x faster in f32: set "
         "OPENBLAS_CORETYPE=" + better + " before the process starts";
}

void restartWithPreferredBlasKernels(char **argv) {
  if (blasKernelAdvice().empty())
    return;
  const std::string kernels = preferredBlasKernels();
  if (setenv("OPENBLAS_CORETYPE", kernels.c_str(), 1) != 0)
    return;
  execv("/proc/self/exe", argv);
  // Still here: run on as before, with the variable taken back.
  unsetenv("OPENBLAS_CORETYPE");
}

Status bf16Gemm(const uint16_t *a, const uint16_t *b, uint16_t *c, int64_t m,
                int64_t n, int64_t k) {
#ifdef MUON_HAVE_ONEDNN
  if (cpuHasBf16Products()) {
    static OneDnnNewtonSchulz products;
    return products.gemm(a, b, c, m, n, k);
  }
  return unimplemented("this CPU has no bf16 products (oneDNN runs " +
                       oneDnnCpu().isa + ")");
#else
  return unimplemented(
      "built without oneDNN (MUON_ONEDNN=OFF): no bf16 products");
#endif
}

} // namespace muon::runtime::cpu
