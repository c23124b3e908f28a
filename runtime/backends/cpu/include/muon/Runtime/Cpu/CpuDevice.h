//===- CpuDevice.h - The CPU backend's device -------------------*- C++ -*-===//
//
// Host memory, elementwise loops and Newton-Schulz. f32: BLAS (OpenBLAS,
// or BLIS with -DMUON_BLAS=BLIS; symmetric products `cblas_ssyrk` and
// `cblas_ssymm`). bf16: where oneDNN is built in (MUON_ONEDNN) and the CPU
// has bf16 dot products (AVX512_BF16, AMX), oneDNN matmuls with bf16
// operands and f32 accumulation over the Gram matrix's lower block columns
// (OneDnnNewtonSchulz.cpp); elsewhere the f32 BLAS products, each result
// rounded to bf16. ns_dtype "auto" is bf16 where the CPU has the bf16
// products, else f32. f32 on wide or tall matrices can run in the Gram
// form (GramNewtonSchulz.h; CpuDeviceOptions::gramNewtonSchulz, or
// MUON_CPU_NS_FORM=gram). Bit-exact across ranks when every process runs with
// the same thread count (setBlasThreads) on the same kind of CPU.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CPU_CPUDEVICE_H
#define MUON_RUNTIME_CPU_CPUDEVICE_H

#include "muon/Runtime/Device.h"

#include <memory>
#include <string>

namespace muon::runtime::cpu {

class GramNewtonSchulz;
class OneDnnNewtonSchulz;

/// How Newton-Schulz runs its products on the CPU.
enum class CpuNsKernel {
  /// BLAS f32 products (for bf16, every product's result rounded to bf16).
  Blas,
  /// oneDNN bf16 products with f32 accumulation.
  OneDnnBf16,
};

/// The choice for `precision`, given whether oneDNN is built in and whether
/// the CPU has bf16 dot products: bf16 runs on oneDNN where both hold, f32
/// always on BLAS.
CpuNsKernel chooseNsKernel(DType precision, bool oneDnnBuilt, bool cpuBf16);
/// What ns_dtype "auto" means: bf16 where its products run at the bf16
/// rate (as torch.optim.Muon and dion run Newton-Schulz), else f32.
DType chooseDefaultNsDtype(bool oneDnnBuilt, bool cpuBf16);

/// Whether this build has oneDNN, and whether this CPU has bf16 dot
/// products as oneDNN sees it (DNNL_MAX_CPU_ISA=AVX512_CORE hides them).
bool oneDnnBuilt();
bool cpuHasBf16Products();

/// What Newton-Schulz in `precision` runs on here, for summaries: "bf16
/// products, f32 accumulation (oneDNN 2.6.3, avx512_core_bf16)", "f32
/// products (OpenBLAS)", "f32 products (OpenBLAS); Gram form on wide and
/// tall matrices" (`gram`: CpuDeviceOptions::gramNewtonSchulz), ...
std::string describeNewtonSchulz(DType precision, bool gram = false);

/// Settings of a CpuDevice (tests and measurements change them).
struct CpuDeviceOptions {
  /// Run bf16 on oneDNN where this process can (false: always BLAS).
  bool oneDnn = true;
  /// Width of the Gram matrix's block columns on oneDNN.
  int64_t bf16Tile = 64;
  /// f32: run Newton-Schulz in its Gram form (GramNewtonSchulz.h) on the
  /// shapes where it does clearly fewer flops (wide or tall, 3:5 and
  /// beyond at 5 steps). Off by default: the standard form is the
  /// reference (and matches torch.optim.Muon's f32 to 1e-6 after 10
  /// steps, which the Gram form's 2x larger rounding error does not).
  /// Default from the environment: MUON_CPU_NS_FORM=gram (kNsFormVariable).
  bool gramNewtonSchulz = gramFromEnvironment();

  static bool gramFromEnvironment();
};

/// The environment variable that picks the CPU's f32 Newton-Schulz form for
/// every CpuDevice made with default options: "standard" (or unset) or
/// "gram" (muon-run's --ns-form sets it for its ranks).
inline constexpr const char *kNsFormVariable = "MUON_CPU_NS_FORM";
/// Parses a form's name: true with `gram` set for "standard" or "gram".
bool parseNsForm(const std::string &name, bool &gram);

/// Whether f32 Newton-Schulz on a rows x cols matrix, `steps` steps, runs in
/// the Gram form under `options` (for tests and summaries).
bool usesGramNewtonSchulz(const CpuDeviceOptions &options, int64_t rows,
                          int64_t cols, int64_t steps);

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
  void momentum(const void *grad, DType gradType, float *buf, float *update,
                int64_t n, const MuonSettings &settings) override;
  void applyUpdate(void *values, DType type, const float *orth, int64_t n,
                   const MuonSettings &settings, double adjustedLr) override;
  void adamw(void *values, DType type, const void *grad, DType gradType,
             float *expAvg, float *expAvgSq, int64_t n,
             const AdamWSettings &settings, int64_t step) override;
  void copyBox(const BoxCopy &copy) override;
  /// In place: host memory is the device's.
  void normuon(float *x, int64_t rows, int64_t cols, float *v,
               const MuonSettings &settings) override;
  int64_t newtonSchulz(float *x, int64_t count, int64_t rows, int64_t cols,
                       const std::vector<std::array<double, 3>> &abc,
                       double eps, DType precision) override;
  DType defaultNsDtype() const override;
  Status takeError() override;
  /// The kernel newtonSchulz runs for `precision` on this device.
  CpuNsKernel nsKernel(DType precision) const;

private:
  int64_t newtonSchulzOne(float *x, int64_t rows, int64_t cols,
                          const std::vector<std::array<double, 3>> &abc,
                          double eps, bool bf16);

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

/// c = a b, row-major bf16 a (m x k) and b (k x n), f32 accumulation, bf16
/// c, on the products bf16 Newton-Schulz uses: the rate benchmarks set it
/// against. False with `error` where this process has no bf16 products.
bool bf16Gemm(const uint16_t *a, const uint16_t *b, uint16_t *c, int64_t m,
              int64_t n, int64_t k, std::string &error);

} // namespace muon::runtime::cpu

#endif // MUON_RUNTIME_CPU_CPUDEVICE_H
