//===- StepGraph.h - A step recorded into a CUDA graph ----------*- C++ -*-===//
//
// The Device side of step graphs (Device::beginRecording and the rest, as
// CudaDevice implements them): the device's calls of one step are recorded
// by stream capture of its compute stream (NCCL's exchanges join the
// capture through their communication stream) into a graph, instantiated
// once and replayed for later steps. Every call while recording is also
// noted by its key: what it is and everything the graph bakes into its
// nodes (memory, sizes, types, Newton-Schulz's coefficients, NorMuon's
// scalars). A later step is replayed only after the executor's
// calls for it were checked against those keys, call by call, without
// running them: the same step on the same memory.
//
// Scalars that change from step to step without changing the step (every
// registered per-element step's: the update's learning rate and weight
// decay, AdamW's bias corrections, momentum) are
// not baked in: their kernels read them from a slot of a device arena
// that replay() uploads from pinned host memory before each launch, the
// values the checked calls brought.
//
// Memory the executor allocates while recording is plain cudaMalloc memory
// (the device's pool is stream-ordered, which a capture would turn into
// graph memory nodes): it lives as long as the recording and its
// addresses are those the graph names; a check hands the same addresses
// out again. Memory from before the recording that the executor releases
// during it is freed after the next launch, in stream order.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_STEPGRAPH_H
#define MUON_RUNTIME_CUDA_STEPGRAPH_H

#include "Memory.h"
#include "muon/Support/Status.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <vector>

namespace muon::runtime::cuda {

/// The device calls a recording notes.
enum class RecordedCall : uint64_t {
  Allocate,
  Zero,
  ElementStep,
  CopyBox,
  MatrixStep,
  NewtonSchulz,
};

/// A call and what the graph bakes in of it.
class CallKey {
public:
  explicit CallKey(RecordedCall call) {
    words.push_back(static_cast<uint64_t>(call));
  }
  CallKey &operator<<(uint64_t word) {
    words.push_back(word);
    return *this;
  }
  CallKey &operator<<(int64_t word) {
    return *this << static_cast<uint64_t>(word);
  }
  CallKey &operator<<(int word) { return *this << static_cast<uint64_t>(word); }
  CallKey &operator<<(const void *p) {
    return *this << static_cast<uint64_t>(reinterpret_cast<uintptr_t>(p));
  }
  CallKey &operator<<(double value) {
    uint64_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    return *this << bits;
  }
  CallKey &operator<<(float value) {
    return *this << static_cast<double>(value);
  }
  RecordedCall call() const { return static_cast<RecordedCall>(words[0]); }
  bool operator==(const CallKey &o) const { return words == o.words; }

private:
  std::vector<uint64_t> words;
};

class StepGraph {
public:
  /// Records `stream`'s work on GPU `ordinal` (current while it runs);
  /// `blas` is bound to `stream` and gets a workspace of its own for
  /// capture (cuBLAS may not allocate inside a graph).
  StepGraph(StreamMemory memory, cublasHandle_t blas);
  ~StepGraph();
  StepGraph(const StepGraph &) = delete;
  StepGraph &operator=(const StepGraph &) = delete;

  enum class Mode { Idle, Recording, Checking };
  Mode mode() const { return current; }
  bool active() const { return current != Mode::Idle; }

  /// Fails (Unavailable) where CUDA or cuBLAS refuses, saying why.
  Status beginRecording();
  /// Fails with the first call that could not be recorded.
  Status endRecording();
  void beginCheck();
  /// Fails (FailedPrecondition) with the check's first difference.
  Status endCheck();
  void replay();
  void drop();

  /// A call while recording or checking: recording notes it (true: the
  /// caller queues it, into the capture); checking compares it with the
  /// recording's call at its place (false: the caller queues nothing).
  bool note(const CallKey &key);
  /// The same for a call with step scalars: `at` is where its kernel reads
  /// them (a slot of the arena) while recording; they are kept for the
  /// next replay either way.
  template <typename Scalars>
  bool noteScalars(const CallKey &key, const Scalars &scalars,
                   const Scalars *&at) {
    static_assert(sizeof(Scalars) <= kSlotBytes, "a scalar slot holds it");
    void *slot = nullptr;
    const bool run = noteSlot(key, &scalars, sizeof(Scalars), slot);
    at = static_cast<const Scalars *>(slot);
    return run;
  }
  /// Device::allocate while recording (plain memory, zeroed by a captured
  /// fill) or checking (the recording's address). `noted`: the executor's
  /// allocation, part of the step's calls (not a device call's scratch).
  void *allocate(int64_t bytes, bool noted);
  /// Device::release: true when the recording owns `memory` (nothing to
  /// do); other memory released while recording or checking is freed after
  /// the next replay (false: the caller frees it now).
  bool release(void *memory);
  /// A call that cannot be recorded (it reaches the host) or a check's
  /// difference: the recording or the check fails with `why` (the first).
  void fail(const std::string &reason);

private:
  static constexpr size_t kSlotBytes = 64;
  /// What allocate() hands out in a check gone different (never used).
  static char unchecked;
  bool noteSlot(const CallKey &key, const void *scalars, size_t bytes,
                void *&slot);
  bool growArena(int64_t slots);

  struct Noted {
    CallKey key;
    int64_t slot = -1;    // into the scalar arena
    void *memory = nullptr; // Allocate's
  };

  StreamMemory memory;
  cudaStream_t stream;
  cublasHandle_t blas;
  void *blasWorkspace = nullptr;
  Mode current = Mode::Idle;
  std::vector<Noted> calls;
  size_t checked = 0;
  std::string failure;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;
  /// Memory of the recording (cudaMalloc), freed by drop().
  std::set<void *> owned;
  /// Memory from before, released during a recording or check.
  std::vector<void *> releaseAfterReplay;
  // The scalar arena: pinned host slots, uploaded to the device's before
  // every launch.
  char *hostArena = nullptr, *deviceArena = nullptr;
  int64_t arenaSlots = 0, slotsUsed = 0;
};

} // namespace muon::runtime::cuda

#endif // MUON_RUNTIME_CUDA_STEPGRAPH_H
