//===- Optimizer.h - Distributed Muon for a C++ trainer ---------*- C++ -*-===//
//
// The runtime's public API, what torch.optim.Muon with a distributed config
// is for a PyTorch trainer:
//
//   muon::runtime::cpu::CpuDevice device;
//   muon::runtime::MpiCommunicator comm(MPI_COMM_WORLD);  // or any comm
//   std::unique_ptr<muon::runtime::Optimizer> opt;
//   Status status = Optimizer::load("plan.json", comm, device, {}, opt);
//   for (const auto &p : opt->params())        // this rank's pieces
//     status = opt->bind(p.name, values(p), grads(p), p.dtype, p.elements);
//   for (step...) {
//     ... backward ...
//     opt->setGroupLr("muon", schedule(step));  // every rank, same value
//     muon::runtime::StepResult result;
//     if (Status s = opt->step(result); !s.ok()) ... s.code(), s.message()
//   }
//
// A plan comes from a plan file compiled ahead of time (`muon-run --plan`,
// `muon-translate --export-plan`; linking only this library) or from the
// compiler in-process (Muon::Compiler, muon/Compiler/Compile.h). The
// trainer owns parameter and gradient storage, bound by name; the optimizer
// owns its state (Muon momentum, AdamW moments and step counts), which
// checkpoints save and load by parameter name and global box.
//
// Every call that talks to other ranks is collective: all ranks call it,
// in the same order. Calls return a Status (code + message); none fails
// because of an earlier failure's leftovers.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_OPTIMIZER_H
#define MUON_RUNTIME_OPTIMIZER_H

#include "muon/Plan/Plan.h"
#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/DType.h"
#include "muon/Runtime/Device.h"
#include "muon/Runtime/StepExecutor.h"
#include "muon/Support/Status.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace muon::runtime {

struct OptimizerOptions {
  /// Longest wait for a peer in any collective, in seconds; a peer that
  /// does not answer in time fails the call instead of hanging it.
  double timeoutSeconds = 120;
  /// Record each step's timeline (trace()); off, it costs nothing.
  bool trace = false;
  /// Step graphs (ExecutorOptions::graphs): a GPU records the step once
  /// and replays it; off by default. counters().graph says how a step ran.
  bool graphs = false;
};

/// One parameter as this rank sees it.
struct ParamSlot {
  std::string name;
  DType dtype = DType::F32;    // the values' storage type (the plan's)
  DType gradType = DType::F32; // the bound gradient's (dtype until bound)
  AlgorithmId algorithm = kMuon; // its group's (muon/Plan/Algorithm.h)
  int64_t group = 0;             // index into Optimizer::groups()
  std::vector<int64_t> shape; // the whole tensor
  /// This rank's piece: a box of the whole tensor (one range per dim),
  /// row-major; empty when the rank holds nothing of it.
  std::vector<Range> box;
  int64_t elements = 0;
  /// Which partial summand of the gradient this rank holds (0 if none).
  int64_t summand = 0;
  bool bound = false;
};

/// One piece of a parameter's optimizer state, by global box: what a
/// checkpoint saves per piece and what a state dict holds. Pieces are
/// independent of the layout that made them, so pieces from any layout or
/// world size of the same model load under any other (loadStateDict).
struct StatePiece {
  std::string param;
  /// The piece: one range per dim of the whole tensor; every state below
  /// is row-major over it.
  std::vector<Range> box;
  /// The partial summand of the gradient the state belongs to, and how
  /// many the layout has. Only Muon momentum differs between summands (it
  /// is linear in the gradient: the summands' momenta add up to the
  /// momentum of the summed gradient); AdamW moments and parameter values
  /// are the same on every summand.
  int64_t summand = 0, summands = 1;
  /// Named state slots, each of the box's element count, as f32:
  /// "momentum" (Muon), "exp_avg" and "exp_avg_sq" (AdamW), and "values"
  /// (the parameter's values, only when asked for).
  std::map<std::string, std::vector<float>> states;
  /// AdamW's step count of this piece (0 for Muon).
  int64_t step = 0;
};

