//===- BenchDevice.h - A device to measure, with its GEMM rate --*- C++ -*-===//
#ifndef MUON_TOOLS_MUON_BENCH_BENCHDEVICE_H
#define MUON_TOOLS_MUON_BENCH_BENCHDEVICE_H

#include "muon/Runtime/Device.h"
#include "muon/Support/Statistics.h"

#include <array>
#include "muon/Support/Status.h"

#include <memory>
#include <string>
#include <vector>

namespace muon::bench {

/// The device a benchmark runs on, and how fast its plain matrix product
/// is: the rate the dense floor of Newton-Schulz is measured at.
class BenchDevice {
public:
  virtual ~BenchDevice() = default;
  virtual runtime::Device &device() = 0;
  /// "cpu (OpenBLAS, 1 thread)", "cuda:0 (NVIDIA H100 ...)".
  virtual std::string describe() const = 0;
  /// What Newton-Schulz in `dtype` runs its products on ("bf16 products,
  /// f32 accumulation (oneDNN ...)") with the steps `abc`; empty where
  /// the device says nothing.
  virtual std::string
  nsProducts(runtime::DType dtype,
             const std::vector<std::array<double, 3>> &abc = {}) const {
    return {};
  }
  /// The form the last newtonSchulz call on a rows x cols matrix in `dtype`
  /// with the steps `abc` took: "gram" or "standard".
  virtual std::string
  lastNsForm(int64_t rows, int64_t cols, runtime::DType dtype,
             const std::vector<std::array<double, 3>> &abc) const = 0;
  /// What would make this device faster here, as a sentence ("" when
  /// nothing): on the CPU, OpenBLAS's generic kernels on a CPU it does
  /// not know (runtime::cpu::blasKernelAdvice).
  virtual std::string note() const { return {}; }
  /// The product rates ns_dtype "auto" was chosen from, as
  /// MUON_CPU_PRODUCT_RATES writes them ("" where the choice needed none:
  /// a CPU without bf16 products, a GPU).
  virtual std::string productRates() const { return {}; }
  /// Median seconds of one (m x k) x (k x n) product in `dtype` (f32, bf16
  /// or f16 operands, f32 accumulation; no TF32), after a warm-up, on
  /// random data. On the CPU, bf16 is the bf16 products Newton-Schulz
  /// uses (oneDNN) where the CPU has them, else sgemm (what bf16
  /// Newton-Schulz then runs), and f16 is sgemm (what f16 Newton-Schulz
  /// runs there).
  virtual double gemmSeconds(int64_t m, int64_t n, int64_t k,
                             runtime::DType dtype, int repeats) = 0;
};

/// Which of the f32 (0) and bf16 (1) floors is the shorter: the faster
/// product on this device. f32 on a tie or where bf16's is not known.
inline int fasterFloor(const double floors[2]) {
  if (floors[1] <= 0)
    return 0;
  return floors[0] <= 0 || floors[1] < floors[0] ? 1 : 0;
}

/// The clock benchmarks read: wall time (default), or this process's CPU
/// time (`--clock cpu`, CPU backend with one BLAS thread only), which a
/// shared machine's other processes disturb much less: time spent waiting
/// for a core is not counted.
void useCpuClock(bool cpu);
/// Seconds on the chosen clock, from an arbitrary origin.
double clockSeconds();

/// "cpu" or "cuda", opened by name (muon/Runtime/Backends.h) as a trainer
/// does; fails when the backend is not built in or has no device here.
StatusOr<std::unique_ptr<BenchDevice>>
openBenchDevice(const std::string &backend, int blasThreads);

using muon::median;

} // namespace muon::bench

#endif // MUON_TOOLS_MUON_BENCH_BENCHDEVICE_H
