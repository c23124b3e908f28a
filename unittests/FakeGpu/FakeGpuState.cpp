//===- FakeGpuState.cpp - Streams advance; memory; faults and counters ----===//
#include "FakeGpuState.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <unistd.h>

namespace muon::fakegpu {

namespace {

/// Freed memory kept poisoned before it goes back to the host.
constexpr size_t kQuarantineBytes = size_t(64) << 20;

int64_t integerFromEnv(const char *name, int64_t fallback) {
  const char *text = std::getenv(name);
  if (!text || !*text)
    return fallback;
  char *end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  if (*end || value < 0) {
    std::fprintf(stderr, "fake GPU: %s must be a non-negative integer\n", name);
    std::abort();
  }
  return value;
}

Config configFromEnv() {
  Config c;
  c.gpus = static_cast<int>(integerFromEnv("MUON_FAKE_GPU_COUNT", c.gpus));
  c.memoryBytes = integerFromEnv("MUON_FAKE_GPU_MEMORY", c.memoryBytes);
  c.pools = integerFromEnv("MUON_FAKE_GPU_POOLS", 1) != 0;
  c.failProduct = integerFromEnv("MUON_FAKE_CUBLAS_FAIL_AT", 0);
  if (std::getenv("MUON_FAKE_CUBLAS_FAIL_RANK"))
    c.failRank = integerFromEnv("MUON_FAKE_CUBLAS_FAIL_RANK", -1);
  if (const char *grouped = std::getenv("MUON_FAKE_CUBLAS_GROUPED")) {
    const std::string g = grouped;
    if (g == "all")
      c.grouped = GroupedSupport::All;
    else if (g == "none")
      c.grouped = GroupedSupport::None;
    else if (g != "documented" && !g.empty()) {
      std::fprintf(stderr, "fake GPU: MUON_FAKE_CUBLAS_GROUPED must be "
                           "documented, all or none\n");
      std::abort();
    }
  }
  return c;
}

/// The red zones' poison: at even addresses A0, at odd ones FF (0xFFA0 in
/// every 16-bit half): a signalling NaN as f32 and bf16, which arithmetic
/// turns quiet, so that a kernel reading a red zone and writing what it
/// computed into another one changes its bytes.
unsigned char poisonAt(const void *p) {
  return reinterpret_cast<uintptr_t>(p) % 2 ? 0xFF : 0xA0;
}

/// Whether every byte of [p, p + n) is the poison.
bool poisoned(const char *p, size_t n) {
  static const std::vector<char> block = [] {
    std::vector<char> b(kRedZone + 2);
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = static_cast<char>(i % 2 ? 0xFF : 0xA0);
    return b;
  }();
  const char *pattern = block.data() + reinterpret_cast<uintptr_t>(p) % 2;
  for (size_t at = 0; at < n; at += kRedZone)
    if (std::memcmp(p + at, pattern, std::min(kRedZone, n - at)) != 0)
      return false;
  return true;
}

void poison(char *p, size_t n) {
  for (size_t i = 0; i < n; ++i)
    p[i] = static_cast<char>(poisonAt(p + i));
}

} // namespace

void fillGarbage(void *memory, size_t bytes) {
  auto *p = static_cast<unsigned char *>(memory);
  for (size_t i = 0; i < bytes; ++i)
    p[i] = i % 2 ? 0xFF : 0xC1;
}

State &state() {
  static State *s = [] {
    auto *created = new State; // never destroyed: ranks may outlive main
    created->config = configFromEnv();
    return created;
  }();
  return *s;
}

void misuse(State &s, const std::string &what) {
  ++s.counters.misuses;
  s.counters.lastMisuse = what;
  if (s.printMisuses) {
    std::fprintf(stderr, "fake GPU (pid %d): misuse: %s\n",
                 static_cast<int>(getpid()), what.c_str());
    std::fflush(stderr);
  }
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

Allocation *findAllocation(State &s, const void *p) {
  const char *at = static_cast<const char *>(p);
  auto it = s.allocations.upper_bound(at);
  if (it == s.allocations.begin())
    return nullptr;
  --it;
  Allocation &a = it->second;
  return at >= a.data && at < a.data + a.bytes ? &a : nullptr;
}

bool insideAllocation(State &s, const void *p, int64_t bytes, bool pinnedToo) {
  if (bytes <= 0)
    return true;
  const Allocation *a = findAllocation(s, p);
  if (!a || (a->pinned && !pinnedToo))
    return false;
  return static_cast<const char *>(p) + bytes <= a->data + a->bytes;
}

void checkRedZones(State &s, const void *p, const std::string &what) {
  Allocation *a = findAllocation(s, p);
  if (!a)
    return;
  const bool before = poisoned(a->base, kRedZone);
  const bool after = poisoned(a->data + a->bytes, a->tail);
  if (before && after)
    return;
  misuse(s, what + " wrote outside its memory: the red zone " +
                (before ? "after" : "before") + " an allocation of " +
                std::to_string(a->bytes) + " bytes changed");
  poison(a->base, kRedZone);
  poison(a->data + a->bytes, a->tail);
}

void *allocate(State &s, size_t bytes, bool pinned, bool fromPool,
               int ordinal) {
  bytes = std::max<size_t>(bytes, 1);
  if (!pinned && s.deviceBytes + static_cast<int64_t>(bytes) >
                     s.config.memoryBytes)
    return nullptr;
  // The tail red zone also pads to the next 256 bytes.
  const size_t tail = kRedZone + (256 - bytes % 256) % 256;
  char *base =
      static_cast<char *>(std::aligned_alloc(256, kRedZone + bytes + tail));
  if (!base)
    return nullptr;
  poison(base, kRedZone + bytes + tail);
  fillGarbage(base + kRedZone, bytes); // fresh memory is garbage
  Allocation a;
  a.base = base;
  a.data = base + kRedZone;
  a.bytes = bytes;
  a.tail = tail;
  a.pinned = pinned;
  a.fromPool = fromPool;
  a.ordinal = ordinal;
  s.allocations[a.data] = a;
  if (!pinned)
    s.deviceBytes += static_cast<int64_t>(bytes);
  return a.data;
}

bool release(State &s, const void *p, bool pinned, const char *call) {
  auto it = s.allocations.find(static_cast<const char *>(p));
  if (it == s.allocations.end() || it->second.pinned != pinned) {
    misuse(s, std::string(call) + " of " +
                  (findAllocation(s, p) ? "a pointer inside an allocation"
                                        : "memory it did not allocate"));
    return false;
  }
  checkRedZones(s, p, call);
  Allocation a = it->second;
  s.allocations.erase(it);
  if (!pinned)
    s.deviceBytes -= static_cast<int64_t>(a.bytes);
  fillGarbage(a.data, a.bytes);
  s.quarantine.push_back(a);
  s.quarantinedBytes += kRedZone + a.bytes + a.tail;
  while (s.quarantinedBytes > kQuarantineBytes) {
    const Allocation &oldest = s.quarantine.front();
    s.quarantinedBytes -= kRedZone + oldest.bytes + oldest.tail;
    std::free(oldest.base);
    s.quarantine.pop_front();
  }
  return true;
}

/// Runs `op` if it can run now.
static bool step(State &s, const Op &op) {
  switch (op.kind) {
  case OpKind::Copy:
    if (op.bytes)
      std::memmove(op.dst, op.src, op.bytes);
    return true;
  case OpKind::Fill:
    if (op.bytes)
      std::memset(op.dst, op.value, op.bytes);
    return true;
  case OpKind::Record:
    op.event->completed = std::max(op.event->completed, op.generation);
    return true;
  case OpKind::Wait:
    return op.event->completed >= op.generation;
  case OpKind::Send:
    return runSend(s, op);
  case OpKind::Recv:
    return runRecv(s, op);
  case OpKind::Call:
    op.call(s);
    return true;
  case OpKind::Free:
    release(s, op.dst, false, "cudaFreeAsync");
    return true;
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
    for (auto &stream : s.laneStreams)
      moved = advance(s, *stream) || moved;
    movedAny = movedAny || moved;
  }
  if (movedAny)
    s.changed.notify_all();
}

void waitForChange(State &s, std::unique_lock<std::mutex> &lock, int ms) {
  s.changed.wait_for(lock, std::chrono::milliseconds(ms));
}

static Counters countersLocked(State &s) {
  advanceAll(s);
  Counters c = s.counters;
  c.pendingOps = static_cast<int64_t>(s.legacyStream.ops.size());
  for (auto &stream : s.streams) {
    c.liveStreams += stream->live;
    c.pendingOps += static_cast<int64_t>(stream->ops.size());
  }
  for (auto &stream : s.laneStreams)
    c.pendingOps += static_cast<int64_t>(stream->ops.size());
  for (auto &graph : s.graphs)
    c.liveGraphs += graph->live;
  for (auto &exec : s.graphExecs)
    c.liveGraphExecs += exec->live;
  for (auto &event : s.events)
    c.liveEvents += event->live;
  for (auto &comm : s.comms)
    c.liveComms += comm->live;
  for (auto &pool : s.pools)
    c.livePools += pool->live;
  for (auto &handle : s.blasHandles)
    c.liveBlasHandles += handle->live;
  c.liveAllocations = static_cast<int64_t>(s.allocations.size());
  c.deviceBytes = s.deviceBytes;
  return c;
}

Counters counters() {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  return countersLocked(s);
}

void reset() {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.droppedRanks.clear();
  s.asyncErrors.clear();
  s.failures.clear();
  s.counters = Counters();
  s.sticky = cudaSuccess;
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

void setGroupedSupport(GroupedSupport support) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.config.grouped = support;
}

void setMemoryLimit(int64_t bytes) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.config.memoryBytes = bytes;
}

cudaError_t launchKernel(cudaStream_t handle, const char *name,
                         std::vector<std::pair<const void *, int64_t>> spans,
                         std::function<void()> body) {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  CUstream_st *stream = findStream(s, handle);
  if (!stream || !stream->live) {
    misuse(s, std::string(name) + " launched on an unknown stream");
    return cudaErrorInvalidResourceHandle;
  }
  if (s.sticky != cudaSuccess)
    return s.sticky;
  Op op;
  op.kind = OpKind::Call;
  op.call = [name = std::string(name), spans = std::move(spans),
             body = std::move(body)](State &s) {
    for (const auto &[p, bytes] : spans)
      if (!insideAllocation(s, p, bytes)) {
        const Allocation *a = findAllocation(s, p);
        misuse(s, name + " given " + std::to_string(bytes) + " bytes at " +
                      (a ? "offset " +
                               std::to_string(static_cast<const char *>(p) -
                                              a->data) +
                               " of an allocation of " +
                               std::to_string(a->bytes)
                         : std::string("memory outside every allocation")));
        s.sticky = cudaErrorIllegalAddress;
        return;
      }
    body();
    ++s.counters.kernels[name];
    for (const auto &span : spans)
      checkRedZones(s, span.first, name);
  };
  enqueue(s, stream, std::move(op));
  advanceAll(s);
  return cudaSuccess;
}

static void exitCheck() {
  std::fflush(stdout); // before this report, and before a _exit drops it
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  Counters c = countersLocked(s);
  if (const char *summary = std::getenv("MUON_FAKE_GPU_SUMMARY");
      summary && *summary && std::string(summary) != "0") {
    std::string kernels;
    for (const auto &[name, launches] : c.kernels)
      kernels += " " + name + "=" + std::to_string(launches);
    std::fprintf(stderr,
                 "fake GPU (pid %d): kernels%s; cuBLAS strided=%lld "
                 "batched=%lld grouped=%lld grouped-refused=%lld "
                 "products=%lld; NCCL messages=%lld; graph launches=%lld; "
                 "misuses=%lld\n",
                 static_cast<int>(getpid()), kernels.c_str(),
                 static_cast<long long>(c.stridedCalls),
                 static_cast<long long>(c.batchedCalls),
                 static_cast<long long>(c.groupedCalls),
                 static_cast<long long>(c.groupedRefused),
                 static_cast<long long>(c.products),
                 static_cast<long long>(c.messages),
                 static_cast<long long>(c.graphLaunches),
                 static_cast<long long>(c.misuses));
  }
  std::vector<std::string> problems;
  if (c.misuses)
    problems.push_back(std::to_string(c.misuses) +
                       " misuse(s), the last: " + c.lastMisuse);
  const std::pair<const char *, int64_t> live[] = {
      {"stream", c.liveStreams},     {"event", c.liveEvents},
      {"communicator", c.liveComms}, {"allocation", c.liveAllocations},
      {"memory pool", c.livePools},  {"cuBLAS handle", c.liveBlasHandles},
      {"queued operation", c.pendingOps}, {"graph", c.liveGraphs},
      {"executable graph", c.liveGraphExecs}};
  for (const auto &[what, count] : live)
    if (count)
      problems.push_back(std::to_string(count) + " " + what +
                         "(s) left at exit");
  if (problems.empty())
    return;
  for (const std::string &p : problems)
    std::fprintf(stderr, "fake GPU (pid %d): %s\n", static_cast<int>(getpid()),
                 p.c_str());
  std::fflush(stderr);
  _exit(86);
}

void checkAtExit() {
  static bool registered = false;
  if (!registered)
    std::atexit(exitCheck);
  registered = true;
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mutex);
  s.printMisuses = true;
}

} // namespace muon::fakegpu
