//===- StepExecutor.h - One rank's side of a compiled step ------*- C++ -*-===//
//
// Executes a plan (muon-plan/1) on one rank: owns the optimizer state of the
// rank's parameter pieces, and runs the plan's schedule step by step:
// momentum on local pieces, packed all-to-all-v gathers to the owners,
// Newton-Schulz on owned matrices, scatters of the new pieces, weight decay
// and the adjusted-lr update, and AdamW on summed gradients. Exchanges are
// started and waited for exactly where the schedule says, so they overlap
// the Newton-Schulz batches scheduled between them. All memory and
// computation go through a Device; all traffic through a Communicator.
//
// Trainers use it through Optimizer (Optimizer.h), which adds binding by
// name, checks and checkpoints.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_STEPEXECUTOR_H
#define MUON_RUNTIME_STEPEXECUTOR_H

#include "muon/Plan/ElementState.h"
#include "muon/Plan/Plan.h"
#include "muon/Plan/Trace.h"
#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/Device.h"
#include "muon/Support/Status.h"

#include <array>
#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace muon::runtime {

class StepLayout;

/// How a step ran with ExecutorOptions::graphs.
enum class GraphUse {
  Off,      // graphs not asked for
  Eager,    // run call by call: a warm-up, or a fallback (graphNote says)
  Recorded, // recorded into a graph, then replayed once
  Replayed, // the recorded graph replayed, with this step's scalars
};

/// What one step really did on this rank, counted as it happened.
struct StepCounters {
  int64_t bytesSent = 0, bytesReceived = 0; // payload to / from other ranks
  int64_t nsFlops = 0;
  /// The step's control collectives (its agreements: gradients, settings,
  /// missing gradients, QK-clip logits, device errors), beside the
  /// exchanges of the plan.
  int64_t controlCollectives = 0;
  /// The plan's exchanges the step ran over the transport: those that move
  /// something between ranks (an exchange with no transfers is not run).
  int64_t exchanges = 0;
  /// Copies of exchange buffers between device and host memory during the
  /// step, and their bytes (Communicator::hostCopies): 0 where exchanges
  /// stay on the device.
  int64_t hostCopies = 0, hostCopyBytes = 0;
  /// The most device memory the optimizer held at once during the step:
  /// its state (momentum, moments, update buffers) plus the exchange and
  /// Newton-Schulz buffers alive at that moment.
  int64_t peakWorkingBytes = 0;
  /// What the plan allows for it on this rank (StepExecutor::memoryBound).
  int64_t workingBytesBound = 0;
  /// With ExecutorOptions::graphs: how the step ran, and why it ran eagerly
  /// or was recorded again ("" when replayed as recorded).
  GraphUse graph = GraphUse::Off;
  std::string graphNote;
};

struct StepResult {
  bool applied = false;
  /// When not applied: the first parameter (plan order) whose gradient has a
  /// NaN or Inf on some rank, and the lowest such rank.
  int64_t nonFiniteParam = -1;
  int64_t nonFiniteRank = -1;
  /// QK-clip (Plan::qkClip): the query heads, over every layer, whose
  /// largest logit exceeded the threshold, so that the step rescaled them
  /// (the same on every rank).
  int64_t qkClippedHeads = 0;
};

struct ExecutorOptions {
  /// Longest wait for any exchange or control collective.
  double timeoutSeconds = 120;
  /// Record each step's timeline (trace()): a clock read around each
  /// schedule step and NS batch, nothing when off.
  bool trace = false;
  /// Step graphs: after a warm-up step, record the step's device work
  /// (kernels, products, the transport's exchanges) once into a graph of
  /// the device (Device::beginRecording) and replay it for the next steps,
  /// each one checked first against the recording call by call without
  /// running (the same calls on the same memory: bindings, the parameters
  /// left out, the Newton-Schulz settings), its changing scalars (learning
  /// rate, weight decay, AdamW's bias corrections) taken along. A step
  /// that differs is recorded again; where the device or the transport
  /// cannot record (the CPU, host-staged MPI) or with `trace`, steps run
  /// as without graphs. The agreement before a step, QK-clip and the
  /// device-error agreement after it always run on the host.
  bool graphs = false;
};

