//===- CpuDevice.h - The CPU backend's device -------------------*- C++ -*-===//
//
// Host memory, elementwise loops and Newton-Schulz with BLAS (OpenBLAS, or
// BLIS with -DMUON_BLAS=BLIS; symmetric products `cblas_ssyrk` and
// `cblas_ssymm`, fp32; bf16 emulated by rounding every product's result,
// which holds bf16 values exactly in f32). Bit-exact across ranks when every
// process runs BLAS with the same thread count (setBlasThreads).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CPU_CPUDEVICE_H
#define MUON_RUNTIME_CPU_CPUDEVICE_H

#include "muon/Runtime/Device.h"

namespace muon::runtime::cpu {

class CpuDevice final : public Device {
public:
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
  int64_t newtonSchulz(float *x, int64_t count, int64_t rows, int64_t cols,
                       const std::vector<std::array<double, 3>> &abc,
                       double eps, DType precision) override;

private:
  int64_t newtonSchulzOne(float *x, int64_t rows, int64_t cols,
                          const std::vector<std::array<double, 3>> &abc,
                          double eps, bool bf16);

  std::vector<float> gram, poly, next; // Newton-Schulz workspace
};

/// BLAS threads of this process (the reference and every rank must use
/// the same count for bit-exact results).
void setBlasThreads(int threads);

/// The BLAS the backend was built with ("OpenBLAS" or "BLIS"; MUON_BLAS).
const char *blasName();

} // namespace muon::runtime::cpu

#endif // MUON_RUNTIME_CPU_CPUDEVICE_H
