//===- CudaDevice.cpp - The CUDA backend's device -------------------------===//
#include "CudaDevice.h"

#include "CublasLibrary.h"
#include "CudaSupport.h"
#include "Kernels.h"
#include "Memory.h"

#include "muon/Runtime/MatrixStep.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

namespace muon::runtime::cuda {

namespace {

/// A non-negative integer from the environment: `fallback` when unset,
/// InvalidArgument when it is not one.
StatusOr<int64_t> integerFromEnv(const char *name, int64_t fallback) {
  const char *text = std::getenv(name);
  if (!text || !*text)
    return fallback;
  errno = 0;
  char *end = nullptr;
  long long parsed = std::strtoll(text, &end, 10);
  if (errno || *end || parsed < 0)
    return invalidArgument(std::string(name) +
                           " must be a non-negative integer, not '" + text +
                           "'");
  return static_cast<int64_t>(parsed);
}

Status newtonSchulzOptionsFromEnv(NewtonSchulzOptions &options) {
  MUON_ASSIGN_OR_RETURN(
      options.symmetricMin,
      integerFromEnv("MUON_CUDA_SYMMETRIC_MIN", options.symmetricMin));
  MUON_ASSIGN_OR_RETURN(options.tile,
                        integerFromEnv("MUON_CUDA_SYMMETRIC_TILE", 0));
  MUON_ASSIGN_OR_RETURN(
      const int64_t grouped,
      integerFromEnv("MUON_CUDA_GROUPED_GEMM", options.grouped ? 1 : 0));
  if (grouped > 1)
    return invalidArgument("MUON_CUDA_GROUPED_GEMM must be 0 or 1");
  options.grouped = grouped == 1;
  NsForm form;
  if (const char *value = std::getenv(kNsFormVariable);
      value && *value && !parseNsForm(value, form))
    return invalidArgument(std::string(kNsFormVariable) +
                           " must be auto, standard or gram, not '" + value +
                           "'");
  return okStatus();
}

/// Teardown tolerates a CUDA runtime that is already unloading (a device
/// destroyed by a static destructor at exit).
void checkTeardown(cudaError_t status, const char *what) {
  if (status != cudaSuccess && status != cudaErrorCudartUnloading)
    recordFailure(what, describe(status), __FILE__, __LINE__);
}

} // namespace

StatusOr<std::unique_ptr<CudaDevice>>
CudaDevice::create(int ordinal, const DeviceOptions &deviceOptions) {
  std::string error;
  auto failed = [&](cudaError_t status, const char *what) {
    if (status == cudaSuccess)
      return false;
    (void)cudaGetLastError();
    error = "GPU " + std::to_string(ordinal) + ": " + what + ": " +
            describe(status);
    return true;
  };
  cudaDeviceProp props;
  if (failed(cudaGetDeviceProperties(&props, ordinal), "reading properties"))
    return unavailable(error);
  const std::string arch =
      "sm_" + std::to_string(props.major) + std::to_string(props.minor);
  if (props.major < 8)
    return failedPrecondition(
        "GPU " + std::to_string(ordinal) + " (" + props.name + ", " + arch +
        ") is too old: the CUDA backend needs compute capability 8.0 or "
        "newer (bf16 GEMMs; kernels built for sm_80 and sm_90)");
  NewtonSchulzOptions options;
  MUON_RETURN_IF_ERROR(newtonSchulzOptionsFromEnv(options));
  options.form = deviceOptions.nsForm;

  int previous = -1;
  if (failed(cudaGetDevice(&previous), "cudaGetDevice") ||
      failed(cudaSetDevice(ordinal), "making it current (is it busy, or in "
                                     "exclusive mode?)"))
    return unavailable(error);
  std::unique_ptr<CudaDevice> device(new CudaDevice(ordinal));
  device->form = options.form;
  char memory[32];
  std::snprintf(memory, sizeof(memory), "%.1f GiB",
                static_cast<double>(props.totalGlobalMem) / (1 << 30));
  device->gpuDescription = std::string(props.name) + ", " + arch + ", " +
                           std::to_string(props.multiProcessorCount) +
                           " SMs, " + memory;
  bool ok = [&] {
    if (Status loadable = kernelsLoadable(); !loadable.ok()) {
      error = "GPU " + std::to_string(ordinal) + ": " + loadable.message();
      return false;
    }
    // A blocking stream: ordered after the trainer's work on the legacy
    // default stream.
    if (failed(cudaStreamCreateWithFlags(&device->computeStream,
                                         cudaStreamDefault),
               "creating a stream"))
      return false;
    int poolsSupported = 0, pitch = 0;
    if (failed(cudaDeviceGetAttribute(&poolsSupported,
                                      cudaDevAttrMemoryPoolsSupported, ordinal),
               "cudaDeviceGetAttribute") ||
        failed(cudaDeviceGetAttribute(&pitch, cudaDevAttrMaxPitch, ordinal),
               "cudaDeviceGetAttribute"))
      return false;
    device->maxPitch = pitch;
    if (poolsSupported) {
      cudaMemPoolProps poolProps = {};
      poolProps.allocType = cudaMemAllocationTypePinned;
      poolProps.handleTypes = cudaMemHandleTypeNone;
      poolProps.location.type = cudaMemLocationTypeDevice;
      poolProps.location.id = ordinal;
      // Keep freed memory for the next step's buffers instead of handing
      // it back to the driver at every synchronization.
      uint64_t keep = std::numeric_limits<uint64_t>::max();
      if (failed(cudaMemPoolCreate(&device->pool, &poolProps),
                 "creating a memory pool") ||
          failed(cudaMemPoolSetAttribute(
                     device->pool, cudaMemPoolAttrReleaseThreshold, &keep),
                 "setting the memory pool's release threshold"))
        return false;
    }
    if (failed(cudaMalloc(reinterpret_cast<void **>(&device->nonFinite),
                          sizeof(int)),
               "allocating GPU memory") ||
        failed(cudaMallocHost(reinterpret_cast<void **>(&device->nonFiniteHost),
                              sizeof(int)),
               "allocating pinned host memory"))
      return false;
    // cuBLAS is loaded with the first device (CublasLibrary.h).
    StatusOr<const cublas::Library *> loaded = cublas::load();
    if (!loaded.ok()) {
      error = "GPU " + std::to_string(ordinal) + ": " +
              loaded.status().message();
      return false;
    }
    const cublas::Library *blas = *loaded;
    cublasStatus_t status = blas->cublasCreate(&device->blas);
    if (status == CUBLAS_STATUS_SUCCESS)
      status = blas->cublasSetStream(device->blas, device->computeStream);
    // BF16 and F16 results: reductions across a split K stay in f32, never
    // in the 16-bit type.
    if (status == CUBLAS_STATUS_SUCCESS)
      status = blas->cublasSetMathMode(
          device->blas, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION);
    if (status != CUBLAS_STATUS_SUCCESS) {
      error = "GPU " + std::to_string(ordinal) +
              ": setting up cuBLAS: " + describe(status);
      return false;
    }
    device->ns = std::make_unique<NewtonSchulzRunner>(
        StreamMemory{device->computeStream, device->pool}, device->blas,
        options);
    return true;
  }();
  if (!ok)
    device.reset(); // its destructor frees what was made
  if (previous != ordinal)
    (void)cudaSetDevice(previous);
  if (!device)
    return unavailable(error);
  return device;
}

CudaDevice::~CudaDevice() {
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess || previous == gpu ||
      cudaSetDevice(gpu) != cudaSuccess)
    previous = -1;
  if (computeStream)
    checkTeardown(cudaStreamSynchronize(computeStream),
                  "cudaStreamSynchronize");
  graph.reset(); // before cuBLAS's handle: it lends the handle a workspace
  ns.reset();
  if (computeStream)
    checkTeardown(cudaStreamSynchronize(computeStream),
                  "cudaStreamSynchronize");
  if (blas)
    cublas::api().cublasDestroy(blas); // nothing useful to do about a failure here
  if (nonFinite)
    checkTeardown(cudaFree(nonFinite), "cudaFree");
  if (nonFiniteHost)
    checkTeardown(cudaFreeHost(nonFiniteHost), "cudaFreeHost");
  if (orderEvent)
    checkTeardown(cudaEventDestroy(orderEvent), "cudaEventDestroy");
  // Buffers still out are freed with the pool once released.
  if (pool)
    checkTeardown(cudaMemPoolDestroy(pool), "cudaMemPoolDestroy");
  if (computeStream)
    checkTeardown(cudaStreamDestroy(computeStream), "cudaStreamDestroy");
  if (previous >= 0)
    (void)cudaSetDevice(previous);
}

