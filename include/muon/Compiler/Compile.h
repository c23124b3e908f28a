//===- Compile.h - The compiler as a C++ library ----------------*- C++ -*-===//
//
// What a trainer writes instead of a spec file: the model's parameters with
// their layouts and a distributed config, mirroring the seeds' Python API
// (torch.optim.Muon's `distributed_config`):
//
//   muon::compiler::Model model;
//   model.params = {{"wq", {1024, 1024}}, {"norm", {1024}}};
//   muon::compiler::AutoConfig groups;
//   groups.worldSize = 8;
//   groups.fsdp = fsdpGroups;   // rank lists, as the trainer built them
//   groups.tp = tpGroups;
//   groups.tpDim = 0;
//   auto config = muon::compiler::createAutoConfig(groups);
//   muon::StatusOr<muon::Plan> plan = muon::compiler::compile(model, &config);
//   if (!plan.ok()) ...   // plan.status().text() names what is at fault
//   muon::runtime::Optimizer::create(*plan, comm, device, {}, opt);
//
// The description becomes a spec (muon-spec/1, `toSpec`), goes through the
// importer, the verifier and the pass pipeline, and comes back as the plan
// the runtime executes: the same checks and errors as the tools, with the
// parameter named in each error.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_COMPILER_COMPILE_H
#define MUON_COMPILER_COMPILE_H

#include "muon/Plan/Placement.h"
#include "muon/Plan/Plan.h"
#include "muon/Support/Status.h"

#include <cstdint>
#include <array>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace muon::compiler {

/// A DTensor placement on one mesh axis.
struct Placement {
  enum class Kind { Replicate, Shard, Partial } kind = Kind::Replicate;
  int64_t dim = -1; // Shard
  static Placement replicate() { return {Kind::Replicate, -1}; }
  static Placement shard(int64_t dim) { return {Kind::Shard, dim}; }
  static Placement partial() { return {Kind::Partial, -1}; }
};

/// DTensor's DeviceMesh: axis sizes and, optionally, names.
struct DeviceMesh {
  std::vector<int64_t> shape;
  std::vector<std::string> names;
};

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype = "f32"; // f32, bf16 or f16
  /// The algorithm that updates it, by name (muon/Plan/Algorithm.h:
  /// "muon", "adamw", ...; the spec's `params[i].optimizer`); empty: its
  /// group's, else Muon for 2 or more dims (leading dims are batch dims)
  /// and AdamW below.
  std::string optimizer;
  /// The name of the Model::groups entry the parameter belongs to; empty:
  /// the first group of its algorithm.
  std::string groupName;
  // DTensor style: one placement per mesh axis (none: replicated), and the
  // sub-mesh outside of which the parameter does not exist (axis -> coord).
  std::vector<Placement> placements;
  std::map<std::string, int64_t> only;
  /// The spec's `split` (strided layouts, e.g. TP then FSDP on one dim):
  /// tensor dim -> the mesh axes (names or indices) splitting it, major
  /// first. Empty: the placements' DTensor order.
  std::map<int64_t, std::vector<std::string>> split;
  // Process-group style: the pipeline stage and the expert id.
  std::optional<int64_t> stage, expert;
  /// Per-head Newton-Schulz (docs/spec-format.md 1.3): dim `headSplitDim`
  /// of each matrix (0: rows, 1: columns) cut into `numHeads` blocks, each
  /// orthogonalized, owned and balanced as a matrix of its own ("w[h]").
  /// 1: the whole matrix.
  int64_t numHeads = 1;
  int64_t headSplitDim = 0;
};

/// A Muon group's Newton-Schulz settings, which the compiler turns into
/// the group's NS configuration in the plan (groups with the same ones
/// share it).
struct NewtonSchulzOptions {
  double eps = 1e-7;
  int64_t nsSteps = 5;
  /// Newton-Schulz coefficients by preset name: "jordan" (one triple for
  /// every step, torch.optim.Muon's) or "polar_express" (one triple per
  /// step; muon/Support/NsCoefficients.h). Unknown names fail to compile.
  std::string nsPreset = "jordan";
  /// An explicit table instead of the preset when not empty: one (a, b, c)
  /// triple for every step, or one per step.
  std::vector<std::array<double, 3>> nsCoefficients;
  /// "f32" or "bf16"; empty: the device that runs the plan chooses.
  std::string nsDtype;
};

/// One of torch.optim's param_groups: its name, algorithm and settings,
/// stored by the settings table (::muon::PlanGroup: setNumber("lr", ...),
/// muon/Plan/GroupSettings.h), and a Muon group's Newton-Schulz settings.
/// A setting or an algorithm added to the registry reaches the spec this
/// API writes without a change here. Muon groups may differ in ns_steps,
/// coefficients and eps, as torch.optim.Muon's; they must agree on nsDtype
/// (the plan's one precision).
struct ParamGroup : ::muon::PlanGroup {
  using PlanGroup::PlanGroup; // ParamGroup(::muon::kAdamW)
  NewtonSchulzOptions ns;     // Muon groups
};

