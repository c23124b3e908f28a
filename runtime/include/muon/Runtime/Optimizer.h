//===- Optimizer.h - Distributed Muon for a C++ trainer ---------*- C++ -*-===//
//
// The runtime's public API, what torch.optim.Muon with a distributed config
// is for a PyTorch trainer:
//
//   muon::runtime::cpu::CpuDevice device;
//   muon::runtime::MpiCommunicator comm(MPI_COMM_WORLD);  // or any comm
//   std::string error;
//   auto opt = muon::runtime::Optimizer::load("plan.json", comm, device,
//                                             {}, error);
//   for (const auto &p : opt->params())        // this rank's pieces
//     opt->bind(p.name, values(p), grads(p), p.dtype, p.elements, error);
//   ... backward ...
//   muon::runtime::StepResult result;
//   opt->step(result, error);
//
// A plan comes from a plan file compiled ahead of time (`muon-run --plan`,
// `muon-translate --export-plan`; linking only this library) or from the
// compiler in-process (Muon::Compiler, muon/Compiler/Compile.h). The
// trainer owns parameter and gradient storage, bound by name; the optimizer
// owns its state (Muon momentum, AdamW moments and step counts), which
// checkpoints save and load by parameter name and global box.
//
// Every call that talks to other ranks is collective: all ranks call it,
// in the same order.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_OPTIMIZER_H
#define MUON_RUNTIME_OPTIMIZER_H

#include "muon/Plan/Plan.h"
#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/DType.h"
#include "muon/Runtime/Device.h"
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
  DType dtype = DType::F32;
  bool muon = true; // else AdamW
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
  static std::unique_ptr<Optimizer> load(const std::string &planPath,
                                         Communicator &comm, Device &device,
                                         const OptimizerOptions &options,
                                         std::string &error);
  /// Checks the plan (validatePlan) and that it is for this communicator's
  /// world, compares plan hashes across ranks and allocates the optimizer
  /// state. Collective. Returns null with `error` set.
  static std::unique_ptr<Optimizer> create(Plan plan, Communicator &comm,
                                           Device &device,
                                           const OptimizerOptions &options,
                                           std::string &error);
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
  /// device memory of `elements` values of `dtype`, row-major over the
  /// slot's box. The dtype must be the plan's and `elements` the slot's.
  /// A parameter this rank does not hold needs no binding.
  bool bind(const std::string &name, void *values, const void *grad,
            DType dtype, int64_t elements, std::string &error);

  /// One optimizer step on the bound gradients. Collective. Returns false
  /// with `error` when a rank has unbound parameters (nothing changes), a
  /// peer does not answer, or the device runs out of memory. A gradient
  /// with NaN or Inf on any rank skips the step on every rank, changing
  /// nothing (`result.applied` false).
  bool step(StepResult &result, std::string &error);
  int64_t stepsTaken() const { return steps; }

  /// Saves this rank's optimizer state into `dir` (created if missing):
  /// one file per rank, holding every local piece's state (Muon momentum,
  /// AdamW moments and step counts) by parameter name and global box, with
  /// the step count and the plan's hash; with `withParameters`, the bound
  /// parameter values too. Files are written atomically and flushed to
  /// disk, and a manifest written last makes the checkpoint complete: a
  /// save that fails on any rank leaves the previous checkpoint as it was.
  /// Collective.
  bool saveCheckpoint(const std::string &dir, bool withParameters,
                      std::string &error);
  /// Loads a checkpoint under any layout or world size of the same model:
  /// each rank reads the boxes overlapping its pieces from every rank's
  /// file and cuts them to its own. With `withParameters`, the bound
  /// storage gets the saved values (the checkpoint must hold them). A
  /// damaged, foreign or incomplete checkpoint is refused on every rank
  /// with nothing changed. Collective.
  bool loadCheckpoint(const std::string &dir, bool withParameters,
                      std::string &error);

  const StepCounters &counters() const;
  /// The last step's timeline on this rank, with OptimizerOptions::trace
  /// (StepExecutor::trace).
  const std::vector<TraceEvent> &trace() const;
  const Plan &plan() const { return thePlan; }
  /// The element type Newton-Schulz runs in: the plan's ns_dtype, "auto"
  /// resolved to the device's default.
  DType nsDtype() const;

private:
  Optimizer(Plan plan, Communicator &comm, Device &device,
            const OptimizerOptions &options);

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