bool CudaDevice::noted(const CallKey &key) {
  return !graph || !graph->active() || graph->note(key);
}

bool CudaDevice::hostReachable(const char *call) {
  if (!graph || !graph->active())
    return true;
  graph->fail(std::string(call) + " reaches the host, which a step graph "
                                  "cannot record");
  return false;
}

void *CudaDevice::allocate(int64_t bytes) {
  CurrentDevice current(gpu);
  if (graph && graph->active())
    return graph->allocate(bytes, /*noted=*/true);
  const size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  void *memory = StreamMemory{computeStream, pool}.allocate(size);
  if (memory)
    MUON_CUDA_CHECK(cudaMemsetAsync(memory, 0, size, computeStream));
  return memory;
}

void CudaDevice::release(void *memory) {
  CurrentDevice current(gpu);
  if (graph && graph->release(memory))
    return;
  StreamMemory{computeStream, pool}.release(memory);
}

void CudaDevice::zero(void *memory, int64_t bytes) {
  if (bytes <= 0 || !noted(CallKey(RecordedCall::Zero) << memory << bytes))
    return;
  CurrentDevice current(gpu);
  MUON_CUDA_CHECK(
      cudaMemsetAsync(memory, 0, static_cast<size_t>(bytes), computeStream));
}

void CudaDevice::copyToDevice(void *dst, const void *src, int64_t bytes) {
  if (bytes <= 0 || !hostReachable("copyToDevice"))
    return;
  CurrentDevice current(gpu);
  MUON_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                  cudaMemcpyDefault, computeStream));
  // Done on return: the caller may reuse `src` (pinned memory included).
  MUON_CUDA_CHECK(cudaStreamSynchronize(computeStream));
}