struct Model {
  std::vector<Param> params;
  /// Without `groups`: the two groups "muon" and "adamw" (their names
  /// unused).
  ParamGroup muon = ParamGroup(::muon::kMuon);
  ParamGroup adamw = ParamGroup(::muon::kAdamW);
  /// Any number of groups instead of `muon` and `adamw` (the spec's
  /// param_groups); then those two are unused.
  std::vector<ParamGroup> groups;
  /// QK-clip (MuonClip, docs/spec-format.md 1.3): the attention layers
  /// whose W_q and W_k rows are rescaled after each step, by head, from the
  /// per-step max logits (Optimizer::setQkMaxLogits). numKvHeads 0: as many
  /// as numHeads. Empty: off, and the plan is what it was without.
  std::vector<::muon::QkClipLayer> qkClip;
};

/// A Muon matrix as an assign callback sees it.
struct MatrixInfo {
  /// "w", or "w[3]" for one matrix of a batched or per-head parameter.
  std::string name;
  int64_t rows = 0, cols = 0;
  int64_t nsFlops = 0;
  std::vector<int64_t> holders; // ranks holding a piece of it
};
/// The seeds' assign_fn, run at compile time: for each rank, the matrices
/// it orthogonalizes (every matrix exactly once, each to a holder).
using AssignFn = std::function<std::map<int64_t, std::vector<std::string>>(
    const std::vector<MatrixInfo> &matrices, int64_t worldSize)>;

struct DistributedConfig {
  // DTensor style: the mesh (placements are per parameter).
  std::optional<DeviceMesh> mesh;
  // Process-group style: the world and its groups, each a list of rank
  // lists that partitions the world.
  int64_t worldSize = 0;
  std::map<std::string, std::vector<std::vector<int64_t>>> groups;
  std::optional<int64_t> tpDim;              // every 2+-dim parameter
  std::map<int64_t, int64_t> tpDimPerParam;  // parameter index -> dim
  std::optional<int64_t> fsdpDim;
  std::optional<int64_t> numExperts;
  // The step.
  bool async = true;
  int64_t prefetchCount = 1;
  std::map<int64_t, std::vector<std::string>> assignments;
  AssignFn assignFn;
  std::string wireDtype = "f32";
  int64_t gatherBudgetBytes = 0;
  int64_t maxRounds = 8;
  /// Newton-Schulz placement of matrices whose whole gradient several
  /// ranks hold (the spec's distributed.placement): "auto" (the default:
  /// by predicted time on a machine profile; without one, one owner),
  /// "once", or "redundant_below" with `redundantBelow` (matrices of fewer
  /// elements are orthogonalized by every holder).
  std::string placement = "auto";
  int64_t redundantBelow = 0;
  /// The machine "auto" predicts on (a profile's numbers, as muon-run
  /// --placement-profile reads them); not valid(): one owner per matrix.
  PlacementMachine placementMachine;
};

/// The seeds' create_dtensor_config: placements come with the parameters.
DistributedConfig createDTensorConfig(DeviceMesh mesh, bool async = true,
                                      int64_t prefetchCount = 1);

/// The seeds' create_auto_config: process groups per kind (FSDP, TP as one
/// dim or per-parameter dims, DDP, HSDP as shard + replicate, EP with the
/// experts' ids on the parameters, CP, PP with the stages on the
/// parameters).
struct AutoConfig {
  int64_t worldSize = 0;
  std::vector<std::vector<int64_t>> fsdp, shard, tp, ddp, replicate, cp, ep,
      pp;
  std::optional<int64_t> tpDim;
  std::map<int64_t, int64_t> tpDimPerParam;
  std::optional<int64_t> fsdpDim;
  std::optional<int64_t> numExperts;
  bool async = true;
  int64_t prefetchCount = 1;
};
DistributedConfig createAutoConfig(const AutoConfig &config);

/// Compiles `model` under `config` (null: no distributed config, the
/// single-device algorithm on every holder) into a plan. InvalidArgument
/// naming the parameter or setting at fault.
StatusOr<Plan> compile(const Model &model, const DistributedConfig *config);

/// Compiles a spec document (muon-spec/1 JSON text, as muon-run and
/// muon-translate read it; docs/spec-format.md) into a plan, as `muon-run
/// SPEC` does. `wireDtype` ("f32", "bf16"), when not empty, sets the
/// exchanges' element type (a compiler setting a spec does not hold; f32
/// otherwise). InvalidArgument with the first error, prefixed with its
/// JSON path ("params[3].shape: ...").
StatusOr<Plan> compileSpec(const std::string &spec,
                           const std::string &wireDtype = "");

/// The spec (muon-spec/1) of a model and config, as muon-run and
/// muon-translate read it.
std::string toSpec(const Model &model, const DistributedConfig *config);

} // namespace muon::compiler

#endif // MUON_COMPILER_COMPILE_H
