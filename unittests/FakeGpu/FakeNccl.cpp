//===- FakeNccl.cpp - NCCL's point-to-point API on the fake GPU's streams -===//
//
// Ranks are threads; ncclCommInitRank blocks until every rank of the unique
// id has joined, as NCCL's does. Sends and receives are collected inside a
// group and queued on their streams at ncclGroupEnd (NCCL launches the
// group there); a send delivers its bytes into the receiver's mailbox when
// its stream reaches it, and a receive completes when the matching message
// is there. An aborted communicator's queued operations end at once.
// Declarations come from nccl.h where the toolkit has it, so the fake keeps
// NCCL's signatures, and the backend's hand-written ABI (NcclLibrary.h) is
// checked against them here.
//
//===----------------------------------------------------------------------===//
#include "FakeGpuState.h"

#include "NcclLibrary.h"

#include <chrono>
#include <cstdio>
#include <cstring>

#if __has_include(<nccl.h>)
#include <nccl.h>

namespace abi = muon::runtime::cuda::nccl;
static_assert(sizeof(ncclUniqueId) == sizeof(abi::UniqueId));
static_assert(sizeof(ncclResult_t) == sizeof(abi::Result));
static_assert(sizeof(ncclDataType_t) == sizeof(abi::DataType));
static_assert(ncclSuccess == abi::kSuccess);
static_assert(ncclInProgress == abi::kInProgress);
static_assert(ncclChar == abi::kChar);
#else
// Without nccl.h: NCCL 2's C ABI as the backend declares it.
using ncclResult_t = int;
using ncclDataType_t = int;
using ncclUniqueId = muon::runtime::cuda::nccl::UniqueId;
using ncclComm_t = ncclComm *;
enum {
  ncclSuccess = 0,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclUint8 = 1,
};
#endif

using namespace muon::fakegpu;

namespace {
/// Sends and receives of the open group, queued at its end.
struct GroupOp {
  CUstream_st *stream;
  Op op;
};
thread_local int groupDepth = 0;
thread_local std::vector<GroupOp> groupOps;
thread_local int groupRank = -1; // the rank of the group's operations

/// How long ncclCommInitRank waits for the other ranks.
constexpr std::chrono::seconds kJoinSeconds(20);

ncclComm *findLive(State &s, ncclComm_t handle) {
  for (auto &comm : s.comms)
    if (comm.get() == handle && comm->live)
      return comm.get();
  return nullptr;
}

/// A send or a receive, collected into the open group.
ncclResult_t pointToPoint(OpKind kind, const void *src, void *dst,
                          size_t count, ncclDataType_t type, int peer,
                          ncclComm_t handle, cudaStream_t streamHandle) {
  const char *call = kind == OpKind::Send ? "ncclSend" : "ncclRecv";
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ncclComm *comm = findLive(s, handle);
  CUstream_st *stream = findStream(s, streamHandle);
  if (!comm || !stream || !stream->live) {
    misuse(s, std::string(call) + " with an unknown communicator or stream");
    return ncclInvalidArgument;
  }
  if (groupDepth == 0) {
    // Legal in NCCL, but unpaired sends and receives of two ranks then
    // wait for each other: the transport always groups them.
    misuse(s, std::string(call) + " outside a group");
    return ncclInvalidUsage;
  }
  if (type != ncclChar && type != ncclUint8) {
    misuse(s, std::string(call) + " of a type other than bytes");
    return ncclInvalidArgument;
  }
  if (peer < 0 || peer >= comm->world->size) {
    misuse(s, std::string(call) + " with peer " + std::to_string(peer));
    return ncclInvalidArgument;
  }
  groupRank = comm->rank;
  int injected = ncclSuccess;
  if (takeFailure(s, call, comm->rank, injected))
    return static_cast<ncclResult_t>(injected);
  Op op;
  op.kind = kind;
  op.src = src;
  op.dst = dst;
  op.bytes = count;
  op.comm = comm;
  op.peer = peer;
  groupOps.push_back({stream, op});
  return ncclSuccess;
}
} // namespace

