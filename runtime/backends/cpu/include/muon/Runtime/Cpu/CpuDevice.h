//===- CpuDevice.h - The CPU backend's device -------------------*- C++ -*-===//
//
// Host memory, the registered steps' host loops in place, and
// Newton-Schulz. f32: BLAS (OpenBLAS,
// or BLIS with -DMUON_BLAS=BLIS; symmetric products `cblas_ssyrk` and
// `cblas_ssymm`). bf16: where oneDNN is built in (MUON_ONEDNN) and the CPU
// has bf16 dot products (AVX512_BF16, AMX), oneDNN matmuls with bf16
// operands and f32 accumulation over the Gram matrix's lower block columns
// (OneDnnNewtonSchulz.cpp); elsewhere the f32 BLAS products, each result
// rounded to bf16. f16: the f32 BLAS products, each result rounded to f16
// (the input normalized in f32 first). ns_dtype "auto" is the precision
// whose products run faster here (NsPrecision.h; never f16). Wide and tall
// matrices can run in the Gram form (NsForm, muon/Runtime/NsForm.h): by
// default where the coefficients keep its accuracy (bf16 on oneDNN, f32,
// bf16 and f16 in GramNewtonSchulz.h). Bit-exact across ranks when every
// process runs with the same thread count (setBlasThreads) on the same
// kind of CPU.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CPU_CPUDEVICE_H
#define MUON_RUNTIME_CPU_CPUDEVICE_H

#include "muon/Runtime/Device.h"
#include "muon/Runtime/NsForm.h"
#include "muon/Runtime/Cpu/NsPrecision.h"

#include <memory>
#include <string>

namespace muon::runtime::cpu {

class GramNewtonSchulz;
class OneDnnNewtonSchulz;

/// How Newton-Schulz runs its products on the CPU.
enum class CpuNsKernel {
  /// BLAS f32 products (for bf16 and f16, every product's result rounded to
  /// that type).
  Blas,
  /// oneDNN bf16 products with f32 accumulation.
  OneDnnBf16,
};

/// The choice for `precision`, given whether oneDNN is built in and whether
/// the CPU has bf16 dot products: bf16 runs on oneDNN where both hold, f32
/// and f16 always on BLAS. (What ns_dtype "auto" is: NsPrecision.h.)
CpuNsKernel chooseNsKernel(DType precision, bool oneDnnBuilt, bool cpuBf16);

/// Whether this build has oneDNN, and whether this CPU has bf16 dot
/// products as oneDNN sees it (DNNL_MAX_CPU_ISA=AVX512_CORE hides them).
bool oneDnnBuilt();
bool cpuHasBf16Products();

/// The form Newton-Schulz's steps run in (muon/Runtime/NsForm.h, shared
/// with the GPU). On the CPU, Auto runs bf16 in 2-step phases (as accurate
/// as the standard form; on oneDNN, else on BLAS's f32 products rounded to
/// bf16) and f32 in the phases of
/// GramNewtonSchulz.h (about twice f32's rounding error, far below bf16's;
/// within 1e-6 of torch.optim.Muon's f32 after 10 steps); Standard runs
/// every step as torch.optim.Muon does (in bf16, torch's bits on square and
/// wide matrices); Gram runs the Gram form wherever it pays.
using runtime::NsForm;
using runtime::nsFormName;
using runtime::parseNsForm;

/// What Newton-Schulz in `precision` with the steps `abc` runs on here, for
/// summaries: "bf16 products, f32 accumulation (oneDNN 2.6.3,
/// avx512_core_bf16); Gram form on wide and tall matrices", "f32 products
/// (OpenBLAS)", ... With no steps given, as for Jordan's coefficients.
std::string
describeNewtonSchulz(DType precision, NsForm form = NsForm::Auto,
                     const std::vector<std::array<double, 3>> &abc = {});

/// Settings of a CpuDevice (tests and measurements change them).
struct CpuDeviceOptions {
  /// Run bf16 on oneDNN where this process can (false: always BLAS).
  bool oneDnn = true;
  /// Width of the Gram matrix's block columns on oneDNN.
  int64_t bf16Tile = 64;
  /// The form of Newton-Schulz's steps. Default from the environment,
  /// MUON_CPU_NS_FORM (kNsFormVariable), else Auto.
  NsForm nsForm = nsFormFromEnvironment();