/// A per-row state of one whole matrix (NorMuon's "normuon_v"): kept only
/// by the rank that orthogonalizes the matrix (its owner), saved by global
/// row, so that whichever rank owns the matrix under another layout or
/// world size takes it whole.
struct RowStatePiece {
  std::string param;
  /// The matrix's index over the parameter's batch dims (row-major), 0 for
  /// a 2-D parameter.
  int64_t slice = 0;
  std::string state = "normuon_v";
  std::vector<float> values; // one per row of the matrix, row 0 first
};

/// A rank's optimizer state in memory, or any collection of pieces (every
/// rank's stateDict of another world size, concatenated).
struct StateDict {
  int64_t steps = 0; // the optimizer's step count (stepsTaken())
  std::vector<StatePiece> pieces;
  /// The per-row states of the matrices this rank orthogonalizes (NorMuon
  /// groups). A load takes each matrix it owns from here; a matrix with
  /// none starts from zeros unless the saved group was NorMuon (then its
  /// absence is an error).
  std::vector<RowStatePiece> rowStates;
  /// The groups' hyper-parameters as they were (torch's param_groups in
  /// its optimizer state_dict); a load leaves groups not listed as they
  /// are.
  std::vector<PlanGroup> groups;
};

/// What the last loadCheckpoint read on this rank, in bytes as read from
/// the files (by pread; whether they came from the page cache is the
/// kernel's business).
struct CheckpointIoCounters {
  int64_t manifestBytes = 0; // checkpoint.json
  /// Rank files: headers, state data and the data's chunk hashes.
  int64_t rankFileBytes = 0;
  int64_t filesOpened = 0; // rank files opened (each at most once)
  int64_t slotsRead = 0;   // saved states (one piece's one state) read from
};

/// What an Optimizer holds (runtime/lib/OptimizerState.h).
class OptimizerState;

class Optimizer {
public:
  /// Reads and validates a plan file, then as `create`. A binary plan
  /// (muon-plan-bin/1) is loaded as this rank's part only (loadPlanSlice,
  /// validatePlanSlice): every rank of the communicator must load the same
  /// file, which `create` checks.
  static Status load(const std::string &planPath, Communicator &comm,
                     Device &device, const OptimizerOptions &options,
                     std::unique_ptr<Optimizer> &out);
  /// Checks the plan (validatePlan) and that it is for this communicator's
  /// world, compares plan hashes across ranks and allocates the optimizer
  /// state. Collective. `out` is set only on success.
  static Status create(Plan plan, Communicator &comm, Device &device,
                       const OptimizerOptions &options,
                       std::unique_ptr<Optimizer> &out);
  ~Optimizer();

  int64_t currentRank() const;
  int64_t worldSize() const;
  /// Per rank, the matrices it orthogonalizes ("w", or "w[3]" for one
  /// matrix of a batched parameter): the seeds' `optimizer.assignments`.
  /// Without a distributed config every holder orthogonalizes what it
  /// holds.
  /// With a rank's part of a binary plan, only this rank's entry is filled.
  std::map<int64_t, std::vector<std::string>> assignments() const;

  const std::vector<ParamSlot> &params() const;
  /// The slot of parameter `name`, or null.
  const ParamSlot *param(const std::string &name) const;

  /// Binds this rank's storage of parameter `name`: `values` and `grad`,
  /// device memory of `elements` values, row-major over the slot's box.
  /// `values` are of the plan's dtype; the gradient may be of any storage
  /// type (`gradType`: bf16 weights with f32 gradients, f32 master weights
  /// with bf16 gradients). `elements` must be the slot's. A parameter this
  /// rank does not hold needs no binding. A null `grad` says the parameter
  /// has no gradient (torch's `grad is None`: a frozen weight, an expert
  /// that got no tokens): the steps that follow, until a gradient is bound,
  /// leave it untouched (values, state, step count) and move none of its
  /// bytes, provided every rank that holds a piece of it has none too (see
  /// step()).
  Status bind(const std::string &name, void *values, DType dtype,
              const void *grad, DType gradType, int64_t elements);
  /// The same with values and gradient of one type.
  Status bind(const std::string &name, void *values, const void *grad,
              DType dtype, int64_t elements) {
    return bind(name, values, dtype, grad, dtype, elements);
  }