extern "C" {

ncclResult_t ncclGetVersion(int *version) {
  *version = 22803; // 2.28.3
  return ncclSuccess;
}

const char *ncclGetErrorString(ncclResult_t result) {
  switch (static_cast<int>(result)) {
  case 0:
    return "no error";
  case 1:
    return "unhandled cuda error";
  case 2:
    return "unhandled system error";
  case 3:
    return "internal error";
  case 4:
    return "invalid argument";
  case 5:
    return "invalid usage";
  case 6:
    return "remote process exited or there was a network error";
  case 7:
    return "NCCL operation in progress";
  default:
    return "unknown result code";
  }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  int injected = ncclSuccess;
  if (takeFailure(s, "ncclGetUniqueId", -1, injected))
    return static_cast<ncclResult_t>(injected);
  std::memset(id, 0, sizeof(*id));
  std::snprintf(reinterpret_cast<char *>(id), sizeof(*id), "fake-%lld",
                static_cast<long long>(s.nextUniqueId++));
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t *handle, int ranks, ncclUniqueId id,
                              int rank) {
  State &s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  if (ranks < 1 || rank < 0 || rank >= ranks) {
    misuse(s, "ncclCommInitRank of rank " + std::to_string(rank) + " of " +
                  std::to_string(ranks));
    return ncclInvalidArgument;
  }
  int injected = ncclSuccess;
  if (takeFailure(s, "ncclCommInitRank", rank, injected))
    return static_cast<ncclResult_t>(injected);
  const char *bytes = reinterpret_cast<const char *>(&id);
  const std::string key(bytes, strnlen(bytes, sizeof(id)));
  std::unique_ptr<World> &world = s.worlds[key];
  if (!world) {
    world = std::make_unique<World>();
    world->size = ranks;
  }
  if (world->size != ranks) {
    misuse(s, "ncclCommInitRank with " + std::to_string(ranks) +
                  " ranks on an id of " + std::to_string(world->size));
    return ncclInvalidArgument;
  }
  s.comms.push_back(std::make_unique<ncclComm>());
  ncclComm *comm = s.comms.back().get();
  comm->world = world.get();
  comm->rank = rank;
  World *joinedWorld = world.get();
  ++joinedWorld->joined;
  s.changed.notify_all();
  if (!s.changed.wait_for(lock, kJoinSeconds, [&] {
        return joinedWorld->joined >= joinedWorld->size;
      })) {
    misuse(s, "ncclCommInitRank waited for ranks that never joined (NCCL "
              "would wait forever)");
    comm->live = false;
    return ncclSystemError;
  }
  *handle = comm;
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t handle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ncclComm *comm = findLive(s, handle);
  if (!comm) {
    misuse(s, "ncclCommDestroy of an unknown communicator");
    return ncclInvalidArgument;
  }
  if (groupDepth > 0)
    misuse(s, "ncclCommDestroy inside a group that was never ended");
  advanceAll(s);
  for (auto &stream : s.streams)
    for (const Op &op : stream->ops)
      if (op.comm == comm) {
        misuse(s, "ncclCommDestroy with operations in flight (NCCL would "
                  "wait for them, forever if a peer is gone)");
        break;
      }
  comm->live = false;
  ++s.counters.commsDestroyed;
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t handle) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ncclComm *comm = findLive(s, handle);
  if (!comm) {
    misuse(s, "ncclCommAbort of an unknown communicator");
    return ncclInvalidArgument;
  }
  if (groupDepth > 0)
    misuse(s, "ncclCommAbort inside a group that was never ended");
  comm->aborted = true; // its queued operations end
  comm->live = false;
  ++s.counters.commsAborted;
  advanceAll(s);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t handle, ncclResult_t *async) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  ncclComm *comm = findLive(s, handle);
  if (!comm) {
    misuse(s, "ncclCommGetAsyncError of an unknown communicator");
    return ncclInvalidArgument;
  }
  auto it = s.asyncErrors.find(comm->rank);
  *async = static_cast<ncclResult_t>(it == s.asyncErrors.end() ? ncclSuccess
                                                               : it->second);
  return ncclSuccess;
}

ncclResult_t ncclGroupStart() {
  if (groupDepth++ == 0) {
    groupOps.clear();
    groupRank = -1;
  }
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (groupDepth == 0) {
    misuse(s, "ncclGroupEnd without ncclGroupStart");
    return ncclInvalidUsage;
  }
  if (--groupDepth > 0)
    return ncclSuccess;
  int injected = ncclSuccess;
  if (takeFailure(s, "ncclGroupEnd", groupRank, injected)) {
    groupOps.clear(); // nothing was launched
    return static_cast<ncclResult_t>(injected);
  }
  for (GroupOp &queued : groupOps)
    queued.stream->ops.push_back(queued.op);
  groupOps.clear();
  advanceAll(s);
  return ncclSuccess;
}

ncclResult_t ncclSend(const void *buffer, size_t count, ncclDataType_t type,
                      int peer, ncclComm_t comm, cudaStream_t stream) {
  return pointToPoint(OpKind::Send, buffer, nullptr, count, type, peer, comm,
                      stream);
}

ncclResult_t ncclRecv(void *buffer, size_t count, ncclDataType_t type,
                      int peer, ncclComm_t comm, cudaStream_t stream) {
  return pointToPoint(OpKind::Recv, nullptr, buffer, count, type, peer, comm,
                      stream);
}

} // extern "C"
