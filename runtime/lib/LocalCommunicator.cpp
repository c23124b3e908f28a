//===- LocalCommunicator.cpp - Ranks as threads of one process ------------===//
#include "muon/Runtime/LocalCommunicator.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

namespace muon::runtime {

namespace {
/// One collective as the ranks see it. Posted buffers stay valid until every
/// rank has finished reading them; the last rank to leave frees the slot.
struct Slot {
  std::vector<AllToAllV> calls;         // all-to-all-v, per rank
  std::vector<std::vector<char>> bytes; // small collectives, per rank
  int64_t posted = 0, finished = 0, left = 0;
};

using Clock = std::chrono::steady_clock;

Clock::time_point deadlineAfter(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}
} // namespace

struct LocalWorld::State {
  int64_t size;
  std::mutex mutex;
  std::condition_variable changed;
  std::map<int64_t, Slot> slots;

  Slot &slot(int64_t id) {
    Slot &s = slots[id];
    s.calls.resize(size);
    s.bytes.resize(size);
    return s;
  }
  /// Waits until every rank has finished with slot `id`, then leaves it.
  bool finish(std::unique_lock<std::mutex> &lock, int64_t id,
              Clock::time_point deadline) {
    ++slots[id].finished;
    changed.notify_all();
    if (!changed.wait_until(lock, deadline,
                            [&] { return slots[id].finished == size; }))
      return false;
    if (++slots[id].left == size)
      slots.erase(id);
    return true;
  }
  bool allPosted(std::unique_lock<std::mutex> &lock, int64_t id,
                 Clock::time_point deadline) {
    return changed.wait_until(lock, deadline,
                              [&] { return slots[id].posted == size; });
  }
};

LocalWorld::LocalWorld(int64_t size) : state(std::make_unique<State>()) {
  state->size = size;
}
LocalWorld::~LocalWorld() = default;
int64_t LocalWorld::size() const { return state->size; }

LocalCommunicator::LocalCommunicator(LocalWorld &world, int64_t rank)
    : world(world), me(rank) {}

int64_t LocalCommunicator::size() const { return world.size(); }

StatusOr<PendingExchange> LocalCommunicator::start(const AllToAllV &exchange) {
  LocalWorld::State &s = *world.state;
  size_t n = s.size;
  if (exchange.sendCounts.size() != n || exchange.recvCounts.size() != n ||
      exchange.sendOffsets.size() != n || exchange.recvOffsets.size() != n)
    return invalidArgument("an exchange needs one count and offset per rank");
  std::lock_guard<std::mutex> lock(s.mutex);
  int64_t id = issued++;
  Slot &slot = s.slot(id);
  slot.calls[me] = exchange;
  ++slot.posted;
  s.changed.notify_all();
  return PendingExchange{id};
}

Status LocalCommunicator::wait(PendingExchange &pending,
                               double timeoutSeconds) {
  LocalWorld::State &s = *world.state;
  int64_t id = pending.id, n = s.size;
  Clock::time_point deadline = deadlineAfter(timeoutSeconds);
  std::unique_lock<std::mutex> lock(s.mutex);
  if (!s.allPosted(lock, id, deadline))
    return deadlineExceeded(timeoutSeconds);
  // Pull every peer's part for this rank.
  const std::vector<AllToAllV> &calls = s.slots[id].calls;
  const AllToAllV &mine = calls[me];
  Status status;
  for (int64_t p = 0; p < n; ++p) {
    const AllToAllV &peer = calls[p];
    if (peer.sendCounts[me] != mine.recvCounts[p] ||
        peer.elementBytes != mine.elementBytes) {
      status = unavailable("rank " + std::to_string(p) + " sends " +
                           std::to_string(peer.sendCounts[me]) +
                           " elements but rank " + std::to_string(me) +
                           " expects " + std::to_string(mine.recvCounts[p]));
      continue;
    }
    if (mine.recvCounts[p])
      std::memcpy(static_cast<char *>(mine.recvBuffer) +
                      mine.recvOffsets[p] * mine.elementBytes,
                  static_cast<const char *>(peer.sendBuffer) +
                      peer.sendOffsets[me] * peer.elementBytes,
                  mine.recvCounts[p] * mine.elementBytes);
  }
  if (!s.finish(lock, id, deadline))
    return deadlineExceeded(timeoutSeconds);
  pending.id = -1;
  return status;
}

StatusOr<std::vector<std::vector<char>>>
LocalCommunicator::exchangeBytes(std::vector<char> mine,
                                 double timeoutSeconds) {
  LocalWorld::State &s = *world.state;
  Clock::time_point deadline = deadlineAfter(timeoutSeconds);
  std::unique_lock<std::mutex> lock(s.mutex);
  int64_t id = issued++;
  Slot &slot = s.slot(id);
  slot.bytes[me] = std::move(mine);
  ++slot.posted;
  s.changed.notify_all();
  if (!s.allPosted(lock, id, deadline))
    return deadlineExceeded(timeoutSeconds);
  std::vector<std::vector<char>> all = s.slots[id].bytes;
  if (!s.finish(lock, id, deadline))
    return deadlineExceeded(timeoutSeconds);
  return all;
}

StatusOr<std::vector<uint64_t>>
LocalCommunicator::allGather(uint64_t value, double timeoutSeconds) {
  return allGatherWords({value}, timeoutSeconds);
}

StatusOr<std::vector<uint64_t>>
LocalCommunicator::allGatherWords(const std::vector<uint64_t> &mine,
                                  double timeoutSeconds) {
  std::vector<char> bytes(mine.size() * sizeof(uint64_t));
  if (!mine.empty())
    std::memcpy(bytes.data(), mine.data(), bytes.size());
  MUON_ASSIGN_OR_RETURN(std::vector<std::vector<char>> every,
                        exchangeBytes(bytes, timeoutSeconds));
  std::vector<uint64_t> all(mine.size() * every.size(), 0);
  for (size_t r = 0; r < every.size(); ++r) {
    if (every[r].size() != bytes.size())
      return invalidArgument(
          "rank " + std::to_string(r) + " gathered " +
          std::to_string(every[r].size() / sizeof(uint64_t)) +
          " words, this rank " + std::to_string(mine.size()));
    if (!bytes.empty())
      std::memcpy(all.data() + r * mine.size(), every[r].data(), bytes.size());
  }
  return all;
}

StatusOr<int64_t> LocalCommunicator::allReduceMin(int64_t value,
                                                  double timeoutSeconds) {
  MUON_ASSIGN_OR_RETURN(
      std::vector<uint64_t> values,
      allGather(static_cast<uint64_t>(value), timeoutSeconds));
  int64_t result = value;
  for (uint64_t v : values)
    result = std::min(result, static_cast<int64_t>(v));
  return result;
}

StatusOr<std::vector<std::vector<char>>>
LocalCommunicator::gatherToRoot(const std::vector<char> &bytes,
                                double timeoutSeconds) {
  MUON_ASSIGN_OR_RETURN(std::vector<std::vector<char>> all,
                        exchangeBytes(bytes, timeoutSeconds));
  if (me != 0)
    all.clear();
  return all;
}

StatusOr<std::vector<std::vector<char>>>
LocalCommunicator::allGatherBytes(const std::vector<char> &bytes,
                                  double timeoutSeconds) {
  return exchangeBytes(bytes, timeoutSeconds);
}

void LocalCommunicator::abort(int exitCode) { std::_Exit(exitCode); }

} // namespace muon::runtime
