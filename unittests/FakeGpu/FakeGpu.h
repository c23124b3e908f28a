//===- FakeGpu.h - A host-memory stand-in for CUDA streams and NCCL -*- C++ -*-===//
//
// libMuonFakeGpu exports the few CUDA runtime calls the NCCL transport makes
// (streams, events, async copies, the current device) and NCCL's API, run on
// host memory: "device" pointers are host pointers, a stream is a queue of
// operations that advances whenever a fake call is made, and ranks are
// threads of one process that send each other bytes through mailboxes. A
// test links the library for the CUDA calls and loads it as NCCL (dlopen,
// as the backend loads libnccl.so.2), so that NcclCommunicator.cpp runs
// unchanged without a GPU. The calls below control it: faults to inject
// and counters that tell what the code under test did.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_UNITTESTS_FAKEGPU_FAKEGPU_H
#define MUON_UNITTESTS_FAKEGPU_FAKEGPU_H

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

namespace muon::fakegpu {

struct Counters {
  int64_t liveStreams = 0, liveEvents = 0, liveComms = 0;
  int64_t commsDestroyed = 0, commsAborted = 0;
  /// Operations still queued on any stream (after advancing them all).
  int64_t pendingOps = 0;
  /// Point-to-point messages delivered, and bytes in them.
  int64_t messages = 0, bytes = 0;
  /// Calls real CUDA or NCCL would refuse or that would hang them (a send
  /// outside a group, an unknown handle, a group left open); `lastMisuse`
  /// says what the latest was.
  int64_t misuses = 0;
  std::string lastMisuse;
};

/// What the fake has seen since the last reset().
Counters counters();

/// Forgets injected faults and zeroes the counters (live objects stay).
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

} // namespace muon::fakegpu

#endif // MUON_UNITTESTS_FAKEGPU_FAKEGPU_H
