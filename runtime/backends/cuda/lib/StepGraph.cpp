//===- StepGraph.cpp - A step recorded into a CUDA graph ------------------===//
#include "StepGraph.h"

#include "CublasLibrary.h"
#include "CudaSupport.h"

#include <algorithm>

namespace muon::runtime::cuda {

char StepGraph::unchecked = 0;

namespace {

/// cuBLAS's own workspace for a handle on Hopper (its documentation's
/// recommendation); set before a capture so that no product allocates one
/// inside the graph.
constexpr size_t kBlasWorkspaceBytes = size_t(32) << 20;

/// Scalar slots of a first recording; later ones double what was used.
constexpr int64_t kFirstArenaSlots = 256;

const char *callName(RecordedCall call) {
  switch (call) {
  case RecordedCall::Allocate:
    return "allocate";
  case RecordedCall::Zero:
    return "zero";
  case RecordedCall::ElementStep:
    return "runElementStep";
  case RecordedCall::CopyBox:
    return "copyBox";
  case RecordedCall::MatrixStep:
    return "runMatrixStep";
  case RecordedCall::NewtonSchulz:
    return "newtonSchulz";
  }
  return "a call";
}

} // namespace

StepGraph::StepGraph(StreamMemory memory, cublasHandle_t blas)
    : memory(memory), stream(memory.stream), blas(blas) {}

StepGraph::~StepGraph() {
  drop();
  if (blasWorkspace) {
    // Back to cuBLAS's own before the memory goes.
    cublas::api().cublasSetWorkspace(blas, nullptr, 0);
    MUON_CUDA_CHECK(cudaFree(blasWorkspace));
  }
  if (hostArena)
    MUON_CUDA_CHECK(cudaFreeHost(hostArena));
  if (deviceArena)
    MUON_CUDA_CHECK(cudaFree(deviceArena));
}

bool StepGraph::growArena(int64_t slots) {
  if (slots <= arenaSlots)
    return true;
  if (hostArena)
    MUON_CUDA_CHECK(cudaFreeHost(hostArena));
  if (deviceArena)
    MUON_CUDA_CHECK(cudaFree(deviceArena));
  hostArena = deviceArena = nullptr;
  arenaSlots = 0;
  const size_t bytes = static_cast<size_t>(slots) * kSlotBytes;
  if (cudaMallocHost(reinterpret_cast<void **>(&hostArena), bytes) !=
          cudaSuccess ||
      cudaMalloc(reinterpret_cast<void **>(&deviceArena), bytes) !=
          cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  arenaSlots = slots;
  return true;
}

Status StepGraph::beginRecording() {
  drop();
  if (!blasWorkspace) {
    if (cudaMalloc(&blasWorkspace, kBlasWorkspaceBytes) != cudaSuccess) {
      (void)cudaGetLastError();
      blasWorkspace = nullptr;
      return unavailable("no room on the GPU for cuBLAS's workspace");
    }
    cublasStatus_t status =
        cublas::api().cublasSetWorkspace(blas, blasWorkspace, kBlasWorkspaceBytes);
    if (status != CUBLAS_STATUS_SUCCESS)
      return unavailable("cublasSetWorkspace: " + describe(status));
  }
  if (!growArena(std::max(kFirstArenaSlots, 2 * slotsUsed)))
    return unavailable("no room for the step's scalar slots");
  // Relaxed: the executor's allocations while recording are cudaMalloc's,
  // which the other capture modes forbid.
  cudaError_t status =
      cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return unavailable("cudaStreamBeginCapture: " + describe(status));
  }
  current = Mode::Recording;
  slotsUsed = 0;
  return okStatus();
}

Status StepGraph::endRecording() {
  current = Mode::Idle;
  cudaError_t status = cudaStreamEndCapture(stream, &graph);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    graph = nullptr;
    fail("cudaStreamEndCapture: " + describe(status));
  }
  if (failure.empty()) {
    status = cudaGraphInstantiate(&exec, graph, 0);
    if (status != cudaSuccess) {
      (void)cudaGetLastError();
      exec = nullptr;
      fail("cudaGraphInstantiate: " + describe(status));
    }
  }
  if (failure.empty())
    return okStatus();
  Status why = unavailable(failure);
  // What failed inside the capture is the recording's, not the step's:
  // the step runs again without it.
  (void)takeFailure();
  drop();
  return why;
}

void StepGraph::beginCheck() {
  current = Mode::Checking;
  checked = 0;
  failure.clear();
}