  /// The parameter groups with the settings the next step uses: the plan's
  /// starting values, as changed since (torch.optim's param_groups).
  const std::vector<PlanGroup> &groups() const;
  /// The group named `name`, or null.
  const PlanGroup *group(const std::string &name) const;
  /// Changes a group's hyper-parameters for the steps that follow (a
  /// learning-rate schedule, weight-decay changes): every setting of its
  /// algorithm at once (`settings.algorithm` must be the group's; its name
  /// is ignored), as the settings table stores them (GroupSettings.h): a
  /// caller copies group(name), changes what it changes (setNumber("lr",
  /// ...)) and sets it; the C API's and Python's by-name setters do. Checked
  /// like the plan's values; a bad value, a group of another algorithm or a
  /// change of a setting the plan fixes (NorMuon's flag) is refused with
  /// nothing changed. Not collective, but every rank must set the same
  /// values before the next step: the step compares them across ranks (a
  /// hash in its agreement round) and refuses to run, changing nothing, if
  /// they differ.
  Status setGroupSettings(const std::string &name, const PlanGroup &settings);
  /// Only the learning rate, of a group of any algorithm (a scheduler's
  /// usual change).
  Status setGroupLr(const std::string &name, double lr);

  /// QK-clip's step input (MuonClip, Kimi K2; the plan's `qk_clip` layers):
  /// the largest attention logit (q.k / sqrt(d), before the softmax) of
  /// each query head of layer `layer` in this step's forward pass, `count`
  /// values (the layer's num_heads). After the next step's update, each
  /// head whose logit exceeds the layer's threshold has its rows of W_q and
  /// W_k scaled by sqrt(threshold / logit) (a key head shared by several
  /// query heads by the largest of theirs). Valid for the next step only
  /// (kept by a refused step, dropped by a skipped one). The step takes the
  /// largest value per head over the ranks, so each data-parallel rank may
  /// pass what it measured on its part of the batch; a layer no rank set is
  /// not clipped. An unknown layer, a wrong count or a non-finite value is
  /// refused with nothing changed. Not collective.
  Status setQkMaxLogits(const std::string &layer, const float *logits,
                        int64_t count);
  /// The plan's QK-clip layers (empty: QK-clip is off).
  const std::vector<QkClipLayer> &qkClipLayers() const;

  /// For a trainer that reduces each matrix's gradient to the rank that
  /// orthogonalizes it (assignments()) instead of to every rank, so that
  /// on the other ranks the bound gradient of that matrix is zero (what
  /// muonc.torch's reduce_gradients_to_owners does under DDP). Its momentum
  /// there is then zero too (the owner's is the whole), and with `on` the
  /// steps that follow skip that momentum and that NaN check (the owner's
  /// check sees the sum) for every parameter whose matrices all have
  /// another owner: (N-1)/N of the momentum work on N ranks. The caller
  /// keeps the promise; a non-zero gradient there is ignored. Not
  /// collective; off by default.
  void setGradientsReducedToOwners(bool on);

  /// Assembles parameter `name` whole (row-major over its shape, as f32)
  /// from the ranks' pieces, for evaluation or export: into `whole` on rank
  /// `root`, or on every rank when `root` is -1; `whole` is left alone on
  /// other ranks and may be null there. Each distinct piece crosses once
  /// (from its lowest holder), through the optimizer's communicator.
  /// Collective.
  Status gatherParameter(const std::string &name, float *whole,
                         int64_t root = -1);

  /// One optimizer step on the bound gradients, with the groups' current
  /// settings. Collective. Parameters bound without a gradient on every
  /// rank that holds them are left out, as torch skips a parameter whose
  /// grad is None. Fails, with nothing changed, when a rank has unbound
  /// parameters, ranks set different group settings, or a parameter has a
  /// gradient on some of its holders and none on others (the message names
  /// it and both sets of ranks); fails when
  /// a peer does not answer, the device runs out of memory or reports an
  /// error (on every rank). A gradient with NaN or Inf on any rank skips the
  /// step on every rank, changing nothing (`result.applied` false).
  Status step(StepResult &result);
  int64_t stepsTaken() const;

