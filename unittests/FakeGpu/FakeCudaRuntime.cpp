//===- FakeCudaRuntime.cpp - The CUDA runtime calls of the CUDA backend ---===//
//
// Devices, streams, events, memory (plain, pinned and from pools), async
// copies and fills on host memory, with CUDA's semantics where the backend
// relies on them: a stream runs its operations in order; an event is
// complete when the stream that recorded it reached the record (or was
// never recorded); cudaStreamWaitEvent waits for the record issued before
// it; a destroyed stream still finishes its work; a stream-ordered free
// happens when the stream reaches it. Copies and fills that start in an
// allocation must stay inside it. MUON_FAKE_GPU_COUNT GPUs (default 1),
// sm_90. The declarations come from the CUDA toolkit's headers, so the
// signatures are the real ones.
//
//===----------------------------------------------------------------------===//
#include "FakeGpuState.h"

#include <cuda_runtime_api.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>

using namespace muon::fakegpu;

namespace {
thread_local int currentDevice = 0;
thread_local cudaError_t lastError = cudaSuccess;

cudaError_t fail(cudaError_t error) {
  lastError = error;
  return error;
}

/// A handle the fake made and the code under test has not destroyed.
template <typename T>
T *findLive(std::vector<std::unique_ptr<T>> &objects, const void *handle) {
  for (auto &object : objects)
    if (object.get() == handle && object->live)
      return object.get();
  return nullptr;
}

/// A new stream or event, kept until the process ends.
template <typename T> T *create(std::vector<std::unique_ptr<T>> &objects) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  objects.push_back(std::make_unique<T>());
  return objects.back().get();
}

/// Destroys a stream or an event: work still queued that names it runs on,
/// as on a GPU.
template <typename T>
cudaError_t destroy(std::vector<std::unique_ptr<T>> &objects,
                    const void *handle, const char *call) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  T *object = findLive(objects, handle);
  if (!object) {
    misuse(s, std::string(call) + " of an unknown handle");
    return fail(cudaErrorInvalidResourceHandle);
  }
  object->live = false;
  advanceAll(s);
  return cudaSuccess;
}

/// How long a synchronize waits for a stream that does not advance before
/// calling it a hang of the code under test.
constexpr std::chrono::seconds kHangSeconds(20);

/// cudaDevAttrMaxPitch of the fake GPUs.
constexpr int kMaxPitch = INT_MAX;

/// A live stream, or nullptr after counting the misuse. Caller holds the
/// mutex.
CUstream_st *liveStream(State &s, cudaStream_t handle, const char *call) {
  CUstream_st *stream = findStream(s, handle);
  if (!stream || !stream->live) {
    misuse(s, std::string(call) + " on an unknown stream");
    return nullptr;
  }
  return stream;
}

/// A copy's or fill's end that starts in an allocation must end in it (an
/// end outside every allocation is host memory). Caller holds the mutex.
bool rangeOk(State &s, const void *p, size_t bytes, const char *call,
             const char *which) {
  if (bytes == 0 || !findAllocation(s, p) ||
      insideAllocation(s, p, static_cast<int64_t>(bytes), true))
    return true;
  const Allocation *a = findAllocation(s, p);
  misuse(s, std::string(call) + ": " + which + " runs " +
                std::to_string(bytes) + " bytes from offset " +
                std::to_string(static_cast<const char *>(p) - a->data) +
                " of an allocation of " + std::to_string(a->bytes));
  return false;
}

bool validDevice(int device) {
  return device >= 0 && device < state().config.gpus;
}
} // namespace

extern "C" {

cudaError_t cudaGetDeviceCount(int *count) {
  *count = state().config.gpus;
  return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}

cudaError_t cudaDriverGetVersion(int *version) {
  *version = 13000;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *version) {
  *version = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp *props, int device) {
  if (!validDevice(device))
    return fail(cudaErrorInvalidDevice);
  std::memset(props, 0, sizeof(*props));
  std::snprintf(props->name, sizeof(props->name), "Fake GPU (host memory)");
  props->major = 9;
  props->minor = 0;
  props->multiProcessorCount = 132;
  props->totalGlobalMem = static_cast<size_t>(state().config.memoryBytes);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr,
                                   int device) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!validDevice(device))
    return fail(cudaErrorInvalidDevice);
  switch (attr) {
  case cudaDevAttrMemoryPoolsSupported:
    *value = s.config.pools ? 1 : 0;
    return cudaSuccess;
  case cudaDevAttrMaxPitch:
    *value = kMaxPitch;
    return cudaSuccess;
  default:
    misuse(s, "cudaDeviceGetAttribute of an attribute the fake does not "
              "model (" + std::to_string(static_cast<int>(attr)) + ")");
    return fail(cudaErrorInvalidValue);
  }
}

