//===- FakeGpuState.h - The fake GPU's streams, memory and worlds -*- C++ -*-===//
//
// Shared by the fake CUDA runtime, the fake cuBLAS, the host launcher of the
// kernels and the fake NCCL. Everything is guarded by one mutex; a stream's
// operations run in order whenever any fake call advances the streams, so
// progress needs no threads of its own. Streams, events and communicators
// are kept until the process ends (queued operations may still name an
// event or a communicator after the code under test destroyed it, as on a
// GPU); a destroyed one only stops counting as live.
//
// Memory: every allocation of "device" (or pinned) memory is host memory
// with a red zone on each side, filled with signalling NaNs (0xFFA0 in
// every 16-bit half): a kernel or a product that reads outside what it was
// given reads NaNs, and one that writes there, even what it computed from
// such a NaN, is caught when the red zones are checked (after every kernel and product that names the allocation, and
// when it is freed). Fresh memory holds garbage that is also a NaN but not
// the red zones' bytes (fillGarbage), and so does freed memory, kept in a
// quarantine for a while, so that a late access reads NaNs rather than
// someone else's data.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_UNITTESTS_FAKEGPU_FAKEGPUSTATE_H
#define MUON_UNITTESTS_FAKEGPU_FAKEGPUSTATE_H

#include "FakeGpu.h"

#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

struct ncclComm;
struct CUgraph_st;

struct CUevent_st {
  int64_t recorded = 0;  // records issued
  int64_t completed = 0; // the latest record a stream has reached
  bool live = true;
  /// Its latest record was captured into this graph (not issued): waiting
  /// on it joins that capture, through the graph's own event `capturedAs`.
  CUgraph_st *capturedIn = nullptr;
  CUevent_st *capturedAs = nullptr;
};

/// A cuBLAS handle (cublas_api.h's opaque struct).
struct cublasContext {
  cudaStream_t stream = nullptr;
  int mathMode = 0; // cublasMath_t
  bool live = true;
  /// cublasSetWorkspace's memory (null: cuBLAS's own, which a product
  /// captured into a graph may not use).
  void *workspace = nullptr;
};

struct CUmemPoolHandle_st {
  int ordinal = 0;
  bool live = true;
};

namespace muon::fakegpu {

struct World;
struct State;

enum class OpKind { Copy, Fill, Record, Wait, Send, Recv, Call, Free };

struct Op {
  OpKind kind = OpKind::Copy;
  void *dst = nullptr;
  const void *src = nullptr;
  size_t bytes = 0;
  int value = 0; // Fill
  CUevent_st *event = nullptr;
  int64_t generation = 0; // Record: which record; Wait: the one awaited
  ncclComm *comm = nullptr;
  int peer = -1;
  /// Call: a kernel or a product, run when the stream reaches it (with the
  /// state's mutex held).
  std::function<void(State &)> call;
};

} // namespace muon::fakegpu

struct CUstream_st {
  std::deque<muon::fakegpu::Op> ops;
  bool held = false;
  bool live = true;
  /// While a capture holds the stream, what is queued on it goes into the
  /// graph's lane `lane` instead (graph capture, FakeGraphs.cpp).
  CUgraph_st *capture = nullptr;
  size_t lane = 0;
};

/// A graph made by stream capture: per stream the capture reached (lane 0
/// the stream that began it), the operations queued there in order; records
/// and waits between lanes name events of the graph's own.
struct CUgraph_st {
  struct Lane {
    CUstream_st *stream = nullptr;
    std::vector<muon::fakegpu::Op> ops;
  };
  std::vector<Lane> lanes;
  std::vector<std::unique_ptr<CUevent_st>> events;
  bool capturing = true;
  /// Something the capture cannot hold happened (a misuse says what): the
  /// capture ends with cudaErrorStreamCaptureInvalidated.
  bool invalidated = false;
  bool live = true;
};

/// An instantiated graph: a copy of the graph's lanes with events of its
/// own (fresh records on every launch); lanes past the first run on hidden
/// streams of their own, the first on the stream it is launched on.
struct CUgraphExec_st {
  std::vector<CUgraph_st::Lane> lanes;
  std::vector<std::unique_ptr<CUevent_st>> events;
  std::vector<CUstream_st *> laneStreams; // [0] unused
  bool live = true;
};

struct ncclComm {
  muon::fakegpu::World *world = nullptr;
  int rank = -1;
  bool live = true, aborted = false;
  /// Messages sent to and received from each peer so far (their files are
  /// numbered by it).
  std::map<int, int64_t> sent, received;
};