class StepExecutor {
public:
  StepExecutor(const Plan &plan, Communicator &comm, Device &device,
               ExecutorOptions options = {});
  ~StepExecutor();

  /// Checks that the plan fits the communicator and that every rank holds
  /// the same plan (a hash exchanged at start-up; mismatching ranks are
  /// named), lays out the local pieces and allocates the optimizer state.
  /// Collective: every rank calls it.
  Status initialize();

  /// This rank's piece of parameter `param`: its box in the global tensor,
  /// and its element count (0: the rank holds nothing of it).
  const std::vector<Range> &localBox(int64_t param) const;
  int64_t localElements(int64_t param) const;
  /// The partial summand of the gradient this rank holds (0 if none).
  int64_t localSummand(int64_t param) const;
  /// The storage type of parameter `param` (the plan's dtype).
  DType dtype(int64_t param) const;

  /// Binds the piece's storage (device memory, row-major over the box): the
  /// values in `dtype(param)`, the gradient in `gradType` (any storage
  /// type: bf16 weights may have f32 gradients, f32 master weights bf16
  /// ones); both outlive the executor's steps. A null `grad` says the
  /// parameter has no gradient for the next steps (torch's `grad is None`):
  /// they leave it untouched (see step()).
  void bind(int64_t param, void *values, const void *grad, DType gradType);
  /// Whether every parameter this rank holds has its values bound.
  bool allBound() const;

  /// The hyper-parameters the next step uses, per plan group: the plan's
  /// starting values until setGroup changes them.
  const std::vector<PlanGroup> &groups() const { return currentGroups; }
  /// Replaces group `index`'s settings (checked by the caller; the name and
  /// algorithm stay). Every rank must set the same values before its next
  /// step, which checks that they did.
  void setGroup(int64_t index, const PlanGroup &group);

  /// QK-clip's step input: the largest logit of each query head of layer
  /// `layer` (an index into Plan::qkClip) in this step's forward pass, one
  /// finite value per head (checked by the caller). It holds for the next
  /// step that runs or skips (non-finite gradients), then is dropped; a
  /// refused step keeps it. The step takes, per head, the largest value
  /// any rank set (each data-parallel rank sees its own part of the batch);
  /// a layer no rank set is not clipped.
  void setQkMaxLogits(int64_t layer, std::vector<float> logits);

  /// Says that the caller reduces each matrix's gradient to the rank that
  /// orthogonalizes it (muonc.torch's owner reduction under DDP): on every
  /// other holder the gradient is zero, so is the momentum (a summand of
  /// the true one), and stepping it would only keep zero at zero. With
  /// `on`, the steps that follow skip the momentum and the NaN check of a
  /// parameter whose matrices all have another owner (the owner's check
  /// sees its sum); the update from the owner is applied as before.
  void setGradientsReducedToOwners(bool on);

  /// One optimizer step. A parameter whose gradient is null on every rank
  /// that holds a piece of it is left out, as torch skips a parameter whose
  /// grad is None: its values, state and step count stay as they are, and
  /// none of its bytes cross (its matrices' exchanges carry nothing of it,
  /// no Newton-Schulz runs on them). Fails on a problem that changes
  /// nothing, found in the agreement every rank makes before any state
  /// changes (a rank with unbound parameters, ranks whose group settings
  /// differ, a parameter with a gradient on some of its holders and none on
  /// others), or on a fatal
  /// one (a peer that does not answer in time, a transport failure, memory
  /// or a device error, which fails the step on every rank after the work);
  /// a skipped step for non-finite gradients is not an error (see
  /// `result`). Collective.
  Status step(StepResult &result);