Status StepGraph::endCheck() {
  current = Mode::Idle;
  if (failure.empty() && checked != calls.size())
    fail("the step made " + std::to_string(checked) + " of the recording's " +
         std::to_string(calls.size()) + " calls");
  if (failure.empty())
    return okStatus();
  return failedPrecondition(failure);
}

void StepGraph::replay() {
  if (!exec)
    return;
  if (slotsUsed > 0)
    MUON_CUDA_CHECK(cudaMemcpyAsync(
        deviceArena, hostArena, static_cast<size_t>(slotsUsed) * kSlotBytes,
        cudaMemcpyHostToDevice, stream));
  MUON_CUDA_CHECK(cudaGraphLaunch(exec, stream));
  for (void *p : releaseAfterReplay)
    memory.release(p);
  releaseAfterReplay.clear();
}

void StepGraph::drop() {
  if (current == Mode::Recording) {
    cudaGraph_t abandoned = nullptr;
    if (cudaStreamEndCapture(stream, &abandoned) == cudaSuccess && abandoned)
      MUON_CUDA_CHECK(cudaGraphDestroy(abandoned));
    (void)cudaGetLastError();
  }
  current = Mode::Idle;
  if (exec)
    MUON_CUDA_CHECK(cudaGraphExecDestroy(exec));
  if (graph)
    MUON_CUDA_CHECK(cudaGraphDestroy(graph));
  exec = nullptr;
  graph = nullptr;
  // The recording's memory may still be read by a launch in flight.
  if (!owned.empty())
    MUON_CUDA_CHECK(cudaStreamSynchronize(stream));
  for (void *p : owned)
    MUON_CUDA_CHECK(cudaFree(p));
  owned.clear();
  for (void *p : releaseAfterReplay)
    memory.release(p);
  releaseAfterReplay.clear();
  calls.clear();
  checked = 0;
  failure.clear();
}

void StepGraph::fail(const std::string &reason) {
  if (failure.empty())
    failure = reason;
}

bool StepGraph::note(const CallKey &key) {
  void *slot = nullptr;
  return noteSlot(key, nullptr, 0, slot);
}

bool StepGraph::noteSlot(const CallKey &key, const void *scalars, size_t bytes,
                         void *&slot) {
  slot = nullptr;
  if (current == Mode::Recording) {
    Noted noted{key};
    if (scalars) {
      if (slotsUsed == arenaSlots) {
        fail("the step has more than " + std::to_string(arenaSlots) +
             " calls with step scalars (the next recording has room for "
             "twice as many)");
        slotsUsed = arenaSlots + 1; // what growArena doubles next time
        return true;
      }
      noted.slot = slotsUsed++;
      std::memcpy(hostArena + noted.slot * kSlotBytes, scalars, bytes);
      slot = deviceArena + noted.slot * kSlotBytes;
    }
    calls.push_back(std::move(noted));
    return true;
  }
  // Checking.
  if (!failure.empty())
    return false;
  if (checked >= calls.size() || !(calls[checked].key == key)) {
    fail(std::string("call ") + std::to_string(checked) + " of the step (" +
         callName(key.call()) + ") is not the recording's (" +
         (checked < calls.size() ? callName(calls[checked].key.call())
                                 : "none") +
         ")");
    return false;
  }
  if (scalars && calls[checked].slot >= 0)
    std::memcpy(hostArena + calls[checked].slot * kSlotBytes, scalars, bytes);
  ++checked;
  return false;
}

void *StepGraph::allocate(int64_t bytes, bool noted) {
  const size_t size = static_cast<size_t>(std::max<int64_t>(bytes, 1));
  if (current == Mode::Checking) {
    if (!noted)
      return nullptr; // a device call's scratch: the call itself is noted
    CallKey key(RecordedCall::Allocate);
    key << bytes;
    const size_t at = checked;
    note(key);
    // On a difference, any address will do: nothing runs, and the step
    // runs again.
    return failure.empty() ? calls[at].memory : &unchecked;
  }
  void *memory = nullptr;
  if (cudaMalloc(&memory, size) != cudaSuccess) {
    (void)cudaGetLastError();
    fail("no room on the GPU for " + std::to_string(bytes) +
         " bytes the recording would keep");
    return nullptr;
  }
  owned.insert(memory);
  MUON_CUDA_CHECK(cudaMemsetAsync(memory, 0, size, stream));
  if (noted) {
    CallKey key(RecordedCall::Allocate);
    key << bytes;
    calls.push_back({key, -1, memory});
  }
  return memory;
}

bool StepGraph::release(void *memory) {
  if (owned.count(memory) || memory == &unchecked)
    return true;
  if (current == Mode::Idle)
    return false;
  releaseAfterReplay.push_back(memory);
  return true;
}

} // namespace muon::runtime::cuda
