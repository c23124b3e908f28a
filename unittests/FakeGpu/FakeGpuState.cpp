//===- FakeGpuState.cpp - Streams advance; faults and counters ------------===//
#include "FakeGpuState.h"

#include <algorithm>
#include <cstring>

namespace muon::fakegpu {

State &state() {
  static State *s = new State; // never destroyed: ranks may outlive main
  return *s;
}

void misuse(State &s, const std::string &what) {
  ++s.counters.misuses;
  s.counters.lastMisuse = what;
}

bool takeFailure(State &s, const std::string &call, int rank, int &result) {
  for (auto it = s.failures.begin(); it != s.failures.end(); ++it)
    if (it->first.first == call && (rank < 0 || it->first.second == rank)) {
      result = it->second;
      s.failures.erase(it);
      return true;
    }
  return false;
}

CUstream_st *findStream(State &s, cudaStream_t handle) {
  if (handle == nullptr || handle == cudaStreamLegacy ||
      handle == cudaStreamPerThread)
    return &s.legacyStream;
  for (auto &stream : s.streams)
    if (stream.get() == handle)
      return stream.get();
  return nullptr;
}

/// Runs `op` if it can run now.
static bool step(State &s, const Op &op) {
  switch (op.kind) {
  case OpKind::Copy:
    if (op.bytes)
      std::memmove(op.dst, op.src, op.bytes);
    return true;
  case OpKind::Record:
    op.event->completed = std::max(op.event->completed, op.generation);
    return true;
  case OpKind::Wait:
    return op.event->completed >= op.generation;
  case OpKind::Send: {
    if (op.comm->aborted || s.droppedRanks.count(op.comm->rank))
      return true; // ended by the abort, or lost on the way
    const char *bytes = static_cast<const char *>(op.src);
    op.comm->world->mail[{op.comm->rank, op.peer}].emplace_back(
        bytes, bytes + op.bytes);
    return true;
  }
  case OpKind::Recv: {
    if (op.comm->aborted)
      return true;
    auto &queue = op.comm->world->mail[{op.peer, op.comm->rank}];
    if (queue.empty())
      return false;
    const std::vector<char> &message = queue.front();
    if (message.size() != op.bytes)
      misuse(s, "rank " + std::to_string(op.comm->rank) + " received " +
                    std::to_string(op.bytes) + " bytes from rank " +
                    std::to_string(op.peer) + ", which sent " +
                    std::to_string(message.size()));
    if (!message.empty())
      std::memcpy(op.dst, message.data(), std::min(message.size(), op.bytes));
    ++s.counters.messages;
    s.counters.bytes += static_cast<int64_t>(message.size());
    queue.pop_front();
    return true;
  }
  }
  return false;
}

static bool advance(State &s, CUstream_st &stream) {
  bool moved = false;
  while (!stream.held && !stream.ops.empty() && step(s, stream.ops.front())) {
    stream.ops.pop_front();
    moved = true;
  }
  return moved;
}

void advanceAll(State &s) {
  bool movedAny = false;
  for (bool moved = true; moved;) {
    moved = advance(s, s.legacyStream);
    for (auto &stream : s.streams)
      moved = advance(s, *stream) || moved;
    movedAny = movedAny || moved;
  }
  if (movedAny)
    s.changed.notify_all();
}

Counters counters() {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  advanceAll(s);
  Counters c = s.counters;
  c.pendingOps = static_cast<int64_t>(s.legacyStream.ops.size());
  for (auto &stream : s.streams) {
    c.liveStreams += stream->live;
    c.pendingOps += static_cast<int64_t>(stream->ops.size());
  }
  for (auto &event : s.events)
    c.liveEvents += event->live;
  for (auto &comm : s.comms)
    c.liveComms += comm->live;
  return c;
}

void reset() {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.droppedRanks.clear();
  s.asyncErrors.clear();
  s.failures.clear();
  s.counters = Counters();
}

void dropSendsFrom(int rank) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.droppedRanks.insert(rank);
}

void setAsyncError(int rank, int result) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.asyncErrors[rank] = result;
}

void failNext(const std::string &call, int rank, int result) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.failures.insert({{call, rank}, result});
}

void holdStream(cudaStream_t handle, bool held) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  if (CUstream_st *stream = findStream(s, handle))
    stream->held = held;
  advanceAll(s);
}

} // namespace muon::fakegpu