cudaError_t cudaGetDevice(int *device) {
  *device = currentDevice;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (!validDevice(device))
    return fail(cudaErrorInvalidDevice);
  currentDevice = device;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t error = lastError;
  lastError = cudaSuccess;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return s.sticky != cudaSuccess ? s.sticky : error;
}

const char *cudaGetErrorName(cudaError_t error) {
  switch (error) {
  case cudaSuccess:
    return "cudaSuccess";
  case cudaErrorInvalidValue:
    return "cudaErrorInvalidValue";
  case cudaErrorMemoryAllocation:
    return "cudaErrorMemoryAllocation";
  case cudaErrorInvalidPitchValue:
    return "cudaErrorInvalidPitchValue";
  case cudaErrorNoDevice:
    return "cudaErrorNoDevice";
  case cudaErrorInvalidDevice:
    return "cudaErrorInvalidDevice";
  case cudaErrorInvalidResourceHandle:
    return "cudaErrorInvalidResourceHandle";
  case cudaErrorNotReady:
    return "cudaErrorNotReady";
  case cudaErrorIllegalAddress:
    return "cudaErrorIllegalAddress";
  case cudaErrorLaunchTimeout:
    return "cudaErrorLaunchTimeout";
  default:
    return "cudaErrorUnknown";
  }
}

const char *cudaGetErrorString(cudaError_t error) {
  return error == cudaSuccess ? "no error" : "error reported by the fake GPU";
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int) {
  *stream = create(state().streams);
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  return destroy(state().streams, stream, "cudaStreamDestroy");
}

