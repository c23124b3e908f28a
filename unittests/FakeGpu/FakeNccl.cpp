//===- FakeNccl.cpp - NCCL's point-to-point API on the fake GPU's streams -===//
//
// Ranks are threads of one process or processes of one machine: they meet
// in a directory that ncclGetUniqueId makes (under $TMPDIR) and whose name
// is the unique id. ncclCommInitRank leaves a file there and blocks until
// every rank of the id has, as NCCL's blocks until every rank joined.
// Sends and receives are collected inside a group and queued on their
// streams at ncclGroupEnd (NCCL launches the group there); a send writes
// its bytes as the next message file from its rank to its peer when its
// stream reaches it, and a receive completes when the matching file is
// there (it reads and removes it). An aborted communicator's queued
// operations end at once. When every rank has destroyed or aborted its
// communicator, the last one removes the directory.
// Declarations come from nccl.h where the toolkit has it, so the fake keeps
// NCCL's signatures, and the backend's hand-written ABI (NcclLibrary.h) is
// checked against them here.
//
//===----------------------------------------------------------------------===//
#include "FakeGpuState.h"

#include "NcclLibrary.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

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

std::string fileIn(const World &world, const std::string &name) {
  return world.directory + "/" + name;
}

bool exists(const std::string &path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

/// Writes `bytes` to `path` all at once (a temporary file, then renamed),
/// so that a reader never sees part of it.
bool writeAtomically(const std::string &path, const char *bytes, size_t n) {
  const std::string temporary = path + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out.write(bytes, static_cast<std::streamsize>(n));
    if (!out)
      return false;
  }
  return std::rename(temporary.c_str(), path.c_str()) == 0;
}

/// "msg-<from>-<to>-<seq>": the seq-th message from `from` to `to`.
std::string messageName(int from, int to, int64_t seq) {
  return "msg-" + std::to_string(from) + "-" + std::to_string(to) + "-" +
         std::to_string(seq);
}

/// Marks `comm`'s rank as gone; the last rank of the world to go removes
/// the directory with whatever messages were never received.
void leave(ncclComm *comm) {
  const World &world = *comm->world;
  const std::string mine = fileIn(world, "left-" + std::to_string(comm->rank));
  writeAtomically(mine, "", 0);
  for (int r = 0; r < world.size; ++r)
    if (!exists(fileIn(world, "left-" + std::to_string(r))))
      return;
  if (DIR *dir = ::opendir(world.directory.c_str())) {
    while (dirent *entry = ::readdir(dir)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..")
        ::unlink(fileIn(world, name).c_str());
    }
    ::closedir(dir);
  }
  ::rmdir(world.directory.c_str()); // another rank may have removed it
}

/// Ids whose directory no rank joined (every ncclCommInitRank failed) are
/// removed when the process that made them ends; a joined one goes with
/// its last rank (leave()).
void removeUnjoined();
std::vector<std::string> &madeDirectories() {
  static auto *made = new std::vector<std::string>;
  return *made;
}
void forgetAtExit(const std::string &directory) {
  if (madeDirectories().empty())
    std::atexit(removeUnjoined);
  madeDirectories().push_back(directory);
}
void removeUnjoined() {
  for (const std::string &directory : madeDirectories()) {
    bool joined = false;
    if (DIR *dir = ::opendir(directory.c_str())) {
      while (dirent *entry = ::readdir(dir))
        joined = joined || std::strncmp(entry->d_name, "joined-", 7) == 0;
      ::closedir(dir);
    }
    if (!joined)
      ::rmdir(directory.c_str());
  }
}