void CudaDevice::copyToHost(void *dst, const void *src, int64_t bytes) {
  if (bytes <= 0 || !hostReachable("copyToHost"))
    return;
  CurrentDevice current(gpu);
  MUON_CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                  cudaMemcpyDefault, computeStream));
  MUON_CUDA_CHECK(cudaStreamSynchronize(computeStream));
}

bool CudaDevice::allFinite(const void *x, DType type, int64_t n) {
  if (n <= 0 || !hostReachable("allFinite"))
    return true;
  CurrentDevice current(gpu);
  MUON_CUDA_CHECK(cudaMemsetAsync(nonFinite, 0, sizeof(int), computeStream));
  launchFindNonFinite(computeStream, x, type, n, nonFinite);
  MUON_CUDA_CHECK(cudaMemcpyAsync(nonFiniteHost, nonFinite, sizeof(int),
                                  cudaMemcpyDeviceToHost, computeStream));
  MUON_CUDA_CHECK(cudaStreamSynchronize(computeStream));
  return *nonFiniteHost == 0;
}

void CudaDevice::runElementStep(const ElementStep &step,
                                const ElementOperands &o,
                                const StepScalars &scalars) {
  if (o.n <= 0)
    return;
  // Every step's scalars may change from one step to the next (the
  // learning rate, weight decay, AdamW's bias corrections, momentum): a
  // step graph reads them from a slot (StepGraph.h); its key is the step
  // and the memory it touches.
  const void *at = nullptr;
  if (graph && graph->active()) {
    CallKey key(RecordedCall::ElementStep);
    key << static_cast<const void *>(&step) << o.values
        << static_cast<int>(o.type) << o.grad << static_cast<int>(o.gradType)
        << o.input << o.rowLength << o.output << o.n;
    for (int k = 0; k < kMaxStepSlots; ++k)
      key << static_cast<const void *>(o.slots[k]);
    const StepScalars *slot = nullptr;
    if (!graph->noteScalars(key, scalars, slot))
      return;
    at = slot;
  }
  CurrentDevice current(gpu);
  if (!launchElementStep(computeStream, step, o, scalars, at))
    Device::runElementStep(step, o, scalars);
}