cudaError_t cudaStreamSynchronize(cudaStream_t handle) {
  State &s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  CUstream_st *stream = findStream(s, handle);
  if (!stream || !stream->live) {
    misuse(s, "cudaStreamSynchronize of an unknown stream");
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (stream->capture) {
    misuse(s, "cudaStreamSynchronize of a capturing stream");
    invalidateCapture(s, stream);
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  auto deadline = std::chrono::steady_clock::now() + kHangSeconds;
  while (true) {
    advanceAll(s);
    if (stream->ops.empty())
      return s.sticky != cudaSuccess ? fail(s.sticky) : cudaSuccess;
    if (std::chrono::steady_clock::now() >= deadline) {
      misuse(s, "cudaStreamSynchronize on a stream that cannot finish (a "
                "real GPU would hang here)");
      return fail(cudaErrorLaunchTimeout);
    }
    waitForChange(s, lock, 1); // a message from another process cannot notify
  }
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int) {
  *event = create(state().events);
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  return destroy(state().events, event, "cudaEventDestroy");
}

cudaError_t cudaEventRecord(cudaEvent_t handle, cudaStream_t streamHandle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUevent_st *event = findLive(s.events, handle);
  CUstream_st *stream = findStream(s, streamHandle);
  if (!event || !stream || !stream->live) {
    misuse(s, "cudaEventRecord with an unknown event or stream");
    return fail(cudaErrorInvalidResourceHandle);
  }
  Op op;
  op.kind = OpKind::Record;
  if (CUgraph_st *graph = stream->capture) {
    // A record in a capture is the graph's own: the event the host sees
    // keeps its state, and a wait on it joins the capture.
    graph->events.push_back(std::make_unique<CUevent_st>());
    op.event = graph->events.back().get();
    event->capturedIn = graph;
    event->capturedAs = op.event;
    enqueue(s, stream, op);
    return cudaSuccess;
  }
  event->capturedIn = nullptr;
  op.event = event;
  op.generation = ++event->recorded;
  stream->ops.push_back(op);
  advanceAll(s);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t streamHandle, cudaEvent_t handle,
                                unsigned int) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUevent_st *event = findLive(s.events, handle);
  CUstream_st *stream = findStream(s, streamHandle);
  if (!event || !stream || !stream->live) {
    misuse(s, "cudaStreamWaitEvent with an unknown event or stream");
    return fail(cudaErrorInvalidResourceHandle);
  }
  Op op;
  op.kind = OpKind::Wait;
  if (CUgraph_st *graph = event->capturedIn; graph && graph->capturing) {
    if (stream->capture && stream->capture != graph) {
      misuse(s, "cudaStreamWaitEvent joining two captures");
      invalidateCapture(s, stream);
      return cudaErrorStreamCaptureIsolation;
    }
    if (!stream->capture) { // the fork: the stream joins the capture
      stream->capture = graph;
      stream->lane = graph->lanes.size();
      graph->lanes.push_back({stream, {}});
    }
    op.event = event->capturedAs;
    enqueue(s, stream, op);
    return cudaSuccess;
  }
  if (stream->capture) {
    misuse(s, "cudaStreamWaitEvent in a capture on an event recorded "
              "outside it (a dependency across the capture's boundary)");
    invalidateCapture(s, stream);
    return cudaErrorStreamCaptureIsolation;
  }
  op.event = event;
  op.generation = event->recorded; // the latest record at this call
  stream->ops.push_back(op);
  advanceAll(s);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t handle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUevent_st *event = findLive(s.events, handle);
  if (!event) {
    misuse(s, "cudaEventQuery of an unknown event");
    return fail(cudaErrorInvalidResourceHandle);
  }
  if (event->capturedIn && event->capturedIn->capturing) {
    misuse(s, "cudaEventQuery of an event recorded in a capture in progress");
    event->capturedIn->invalidated = true;
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  advanceAll(s);
  if (s.sticky != cudaSuccess)
    return fail(s.sticky);
  return event->completed >= event->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            enum cudaMemcpyKind, cudaStream_t streamHandle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUstream_st *stream = liveStream(s, streamHandle, "cudaMemcpyAsync");
  if (!stream)
    return fail(cudaErrorInvalidResourceHandle);
  if (!rangeOk(s, dst, count, "cudaMemcpyAsync", "the destination") ||
      !rangeOk(s, src, count, "cudaMemcpyAsync", "the source"))
    return fail(cudaErrorInvalidValue);
  if (s.sticky != cudaSuccess)
    return fail(s.sticky);
  Op op;
  op.kind = OpKind::Copy;
  op.dst = dst;
  op.src = src;
  op.bytes = count;
  enqueue(s, stream, op);
  advanceAll(s);
  return cudaSuccess;
}

cudaError_t cudaMemcpy2DAsync(void *dst, size_t dpitch, const void *src,
                              size_t spitch, size_t width, size_t height,
                              enum cudaMemcpyKind, cudaStream_t streamHandle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUstream_st *stream = liveStream(s, streamHandle, "cudaMemcpy2DAsync");
  if (!stream)
    return fail(cudaErrorInvalidResourceHandle);
  if (width > dpitch || width > spitch ||
      dpitch > static_cast<size_t>(kMaxPitch) ||
      spitch > static_cast<size_t>(kMaxPitch)) {
    misuse(s, "cudaMemcpy2DAsync with a row of " + std::to_string(width) +
                  " bytes and pitches " + std::to_string(spitch) + "/" +
                  std::to_string(dpitch));
    return fail(cudaErrorInvalidPitchValue);
  }
  const size_t dstBytes = height ? (height - 1) * dpitch + width : 0;
  const size_t srcBytes = height ? (height - 1) * spitch + width : 0;
  if (!rangeOk(s, dst, dstBytes, "cudaMemcpy2DAsync", "the destination") ||
      !rangeOk(s, src, srcBytes, "cudaMemcpy2DAsync", "the source"))
    return fail(cudaErrorInvalidValue);
  if (s.sticky != cudaSuccess)
    return fail(s.sticky);
  Op op;
  op.kind = OpKind::Call;
  op.call = [=](State &) {
    for (size_t row = 0; row < height; ++row)
      std::memmove(static_cast<char *>(dst) + row * dpitch,
                   static_cast<const char *>(src) + row * spitch, width);
  };
  enqueue(s, stream, std::move(op));
  advanceAll(s);
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *dst, int value, size_t count,
                            cudaStream_t streamHandle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUstream_st *stream = liveStream(s, streamHandle, "cudaMemsetAsync");
  if (!stream)
    return fail(cudaErrorInvalidResourceHandle);
  if (count && !insideAllocation(s, dst, static_cast<int64_t>(count))) {
    misuse(s, "cudaMemsetAsync of " + std::to_string(count) +
                  " bytes outside GPU memory");
    return fail(cudaErrorInvalidValue);
  }
  if (s.sticky != cudaSuccess)
    return fail(s.sticky);
  Op op;
  op.kind = OpKind::Fill;
  op.dst = dst;
  op.value = value;
  op.bytes = count;
  enqueue(s, stream, op);
  advanceAll(s);
  return cudaSuccess;
}

cudaError_t cudaMalloc(void **memory, size_t bytes) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  *memory = allocate(s, bytes, false, false, currentDevice);
  return *memory ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFree(void *memory) {
  if (!memory)
    return cudaSuccess;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  advanceAll(s); // cudaFree waits for the work queued before it
  return release(s, memory, false, "cudaFree") ? cudaSuccess
                                               : fail(cudaErrorInvalidValue);
}

cudaError_t cudaMallocHost(void **memory, size_t bytes) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  *memory = allocate(s, bytes, true, false, currentDevice);
  return *memory ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeHost(void *memory) {
  if (!memory)
    return cudaSuccess;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  advanceAll(s);
  return release(s, memory, true, "cudaFreeHost")
             ? cudaSuccess
             : fail(cudaErrorInvalidValue);
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t *pool,
                              const cudaMemPoolProps *props) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!s.config.pools ||
      props->location.type != cudaMemLocationTypeDevice ||
      !validDevice(props->location.id) ||
      props->allocType != cudaMemAllocationTypePinned) {
    misuse(s, "cudaMemPoolCreate that CUDA would refuse");
    return fail(cudaErrorInvalidValue);
  }
  s.pools.push_back(std::make_unique<CUmemPoolHandle_st>());
  s.pools.back()->ordinal = props->location.id;
  *pool = s.pools.back().get();
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, enum cudaMemPoolAttr,
                                    void *) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!findLive(s.pools, pool)) {
    misuse(s, "cudaMemPoolSetAttribute of an unknown pool");
    return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (!findLive(s.pools, pool)) {
    misuse(s, "cudaMemPoolTrimTo of an unknown pool");
    return fail(cudaErrorInvalidValue);
  }
  return cudaSuccess;
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t handle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUmemPoolHandle_st *pool = findLive(s.pools, handle);
  if (!pool) {
    misuse(s, "cudaMemPoolDestroy of an unknown pool");
    return fail(cudaErrorInvalidValue);
  }
  // Memory still out stays valid until it is freed, as CUDA's does.
  pool->live = false;
  return cudaSuccess;
}

