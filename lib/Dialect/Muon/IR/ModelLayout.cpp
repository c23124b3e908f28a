//===- ModelLayout.cpp - A model's mesh and parameter layouts -------------===//
//
// Both configuration styles end here. The DTensor style reads the grid and
// the layouts as written. The process-group style builds the grid from the
// groups (see Support/ProcessGroups) and derives each layout:
//   fsdp/shard  split `fsdp_dim` (0-D: replicated)  tp  split `tp_dim` (major)
//   ddp/replicate/cp  replicated         pp        only [pp = stage]
//   ep  only [ep = floor(expert * g / num_experts)] for expert parameters,
//       replicated for the others.
//
//===----------------------------------------------------------------------===//
#include "muon/Dialect/Muon/IR/ModelLayout.h"
#include "muon/Dialect/Muon/IR/ShardAdapter.h"
#include "muon/Support/ProcessGroups.h"

#include "llvm/ADT/StringMap.h"

using namespace mlir;
using namespace mlir::muon;
using ::muon::buildGroupGrid;
using ::muon::GroupGrid;
using ::muon::GroupKind;

std::string mlir::muon::axisLabel(const ModelLayout &layout, int64_t axis) {
  if (axis >= 0 && axis < static_cast<int64_t>(layout.axisNames.size()) &&
      !layout.axisNames[axis].empty())
    return layout.axisNames[axis];
  return "axis " + std::to_string(axis);
}

std::vector<MatrixPiece> mlir::muon::matrixPieces(const ModelLayout &layout,
                                                  size_t i, int64_t matrix) {
  return ::muon::matrixPieces(layout.mesh, layout.layouts[i], matrix);
}

std::vector<int64_t> mlir::muon::matrixHolders(const ModelLayout &layout,
                                               size_t i, int64_t matrix) {
  std::vector<int64_t> ranks;
  for (const MatrixPiece &piece : matrixPieces(layout, i, matrix))
    ranks.push_back(piece.rank);
  return ranks;
}

static std::vector<int64_t> shapeOf(ParamOp param) {
  ArrayRef<int64_t> s = param.getTensorType().getShape();
  return {s.begin(), s.end()};
}

static FailureOr<ModelLayout> layoutFromGrid(ModelOp model, Operation *grid) {
  ModelLayout layout;
  layout.mesh.shape = *shard_adapter::getGridShape(grid);
  if (auto devices =
          grid->getAttrOfType<DenseI64ArrayAttr>(MuonDialect::kDevicesAttr))
    layout.mesh.devices.assign(devices.asArrayRef().begin(),
                               devices.asArrayRef().end());
  layout.axisNames.resize(layout.mesh.shape.size());
  if (auto names = grid->getAttrOfType<ArrayAttr>(MuonDialect::kAxisNamesAttr))
    for (auto [i, n] : llvm::enumerate(names))
      if (auto s = dyn_cast<StringAttr>(n); s && i < layout.axisNames.size())
        layout.axisNames[i] = s.str();
  for (ParamOp param : model.getBodyBlock().getOps<ParamOp>()) {
    ParamLayout pl;
    pl.shape = shapeOf(param);
    pl.splitAxes = param.getSplitAxesVector();
    if (std::optional<ArrayRef<int64_t>> partial = param.getPartialAxes())
      pl.partialAxes.assign(partial->begin(), partial->end());
    pl.only = param.getOnlyPairs();
    pl.numHeads = param.getNumHeads().value_or(1);
    pl.headSplitDim = param.getHeadSplitDim().value_or(0);
    layout.params.push_back(param);
    layout.layouts.push_back(std::move(pl));
  }
  return layout;
}