  const StepCounters &counters() const { return lastCounters; }
  /// The last step's timeline on this rank (with ExecutorOptions::trace),
  /// in seconds from the moment every rank agreed to run the step (the
  /// all-reduce before any work: the ranks' nearest common instant).
  /// Times are the host's: a device that queues work asynchronously is
  /// timed as far as its calls block.
  const std::vector<TraceEvent> &trace() const { return traceEvents; }
  /// The element type Newton-Schulz runs in (the plan's ns_dtype, with
  /// "auto" resolved to rank 0's device's default), and why, in words
  /// ("bf16: its products run at 2.14x f32's here (...)").
  DType nsPrecision() const { return nsDtype; }
  const std::string &nsPrecisionReason() const { return nsReason; }
  const Plan &plan() const { return planRef; }
  int64_t rank() const { return myRank; }

  /// The optimizer state of parameter `param`'s piece, for state dicts and
  /// checkpoints: slot `slot` (an index into elementSlots()), one f32 per
  /// element in device memory, nullptr where the parameter's group keeps no
  /// such slot or this rank holds none of it.
  float *elementState(int64_t param, int slot);
  /// The steps the piece has taken (AdamW's bias correction: its algorithm
  /// counts them, countsSteps in ElementState.h).
  int64_t &stepCount(int64_t param) { return locals[param].steps; }
  /// One per-row state slot (MatrixStep.h) this rank keeps: matrix `k`'s
  /// slot of per-matrix step `step` (an index into matrixSteps()), one f32
  /// per row of the whole matrix, where this rank orthogonalizes it (its
  /// owner, or every holder without a distributed config).
  struct RowSlot {
    int64_t matrix = 0;
    int step = 0;
  };
  /// Every slot this rank keeps, by matrix (plan order), then step.
  std::vector<RowSlot> rowSlots() const;
  /// The slot's rows in device memory; nullptr where this rank keeps none.
  float *rowState(int64_t k, int step);

private:
  struct LocalParam {
    std::vector<Range> box;
    int64_t elements = 0;
    int64_t summand = 0;
    DType dtype = DType::F32;
    void *values = nullptr;
    const void *grad = nullptr;
    DType gradType = DType::F32;
    /// Its slots, by index into elementSlots(): those its group keeps
    /// (keepsSlot) hold memory.
    std::vector<DeviceBuffer> state;
    /// Its algorithm's per-element steps (ElementStep.h): the prepare step
    /// (null for most) and the update step, and its slots in the order
    /// they take them.
    const ElementStep *prepareStep = nullptr, *updateStep = nullptr;
    StepSlots stepSlots;
    DeviceBuffer update, orthogonalized; // orthogonalized parameters
    DeviceBuffer summedGrad;             // element-wise algorithms' (AdamW)
    bool summed = false; // summedGrad holds this step's reduced gradient
    int64_t steps = 0;
  };
  struct InFlight {
    DeviceBuffer send, recv;
    PendingExchange pending;
  };