void CudaDevice::runMatrixStep(const MatrixStep &step, float *x, int64_t rows,
                               int64_t cols, float *state,
                               const StepScalars &scalars) {
  if (rows <= 0 || cols <= 0)
    return;
  const int64_t scratchBytes = matrixStepScratchBytes(step, rows, cols);
  if (scratchBytes < 0) { // no kernel in this build: on host copies
    Device::runMatrixStep(step, x, rows, cols, state, scalars);
    return;
  }
  CallKey key(RecordedCall::MatrixStep);
  key << static_cast<const void *>(step.name) << x << rows << cols << state;
  for (size_t at = 0; at < sizeof(scalars.bytes); at += sizeof(uint64_t)) {
    uint64_t word;
    std::memcpy(&word, scalars.bytes + at, sizeof(word));
    key << word;
  }
  if (!noted(key))
    return;
  CurrentDevice current(gpu);
  // Released in stream order, after the kernels that use it.
  void *scratch = graph && graph->active()
                      ? graph->allocate(scratchBytes, /*noted=*/false)
                      : allocate(scratchBytes);
  if (!scratch) {
    const std::string what = std::string("allocating ") + step.title +
                             "'s scratch";
    recordFailure(what.c_str(), "out of GPU memory", __FILE__, __LINE__);
    return;
  }
  launchMatrixStep(computeStream, step, x, rows, cols, state, scalars,
                   scratch);
  release(scratch);
}

void CudaDevice::copyBox(const BoxCopy &c) {
  if (c.rows <= 0 || c.cols <= 0 ||
      !noted(CallKey(RecordedCall::CopyBox)
             << c.src << static_cast<int>(c.srcType) << c.srcStride << c.dst
             << static_cast<int>(c.dstType) << c.dstStride << c.rows << c.cols
             << static_cast<int>(c.through) << static_cast<int>(c.accumulate)))
    return;
  CurrentDevice current(gpu);
  if (c.srcType == c.dstType && c.through == DType::F32 && !c.accumulate) {
    // The bits as they are, as CpuDevice's memcpy moves them.
    const int64_t width = dtypeBytes(c.srcType);
    const int64_t rowBytes = c.cols * width;
    if (c.rows == 1) {
      MUON_CUDA_CHECK(cudaMemcpyAsync(c.dst, c.src,
                                      static_cast<size_t>(rowBytes),
                                      cudaMemcpyDefault, computeStream));
      return;
    }
    const int64_t srcPitch = c.srcStride * width;
    const int64_t dstPitch = c.dstStride * width;
    if (srcPitch >= rowBytes && dstPitch >= rowBytes && srcPitch <= maxPitch &&
        dstPitch <= maxPitch) {
      MUON_CUDA_CHECK(cudaMemcpy2DAsync(
          c.dst, static_cast<size_t>(dstPitch), c.src,
          static_cast<size_t>(srcPitch), static_cast<size_t>(rowBytes),
          static_cast<size_t>(c.rows), cudaMemcpyDefault, computeStream));
      return;
    }
  }
  launchCopyBox(computeStream, c);
}

