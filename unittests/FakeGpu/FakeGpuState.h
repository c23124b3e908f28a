//===- FakeGpuState.h - The fake GPU's streams, events and worlds -*- C++ -*-===//
//
// Shared by the fake CUDA runtime and the fake NCCL. Everything is guarded
// by one mutex; a stream's operations run in order whenever any fake call
// advances the streams, so progress needs no threads of its own. Objects
// are kept until the process ends (queued operations may still name an
// event or a communicator after the code under test destroyed it, as on a
// GPU); a destroyed one only stops counting as live.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_UNITTESTS_FAKEGPU_FAKEGPUSTATE_H
#define MUON_UNITTESTS_FAKEGPU_FAKEGPUSTATE_H

#include "FakeGpu.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

struct ncclComm;

struct CUevent_st {
  int64_t recorded = 0;  // records issued
  int64_t completed = 0; // the latest record a stream has reached
  bool live = true;
};

namespace muon::fakegpu {

struct World;

enum class OpKind { Copy, Record, Wait, Send, Recv };

struct Op {
  OpKind kind = OpKind::Copy;
  void *dst = nullptr;
  const void *src = nullptr;
  size_t bytes = 0;
  CUevent_st *event = nullptr;
  int64_t generation = 0; // Record: which record; Wait: the one awaited
  ncclComm *comm = nullptr;
  int peer = -1;
};

} // namespace muon::fakegpu

struct CUstream_st {
  std::deque<muon::fakegpu::Op> ops;
  bool held = false;
  bool live = true;
};

struct ncclComm {
  muon::fakegpu::World *world = nullptr;
  int rank = -1;
  bool live = true, aborted = false;
};

namespace muon::fakegpu {

/// The ranks of one ncclCommInitRank and the messages between them.
struct World {
  int size = 0, joined = 0;
  /// (from, to) -> messages in send order.
  std::map<std::pair<int, int>, std::deque<std::vector<char>>> mail;
};

struct State {
  std::mutex mutex;
  std::condition_variable changed; // some stream advanced or a rank joined
  std::vector<std::unique_ptr<CUstream_st>> streams;
  std::vector<std::unique_ptr<CUevent_st>> events;
  std::vector<std::unique_ptr<ncclComm>> comms;
  std::map<std::string, std::unique_ptr<World>> worlds; // by unique id
  CUstream_st legacyStream; // stream 0
  int64_t nextUniqueId = 0;

  // Faults and counters (reset()).
  std::set<int> droppedRanks;
  std::map<int, int> asyncErrors;
  std::multimap<std::pair<std::string, int>, int> failures;
  Counters counters;
};

State &state();

/// Runs every stream's operations as far as they can go. Caller holds the
/// mutex.
void advanceAll(State &s);

/// Records a call real CUDA or NCCL would refuse. Caller holds the mutex.
void misuse(State &s, const std::string &what);

/// Takes an injected failure of `call` for `rank` (-1: the caller has no
/// rank, any injected rank matches). Caller holds the mutex.
bool takeFailure(State &s, const std::string &call, int rank, int &result);

/// The stream a handle names (0 and the special handles: the legacy
/// stream); nullptr for one that was never created. Caller holds the mutex.
CUstream_st *findStream(State &s, cudaStream_t handle);

} // namespace muon::fakegpu

#endif // MUON_UNITTESTS_FAKEGPU_FAKEGPUSTATE_H
