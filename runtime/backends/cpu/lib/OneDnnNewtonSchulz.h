//===- OneDnnNewtonSchulz.h - bf16 Newton-Schulz on oneDNN ------*- C++ -*-===//
//
// The CPU backend's bf16 Newton-Schulz where the CPU has bf16 dot-product
// instructions: every product a oneDNN matmul with bf16 operands, f32
// accumulation and a bf16 result (its scale and sum epilogue in f32), the
// symmetric products only over the Gram matrix's lower block columns; wide
// and tall matrices optionally in Gram phases of 2 steps (run's `gram`,
// chosen by CpuDevice from NsForm, gramPays and GramNewtonSchulz::keepsAccuracy).
// Built only with oneDNN (MUON_HAVE_ONEDNN); CpuDevice.cpp decides when it
// runs.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CPU_ONEDNNNEWTONSCHULZ_H
#define MUON_RUNTIME_CPU_ONEDNNNEWTONSCHULZ_H

#include "muon/Support/Status.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace muon::runtime::cpu {

/// What oneDNN says about this CPU: whether it has bf16 dot products
/// (AVX512_BF16 or AMX) and the ISA oneDNN runs on ("avx512_core_bf16").
/// DNNL_MAX_CPU_ISA (oneDNN's own setting) lowers it, as on an older CPU.
struct OneDnnCpu {
  bool bf16 = false;
  std::string isa;
  std::string version; // "2.6.3"
};
OneDnnCpu oneDnnCpu();

class OneDnnNewtonSchulz {
public:
  OneDnnNewtonSchulz();
  ~OneDnnNewtonSchulz();
  OneDnnNewtonSchulz(const OneDnnNewtonSchulz &) = delete;
  OneDnnNewtonSchulz &operator=(const OneDnnNewtonSchulz &) = delete;

  /// Device::newtonSchulz's BF16 contract on one rows x cols matrix in
  /// place, with `gram` in Gram phases (kGramPhaseSteps steps each, an odd
  /// last step in the standard form). Internal when oneDNN fails.
  Status run(float *x, int64_t rows, int64_t cols,
             const std::vector<std::array<double, 3>> &abc, double eps,
             bool gram);

  /// c = a b for row-major bf16 a (m x k) and b (k x n), f32 accumulation,
  /// c bf16: the plain product the benchmarks set Newton-Schulz against.
  /// `threads` > 0 runs it on that many OpenMP threads, set for the calling
  /// thread only (the rate probe's, NsPrecision.cpp); 0, on the process's
  /// count (setOneDnnThreads).
  Status gemm(const uint16_t *a, const uint16_t *b, uint16_t *c, int64_t m,
              int64_t n, int64_t k, int threads = 0);

  /// Width of the Gram matrix's block columns (CpuDeviceOptions).
  void setTile(int64_t tile) { this->tile = tile; }

  /// Steps of a Gram phase in bf16: R's rounding errors enter once per
  /// phase and are never multiplied by a later step's a^2.
  static constexpr int64_t kGramPhaseSteps = 2;
  /// Whether the Gram phases do clearly fewer flops than the standard
  /// steps: `steps` steps on an m x n matrix (m <= n), block columns
  /// `tile` wide. Wide and tall matrices from 1:2 on; never square ones.
  static bool gramPays(int64_t m, int64_t n, int64_t steps, int64_t tile);

private:
  struct Impl;
  std::unique_ptr<Impl> impl;
  int64_t tile = 64;
};

/// The thread count oneDNN's products use (OpenMP's, for this thread), as
/// setBlasThreads sets it for BLAS.
void setOneDnnThreads(int threads);

} // namespace muon::runtime::cpu

#endif // MUON_RUNTIME_CPU_ONEDNNNEWTONSCHULZ_H