  /// Where matrix `k`'s piece sits in its parameter's local buffers: the
  /// element offset of its (row-major, rows x cols) block, and its global
  /// rows and cols. `offset` is -1 when this rank holds none of it.
  /// This rank's piece of a matrix: `rows` x `cols` in the matrix's
  /// coordinates, starting at element `offset` of the local parameter, its
  /// rows `stride` apart (wider than `cols` for a head's block of columns).
  struct Piece {
    int64_t offset = -1;
    Range rows, cols;
    int64_t stride = 0;
    bool contiguous() const { return stride == cols.size(); }
    int64_t elements() const { return rows.size() * cols.size(); }
  };
  Piece piece(int64_t k) const;
  /// The steps of p's algorithm (Algorithm::prepareStep, updateStep) into
  /// `local`, checked against the `slots` it keeps.
  Status resolveSteps(const PlanParam &p, int slots, LocalParam &local);
  Status fullMatrix(int64_t k, float *&matrix);
  Status startExchange(int64_t index);
  Status finishExchange(int64_t index);
  Status runNewtonSchulz(int64_t round);
  /// The step's schedule and its per-step buffers' release: eagerly, or
  /// with graphs recorded or replayed (ExecutorOptions::graphs).
  Status runStepWork();
  /// A step checked against the recording, then replayed (`replayed`); a
  /// step that differs leaves the recording dropped and the host state as
  /// before, to be recorded.
  Status checkAndReplay(bool &replayed);
  /// The step recorded, then replayed; run eagerly when the recording
  /// fails.
  Status recordAndReplay();
  /// runSchedule, then the per-step buffers released.
  Status runScheduleOnce();
  /// Whether this step can use a graph; FailedPrecondition saying why not.
  Status checkGraphsUsable() const;
  /// What a pass over the schedule changes on the host, put back before
  /// the step runs again after a failed recording or check.
  struct HostSnapshot {
    std::vector<int64_t> steps;
    StepCounters counters;
    int64_t peakBytes = 0;
  };
  HostSnapshot snapshot() const;
  void restore(const HostSnapshot &snapshot);
  void applyRound(int64_t round);
  Status runSchedule();
  /// This rank's parameters without a gradient (of those it holds).
  std::vector<int64_t> missingGradients() const;
  /// A hash of such a list, the same on ranks with the same list.
  static uint64_t listHash(const std::vector<int64_t> &list);
  /// Whether every rank holds each parameter of `list` (cached per
  /// parameter in heldByAll).
  bool heldEverywhere(const std::vector<int64_t> &list);
  /// Takes `mine` as the step's set: what every rank decides alike when
  /// every rank has that same list of parameters every rank holds.
  void adoptMissingGradients(const std::vector<int64_t> &mine);
  /// The step's set `none` (one flag per parameter), agreed from this
  /// rank's list `mine`: what the next steps keep while no list changes.
  void settleMissingGradients(const std::vector<int64_t> &mine,
                              std::vector<bool> none);
  /// The agreement before any state changes (StepAgreement.cpp): one
  /// all-gather of every rank's status word, refused when a rank has
  /// unbound storage or other group settings; the step's parameters
  /// without a gradient into `skipped`; the first non-finite gradient
  /// into `result` (the step is then skipped). Collective.
  Status agreeBeforeStep(StepResult &result);
  /// The parameters without a gradient on every rank that holds them, into
  /// `skipped`, from every rank's `mine`, when some rank's list changed
  /// since the last agreement; refused when a parameter has a gradient on
  /// some of its holders only. Collective.
  Status agreeOnMissingGradients(const std::vector<int64_t> &mine);
  /// The layout of a step that leaves out `skipped` (none: the whole one).
  const StepLayout &layoutFor(const std::vector<bool> &skipped);
  bool isSkipped(int64_t param) const {
    return !skipped.empty() && skipped[param];
  }
  bool isZeroHere(size_t param) const {
    return !zeroHere.empty() && zeroHere[param];
  }
  /// After the work: a device error on any rank fails the step on every
  /// rank, with the first failing rank's message.
  Status agreeOnDeviceErrors();
  /// QK-clip (QkClip.cpp): every rank's logits of this step, the largest
  /// per head into `maxima` (empty for a layer no rank set). Collective.
  Status agreeOnQkLogits(std::vector<std::vector<float>> &maxima);
  /// Rescales this rank's rows of each layer's W_q and W_k by their heads'
  /// factors; returns the query heads clipped.
  int64_t applyQkClip(const std::vector<std::vector<float>> &maxima);
  /// Row r of parameter `param`'s piece (2-D, rows x cols) times
  /// factors[r], QK-clip's step.
  void scaleRows(int64_t param, const std::vector<float> &factors);
  /// Runs parameter `i`'s algorithm's prepare step (Muon's momentum) on its
  /// own gradient summand, into its update buffer.
  void prepare(int64_t i);
  /// The update steps of the parameters of element-wise algorithms (AdamW,
  /// ...), on summed gradients: the schedule's AdamW step.
  void runElementUpdates();
  /// A failure of this rank's step outside the device (memory for a
  /// step's operands), agreed on with the device's errors.
  Status stepFailure;
  std::string describeExchange(int64_t index) const;
  Status allocate(DeviceBuffer &buffer, int64_t bytes, const char *what);
  /// FNV-1a of every group's settings: what ranks compare before a step.
  uint64_t groupsHash() const;
  /// This rank's bound on the optimizer's working memory: its state, plus
  /// the buffers of the rounds that may be in flight at once (the plan's
  /// inflight limit, and the round being orthogonalized): each round's
  /// gather and scatter buffers and its gathered matrices, the largest
  /// rounds counted, plus the AdamW reduce's buffers.
  int64_t memoryBound() const;
  /// Device bytes the executor holds now, and the most since the step
  /// began (DeviceBuffer's tracker).
  int64_t liveBytes = 0, peakBytes = 0;
  int64_t workingBytesBound = 0; // memoryBound(), computed at initialize