/// A process on the fake GPU must load the fake as NCCL too (a real NCCL
/// would look for a real GPU): unless MUON_NCCL_LIBRARY says otherwise, it
/// names this library's own file.
__attribute__((constructor)) void nameThisLibraryAsNccl() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&nameThisLibraryAsNccl), &info) &&
      info.dli_fname)
    setenv("MUON_NCCL_LIBRARY", info.dli_fname, 0);
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
  // The directory's name is the id: it must fit, with its terminator.
  const char *tmp = std::getenv("TMPDIR");
  std::string base = tmp && *tmp ? tmp : "/tmp";
  if (base.size() > 80)
    base = "/tmp";
  std::string directory = base + "/muon-fake-nccl-XXXXXX";
  if (!::mkdtemp(directory.data())) {
    misuse(s, "ncclGetUniqueId could not make a directory in " + base);
    return ncclSystemError;
  }
  std::memset(id, 0, sizeof(*id));
  std::memcpy(id, directory.data(), directory.size());
  forgetAtExit(directory);
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
  const std::string directory(bytes, strnlen(bytes, sizeof(id)));
  struct stat st;
  if (directory.empty() || ::stat(directory.c_str(), &st) != 0 ||
      !S_ISDIR(st.st_mode)) {
    misuse(s, "ncclCommInitRank with an id no ncclGetUniqueId made");
    return ncclInvalidArgument;
  }
  std::unique_ptr<World> &world = s.worlds[directory];
  if (!world) {
    world = std::make_unique<World>();
    world->size = ranks;
    world->directory = directory;
  }
  // Every rank says how many ranks it joins with.
  const std::string joined = "joined-" + std::to_string(rank);
  const std::string size = std::to_string(ranks);
  if (exists(fileIn(*world, joined)) ||
      !writeAtomically(fileIn(*world, joined), size.data(), size.size())) {
    misuse(s, "ncclCommInitRank of rank " + std::to_string(rank) +
                  " twice on one id");
    return ncclInvalidUsage;
  }
  s.comms.push_back(std::make_unique<ncclComm>());
  ncclComm *comm = s.comms.back().get();
  comm->world = world.get();
  comm->rank = rank;
  const auto deadline = std::chrono::steady_clock::now() + kJoinSeconds;
  for (int r = 0; r < ranks;) {
    std::ifstream in(fileIn(*world, "joined-" + std::to_string(r)));
    std::string theirs;
    if (in >> theirs) {
      if (theirs != size) {
        misuse(s, "ncclCommInitRank with " + size + " ranks on an id of " +
                      theirs);
        comm->live = false;
        return ncclInvalidArgument;
      }
      ++r;
      continue;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      misuse(s, "ncclCommInitRank waited for ranks that never joined (NCCL "
                "would wait forever)");
      comm->live = false;
      return ncclSystemError;
    }
    waitForChange(s, lock, 2); // another process cannot notify
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
  std::vector<CUstream_st *> streams;
  for (auto &stream : s.streams)
    streams.push_back(stream.get());
  for (auto &stream : s.laneStreams)
    streams.push_back(stream.get());
  for (CUstream_st *stream : streams)
    for (const Op &op : stream->ops)
      if (op.comm == comm) {
        misuse(s, "ncclCommDestroy with operations in flight (NCCL would "
                  "wait for them, forever if a peer is gone)");
        break;
      }
  comm->live = false;
  ++s.counters.commsDestroyed;
  leave(comm);
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
  leave(comm);
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
    enqueue(s, queued.stream, queued.op);
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

namespace muon::fakegpu {

bool runSend(State &s, const Op &op) {
  ncclComm *comm = op.comm;
  if (comm->aborted || s.droppedRanks.count(comm->rank))
    return true; // ended by the abort, or lost on the way
  const int64_t seq = comm->sent[op.peer]++;
  const std::string path =
      fileIn(*comm->world, messageName(comm->rank, op.peer, seq));
  if (!writeAtomically(path, static_cast<const char *>(op.src), op.bytes))
    misuse(s, "the fake NCCL could not write " + path);
  return true;
}

bool runRecv(State &s, const Op &op) {
  ncclComm *comm = op.comm;
  if (comm->aborted)
    return true;
  const int64_t seq = comm->received[op.peer];
  const std::string path =
      fileIn(*comm->world, messageName(op.peer, comm->rank, seq));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false; // not there yet
  std::vector<char> message((std::istreambuf_iterator<char>(in)),
                            std::istreambuf_iterator<char>());
  in.close();
  ::unlink(path.c_str());
  ++comm->received[op.peer];
  if (message.size() != op.bytes)
    misuse(s, "rank " + std::to_string(comm->rank) + " received " +
                  std::to_string(op.bytes) + " bytes from rank " +
                  std::to_string(op.peer) + ", which sent " +
                  std::to_string(message.size()));
  if (!message.empty())
    std::memcpy(op.dst, message.data(), std::min(message.size(), op.bytes));
  ++s.counters.messages;
  s.counters.bytes += static_cast<int64_t>(message.size());
  return true;
}

} // namespace muon::fakegpu