  static NsForm nsFormFromEnvironment();
};

/// The environment variable that picks the CPU's Newton-Schulz form for
/// every CpuDevice made with default options: "auto" (or unset),
/// "standard" or "gram" (muon-run's --ns-form sets it for its ranks).
inline constexpr const char *kNsFormVariable = "MUON_CPU_NS_FORM";

/// Whether Newton-Schulz in `precision` on a rows x cols matrix with the
/// steps `abc` runs in the Gram form under `options`.
bool usesGramNewtonSchulz(const CpuDeviceOptions &options, DType precision,
                          int64_t rows, int64_t cols,
                          const std::vector<std::array<double, 3>> &abc);

class CpuDevice final : public Device {
public:
  explicit CpuDevice(CpuDeviceOptions options = {});
  ~CpuDevice() override;
  const char *name() const override { return "cpu"; }
  void *allocate(int64_t bytes) override;
  void release(void *memory) override;
  void zero(void *memory, int64_t bytes) override;
  void copyToDevice(void *dst, const void *src, int64_t bytes) override;
  void copyToHost(void *dst, const void *src, int64_t bytes) override;
  bool allFinite(const void *x, DType type, int64_t n) override;
  void copyBox(const BoxCopy &copy) override;
  /// The step's host loop in place: host memory is the device's.
  void runElementStep(const ElementStep &step, const ElementOperands &operands,
                      const StepScalars &scalars) override;
  void runMatrixStep(const MatrixStep &step, float *x, int64_t rows,
                     int64_t cols, float *state,
                     const StepScalars &scalars) override;
  int64_t newtonSchulz(float *x, int64_t count, int64_t rows, int64_t cols,
                       const std::vector<std::array<double, 3>> &abc,
                       double eps, DType precision) override;
  /// ns_dtype "auto": the process's choice (NsPrecision.h); f32 where
  /// this device may not use oneDNN (CpuDeviceOptions::oneDnn).
  DType defaultNsDtype() const override;
  std::string defaultNsDtypeReason() const override;
  Status takeError() override;
  /// The kernel newtonSchulz runs for `precision` on this device.
  CpuNsKernel nsKernel(DType precision) const;

private:
  NsPrecisionChoice defaultNsPrecision() const;
  int64_t newtonSchulzOne(float *x, int64_t rows, int64_t cols,
                          const std::vector<std::array<double, 3>> &abc,
                          double eps, DType precision);
  /// The steps abc[first:] in the standard form on the normalized x, with
  /// symmetric BLAS products (in bf16 and f16, each result rounded to it).
  void standardSteps(float *x, int64_t rows, int64_t cols,
                     const std::vector<std::array<double, 3>> &abc,
                     size_t first, DType precision);

  std::vector<float> gram, poly, next; // Newton-Schulz workspace
  CpuDeviceOptions options;
  std::unique_ptr<OneDnnNewtonSchulz> oneDnn; // made on first use
  std::unique_ptr<GramNewtonSchulz> gramForm; // made on first use
  Status error;
};

/// BLAS and oneDNN threads of this process (the reference and every rank
/// must use the same count for bit-exact results).
void setBlasThreads(int threads);

/// The BLAS the backend was built with ("OpenBLAS" or "BLIS"; MUON_BLAS).
const char *blasName();

/// blasName(), and for OpenBLAS the kernels it picked for this CPU
/// ("OpenBLAS, SkylakeX kernels").
std::string blasKernels();

/// The kernels the rule of blasKernelAdvice() picks from this CPU's
/// features: "SkylakeX" with AVX-512 (F, BW, DQ, VL), "Haswell" with AVX2
/// and FMA, else "" (and "" off x86-64). muonc's Python package sets
/// OPENBLAS_CORETYPE to it, when unset, before OpenBLAS loads.
std::string preferredBlasKernels();

/// What to do when OpenBLAS runs its generic kernels on a CPU that has
/// better ones ("" when it does not): OpenBLAS 0.3.21 does not know CPUs
/// newer than itself (an Emerald Rapids, model 207) and falls back to its
/// Prescott (SSE3) kernels, about 5x slower in f32 products; it reads
/// OPENBLAS_CORETYPE when it loads, so the advice is to set that before
/// the process starts.
std::string blasKernelAdvice();

/// For a program's main, before anything else: where blasKernelAdvice()
/// has advice, takes it for the user -- sets OPENBLAS_CORETYPE to
/// preferredBlasKernels() and restarts the program in place (execv of
/// /proc/self/exe with `argv`: the same process, arguments and standard
/// streams), so that it and the ranks it starts run the faster kernels.
/// Returns doing nothing when OPENBLAS_CORETYPE is set (by the user, or by
/// this restart: it happens at most once), when OpenBLAS's kernels are not
/// its generic ones, or when the restart fails. muon-run and muon-bench
/// call it; a library cannot (OpenBLAS has loaded by then).
void restartWithPreferredBlasKernels(char **argv);

/// c = a b, row-major bf16 a (m x k) and b (k x n), f32 accumulation, bf16
/// c, on the products bf16 Newton-Schulz uses: the rate benchmarks set it
/// against. Unimplemented where this process has no bf16 products.
Status bf16Gemm(const uint16_t *a, const uint16_t *b, uint16_t *c, int64_t m,
                int64_t n, int64_t k);

} // namespace muon::runtime::cpu

#endif // MUON_RUNTIME_CPU_CPUDEVICE_H