cudaError_t cudaMallocFromPoolAsync(void **memory, size_t bytes,
                                    cudaMemPool_t handle,
                                    cudaStream_t streamHandle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUmemPoolHandle_st *pool = findLive(s.pools, handle);
  if (!pool || !liveStream(s, streamHandle, "cudaMallocFromPoolAsync")) {
    if (!pool)
      misuse(s, "cudaMallocFromPoolAsync from an unknown pool");
    return fail(cudaErrorInvalidValue);
  }
  if (CUstream_st *stream = findStream(s, streamHandle); stream->capture) {
    misuse(s, "cudaMallocFromPoolAsync on a capturing stream (graph memory "
              "nodes are not modelled by the fake)");
    invalidateCapture(s, stream);
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  *memory = allocate(s, bytes, false, true, pool->ordinal);
  return *memory ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaFreeAsync(void *memory, cudaStream_t streamHandle) {
  if (!memory)
    return cudaSuccess;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUstream_st *stream = liveStream(s, streamHandle, "cudaFreeAsync");
  if (!stream)
    return fail(cudaErrorInvalidResourceHandle);
  auto it = s.allocations.find(static_cast<const char *>(memory));
  if (it == s.allocations.end() || !it->second.fromPool) {
    misuse(s, "cudaFreeAsync of memory that is not a live pool allocation");
    return fail(cudaErrorInvalidValue);
  }
  Op op;
  op.kind = OpKind::Free;
  op.dst = memory;
  enqueue(s, stream, op);
  advanceAll(s);
  return cudaSuccess;
}

} // extern "C"
