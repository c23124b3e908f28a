//===- CudaDevice.h - The CUDA backend's device -----------------*- C++ -*-===//
//
// A Device on one GPU: memory from a pool of its own (stream-ordered, so
// that releasing a buffer does not wait for the whole GPU), a kernel for
// every registered per-element step and NorMuon's per-matrix one
// (Kernels.h) and Newton-Schulz on cuBLAS, all queued on one compute
// stream. Host-visible results (copyToHost, allFinite) wait for it.
// Internal: users get it through createDevice (CudaBackend.h); the NCCL
// communicator and the self-check reach its stream and GPU through here.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_CUDADEVICE_H
#define MUON_RUNTIME_CUDA_CUDADEVICE_H

#include "NewtonSchulz.h"
#include "StepGraph.h"

#include "muon/Runtime/Cuda/CudaBackend.h"
#include "muon/Runtime/Device.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <string>

namespace muon::runtime::cuda {

class CudaDevice final : public Device, private StepGraphRecorder {
public:
  /// The device on GPU `ordinal` (which must exist): FailedPrecondition
  /// for a GPU too old, InvalidArgument for a MUON_CUDA_* value it cannot
  /// read, Unavailable when a stream, pool, cuBLAS or its handle cannot be
  /// had.
  static StatusOr<std::unique_ptr<CudaDevice>>
  create(int ordinal, const DeviceOptions &options);
  ~CudaDevice() override;

  const char *name() const override { return "cuda"; }
  void *allocate(int64_t bytes) override;
  void release(void *memory) override;
  void zero(void *memory, int64_t bytes) override;
  void copyToDevice(void *dst, const void *src, int64_t bytes) override;
  void copyToHost(void *dst, const void *src, int64_t bytes) override;
  bool allFinite(const void *x, DType type, int64_t n) override;
  void copyBox(const BoxCopy &copy) override;
  /// The step's kernel (launchElementStep); a step the build has none for
  /// runs as the default does, on host copies.
  void runElementStep(const ElementStep &step, const ElementOperands &operands,
                      const StepScalars &scalars) override;
  /// The step's kernels (launchMatrixStep, found by the step's name), with
  /// scratch from the pool; a step the build has none for runs as the
  /// default does, on host copies.
  void runMatrixStep(const MatrixStep &step, float *x, int64_t rows,
                     int64_t cols, float *state,
                     const StepScalars &scalars) override;
  int64_t newtonSchulz(float *x, int64_t count, int64_t rows, int64_t cols,
                       const std::vector<std::array<double, 3>> &abc,
                       double eps, DType precision) override;
  /// Whole batches: the workspace splits what does not fit.
  int64_t nsBatchLimit() const override;
  DType defaultNsDtype() const override { return DType::BF16; }
  std::string defaultNsDtypeReason() const override {
    return "bf16: tensor cores run its products at many times f32's rate";
  }
  void synchronize() override;
  /// Step graphs: the compute stream's capture (StepGraph.h).
  StepGraphRecorder *stepGraphs() override { return this; }
  /// The first CUDA or cuBLAS failure since the last call (CudaSupport.h).
  Status takeError() override;

  /// Cross-stream order with a stream of the caller's on this GPU (a
  /// framework's current stream; 0 is the legacy default stream), through
  /// an event, without a host wait: orderAfter(s) makes the device's work
  /// queued from now on start after what `s` holds now; orderBefore(s)
  /// makes work queued on `s` from now on start after the device's so far.
  /// InvalidArgument when CUDA refuses (a stream of another GPU, ...).
  Status orderAfter(cudaStream_t other);
  Status orderBefore(cudaStream_t other);

  int ordinal() const { return gpu; }
  cudaStream_t stream() const { return computeStream; }
  /// The cuBLAS handle, bound to the compute stream.
  cublasHandle_t blasHandle() const { return blas; }
  /// "NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB".
  const std::string &description() const { return gpuDescription; }
  /// How the last newtonSchulz ran its products, and whether in the Gram
  /// form (NewtonSchulz.h).
  std::string lastNewtonSchulzPath() const { return ns->lastPath(); }
  /// Newton-Schulz's form (DeviceOptions::nsForm).
  NsForm nsForm() const { return form; }

private:
  explicit CudaDevice(int ordinal) : gpu(ordinal) {}
  // StepGraphRecorder.
  Status beginRecording() override;
  Status endRecording() override;
  void beginReplayCheck() override;
  Status endReplayCheck() override;
  void replay() override;
  void dropRecording() override;
  /// While a step graph records or checks: notes the call (`key`); false
  /// when the caller must not queue it (checking). True outside graphs.
  bool noted(const CallKey &key);
  /// A call that reaches the host cannot be recorded or checked: false
  /// (and the recording or check fails) while one is active.
  bool hostReachable(const char *call);

  int gpu;
  std::string gpuDescription;
  cudaStream_t computeStream = nullptr;
  cublasHandle_t blas = nullptr;
  cudaMemPool_t pool = nullptr; // null: plain cudaMalloc (no pool support)
  int64_t maxPitch = 0;         // cudaMemcpy2D's limit
  int *nonFinite = nullptr;     // device flag of allFinite
  int *nonFiniteHost = nullptr; // pinned
  cudaEvent_t orderEvent = nullptr; // orderAfter / orderBefore, made on use
  std::unique_ptr<NewtonSchulzRunner> ns;
  NsForm form = NsForm::Auto;
  std::unique_ptr<StepGraph> graph; // made by the first beginRecording
  /// The Newton-Schulz workspace's generation the recording names.
  int64_t recordedWorkspace = -1;
};

} // namespace muon::runtime::cuda

#endif // MUON_RUNTIME_CUDA_CUDADEVICE_H