  const Plan &planRef;
  std::vector<PlanGroup> currentGroups;
  Communicator &comm;
  Device &device;
  ExecutorOptions options;
  DType wire = DType::F32;
  DType nsDtype = DType::F32; // the plan's ns_dtype, "auto" resolved
  std::string nsReason;
  int64_t myRank = 0;
  std::vector<LocalParam> locals;
  /// This rank's side of the whole step, and of the last step that left
  /// parameters out (those without a gradient: `partSkipped`, one flag per
  /// parameter), kept while the next steps leave out the same ones;
  /// `layout` is the one the running step uses.
  std::unique_ptr<StepLayout> wholeLayout, partLayout;
  std::vector<bool> partSkipped;
  const StepLayout *layout = nullptr;
  /// The parameters the running step leaves out (empty: none).
  std::vector<bool> skipped;
  /// Per parameter: its gradient and momentum are zero here, left alone
  /// (setGradientsReducedToOwners; empty: none).
  std::vector<bool> zeroHere;
  /// The last agreement on missing gradients: this rank's own list then,
  /// and the step's set it gave. While no rank's list changes, the set is
  /// the same, and consistent: the agreement needs no second exchange.
  std::vector<int64_t> agreedMine;
  std::vector<bool> agreedSkipped;
  /// Per parameter: whether every rank holds it (-1 not yet known).
  std::vector<int8_t> heldByAll;
  /// The per-row state slots of the matrices this rank orthogonalizes, by
  /// (matrix, step) for each enabled per-matrix step; zero redundancy:
  /// nowhere else.
  std::map<std::pair<int64_t, int>, DeviceBuffer> rowStates;
  std::map<const NsBatch *, DeviceBuffer> batchBuffers; // this step's
  std::map<int64_t, float *> full; // gathered matrices, into batchBuffers
  std::map<int64_t, InFlight> inFlight;
  /// Per Plan::qkClip layer: this step's logits as set here (empty: none),
  /// and its query and key parameters' indices.
  std::vector<std::vector<float>> qkLogits;
  std::vector<std::pair<int64_t, int64_t>> qkParams;
  StepCounters lastCounters;
  /// Step graphs: how the current pass over the schedule runs (Checking:
  /// the device compares its calls with the recording and the transport is
  /// not called), whether a recording is ready to replay, whether a step
  /// has warmed the device up, failed recordings in a row, and why graphs
  /// were given up for good.
  enum class Pass { Eager, Recording, Checking };
  Pass pass = Pass::Eager;
  bool graphReady = false, warmedUp = false;
  int failedRecordings = 0;
  std::string graphsGivenUp;
  // Tracing (options.trace): the step's zero, each exchange's start-call
  // time and lane, and the events so far.
  double sinceStep() const;
  void recordTrace(const ScheduleStep &s, double begin);
  std::chrono::steady_clock::time_point traceZero;
  std::map<int64_t, std::pair<double, int64_t>> traceStarts;
  TraceLanes traceLanes;
  std::vector<TraceEvent> traceEvents;
};

/// FNV-1a over a plan's canonical text: equal plans, equal hashes.
uint64_t planHash(const Plan &plan);

} // namespace muon::runtime

#endif // MUON_RUNTIME_STEPEXECUTOR_H
