//===- FakeCudaRuntime.cpp - The CUDA runtime calls of the NCCL transport -===//
//
// Streams, events, async copies and the current device on host memory, with
// CUDA's semantics where the transport relies on them: a stream runs its
// operations in order; an event is complete when the stream that recorded
// it reached the record (or was never recorded); cudaStreamWaitEvent waits
// for the record issued before it; a destroyed stream still finishes its
// work. One GPU, ordinal 0. The declarations come from the CUDA toolkit's
// headers, so the signatures are the real ones.
//
//===----------------------------------------------------------------------===//
#include "FakeGpuState.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <chrono>

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
} // namespace

extern "C" {

cudaError_t cudaGetDevice(int *device) {
  *device = currentDevice;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
  if (device != 0)
    return fail(cudaErrorInvalidDevice);
  currentDevice = device;
  return cudaSuccess;
}

cudaError_t cudaGetLastError(void) {
  cudaError_t error = lastError;
  lastError = cudaSuccess;
  return error;
}

const char *cudaGetErrorName(cudaError_t error) {
  switch (error) {
  case cudaSuccess:
    return "cudaSuccess";
  case cudaErrorInvalidValue:
    return "cudaErrorInvalidValue";
  case cudaErrorInvalidDevice:
    return "cudaErrorInvalidDevice";
  case cudaErrorInvalidResourceHandle:
    return "cudaErrorInvalidResourceHandle";
  case cudaErrorNotReady:
    return "cudaErrorNotReady";
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
  auto deadline = std::chrono::steady_clock::now() + kHangSeconds;
  while (true) {
    advanceAll(s);
    if (stream->ops.empty())
      return cudaSuccess;
    if (s.changed.wait_until(lock, deadline) == std::cv_status::timeout) {
      misuse(s, "cudaStreamSynchronize on a stream that cannot finish (a "
                "real GPU would hang here)");
      return fail(cudaErrorLaunchTimeout);
    }
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
  advanceAll(s);
  return event->completed >= event->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t count,
                            enum cudaMemcpyKind, cudaStream_t streamHandle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUstream_st *stream = findStream(s, streamHandle);
  if (!stream || !stream->live) {
    misuse(s, "cudaMemcpyAsync on an unknown stream");
    return fail(cudaErrorInvalidResourceHandle);
  }
  Op op;
  op.kind = OpKind::Copy;
  op.dst = dst;
  op.src = src;
  op.bytes = count;
  stream->ops.push_back(op);
  advanceAll(s);
  return cudaSuccess;
}

// CudaSupport.cpp's describe() of cuBLAS statuses.
const char *cublasGetStatusName(cublasStatus_t) { return "CUBLAS_STATUS_FAKE"; }
const char *cublasGetStatusString(cublasStatus_t) {
  return "cuBLAS is not part of the fake GPU";
}

} // extern "C"
