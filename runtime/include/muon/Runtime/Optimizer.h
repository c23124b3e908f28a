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
#include "muon/Runtime/Status.h"
#include "muon/Runtime/StepExecutor.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace muon::runtime {

struct OptimizerOptions {
  /// Longest wait for a peer in any collective, in seconds; a peer that
  /// does not answer in time fails the call instead of hanging it.
  double timeoutSeconds = 120;
  /// Record each step's timeline (trace()); off, it costs nothing.
  bool trace = false;
};

/// One parameter as this rank sees it.
struct ParamSlot {
  std::string name;
  DType dtype = DType::F32;    // the values' storage type (the plan's)
  DType gradType = DType::F32; // the bound gradient's (dtype until bound)
  bool muon = true; // else AdamW
  int64_t group = 0;          // index into Optimizer::groups()
  std::vector<int64_t> shape; // the whole tensor
  /// This rank's piece: a box of the whole tensor (one range per dim),
  /// row-major; empty when the rank holds nothing of it.
  std::vector<Range> box;
  int64_t elements = 0;
  /// Which partial summand of the gradient this rank holds (0 if none).
  int64_t summand = 0;
  bool bound = false;
};

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

  const std::vector<ParamSlot> &params() const { return slots; }
  /// The slot of parameter `name`, or null.
  const ParamSlot *param(const std::string &name) const;

  /// Binds this rank's storage of parameter `name`: `values` and `grad`,
  /// device memory of `elements` values, row-major over the slot's box.
  /// `values` are of the plan's dtype; the gradient may be of any storage
  /// type (`gradType`: bf16 weights with f32 gradients, f32 master weights
  /// with bf16 gradients). `elements` must be the slot's. A parameter this
  /// rank does not hold needs no binding.
  Status bind(const std::string &name, void *values, DType dtype,
              const void *grad, DType gradType, int64_t elements);
  /// The same with values and gradient of one type.
  Status bind(const std::string &name, void *values, const void *grad,
              DType dtype, int64_t elements) {
    return bind(name, values, dtype, grad, dtype, elements);
  }

  /// The parameter groups with the settings the next step uses: the plan's
  /// starting values, as changed since (torch.optim's param_groups).
  const std::vector<PlanGroup> &groups() const { return executor->groups(); }
  /// The group named `name`, or null.
  const PlanGroup *group(const std::string &name) const;
  /// Changes a group's hyper-parameters for the steps that follow (a
  /// learning-rate schedule, weight-decay changes): lr, weight decay,
  /// momentum, nesterov and adjust_lr of a Muon group, or lr, betas, eps
  /// and weight decay of an AdamW group. Checked like the plan's values;
  /// a bad value or a group of the other algorithm is refused with nothing
  /// changed. Not collective, but every rank must set the same values
  /// before the next step: the step compares them across ranks (a hash in
  /// its agreement round) and refuses to run, changing nothing, if they
  /// differ.
  Status setGroupOptions(const std::string &name, const MuonSettings &muon);
  Status setGroupOptions(const std::string &name, const AdamWSettings &adamw);
  /// Only the learning rate, of a group of either algorithm (a scheduler's
  /// usual change).
  Status setGroupLr(const std::string &name, double lr);

  /// Assembles parameter `name` whole (row-major over its shape, as f32)
  /// from the ranks' pieces, for evaluation or export: into `whole` on rank
  /// `root`, or on every rank when `root` is -1; `whole` is left alone on
  /// other ranks and may be null there. Each distinct piece crosses once
  /// (from its lowest holder), through the optimizer's communicator.
  /// Collective.
  Status gatherParameter(const std::string &name, float *whole,
                         int64_t root = -1);

  /// One optimizer step on the bound gradients, with the groups' current
  /// settings. Collective. Fails, with nothing changed, when a rank has
  /// unbound parameters or ranks set different group settings; fails when
  /// a peer does not answer, the device runs out of memory or reports an
  /// error (on every rank). A gradient with NaN or Inf on any rank skips the
  /// step on every rank, changing nothing (`result.applied` false).
  Status step(StepResult &result);
  int64_t stepsTaken() const { return steps; }

  /// Saves this rank's optimizer state into `dir` (created if missing; an
  /// empty path is refused): one file per rank, holding every local
  /// piece's state (Muon momentum, AdamW moments and step counts) by
  /// parameter name and global box, with the step count, the groups'
  /// current settings and the plan's hash; with `withParameters`, the bound
  /// parameter values too. Files are written atomically and flushed to
  /// disk, and a manifest written last makes the checkpoint complete: a
  /// save that fails on any rank leaves the previous checkpoint as it was.
  /// Collective.
  Status saveCheckpoint(const std::string &dir, bool withParameters);
  /// Loads a checkpoint under any layout or world size of the same model:
  /// each rank reads the boxes overlapping its pieces and cuts them to its
  /// own; the groups' settings come back as saved. With `withParameters`,
  /// the bound storage gets the saved values (the checkpoint must hold
  /// them). A damaged, foreign or incomplete checkpoint is refused on every
  /// rank with nothing changed. Collective.
  Status loadCheckpoint(const std::string &dir, bool withParameters);

  const StepCounters &counters() const;
  /// The last step's timeline on this rank, with OptimizerOptions::trace
  /// (StepExecutor::trace).
  const std::vector<TraceEvent> &trace() const;
  /// The compiled plan, with the groups' starting settings (groups() has
  /// the current ones).
  const Plan &plan() const { return thePlan; }
  /// The element type Newton-Schulz runs in: the plan's ns_dtype, "auto"
  /// resolved to the device's default.
  DType nsDtype() const;

private:
  Optimizer(Plan plan, Communicator &comm, Device &device,
            const OptimizerOptions &options);
  bool saveCheckpointFiles(const std::string &dir, bool withParameters,
                           std::string &error);
  bool loadCheckpointFiles(const std::string &dir, bool withParameters,
                           std::string &error);
  Status setGroup(const std::string &name, bool muon, const PlanGroup &group);

  Plan thePlan;
  Communicator &comm;
  Device &device;
  OptimizerOptions options;
  std::unique_ptr<StepExecutor> executor;
  std::vector<ParamSlot> slots;
  std::map<std::string, size_t> slotOf;
  std::vector<void *> values; // bound storage, per parameter
  int64_t steps = 0;
};

} // namespace muon::runtime

#endif // MUON_RUNTIME_OPTIMIZER_H