  /// This rank's optimizer state of parameter `name` in place, for views of
  /// it (muonc.torch's `opt.state`): element slot `slot` of its algorithm
  /// (ElementState.h: "momentum", "exp_avg", "exp_avg_sq"), one f32 per
  /// element of the slot's box, row-major, in device memory. Null where the
  /// parameter's group keeps no such slot, where this rank holds none of
  /// it, or for an unknown name or slot. Steps and loads write it in place,
  /// and it lives as long as the optimizer.
  float *stateData(const std::string &name, std::string_view slot);
  /// The piece's step count in place (AdamW's bias correction), or null
  /// where the parameter's algorithm counts no steps (countsSteps) or this
  /// rank holds none of it.
  int64_t *stepCountData(const std::string &name);

  /// Saves this rank's optimizer state into `dir` (created if missing; an
  /// empty path is refused): one file per rank, holding every local
  /// piece's state (Muon momentum, AdamW moments and step counts) by
  /// parameter name and global box, with the step count and the groups'
  /// current settings; with `withParameters`, the bound parameter values
  /// too. Rank 0 gathers every rank's index (piece, box, byte range and
  /// checksum of each state) into the manifest, which it writes last: the
  /// manifest makes the checkpoint complete. Files are written atomically
  /// and flushed to disk, and a save that fails on any rank fails on every
  /// rank, naming the problem, and leaves the previous checkpoint as it
  /// was. Collective.
  Status saveCheckpoint(const std::string &dir, bool withParameters);
  /// Loads a checkpoint under any layout or world size of the same model:
  /// each rank reads the manifest, picks the saved boxes that overlap its
  /// pieces (its own rank's file first, so a resume on the same layout
  /// opens only its own file), reads only their byte ranges, checks their
  /// checksums and cuts them to its boxes, as loadStateDict does; the
  /// groups' settings come back as saved. With `withParameters`, the bound
  /// storage gets the saved values (the checkpoint must hold them). A
  /// damaged, foreign or incomplete checkpoint (the manifest's hash, the
  /// rank files' headers and keyed chunk hashes: CheckpointFormat.h), one
  /// with a file that is not a regular file, or one whose values no run
  /// makes (as loadStateDict checks) is refused on every rank, naming the
  /// problem, with nothing changed. checkpointIo() then says what this
  /// rank read. Collective.
  Status loadCheckpoint(const std::string &dir, bool withParameters);
  /// What the last loadCheckpoint read on this rank.
  const CheckpointIoCounters &checkpointIo() const;

  /// This rank's optimizer state, one piece per parameter it holds, with
  /// the step count and the groups' current settings; with
  /// `withParameters`, the bound values too (a parameter that is not bound
  /// fails). Not collective.
  Status stateDict(bool withParameters, StateDict &dict) const;
  /// Loads this rank's state from `dict`'s pieces, saved under any layout
  /// or world size of the same model: every local piece is cut from the
  /// pieces that overlap it (the cut loadCheckpoint uses), the step count
  /// is `dict.steps`, and the groups named in `dict.groups` get their
  /// settings. With `withParameters`, the bound storage gets the pieces'
  /// "values". All or nothing on this rank: a piece or group that does not
  /// fit the model, a local element of any state that no piece covers, or
  /// state that no run makes (a value that is not finite, a negative
  /// exp_avg_sq or normuon_v, AdamW steps that differ between pieces of a
  /// parameter or exceed `dict.steps`) fails before anything changes,
  /// naming the state, parameter and element. Not collective: each rank loads
  /// from the pieces it is given, and a caller that needs every rank to succeed
  /// or none agrees on the outcome itself.
  Status loadStateDict(const StateDict &dict, bool withParameters);

  const StepCounters &counters() const;
  /// The last step's timeline on this rank, with OptimizerOptions::trace
  /// (StepExecutor::trace).
  const std::vector<TraceEvent> &trace() const;
  /// The compiled plan, with the groups' starting settings (groups() has
  /// the current ones).
  const Plan &plan() const;
  /// The element type Newton-Schulz runs in: the plan's ns_dtype, "auto"
  /// resolved to the device's default (rank 0's, on every rank); and why,
  /// in words ("bf16: its products run at 2.14x f32's here (...)", "f32:
  /// the plan's ns_dtype").
  DType nsDtype() const;
  const std::string &nsDtypeReason() const;

private:
  explicit Optimizer(std::unique_ptr<OptimizerState> state);
  /// Everything else (lib/OptimizerState.h): the header stays the API.
  std::unique_ptr<OptimizerState> state;
};

} // namespace muon::runtime

#endif // MUON_RUNTIME_OPTIMIZER_H
