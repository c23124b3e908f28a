//===- OptimizerState.h - What an Optimizer holds, and its work -*- C++ -*-===//
//
// The implementation behind muon/Runtime/Optimizer.h (its pimpl): the plan,
// the executor, the bound storage and the state, and the helpers of the
// state dicts and checkpoints. Optimizer's methods forward here; their
// documentation is Optimizer.h's. Private to the runtime library
// (Optimizer.cpp is the API, OptimizerState.cpp the work, StateDict.cpp and
// Checkpoint.cpp the state's formats).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_LIB_OPTIMIZERSTATE_H
#define MUON_RUNTIME_LIB_OPTIMIZERSTATE_H

#include "StateCut.h"
#include "muon/Runtime/Optimizer.h"

namespace muon::runtime {

/// Optimizer's methods, as Optimizer.h documents them, and what they
/// share.
class OptimizerState {
public:
  static Status load(const std::string &planPath, Communicator &comm,
                     Device &device, const OptimizerOptions &options,
                     std::unique_ptr<OptimizerState> &out);
  static Status create(Plan plan, Communicator &comm, Device &device,
                       const OptimizerOptions &options,
                       std::unique_ptr<OptimizerState> &out);
  ~OptimizerState();

  int64_t currentRank() const;
  int64_t worldSize() const;
  std::map<int64_t, std::vector<std::string>> assignments() const;

  const std::vector<ParamSlot> &params() const { return slots; }
  const ParamSlot *param(const std::string &name) const;

  Status bind(const std::string &name, void *values, DType dtype,
              const void *grad, DType gradType, int64_t elements);

  const std::vector<PlanGroup> &groups() const { return executor->groups(); }
  const PlanGroup *group(const std::string &name) const;
  Status setGroupSettings(const std::string &name, const PlanGroup &settings);
  Status setGroupLr(const std::string &name, double lr);

  Status setQkMaxLogits(const std::string &layer, const float *logits,
                        int64_t count);
  void setGradientsReducedToOwners(bool on) {
    executor->setGradientsReducedToOwners(on);
  }
  const std::vector<QkClipLayer> &qkClipLayers() const {
    return thePlan.qkClip;
  }

  Status gatherParameter(const std::string &name, float *whole,
                         int64_t root = -1);

  Status step(StepResult &result);
  int64_t stepsTaken() const { return steps; }

  float *stateData(const std::string &name, std::string_view slot);
  int64_t *stepCountData(const std::string &name);

  Status saveCheckpoint(const std::string &dir, bool withParameters);
  Status loadCheckpoint(const std::string &dir, bool withParameters);
  const CheckpointIoCounters &checkpointIo() const { return ioCounters; }

  Status stateDict(bool withParameters, StateDict &dict) const;
  Status loadStateDict(const StateDict &dict, bool withParameters);

  const StepCounters &counters() const;
  const std::vector<TraceEvent> &trace() const;
  const Plan &plan() const { return thePlan; }
  DType nsDtype() const;
  const std::string &nsDtypeReason() const;

private:
  OptimizerState(Plan plan, Communicator &comm, Device &device,
                 const OptimizerOptions &options);
  static Status createImpl(Plan plan, Communicator &comm, Device &device,
                           const OptimizerOptions &options,
                           std::unique_ptr<OptimizerState> &out);
  Status saveCheckpointFiles(const std::string &dir, bool withParameters);
  Status loadCheckpointFiles(const std::string &dir, bool withParameters);
  /// A load's local part: this rank's state cut from the checkpoint in
  /// `dir` into `local`, every byte read checked.
  Status readCheckpoint(const std::string &dir, bool withParameters,
                        StateDict &local);
  Status stateDictImpl(bool withParameters, StateDict &dict) const;
  Status loadStateDictImpl(const StateDict &dict, bool withParameters);
  /// A state dict's pieces (`sources`, checked one by one) checked as a
  /// whole and cut into this rank's `local` state, its row states and
  /// values checked; `splits` gets checkSplits'. `what` names the dict.
  Status checkCutState(const std::vector<statecut::Source> &sources,
                       const StateDict &dict, const std::string &what,
                       bool withParameters, std::vector<int64_t> &splits,
                       StateDict &local) const;
  /// The groups of a state dict or checkpoint, checked against this
  /// optimizer's (each known by name, of the same algorithm, with sound
  /// settings): InvalidArgument saying which does not fit.
  Status checkSavedGroups(const std::vector<PlanGroup> &saved) const;
  void applySavedGroups(const std::vector<PlanGroup> &saved);

  Plan thePlan;
  Communicator &comm;
  Device &device;
  OptimizerOptions options;
  std::unique_ptr<StepExecutor> executor;
  std::vector<ParamSlot> slots;
  std::map<std::string, size_t> slotOf;
  std::vector<void *> values; // bound storage, per parameter
  int64_t steps = 0;
  CheckpointIoCounters ioCounters;

  // Checkpoint and state-dict support (StateDict.cpp): writes a state cut
  // to this rank's pieces (one piece per parameter it holds, in order)
  // into the optimizer state and the bound values.
  void applyState(const StateDict &local, bool withParameters);
  /// The row states this rank needs (one per matrix it keeps per-row state
  /// for, in rowStateMatrices order) from `saved`, checked: each names a
  /// known parameter, matrix and state and has the matrix's rows; a matrix
  /// without one gets zeros unless `savedGroups` has its group as NorMuon.
  Status cutRowStates(const std::vector<RowStatePiece> &saved,
                    const std::vector<PlanGroup> &savedGroups,
                    const std::string &what, std::vector<RowStatePiece> &out) const;
};

} // namespace muon::runtime

#endif // MUON_RUNTIME_LIB_OPTIMIZERSTATE_H
