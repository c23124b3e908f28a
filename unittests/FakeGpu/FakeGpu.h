//===- FakeGpu.h - A host-memory stand-in for CUDA, cuBLAS and NCCL -*- C++ -*-===//
//
// libMuonFakeGpu exports the CUDA runtime calls the CUDA backend makes
// (devices, streams, events, memory and its pools, async copies and fills),
// the cuBLAS calls of its Newton-Schulz (handles, strided, batched and
// grouped GEMMs) and NCCL's API, run on host memory: "device" pointers are
// host pointers, a stream is a queue of operations that advances whenever a
// fake call is made, and ranks (threads of one process, or processes)
// send each other bytes through files. With FakeKernels.cpp, which runs
// the kernels' own bodies (KernelBodies.h) on the host over their launch
// geometry, the whole backend (CudaDevice, NewtonSchulz, the NCCL
// transport) runs unchanged without a GPU. The fake checks what real CUDA
// and cuBLAS check (handles, streams, leading dimensions, types), and what
// a GPU would fault on or silently get wrong (memory outside every
// allocation, outputs that overlap their inputs or each other), and counts
// each such misuse. The calls below control it: faults to inject and
// counters that tell what the code under test did.
//
// Environment, read once when the fake starts:
//   MUON_FAKE_GPU_COUNT    GPUs to report (default 1)
//   MUON_FAKE_GPU_MEMORY   bytes of memory per process (default 80 GiB)
//   MUON_FAKE_GPU_POOLS    0: no memory-pool support (cudaMalloc instead)
//   MUON_FAKE_CUBLAS_GROUPED  which grouped GEMMs cuBLAS takes:
//                          documented (default: bf16 and f32 with
//                          CUBLAS_COMPUTE_32F, not the pedantic f32 the
//                          backend asks for), all, or none
// A process that links libMuonFakeGpu loads it as NCCL too: it sets
// MUON_NCCL_LIBRARY to its own file unless that is set.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_UNITTESTS_FAKEGPU_FAKEGPU_H
#define MUON_UNITTESTS_FAKEGPU_FAKEGPU_H

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace muon::fakegpu {

struct Counters {
  int64_t liveStreams = 0, liveEvents = 0, liveComms = 0;
  /// Graphs made by stream capture and their instantiations still live;
  /// graph launches so far.
  int64_t liveGraphs = 0, liveGraphExecs = 0, graphLaunches = 0;
  int64_t liveAllocations = 0, livePools = 0, liveBlasHandles = 0;
  /// Bytes of live device memory (against the memory limit).
  int64_t deviceBytes = 0;
  int64_t commsDestroyed = 0, commsAborted = 0;
  /// Operations still queued on any stream (after advancing them all).
  int64_t pendingOps = 0;
  /// Point-to-point messages delivered, and bytes in them.
  int64_t messages = 0, bytes = 0;
  /// Kernels run, by name ("momentumKernel", ...).
  std::map<std::string, int64_t> kernels;
  /// cuBLAS products: calls of cublasGemmStridedBatchedEx,
  /// cublasGemmBatchedEx and cublasGemmGroupedBatchedEx that ran; grouped
  /// calls refused as unsupported; single products computed in all.
  int64_t stridedCalls = 0, batchedCalls = 0, groupedCalls = 0;
  int64_t groupedRefused = 0, products = 0;
  /// Calls real CUDA, cuBLAS or NCCL would refuse, that would hang or fault
  /// a GPU, or whose results a GPU leaves undefined (a send outside a
  /// group, an unknown handle, a leading dimension too small, memory
  /// outside every allocation, a product writing over its inputs);
  /// `lastMisuse` says what the latest was.
  int64_t misuses = 0;
  std::string lastMisuse;
};

/// What the fake has seen since the last reset().
Counters counters();

/// Forgets injected faults, zeroes the counters and clears a sticky error
/// (live objects stay).
void reset();

/// Messages sent by `rank` from now on are lost: its peers' receives never
/// complete, as when a process dies mid-exchange.
void dropSendsFrom(int rank);

/// ncclCommGetAsyncError reports `result` on `rank`'s communicators.
void setAsyncError(int rank, int result);

/// The next call of the NCCL function `call` ("ncclSend", "ncclRecv",
/// "ncclGroupEnd", "ncclCommInitRank", "ncclGetUniqueId") made for `rank`
/// returns `result` without doing anything.
void failNext(const std::string &call, int rank, int result);

/// A held stream does not advance until released.
void holdStream(cudaStream_t stream, bool held);

/// Which grouped GEMMs the fake cuBLAS takes; the others it refuses with
/// CUBLAS_STATUS_NOT_SUPPORTED, as a cuBLAS without them would.
enum class GroupedSupport { Documented, All, None };
void setGroupedSupport(GroupedSupport support);

/// Bytes of device memory from now on (allocations beyond fail with
/// cudaErrorMemoryAllocation).
void setMemoryLimit(int64_t bytes);

/// Queues `body` on `stream` as a kernel called `name` that may touch the
/// `spans` (pointer, bytes): when the stream reaches it, each span must lie
/// in a live device allocation (else a misuse, the body does not run and
/// the GPU is left broken, as by an illegal address), then `body` runs and
/// the red zones of those allocations are checked. cudaSuccess, or the
/// error a launch on that stream gets.
cudaError_t launchKernel(cudaStream_t stream, const char *name,
                         std::vector<std::pair<const void *, int64_t>> spans,
                         std::function<void()> body);

/// Fills `bytes` with what the fake's fresh, freed and shared memory holds:
/// the bytes C1 FF over and over, a NaN read as f32, bf16, f16 or f64, and
/// not the red zones' bytes, so that garbage written there is caught.
void fillGarbage(void *memory, size_t bytes);

/// Prints each misuse to stderr as it happens and, at the process's exit,
/// the count of misuses since the last reset and every object still live,
/// making the exit status 86 when there is one (for programs that link the
/// fake in place of a GPU). With
/// MUON_FAKE_GPU_SUMMARY=1 it first prints one line of what ran: kernels
/// by name, cuBLAS calls by kind, NCCL messages, misuses.
void checkAtExit();

} // namespace muon::fakegpu

#endif // MUON_UNITTESTS_FAKEGPU_FAKEGPU_H