int64_t CudaDevice::newtonSchulz(float *x, int64_t count, int64_t rows,
                                 int64_t cols,
                                 const std::vector<std::array<double, 3>> &abc,
                                 double eps, DType precision) {
  if (graph && graph->active()) {
    CallKey key(RecordedCall::NewtonSchulz);
    key << x << count << rows << cols << eps << static_cast<int>(precision);
    for (const std::array<double, 3> &k : abc)
      key << k[0] << k[1] << k[2];
    if (!graph->note(key)) {
      // Checked, not run: the count it would return (Device.h's contract).
      const int64_t m = std::min(rows, cols), n = std::max(rows, cols);
      return count > 0 && rows > 0 && cols > 0
                 ? count * static_cast<int64_t>(abc.size()) *
                       (4 * m * m * n + 2 * m * m * m)
                 : 0;
    }
  }
  CurrentDevice current(gpu);
  const int64_t flops = ns->run(x, count, rows, cols, abc, eps, precision);
  if (graph && graph->active() && !ns->recordingFailure().empty())
    graph->fail(ns->recordingFailure());
  return flops;
}

int64_t CudaDevice::nsBatchLimit() const {
  return std::numeric_limits<int64_t>::max();
}

Status CudaDevice::takeError() {
  std::string failure = takeFailure();
  if (failure.empty())
    return okStatus();
  return Status(StatusCode::Internal, std::move(failure));
}

/// `wait` waits for what `record` holds now, through the device's event.
static Status orderStreams(int gpu, cudaEvent_t &event, cudaStream_t record,
                           cudaStream_t wait) {
  CurrentDevice current(gpu);
  cudaError_t status = cudaSuccess;
  const char *what = "cudaEventCreateWithFlags";
  if (!event)
    status = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (status == cudaSuccess) {
    what = "cudaEventRecord";
    status = cudaEventRecord(event, record);
  }
  if (status == cudaSuccess) {
    what = "cudaStreamWaitEvent";
    status = cudaStreamWaitEvent(wait, event, 0);
  }
  if (status == cudaSuccess)
    return okStatus();
  (void)cudaGetLastError(); // not sticky: the device stays usable
  return invalidArgument("GPU " + std::to_string(gpu) +
                         ": ordering with the caller's stream: " + what +
                         ": " + describe(status));
}

Status CudaDevice::orderAfter(cudaStream_t other) {
  return orderStreams(gpu, orderEvent, other, computeStream);
}

Status CudaDevice::orderBefore(cudaStream_t other) {
  return orderStreams(gpu, orderEvent, computeStream, other);
}

void CudaDevice::synchronize() {
  if (!hostReachable("synchronize"))
    return;
  CurrentDevice current(gpu);
  MUON_CUDA_CHECK(cudaStreamSynchronize(computeStream));
}

Status CudaDevice::beginRecording() {
  CurrentDevice current(gpu);
  if (!graph)
    graph = std::make_unique<StepGraph>(StreamMemory{computeStream, pool},
                                        blas);
  MUON_RETURN_IF_ERROR(graph->beginRecording());
  ns->setRecording(true);
  recordedWorkspace = ns->generation();
  return okStatus();
}

Status CudaDevice::endRecording() {
  CurrentDevice current(gpu);
  ns->setRecording(false);
  if (!graph)
    return failedPrecondition("no recording");
  return graph->endRecording();
}

void CudaDevice::beginReplayCheck() {
  if (graph)
    graph->beginCheck();
}

Status CudaDevice::endReplayCheck() {
  if (!graph)
    return failedPrecondition("no recording");
  // The graph names the Newton-Schulz workspace it was recorded with.
  if (ns->generation() != recordedWorkspace)
    graph->fail("the Newton-Schulz workspace was reallocated since the "
                "recording");
  return graph->endCheck();
}

void CudaDevice::replay() {
  CurrentDevice current(gpu);
  if (graph)
    graph->replay();
}

void CudaDevice::dropRecording() {
  CurrentDevice current(gpu);
  if (graph)
    graph->drop();
}

} // namespace muon::runtime::cuda