static FailureOr<ModelLayout> layoutFromGroups(ModelOp model) {
  SmallVector<GroupOp> groupOps(model.getBodyBlock().getOps<GroupOp>());
  std::vector<GroupKind> kinds;
  llvm::StringMap<int64_t> axisOfKind;
  for (GroupOp g : groupOps) {
    StringRef kind = stringifyProcessGroupKind(g.getKind());
    if (axisOfKind.count(kind))
      return g.emitError() << "process-group kind '" << kind
                           << "' is given twice";
    for (auto [a, b] : {std::pair<StringRef, StringRef>{"fsdp", "shard"},
                        {"ddp", "replicate"}})
      if ((kind == a && axisOfKind.count(b)) ||
          (kind == b && axisOfKind.count(a)))
        return g.emitError() << "process groups '" << a << "' and '" << b
                             << "' are the same kind; give only one";
    axisOfKind[kind] = -1;
    kinds.push_back({kind.str(), g.getGroupsVector()});
  }
  ::muon::StatusOr<GroupGrid> grid =
      buildGroupGrid(*model.getWorldSize(), kinds);
  if (!grid.ok())
    return groupOps.front().emitError() << grid.status().message();

  ModelLayout layout;
  layout.mesh = grid->mesh;
  for (auto [axis, k] : llvm::enumerate(grid->axisKind)) {
    layout.axisNames.push_back(kinds[k].name);
    axisOfKind[kinds[k].name] = axis;
  }
  auto axisOf = [&](StringRef kind) -> int64_t {
    auto it = axisOfKind.find(kind);
    return it == axisOfKind.end() ? -1 : it->second;
  };
  int64_t fsdpAxis = axisOf("fsdp") >= 0 ? axisOf("fsdp") : axisOf("shard");
  int64_t tpAxis = axisOf("tp"), epAxis = axisOf("ep"), ppAxis = axisOf("pp");
  int64_t fsdpDim = model.getFsdpDim().value_or(0);
  if (model.getFsdpDim() && fsdpAxis < 0)
    return model.emitError() << "'fsdp_dim' is set but there is no fsdp or "
                                "shard process group";

  int64_t numExperts = 0;
  for (ParamOp p : model.getBodyBlock().getOps<ParamOp>())
    if (std::optional<int64_t> e = p.getExpert())
      numExperts = std::max(numExperts, *e + 1);
  if (std::optional<int64_t> n = model.getNumExperts()) {
    if (*n < 1)
      return model.emitError()
             << "'num_experts' must be at least 1, got " << *n;
    numExperts = *n;
  }

  for (ParamOp param : model.getBodyBlock().getOps<ParamOp>()) {
    StringRef name = param.getSymName();
    ParamLayout pl;
    pl.shape = shapeOf(param);
    int64_t rank = pl.shape.size();
    pl.splitAxes.resize(rank);
    if (std::optional<int64_t> d = param.getTpDim()) {
      if (tpAxis < 0)
        return param.emitError() << "parameter '" << name
                                 << "' has tp_dim but there is no tp process "
                                    "group";
      pl.splitAxes[*d].push_back(tpAxis); // TP is applied first: major
    }
    // A 0-D parameter cannot be split: FSDP keeps a full copy everywhere.
    if (fsdpAxis >= 0 && rank > 0) {
      if (fsdpDim < 0 || fsdpDim >= rank)
        return param.emitError()
               << "fsdp_dim " << fsdpDim << " is out of range for parameter '"
               << name << "' of " << rank << " dim(s)";
      pl.splitAxes[fsdpDim].push_back(fsdpAxis);
    }
    if (std::optional<int64_t> stage = param.getStage()) {
      if (ppAxis < 0)
        return param.emitError() << "parameter '" << name
                                 << "' has a stage but there is no pp process "
                                    "group";
      int64_t stages = layout.mesh.shape[ppAxis];
      if (*stage >= stages)
        return param.emitError()
               << "stage " << *stage << " of parameter '" << name
               << "' is out of range: pp groups have " << stages
               << " ranks (stages 0.." << stages - 1 << ")";
      pl.only.push_back({ppAxis, *stage});
    } else if (ppAxis >= 0) {
      return param.emitError() << "parameter '" << name
                               << "' has no stage, but the model has pp "
                                  "process groups";
    }
    if (std::optional<int64_t> expert = param.getExpert()) {
      if (epAxis < 0)
        return param.emitError() << "parameter '" << name
                                 << "' has an expert id but there is no ep "
                                    "process group";
      if (*expert >= numExperts)
        return param.emitError()
               << "expert " << *expert << " of parameter '" << name
               << "' is out of range: num_experts is " << numExperts;
      int64_t g = layout.mesh.shape[epAxis];
      pl.only.push_back({epAxis, *expert * g / numExperts});
    }
    std::sort(pl.only.begin(), pl.only.end());
    pl.numHeads = param.getNumHeads().value_or(1);
    pl.headSplitDim = param.getHeadSplitDim().value_or(0);
    layout.params.push_back(param);
    layout.layouts.push_back(std::move(pl));
  }
  return layout;
}

FailureOr<ModelLayout> mlir::muon::computeModelLayout(ModelOp model) {
  if (model.usesProcessGroups())
    return layoutFromGroups(model);
  for (Operation &op : model.getBodyBlock())
    if (shard_adapter::isGrid(&op))
      return layoutFromGrid(model, &op);
  // No grid and no parameters (the verifier allows nothing else): one
  // device, so that plans always have a mesh.
  ModelLayout layout;
  layout.mesh.shape = {1};
  layout.axisNames = {""};
  return layout;
}