namespace muon::fakegpu {

/// The ranks of one ncclCommInitRank, which may be threads of this process
/// or other processes: they meet in a directory named by the unique id,
/// where each message is a file (FakeNccl.cpp).
struct World {
  int size = 0;
  std::string directory;
};

/// A block of fake GPU memory (or pinned host memory).
struct Allocation {
  char *base = nullptr; // the host block, red zones included
  char *data = nullptr; // what the caller got
  size_t bytes = 0;     // what the caller asked for
  size_t tail = 0;      // red-zone bytes after `data + bytes`
  bool pinned = false;  // cudaMallocHost, not device memory
  bool fromPool = false;
  int ordinal = 0;
};

/// Red-zone bytes before each allocation (and at least as many after: far
/// enough to catch a kernel that runs a few tiles or rows past its
/// matrices, rather than corrupt the host's heap);
/// allocations start 256-byte aligned, as cudaMalloc's do.
constexpr size_t kRedZone = size_t(64) << 10;

struct Config {
  int gpus = 1;
  int64_t memoryBytes = int64_t(80) << 30;
  bool pools = true;
  /// Which grouped GEMMs the fake cuBLAS takes (FakeCublas.cpp).
  GroupedSupport grouped = GroupedSupport::Documented;
  /// Fault injection: the product call (counting from 1) that fails with
  /// CUBLAS_STATUS_EXECUTION_FAILED, as a GPU fault shows (0: none), on the
  /// MPI rank `failRank` only (-1: any process).
  int64_t failProduct = 0;
  int64_t failRank = -1;
};

struct State {
  std::mutex mutex;
  std::condition_variable changed; // some stream advanced or a rank joined
  std::vector<std::unique_ptr<CUstream_st>> streams;
  std::vector<std::unique_ptr<CUevent_st>> events;
  std::vector<std::unique_ptr<ncclComm>> comms;
  std::vector<std::unique_ptr<CUmemPoolHandle_st>> pools;
  std::vector<std::unique_ptr<cublasContext>> blasHandles;
  std::map<std::string, std::unique_ptr<World>> worlds; // by directory
  std::vector<std::unique_ptr<CUgraph_st>> graphs;
  std::vector<std::unique_ptr<CUgraphExec_st>> graphExecs;
  /// The hidden streams of instantiated graphs' lanes.
  std::vector<std::unique_ptr<CUstream_st>> laneStreams;
  CUstream_st legacyStream; // stream 0
  Config config;

  // Memory: live allocations by their data pointer; freed ones poisoned
  // in the quarantine until it holds more than kQuarantineBytes.
  std::map<const char *, Allocation> allocations;
  std::deque<Allocation> quarantine;
  size_t quarantinedBytes = 0;
  int64_t deviceBytes = 0; // live device memory, against config.memoryBytes
  /// A kernel or product that touched memory outside every allocation
  /// leaves the GPU broken, as an illegal address does: every later call
  /// that can report it returns this.
  cudaError_t sticky = cudaSuccess;

  /// Print each misuse when it happens (checkAtExit(): a tool may abort
  /// on the error that follows, before its exit check could say why).
  bool printMisuses = false;

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

/// Queues `op` on `stream`, or while a capture holds the stream, adds it to
/// the capture's graph (FakeGraphs.cpp). Caller holds the mutex.
void enqueue(State &s, CUstream_st *stream, Op op);

/// Ends the capture that holds `stream` as invalid, after a misuse that
/// said why (real CUDA invalidates a capture on such a call). Caller holds
/// the mutex.
void invalidateCapture(State &s, CUstream_st *stream);

/// Records a call real CUDA or NCCL would refuse. Caller holds the mutex.
void misuse(State &s, const std::string &what);

/// Takes an injected failure of `call` for `rank` (-1: the caller has no
/// rank, any injected rank matches). Caller holds the mutex.
bool takeFailure(State &s, const std::string &call, int rank, int &result);

/// The stream a handle names (0 and the special handles: the legacy
/// stream); nullptr for one that was never created. Caller holds the mutex.
CUstream_st *findStream(State &s, cudaStream_t handle);

/// The live allocation that holds `p`, or nullptr. Caller holds the mutex.
Allocation *findAllocation(State &s, const void *p);

/// Whether [p, p + bytes) lies inside one live allocation (device memory
/// unless `pinnedToo`). Caller holds the mutex.
bool insideAllocation(State &s, const void *p, int64_t bytes,
                      bool pinnedToo = false);

/// `bytes` of poisoned memory with red zones: device memory (against the
/// memory limit; nullptr beyond it) or pinned host memory. Caller holds
/// the mutex.
void *allocate(State &s, size_t bytes, bool pinned, bool fromPool,
               int ordinal);

/// Frees what allocate() returned (checking its red zones); false, with a
/// misuse of `call`, for anything else. Caller holds the mutex.
bool release(State &s, const void *p, bool pinned, const char *call);

/// The fake NCCL's point-to-point steps (FakeNccl.cpp): a send writes its
/// message; a receive completes when the message is there. Caller holds
/// the mutex.
bool runSend(State &s, const Op &op);
bool runRecv(State &s, const Op &op);

/// Checks (and restores) the red zones of the allocation that holds `p`,
/// reporting damage as a misuse of `what`. Caller holds the mutex.
void checkRedZones(State &s, const void *p, const std::string &what);

/// Waits for `changed` at most `ms` milliseconds: progress may come from
/// another process (the fake NCCL's messages), which cannot notify.
void waitForChange(State &s, std::unique_lock<std::mutex> &lock, int ms);

} // namespace muon::fakegpu

#endif // MUON_UNITTESTS_FAKEGPU_FAKEGPUSTATE_H
