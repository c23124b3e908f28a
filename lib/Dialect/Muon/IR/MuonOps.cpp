//===- MuonOps.cpp - muon dialect operations ------------------------------===//
#include "muon/Dialect/Muon/IR/MuonOps.h"
#include "muon/Dialect/Muon/IR/GroupSettingAttrs.h"
#include "muon/Dialect/Muon/IR/ModelLayout.h"
#include "muon/Dialect/Muon/IR/ShardAdapter.h"
#include "muon/Plan/Algorithm.h"
#include "muon/Plan/Validate.h"
#include "muon/Support/Limits.h"
#include "muon/Support/ModelLimits.h"
#include "muon/Support/NsCoefficients.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"

#include <map>

using namespace mlir;
using namespace mlir::muon;

//===----------------------------------------------------------------------===//
// Parsing helpers
//===----------------------------------------------------------------------===//

/// `[1, 2, 3]` (possibly empty).
static ParseResult parseIntList(OpAsmParser &parser,
                                SmallVectorImpl<int64_t> &values) {
  return parser.parseCommaSeparatedList(OpAsmParser::Delimiter::Square,
                                        [&]() -> ParseResult {
                                          int64_t v;
                                          if (parser.parseInteger(v))
                                            return failure();
                                          values.push_back(v);
                                          return success();
                                        });
}

/// `[[0], [], [1, 2]]`: an array of i64 arrays.
static ParseResult parseIntListList(OpAsmParser &parser, ArrayAttr &result) {
  SmallVector<Attribute> lists;
  if (parser.parseCommaSeparatedList(
          OpAsmParser::Delimiter::Square, [&]() -> ParseResult {
            SmallVector<int64_t> values;
            if (parseIntList(parser, values))
              return failure();
            lists.push_back(
                DenseI64ArrayAttr::get(parser.getContext(), values));
            return success();
          }))
    return failure();
  result = ArrayAttr::get(parser.getContext(), lists);
  return success();
}

static void printIntList(OpAsmPrinter &p, ArrayRef<int64_t> values) {
  p << "[";
  llvm::interleaveComma(values, p);
  p << "]";
}

static void printIntListList(OpAsmPrinter &p, ArrayAttr lists) {
  p << "[";
  llvm::interleaveComma(lists, p, [&](Attribute a) {
    if (auto arr = dyn_cast<DenseI64ArrayAttr>(a))
      printIntList(p, arr.asArrayRef());
    else
      p.printAttribute(a);
  });
  p << "]";
}

//===----------------------------------------------------------------------===//
// ModelOp
//===----------------------------------------------------------------------===//

void ModelOp::build(OpBuilder &builder, OperationState &state, StringRef name) {
  state.addAttribute(mlir::SymbolTable::getSymbolAttrName(),
                     builder.getStringAttr(name));
  Region *body = state.addRegion();
  body->push_back(new Block());
}

bool ModelOp::usesProcessGroups() {
  return llvm::any_of(getBodyBlock(), llvm::IsaPred<GroupOp>);
}

/// Names a Muon matrix in messages: the parameter, plus the slice for
/// batched or per-head tensors.
static std::string matrixLabel(ParamOp param, int64_t matrix) {
  if (param.getTensorType().getRank() > 2 ||
      param.getNumHeads().value_or(1) > 1)
    return "matrix '" + param.getSymName().str() + "[" +
           std::to_string(matrix) + "]'";
  return "parameter '" + param.getSymName().str() + "'";
}

/// Calls `fn(param index, matrix)` for every Muon matrix a `[@p, @q[i]]` list
/// names; `who` starts the error messages ("assignment to rank 3").
static LogicalResult
forEachMatrixRef(Operation *op, const ModelLayout &layout,
                 const llvm::DenseMap<StringAttr, size_t> &indexOf,
                 ArrayAttr params, ArrayRef<int64_t> slices,
                 const std::string &who, StringRef onlyMuon,
                 llvm::function_ref<LogicalResult(size_t, int64_t)> fn) {
  for (auto [ref, slice] : llvm::zip(params, slices)) {
    auto sym = cast<FlatSymbolRefAttr>(ref);
    auto it = indexOf.find(sym.getAttr());
    if (it == indexOf.end())
      return op->emitError()
             << who << " names unknown parameter '" << sym.getValue() << "'";
    size_t i = it->second;
    ParamOp param = layout.params[i];
    if (!param.isOrthogonalized())
      return op->emitError()
             << who << " names parameter '" << sym.getValue()
             << "', which is in the "
             << ::muon::algorithmName(param.getAlgorithm()) << " group; "
             << onlyMuon;
    int64_t count = layout.layouts[i].numMatrices();
    if (slice >= count)
      return op->emitError()
             << who << " names matrix '" << sym.getValue() << "[" << slice
             << "]', but the parameter has " << count << " matrices";
    for (int64_t m = slice < 0 ? 0 : slice; m < (slice < 0 ? count : slice + 1);
         ++m)
      if (failed(fn(i, m)))
        return failure();
  }
  return success();
}

static llvm::DenseMap<StringAttr, size_t>
paramIndex(const ModelLayout &layout) {
  llvm::DenseMap<StringAttr, size_t> indexOf;
  for (size_t i = 0; i < layout.params.size(); ++i)
    indexOf[ParamOp(layout.params[i]).getSymNameAttr()] = i;
  return indexOf;
}

/// Numbers every matrix of every parameter: matrix m of parameter i is
/// first[i] + m.
static std::vector<int64_t> firstMatrix(const ModelLayout &layout) {
  std::vector<int64_t> first(layout.params.size() + 1, 0);
  for (size_t i = 0; i < layout.params.size(); ++i)
    first[i + 1] = first[i] + layout.layouts[i].numMatrices();
  return first;
}

/// Names the first Muon matrix whose entry in `seen` is still -1.
static LogicalResult requireAllMatrices(const ModelLayout &layout,
                                        const std::vector<int64_t> &first,
                                        const std::vector<int64_t> &seen,
                                        StringRef prefix, StringRef suffix) {
  for (size_t i = 0; i < layout.params.size(); ++i) {
    ParamOp param = layout.params[i];
    if (!param.isOrthogonalized())
      continue;
    for (int64_t m = 0; m < first[i + 1] - first[i]; ++m)
      if (seen[first[i] + m] < 0)
        return param.emitError() << prefix << matrixLabel(param, m) << suffix;
  }
  return success();
}

/// Explicit assignments: every Muon matrix exactly once, to a rank holding it.
static LogicalResult verifyAssignments(const ModelLayout &layout,
                                       ArrayRef<AssignOp> assigns) {
  llvm::DenseMap<StringAttr, size_t> indexOf = paramIndex(layout);
  int64_t world = layout.mesh.numDevices();
  std::vector<int64_t> first = firstMatrix(layout);
  std::vector<int64_t> owner(first.back(), -1); // matrix -> owning rank
  for (AssignOp assign : assigns) {
    int64_t rank = assign.getRank();
    if (rank >= world)
      return assign.emitError()
             << "assignment names rank " << rank << ", outside the world of "
             << world << " ranks";
    std::vector<int64_t> coords = layout.mesh.coordsOfRank(rank);
    std::string who = "assignment to rank " + std::to_string(rank);
    if (failed(forEachMatrixRef(
            assign, layout, indexOf, assign.getParams(), assign.getSlices(),
            who, "only Muon matrices have owners",
            [&](size_t i, int64_t m) -> LogicalResult {
              ParamOp param = layout.params[i];
              int64_t &slot = owner[first[i] + m];
              if (slot >= 0)
                return assign.emitError()
                       << "overlapping assignments: " << matrixLabel(param, m)
                       << " is assigned to rank " << slot << " and to rank "
                       << rank;
              slot = rank;
              if (!layout.layouts[i].holdsMatrix(layout.mesh, coords, m))
                return assign.emitError()
                       << who << ": the rank does not hold "
                       << matrixLabel(param, m) << " (held by ranks "
                       << ::muon::formatRanks(matrixHolders(layout, i, m))
                       << ")";
              return success();
            })))
      return failure();
  }
  return requireAllMatrices(layout, first, owner, "incomplete assignments: ",
                            " is assigned to no rank");
}

/// Rounds: numbered 0..R-1, every Muon matrix in exactly one.
static LogicalResult verifyRounds(const ModelLayout &layout,
                                  ArrayRef<RoundOp> rounds) {
  namespace limits = ::muon::limits;
  int64_t count = rounds.size(), world = layout.mesh.numDevices();
  if (count > limits::kMaxRounds)
    return RoundOp(rounds[limits::kMaxRounds]).emitError()
           << "the model has " << count << " rounds, above the limit of "
           << limits::describe(limits::kMaxRounds);
  if (world * (2 * count + 1) > limits::kMaxRankExchanges)
    return RoundOp(rounds.front()).emitError()
           << world << " ranks x " << 2 * count + 1
           << " exchanges is above the limit of "
           << limits::describe(limits::kMaxRankExchanges)
           << " for the plan's per-rank tables";
  llvm::DenseMap<StringAttr, size_t> indexOf = paramIndex(layout);
  std::vector<int64_t> first = firstMatrix(layout);
  std::vector<int64_t> roundOf(first.back(), -1);
  std::vector<bool> present(rounds.size(), false);
  for (RoundOp round : rounds) {
    int64_t index = round.getIndex();
    if (index >= static_cast<int64_t>(rounds.size()) || present[index])
      return round.emitError()
             << "rounds must be numbered 0.." << rounds.size() - 1
             << " once each; found " << index << " again or out of range";
    present[index] = true;
    std::string who = "round " + std::to_string(index);
    if (failed(forEachMatrixRef(round, layout, indexOf, round.getParams(),
                                round.getSlices(), who,
                                "only Muon matrices go in rounds",
                                [&](size_t i, int64_t m) -> LogicalResult {
                                  int64_t &slot = roundOf[first[i] + m];
                                  if (slot >= 0)
                                    return round.emitError()
                                           << matrixLabel(layout.params[i], m)
                                           << " is in round " << slot
                                           << " and round " << index;
                                  slot = index;
                                  return success();
                                })))
      return failure();
  }
  return requireAllMatrices(layout, first, roundOf,
                            "incomplete rounds: ", " is in no round");
}

/// Parameter groups: unique names, one Newton-Schulz precision for every
/// Muon group (each may have its own steps, coefficients and eps), each
/// parameter's named group present and of the parameter's algorithm, and a
/// group for every parameter of an algorithm without a default group (Muon
/// and AdamW have theirs: defaultGroups).
static LogicalResult verifyParamGroups(ArrayRef<Operation *> groups,
                                       ArrayRef<ParamOp> params) {
  llvm::StringMap<Operation *> byName;
  std::vector<bool> declared(::muon::algorithms().size(), false);
  declared[::muon::kMuon] = declared[::muon::kAdamW] = true;
  OptimizerOp firstMuon;
  for (Operation *op : groups) {
    auto opt = dyn_cast<OptimizerOp>(op);
    StringRef name = groupNameOf(op);
    if (std::optional<::muon::AlgorithmId> a = groupAlgorithm(op))
      declared[*a] = true;
    if (name.empty())
      return op->emitError() << "a parameter group's name must not be empty";
    auto [it, inserted] = byName.try_emplace(name, op);
    if (!inserted)
      return op->emitError()
             << "a model has one parameter group named '" << name << "'";
    if (!opt)
      continue;
    if (!firstMuon) {
      firstMuon = opt;
      continue;
    }
    // The plan runs Newton-Schulz in one precision, which every rank
    // resolves and agrees on at start-up.
    if (firstMuon.getNsDtype() != opt.getNsDtype())
      return opt.emitError()
             << "Muon groups '" << firstMuon.groupName() << "' and '" << name
             << "' differ in 'ns_dtype'; the Newton-Schulz precision is "
                "shared by every Muon group (ns_steps, ns_coefficients and "
                "eps may differ)";
  }
  for (ParamOp p : params) {
    const ::muon::Algorithm &mine = ::muon::algorithmOf(p.getAlgorithm());
    std::optional<StringRef> group = p.getParamGroup();
    if (!group) {
      if (!declared[p.getAlgorithm()])
        return p.emitError() << "parameter '" << p.getSymName() << "' is a "
                             << mine.title << " parameter but the model has "
                             << "no " << mine.name << " group";
      continue;
    }
    auto it = byName.find(*group);
    if (it == byName.end())
      return p.emitError() << "parameter '" << p.getSymName()
                           << "' is in group '" << *group
                           << "', which the model does not declare";
    const ::muon::AlgorithmId theirs = *groupAlgorithm(it->second);
    if (theirs != p.getAlgorithm())
      return p.emitError() << "parameter '" << p.getSymName() << "' is "
                           << (p.getAlgorithm() == ::muon::kAdamW ? "an "
                                                                  : "a ")
                           << mine.title << " parameter but its group '"
                           << *group << "' is "
                           << ::muon::algorithmOf(theirs).title;
  }
  return success();
}

/// The model's sizes against the limits (the grid, world, experts and
/// parameter count), checked before anything allocates per rank.
static LogicalResult verifyModelSizes(ModelOp model, Operation *grid,
                                      size_t numParams) {
  namespace limits = ::muon::limits;
  if (grid) {
    std::optional<std::vector<int64_t>> shape =
        shard_adapter::getGridShape(grid);
    if (!shape)
      return grid->emitError() << "the model's grid must have a static shape";
    ::muon::Mesh mesh;
    mesh.shape = *shape;
    if (auto devices =
            grid->getAttrOfType<DenseI64ArrayAttr>(MuonDialect::kDevicesAttr))
      mesh.devices.assign(devices.asArrayRef().begin(),
                          devices.asArrayRef().end());
    if (::muon::Status bad = ::muon::checkMeshLimits(mesh); !bad.ok())
      return grid->emitError() << bad.message();
  }
  if (std::optional<int64_t> world = model.getWorldSize();
      world && (*world < 1 || *world > limits::kMaxWorldSize))
    return model.emitError() << "world_size " << *world << " is outside [1, "
                             << limits::describe(limits::kMaxWorldSize) << "]";
  if (std::optional<int64_t> experts = model.getNumExperts();
      experts && *experts > limits::kMaxExperts)
    return model.emitError() << "num_experts " << *experts
                             << " is above the limit of "
                             << limits::describe(limits::kMaxExperts);
  if (static_cast<int64_t>(numParams) > limits::kMaxParams)
    return model.emitError() << "the model has " << numParams
                             << " parameters, above the limit of "
                             << limits::describe(limits::kMaxParams);
  return success();
}

/// A model places its parameters either on a grid or by process groups;
/// each parameter's attributes must match the one the model uses.
static LogicalResult verifyPlacementKind(ModelOp model, Operation *grid,
                                         ArrayRef<GroupOp> groups,
                                         ArrayRef<ParamOp> params) {
  if (!groups.empty()) {
    if (grid)
      return grid->emitError()
             << "a model uses either a grid (DTensor style) or process "
                "groups, not both";
    if (!model.getWorldSize())
      return model.emitError()
             << "process groups need the model's 'world_size'";
    for (ParamOp p : params)
      if (p.getGrid())
        return p.emitError() << "parameter '" << p.getSymName()
                             << "' has a mesh layout but the model uses "
                                "process groups";
    return success();
  }
  for (StringRef attr : {"world_size", "fsdp_dim", "num_experts"})
    if (model->hasAttr(attr))
      return model.emitError()
             << "'" << attr << "' is only meaningful with process groups";
  if (!grid && !params.empty())
    return ParamOp(params.front()).emitError()
           << "the model has parameters but neither a grid nor process "
              "groups";
  for (ParamOp p : params) {
    if (p.getTpDim() || p.getStage() || p.getExpert())
      return p.emitError() << "parameter '" << p.getSymName()
                           << "' has process-group attributes (tp_dim, "
                              "stage, expert) but the model has no groups";
    if (!p.getGrid())
      return p.emitError() << "parameter '" << p.getSymName()
                           << "' has no layout; expected 'on @"
                           << shard_adapter::getGridName(grid) << "'";
    if (*p.getGrid() != shard_adapter::getGridName(grid))
      return p.emitError() << "parameter '" << p.getSymName()
                           << "' is on grid @" << *p.getGrid()
                           << " but the model's mesh is @"
                           << shard_adapter::getGridName(grid);
  }
  return success();
}

/// The laid-out model against the per-rank memory and flop limits.
static LogicalResult
verifyLayoutLimits(ModelOp model, const ModelLayout &layout,
                   ArrayRef<Operation *> optimizerGroups) {
  std::vector<bool> orthogonalized;
  for (ParamOp p : layout.params)
    orthogonalized.push_back(p.isOrthogonalized());
  // The most steps of any group bound every matrix's flops.
  int64_t nsSteps = 5;
  bool anyMuon = false;
  for (Operation *op : optimizerGroups)
    if (auto opt = dyn_cast<OptimizerOp>(op)) {
      int64_t steps = static_cast<int64_t>(opt.getNsSteps());
      nsSteps = anyMuon ? std::max(nsSteps, steps) : steps;
      anyMuon = true;
    }
  ::muon::ModelLimitError error;
  if (::muon::checkModelLimits(layout.mesh, layout.layouts, orthogonalized,
                               nsSteps, error))
    return success();
  if (error.param < 0)
    return model.emitError() << error.message;
  ParamOp p = layout.params[error.param];
  return p.emitError() << "parameter '" << p.getSymName()
                       << "': " << error.message;
}

/// Without a distributed config nothing gathers a shard or sums a partial
/// gradient, so every parameter must be whole and no assignment is given.
static LogicalResult verifyWithoutDistributed(const ModelLayout &layout,
                                              ArrayRef<AssignOp> assigns) {
  for (size_t i = 0; i < layout.params.size(); ++i) {
    const ParamLayout &pl = layout.layouts[i];
    ParamOp p = layout.params[i];
    for (size_t d = 0; d < pl.splitAxes.size(); ++d)
      if (!pl.splitAxes[d].empty())
        return p.emitError()
               << "parameter '" << p.getSymName() << "' is sharded (dim " << d
               << " split on mesh axis '"
               << axisLabel(layout, pl.splitAxes[d].front())
               << "') but there is no distributed config: Newton-Schulz "
                  "on a shard gives a wrong update; add a distributed "
                  "config";
    if (pl.isPartial())
      return p.emitError()
             << "parameter '" << p.getSymName()
             << "' has a partial gradient on mesh axis '"
             << axisLabel(layout, pl.partialAxes.front())
             << "' but there is no distributed config to sum it; add a "
                "distributed config";
  }
  if (!assigns.empty())
    return AssignOp(assigns.front()).emitError()
           << "explicit assignments need a distributed config";
  return success();
}

LogicalResult ModelOp::verifyRegions() {
  Operation *grid = nullptr;
  Operation *distributed = nullptr;
  // muon.optimizer, muon.adamw and muon.param_group
  SmallVector<Operation *> optimizerGroups;
  SmallVector<GroupOp> groups;
  SmallVector<AssignOp> assigns;
  SmallVector<ParamOp> params;
  SmallVector<RoundOp> rounds;
  Operation *schedule = nullptr;
  auto once = [&](Operation *&slot, Operation &op) -> LogicalResult {
    if (slot)
      return op.emitError()
             << "a model has at most one '" << op.getName() << "'";
    slot = &op;
    return success();
  };
  for (Operation &op : getBodyBlock()) {
    if (shard_adapter::isGrid(&op)) {
      if (failed(once(grid, op)))
        return failure();
    } else if (isa<OptimizerOp, AdamWOp, ParamGroupOp>(op)) {
      optimizerGroups.push_back(&op);
    } else if (isa<DistributedOp>(op)) {
      if (failed(once(distributed, op)))
        return failure();
    } else if (auto g = dyn_cast<GroupOp>(op)) {
      groups.push_back(g);
    } else if (auto a = dyn_cast<AssignOp>(op)) {
      assigns.push_back(a);
    } else if (auto p = dyn_cast<ParamOp>(op)) {
      params.push_back(p);
    } else if (auto r = dyn_cast<RoundOp>(op)) {
      rounds.push_back(r);
    } else if (isa<ScheduleOp>(op)) {
      if (failed(once(schedule, op)))
        return failure();
    } else if (isa<QkClipOp>(op)) {
      // Checked by its own verifier (parameters, heads, threshold).
    } else {
      return op.emitError()
             << "'" << op.getName() << "' is not allowed in a muon.model";
    }
  }

  if (failed(verifyParamGroups(optimizerGroups, params)))
    return failure();
  // Sizes first: the layout below allocates per rank.
  if (failed(verifyModelSizes(*this, grid, params.size())) ||
      failed(verifyPlacementKind(*this, grid, groups, params)))
    return failure();

  FailureOr<ModelLayout> layout = computeModelLayout(*this);
  if (failed(layout) ||
      failed(verifyLayoutLimits(*this, *layout, optimizerGroups)))
    return failure();
  if (!distributed && failed(verifyWithoutDistributed(*layout, assigns)))
    return failure();
  if (!assigns.empty() && failed(verifyAssignments(*layout, assigns)))
    return failure();
  if (!rounds.empty() && failed(verifyRounds(*layout, rounds)))
    return failure();
  bool hasMuonMatrices = llvm::any_of(layout->params, [](ParamOp p) {
    return ParamOp(p).isOrthogonalized();
  });
  if (schedule && rounds.empty() && hasMuonMatrices)
    return schedule->emitError() << "a schedule needs the model's rounds "
                                    "(muon.round, from muon-pack-rounds)";
  return success();
}

//===----------------------------------------------------------------------===//
// ParamOp
//===----------------------------------------------------------------------===//

::muon::AlgorithmId ParamOp::getAlgorithm() {
  if (std::optional<StringRef> name = getGroup())
    if (std::optional<::muon::AlgorithmId> a = ::muon::findAlgorithm(*name))
      return *a;
  return getTensorType().getRank() >= 2 ? ::muon::kMuon : ::muon::kAdamW;
}

bool ParamOp::isOrthogonalized() {
  return ::muon::algorithmOf(getAlgorithm()).orthogonalizes;
}

std::vector<std::vector<int64_t>> ParamOp::getSplitAxesVector() {
  std::vector<std::vector<int64_t>> result(getTensorType().getRank());
  if (ArrayAttr split = getSplitAxesAttr())
    for (auto [d, a] : llvm::enumerate(split))
      if (auto axes = dyn_cast<DenseI64ArrayAttr>(a); axes && d < result.size())
        result[d].assign(axes.asArrayRef().begin(), axes.asArrayRef().end());
  return result;
}

std::vector<std::pair<int64_t, int64_t>> ParamOp::getOnlyPairs() {
  std::vector<std::pair<int64_t, int64_t>> result;
  if (std::optional<ArrayRef<int64_t>> only = getOnly())
    for (size_t i = 0; i + 1 < only->size(); i += 2)
      result.push_back({(*only)[i], (*only)[i + 1]});
  return result;
}

ParseResult ParamOp::parse(OpAsmParser &parser, OperationState &result) {
  MLIRContext *ctx = parser.getContext();
  StringAttr name;
  Type type;
  if (parser.parseSymbolName(name, SymbolTable::getSymbolAttrName(),
                             result.attributes) ||
      parser.parseColonType(type))
    return failure();
  result.addAttribute("tensor_type", TypeAttr::get(type));

  if (succeeded(parser.parseOptionalKeyword("on"))) {
    FlatSymbolRefAttr grid;
    ArrayAttr split;
    if (parser.parseAttribute(grid, "grid", result.attributes) ||
        parser.parseKeyword("split") || parseIntListList(parser, split))
      return failure();
    result.addAttribute("split_axes", split);
    if (succeeded(parser.parseOptionalKeyword("partial"))) {
      SmallVector<int64_t> axes;
      if (parseIntList(parser, axes))
        return failure();
      result.addAttribute("partial_axes", DenseI64ArrayAttr::get(ctx, axes));
    }
    if (succeeded(parser.parseOptionalKeyword("only"))) {
      SmallVector<int64_t> pairs;
      if (parser.parseCommaSeparatedList(
              OpAsmParser::Delimiter::Square, [&]() -> ParseResult {
                int64_t axis, coord;
                if (parser.parseInteger(axis) || parser.parseEqual() ||
                    parser.parseInteger(coord))
                  return failure();
                pairs.append({axis, coord});
                return success();
              }))
        return failure();
      result.addAttribute("only", DenseI64ArrayAttr::get(ctx, pairs));
    }
  }
  for (StringRef key :
       {"tp_dim", "stage", "expert", "num_heads", "head_split_dim"}) {
    if (failed(parser.parseOptionalKeyword(key)))
      continue;
    int64_t v;
    if (parser.parseInteger(v))
      return failure();
    result.addAttribute(key, parser.getBuilder().getI64IntegerAttr(v));
  }
  if (succeeded(parser.parseOptionalKeyword("group"))) {
    std::string group;
    llvm::SMLoc at = parser.getCurrentLocation();
    if (parser.parseKeywordOrString(&group))
      return failure();
    if (!::muon::findAlgorithm(group))
      return parser.emitError(at)
             << "unknown optimizer group '" << group << "'; expected "
             << ::muon::algorithmNames('\'');
    result.addAttribute("group", parser.getBuilder().getStringAttr(group));
  }
  if (succeeded(parser.parseOptionalKeyword("param_group"))) {
    std::string name;
    if (parser.parseString(&name))
      return failure();
    result.addAttribute("param_group", parser.getBuilder().getStringAttr(name));
  }
  return parser.parseOptionalAttrDict(result.attributes);
}

void ParamOp::print(OpAsmPrinter &p) {
  p << " ";
  p.printSymbolName(getSymName());
  p << " : " << getTensorType();
  if (FlatSymbolRefAttr grid = getGridAttr()) {
    p << " on " << grid << " split ";
    // A grid without split axes means replicated everywhere: print that.
    p << "[";
    llvm::interleaveComma(getSplitAxesVector(), p,
                          [&](const auto &axes) { printIntList(p, axes); });
    p << "]";
    if (std::optional<ArrayRef<int64_t>> partial = getPartialAxes()) {
      p << " partial ";
      printIntList(p, *partial);
    }
    if (getOnly()) {
      p << " only [";
      llvm::interleaveComma(getOnlyPairs(), p, [&](auto pair) {
        p << pair.first << " = " << pair.second;
      });
      p << "]";
    }
  }
  if (std::optional<int64_t> v = getTpDim())
    p << " tp_dim " << *v;
  if (std::optional<int64_t> v = getStage())
    p << " stage " << *v;
  if (std::optional<int64_t> v = getExpert())
    p << " expert " << *v;
  if (std::optional<int64_t> v = getNumHeads())
    p << " num_heads " << *v;
  if (std::optional<int64_t> v = getHeadSplitDim())
    p << " head_split_dim " << *v;
  if (std::optional<StringRef> g = getGroup())
    p << " group " << *g;
  if (std::optional<StringRef> name = getParamGroup()) {
    p << " param_group ";
    p.printString(*name);
  }
  p.printOptionalAttrDict((*this)->getAttrs(),
                          {SymbolTable::getSymbolAttrName(), "tensor_type",
                           "grid", "split_axes", "partial_axes", "only",
                           "tp_dim", "stage", "expert", "num_heads",
                           "head_split_dim", "group", "param_group"});
}

LogicalResult ParamOp::verify() {
  RankedTensorType type = getTensorType();
  StringRef name = getSymName();
  auto error = [&]() {
    InFlightDiagnostic d = emitError();
    d << "parameter '" << name << "' ";
    return d;
  };
  if (!type.hasStaticShape())
    return error() << "must have a static shape, got " << type;
  Type elem = type.getElementType();
  if (!elem.isF32() && !elem.isBF16() && !elem.isF16())
    return error() << "has element type " << elem
                   << "; expected f32, bf16 or f16";
  for (auto [d, size] : llvm::enumerate(type.getShape()))
    if (size == 0)
      return error() << "has an empty dim " << d << " (size 0)";
  if (std::optional<StringRef> g = getGroup(); g && !::muon::findAlgorithm(*g))
    return error() << "names unknown algorithm '" << *g << "'; expected "
                   << ::muon::algorithmNames('\'');
  if (::muon::Status bad = ::muon::checkShapeLimits(
          std::vector<int64_t>(type.getShape().begin(), type.getShape().end()),
          isOrthogonalized() && type.getRank() >= 2); !bad.ok())
    return error() << bad.message();
  int64_t rank = type.getRank();
  if (isOrthogonalized() && rank < 2)
    return error() << "has " << rank
                   << " dim(s) but Muon orthogonalizes matrices (2 or more "
                      "dims, leading dims being batch dims); use the adamw "
                      "group";

  if (::muon::Status bad = ::muon::checkHeads(
          std::vector<int64_t>(type.getShape().begin(), type.getShape().end()),
          isOrthogonalized(), getNumHeads().value_or(1),
          getHeadSplitDim().value_or(0)); !bad.ok())
    return error() << bad.message();

  bool hasLayout = getSplitAxesAttr() || getPartialAxesAttr() || getOnlyAttr();
  if (hasLayout && !getGridAttr())
    return error() << "has a layout but no grid ('on @grid')";
  if (getGridAttr() && (getTpDim() || getStage() || getExpert()))
    return error() << "mixes a mesh layout with process-group attributes "
                      "(tp_dim, stage, expert)";
  if (std::optional<int64_t> d = getTpDim(); d && (*d < 0 || *d >= rank))
    return error() << "has tp_dim " << *d << ", out of range for a tensor of "
                   << rank << " dim(s)";
  if (std::optional<int64_t> s = getStage(); s && *s < 0)
    return error() << "has negative stage " << *s;
  if (std::optional<int64_t> e = getExpert(); e && *e < 0)
    return error() << "has negative expert id " << *e;
  if (std::optional<int64_t> e = getExpert();
      e && *e >= ::muon::limits::kMaxExperts)
    return error() << "has expert id " << *e << ", above the limit of "
                   << ::muon::limits::describe(::muon::limits::kMaxExperts);

  // Each mesh axis plays at most one role for a parameter.
  llvm::DenseMap<int64_t, std::string> roleOf;
  auto claim = [&](int64_t axis, std::string role) -> LogicalResult {
    if (axis < 0)
      return error() << "names negative mesh axis " << axis;
    auto [it, inserted] = roleOf.try_emplace(axis, role);
    if (!inserted)
      return error() << "uses mesh axis " << axis << " twice (" << it->second
                     << " and " << role << ")";
    return success();
  };
  if (ArrayAttr split = getSplitAxesAttr()) {
    if (static_cast<int64_t>(split.size()) != rank)
      return error() << "has " << split.size() << " split entries but " << rank
                     << " dim(s)";
    for (auto [d, a] : llvm::enumerate(split)) {
      auto axes = dyn_cast<DenseI64ArrayAttr>(a);
      if (!axes)
        return error() << "split entry " << d << " must be an array<i64>";
      for (int64_t axis : axes.asArrayRef())
        if (failed(claim(axis, "split of dim " + std::to_string(d))))
          return failure();
    }
  }
  if (std::optional<ArrayRef<int64_t>> partial = getPartialAxes())
    for (int64_t axis : *partial)
      if (failed(claim(axis, "partial")))
        return failure();
  if (std::optional<ArrayRef<int64_t>> only = getOnly()) {
    if (only->size() % 2)
      return error() << "'only' must hold (axis, coordinate) pairs";
    for (auto [axis, coord] : getOnlyPairs()) {
      if (coord < 0)
        return error() << "has negative 'only' coordinate " << coord;
      if (failed(claim(axis, "only")))
        return failure();
    }
  }
  return success();
}

LogicalResult ParamOp::verifySymbolUses(SymbolTableCollection &) {
  FlatSymbolRefAttr gridRef = getGridAttr();
  if (!gridRef)
    return success();
  Operation *grid = shard_adapter::lookupGrid(*this, gridRef);
  if (!grid)
    return emitError() << "parameter '" << getSymName()
                       << "' refers to unknown grid " << gridRef;
  std::optional<std::vector<int64_t>> shape = shard_adapter::getGridShape(grid);
  if (!shape)
    return emitError() << "grid " << gridRef << " must have a static shape";
  int64_t meshRank = shape->size();
  auto checkAxis = [&](int64_t axis, StringRef role) -> LogicalResult {
    if (axis >= meshRank)
      return emitError() << "parameter '" << getSymName() << "' " << role
                         << " on mesh axis " << axis << ", but grid " << gridRef
                         << " has " << meshRank << " axes";
    return success();
  };
  for (auto [d, axes] : llvm::enumerate(getSplitAxesVector()))
    for (int64_t axis : axes)
      if (failed(checkAxis(axis, "splits dim " + std::to_string(d))))
        return failure();
  if (std::optional<ArrayRef<int64_t>> partial = getPartialAxes())
    for (int64_t axis : *partial)
      if (failed(checkAxis(axis, "is partial")))
        return failure();
  for (auto [axis, coord] : getOnlyPairs()) {
    if (failed(checkAxis(axis, "is restricted ('only')")))
      return failure();
    if (coord >= (*shape)[axis])
      return emitError() << "parameter '" << getSymName()
                         << "' is restricted ('only') to coordinate " << coord
                         << " of mesh axis " << axis << ", which has size "
                         << (*shape)[axis];
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Configuration ops
//===----------------------------------------------------------------------===//

StringRef OptimizerOp::groupName() {
  std::optional<StringRef> name = getGroupName();
  return name ? *name : StringRef("muon");
}

StringRef AdamWOp::groupName() {
  std::optional<StringRef> name = getGroupName();
  return name ? *name : StringRef("adamw");
}

std::array<double, 3> OptimizerOp::getCoefficients(int64_t step) {
  ArrayAttr table = getNsCoefficientsAttr();
  if (!table || table.empty())
    return {3.4445, -4.775, 2.0315};
  auto row = cast<DenseF64ArrayAttr>(table[table.size() == 1 ? 0 : step]);
  return {row[0], row[1], row[2]};
}

LogicalResult OptimizerOp::verify() {
  // The plan validator's rules (checkGroupSettings): what compiles, loads.
  auto nonNegative = [&](StringRef key, double v) -> LogicalResult {
    if (v < 0 || !std::isfinite(v))
      return emitError() << "optimizer '" << key
                         << "' must be a finite number >= 0, got " << v;
    return success();
  };
  if (failed(nonNegative("lr", getLr().convertToDouble())) ||
      failed(nonNegative("weight_decay", getWeightDecay().convertToDouble())) ||
      failed(nonNegative("momentum", getMomentum().convertToDouble())))
    return failure();
  // Newton-Schulz's normalization floor: 0 divides a zero update by zero.
  if (!(getEps().convertToDouble() > 0) ||
      !std::isfinite(getEps().convertToDouble()))
    return emitError() << "optimizer 'eps' must be a finite number > 0, got "
                       << getEps().convertToDouble();
  if (getMomentum().convertToDouble() >= 1)
    return emitError() << "optimizer 'momentum' must be in [0, 1), got "
                       << getMomentum().convertToDouble();
  if (failed(verifySettingAttrs(*this, ::muon::kMuon, "optimizer")))
    return failure();
  int64_t steps = static_cast<int64_t>(getNsSteps());
  if (steps >= 100)
    return emitError() << "optimizer 'ns_steps' must be less than 100, got "
                       << steps;
  if (steps < 1)
    return emitError() << "optimizer 'ns_steps' must be at least 1, got "
                       << steps;
  if (ArrayAttr table = getNsCoefficientsAttr()) {
    if (table.size() != 1 && static_cast<int64_t>(table.size()) != steps)
      return emitError() << "optimizer 'ns_coefficients' has " << table.size()
                         << " triples; expected 1 (for every step) or "
                            "ns_steps = "
                         << steps;
    std::vector<::muon::NsTriple> triples;
    for (auto [i, row] : llvm::enumerate(table)) {
      auto triple = dyn_cast<DenseF64ArrayAttr>(row);
      if (!triple || triple.size() != 3)
        return emitError() << "optimizer 'ns_coefficients' entry " << i
                           << " must be an (a, b, c) triple";
      triples.push_back({triple[0], triple[1], triple[2]});
    }
    // The group's precision: f16's range is 65504, f32's and bf16's (and
    // auto's, which is one of them) 3.4e38.
    if (::muon::Status why = ::muon::checkNsCoefficients(
            triples, steps, stringifyNsDtype(getNsDtype()).str());
        !why.ok())
      return emitError() << "optimizer 'ns_coefficients': " << why.message();
  }
  return success();
}

LogicalResult AdamWOp::verify() {
  for (auto [key, v] :
       {std::pair<StringRef, double>{"lr", getLr().convertToDouble()},
        {"weight_decay", getWeightDecay().convertToDouble()}})
    if (v < 0 || !std::isfinite(v))
      return emitError() << "adamw '" << key
                         << "' must be a finite number >= 0, got " << v;
  // The second moment's floor: 0 divides a zero gradient's zero moment by
  // zero.
  if (!(getEps().convertToDouble() > 0) ||
      !std::isfinite(getEps().convertToDouble()))
    return emitError() << "adamw 'eps' must be a finite number > 0, got "
                       << getEps().convertToDouble();
  if (std::optional<ArrayRef<double>> betas = getBetas()) {
    if (betas->size() != 2)
      return emitError() << "adamw 'betas' must have 2 entries, got "
                         << betas->size();
    for (double b : *betas)
      if (!(b >= 0 && b < 1))
        return emitError() << "adamw 'betas' must be in [0, 1), got " << b;
  }
  return verifySettingAttrs(*this, ::muon::kAdamW, "adamw");
}

StringRef ParamGroupOp::groupName() {
  if (std::optional<StringRef> name = getGroupName())
    return *name;
  return getAlgorithm();
}

LogicalResult ParamGroupOp::verify() {
  std::optional<::muon::AlgorithmId> algorithm =
      ::muon::findAlgorithm(getAlgorithm());
  if (!algorithm)
    return emitError() << "param_group names unknown algorithm '"
                       << getAlgorithm() << "'; expected "
                       << ::muon::algorithmNames('\'');
  // One op per algorithm: those with an op of their own keep it.
  if (*algorithm == ::muon::kMuon || *algorithm == ::muon::kAdamW)
    return emitError() << "a " << getAlgorithm() << " group is a '"
                       << (*algorithm == ::muon::kMuon
                               ? OptimizerOp::getOperationName()
                               : AdamWOp::getOperationName())
                       << "' op, not a param_group";
  return verifySettingAttrs(*this, *algorithm, getAlgorithm());
}

LogicalResult DistributedOp::verify() {
  if (static_cast<int64_t>(getGatherBudgetBytes()) < 0 ||
      static_cast<int64_t>(getMaxRounds()) < 1)
    return emitError() << "distributed 'gather_budget_bytes' must be >= 0 "
                          "and 'max_rounds' >= 1";
  // I64Attr getters are unsigned; the IR may still spell a negative value.
  int64_t prefetch = static_cast<int64_t>(getPrefetchCount());
  if (prefetch < 0)
    return emitError() << "distributed 'prefetch_count' must be >= 0, got "
                       << prefetch;
  namespace limits = ::muon::limits;
  if (prefetch > limits::kMaxPrefetchCount)
    return emitError() << "distributed 'prefetch_count' " << prefetch
                       << " is above the limit of "
                       << limits::describe(limits::kMaxPrefetchCount);
  if (static_cast<int64_t>(getMaxRounds()) > limits::kMaxRounds)
    return emitError() << "distributed 'max_rounds' "
                       << static_cast<int64_t>(getMaxRounds())
                       << " is above the limit of "
                       << limits::describe(limits::kMaxRounds);
  std::optional<StringRef> placement = getPlacement();
  if (placement && *placement != "auto" && *placement != "once" &&
      *placement != "redundant_below")
    return emitError() << "distributed 'placement' must be \"auto\", "
                          "\"once\" or \"redundant_below\", got \""
                       << *placement << "\"";
  bool below = placement && *placement == "redundant_below";
  if (below != getRedundantBelow().has_value())
    return emitError() << "distributed 'redundant_below' (a size in elements) "
                          "goes with placement \"redundant_below\" and only "
                          "with it";
  if (below && static_cast<int64_t>(*getRedundantBelow()) < 0)
    return emitError() << "distributed 'redundant_below' must be >= 0, got "
                       << static_cast<int64_t>(*getRedundantBelow());
  return success();
}

//===----------------------------------------------------------------------===//
// AssignOp
//===----------------------------------------------------------------------===//

/// `[@p, @q[3]]`: whole parameters or single matrices of batched ones.
static ParseResult parseMatrixRefs(OpAsmParser &parser,
                                   SmallVectorImpl<Attribute> &params,
                                   SmallVectorImpl<int64_t> &slices) {
  return parser.parseCommaSeparatedList(
      OpAsmParser::Delimiter::Square, [&]() -> ParseResult {
        FlatSymbolRefAttr ref;
        if (parser.parseAttribute(ref))
          return failure();
        int64_t slice = -1;
        if (succeeded(parser.parseOptionalLSquare()))
          if (parser.parseInteger(slice) || parser.parseRSquare())
            return failure();
        params.push_back(ref);
        slices.push_back(slice);
        return success();
      });
}

static void printMatrixRefs(OpAsmPrinter &p, ArrayAttr params,
                            ArrayRef<int64_t> slices) {
  p << "[";
  llvm::interleaveComma(llvm::zip(params, slices), p, [&](auto e) {
    p.printAttribute(std::get<0>(e));
    if (std::get<1>(e) >= 0)
      p << "[" << std::get<1>(e) << "]";
  });
  p << "]";
}

/// `N [@p, @q[3]]` with N stored in `indexName`.
static ParseResult parseIndexedMatrixRefs(OpAsmParser &parser,
                                          OperationState &result,
                                          StringRef indexName) {
  int64_t index;
  SmallVector<Attribute> params;
  SmallVector<int64_t> slices;
  if (parser.parseInteger(index) || parseMatrixRefs(parser, params, slices))
    return failure();
  Builder &b = parser.getBuilder();
  result.addAttribute(indexName, b.getI64IntegerAttr(index));
  result.addAttribute("params", b.getArrayAttr(params));
  result.addAttribute("slices", b.getDenseI64ArrayAttr(slices));
  return parser.parseOptionalAttrDict(result.attributes);
}

static LogicalResult verifyMatrixRefs(Operation *op, int64_t index,
                                      StringRef what, ArrayAttr params,
                                      ArrayRef<int64_t> slices) {
  if (index < 0)
    return op->emitError() << what << " is negative: " << index;
  if (params.size() != slices.size())
    return op->emitError() << "'params' and 'slices' must have equal length";
  for (auto [ref, slice] : llvm::zip(params, slices)) {
    if (!isa<FlatSymbolRefAttr>(ref))
      return op->emitError() << "entries must be parameter symbols";
    if (slice < -1)
      return op->emitError() << "names negative matrix " << slice;
  }
  return success();
}

/// `N [redundant] [@p, @q[3]]`.
ParseResult AssignOp::parse(OpAsmParser &parser, OperationState &result) {
  int64_t rank;
  SmallVector<Attribute> params;
  SmallVector<int64_t> slices;
  if (parser.parseInteger(rank))
    return failure();
  bool redundant = succeeded(parser.parseOptionalKeyword("redundant"));
  if (parseMatrixRefs(parser, params, slices))
    return failure();
  Builder &b = parser.getBuilder();
  result.addAttribute("rank", b.getI64IntegerAttr(rank));
  result.addAttribute("params", b.getArrayAttr(params));
  result.addAttribute("slices", b.getDenseI64ArrayAttr(slices));
  if (redundant)
    result.addAttribute("redundant", b.getUnitAttr());
  return parser.parseOptionalAttrDict(result.attributes);
}

void AssignOp::print(OpAsmPrinter &p) {
  p << " " << static_cast<int64_t>(getRank()) << " ";
  if (getRedundant())
    p << "redundant ";
  printMatrixRefs(p, getParams(), getSlices());
  p.printOptionalAttrDict((*this)->getAttrs(),
                          {"rank", "params", "slices", "redundant"});
}

LogicalResult AssignOp::verify() {
  return verifyMatrixRefs(*this, static_cast<int64_t>(getRank()),
                          "assignment rank", getParams(), getSlices());
}

//===----------------------------------------------------------------------===//
// QkClipOp
//===----------------------------------------------------------------------===//

LogicalResult QkClipOp::verify() {
  auto model = (*this)->getParentOfType<ModelOp>();
  std::optional<std::vector<int64_t>> queryShape, keyShape;
  for (Operation &op : model.getBodyBlock()) {
    if (auto p = dyn_cast<ParamOp>(op)) {
      ArrayRef<int64_t> shape = p.getTensorType().getShape();
      if (p.getSymName() == getQuery())
        queryShape.emplace(shape.begin(), shape.end());
      if (p.getSymName() == getKey())
        keyShape.emplace(shape.begin(), shape.end());
    } else if (auto other = dyn_cast<QkClipOp>(op)) {
      if (other != *this && other.getLayer() == getLayer() &&
          other->isBeforeInBlock(*this))
        return emitOpError()
               << "layer '" << getLayer() << "' is declared twice";
    }
  }
  ::muon::QkClipLayer layer;
  layer.name = getLayer().str();
  layer.query = getQuery().str();
  layer.key = getKey().str();
  layer.numHeads = static_cast<int64_t>(getNumHeads());
  layer.numKvHeads = static_cast<int64_t>(getNumKvHeads());
  layer.threshold = getThreshold().convertToDouble();
  ::muon::Status bad =
      ::muon::checkQkClipLayer(layer, queryShape ? &*queryShape : nullptr,
                               keyShape ? &*keyShape : nullptr);
  if (!bad.ok())
    return emitOpError() << "layer '" << getLayer() << "': " << bad.location()
                         << ": " << bad.message();
  return success();
}

//===----------------------------------------------------------------------===//
// The step: rounds and their schedule
//===----------------------------------------------------------------------===//

ParseResult RoundOp::parse(OpAsmParser &parser, OperationState &result) {
  return parseIndexedMatrixRefs(parser, result, "index");
}

void RoundOp::print(OpAsmPrinter &p) {
  p << " " << static_cast<int64_t>(getIndex()) << " ";
  printMatrixRefs(p, getParams(), getSlices());
  p.printOptionalAttrDict((*this)->getAttrs(), {"index", "params", "slices"});
}

LogicalResult RoundOp::verify() {
  return verifyMatrixRefs(*this, static_cast<int64_t>(getIndex()),
                          "round index", getParams(), getSlices());
}

void ScheduleOp::build(OpBuilder &builder, OperationState &state) {
  state.addRegion()->push_back(new Block());
}

LogicalResult ScheduleOp::verifyRegions() {
  if (getBodyBlock().getNumArguments())
    return emitError() << "the schedule's block takes no arguments";
  for (Operation &op : getBodyBlock())
    if (!isa<ExchangeStartOp, ExchangeDoneOp, NewtonSchulzOp, MomentumOp,
             ApplyUpdateOp, AdamWUpdateOp>(op))
      return op.emitError()
             << "'" << op.getName() << "' is not a step of a muon.schedule";
  for (ExchangeDoneOp done : getBodyBlock().getOps<ExchangeDoneOp>())
    if (!done.getToken().getDefiningOp<ExchangeStartOp>())
      return done.emitError()
             << "waits on a token that no muon.exchange_start here made";
  for (ExchangeStartOp start : getBodyBlock().getOps<ExchangeStartOp>()) {
    int64_t dones = 0;
    for (Operation *user : start.getToken().getUsers())
      dones += isa<ExchangeDoneOp>(user);
    if (dones != 1)
      return start.emitError()
             << "the " << stringifyExchangePhase(start.getPhase())
             << " of round "
             << static_cast<int64_t>(start.getRound()) << " is waited on "
             << dones << " times; every exchange needs exactly one "
             << "muon.exchange_done";
  }
  return success();
}

LogicalResult ExchangeStartOp::verify() {
  if (static_cast<int64_t>(getRound()) < 0)
    return emitError() << "round is negative";
  if (getPhase() == ExchangePhase::Reduce && getRound() != 0)
    return emitError() << "the AdamW reduce belongs to no round; write "
                          "'round 0'";
  return success();
}

//===----------------------------------------------------------------------===//
// GroupOp
//===----------------------------------------------------------------------===//

std::vector<std::vector<int64_t>> GroupOp::getGroupsVector() {
  std::vector<std::vector<int64_t>> result;
  for (Attribute a : getGroups())
    if (auto g = dyn_cast<DenseI64ArrayAttr>(a))
      result.emplace_back(g.asArrayRef().begin(), g.asArrayRef().end());
  return result;
}

ParseResult GroupOp::parse(OpAsmParser &parser, OperationState &result) {
  std::string kind;
  ArrayAttr groups;
  llvm::SMLoc at = parser.getCurrentLocation();
  if (parser.parseKeywordOrString(&kind))
    return failure();
  std::optional<ProcessGroupKind> k = symbolizeProcessGroupKind(kind);
  if (!k)
    return parser.emitError(at)
           << "unknown process-group kind '" << kind
           << "'; expected one of fsdp, shard, tp, ddp, replicate, cp, ep, pp";
  if (parseIntListList(parser, groups))
    return failure();
  result.addAttribute("kind",
                      ProcessGroupKindAttr::get(parser.getContext(), *k));
  result.addAttribute("groups", groups);
  return parser.parseOptionalAttrDict(result.attributes);
}

void GroupOp::print(OpAsmPrinter &p) {
  p << " " << stringifyProcessGroupKind(getKind()) << " ";
  printIntListList(p, getGroups());
  p.printOptionalAttrDict((*this)->getAttrs(), {"kind", "groups"});
}

LogicalResult GroupOp::verify() {
  for (Attribute a : getGroups())
    if (!isa<DenseI64ArrayAttr>(a))
      return emitError() << "'" << stringifyProcessGroupKind(getKind())
                         << "' groups must be arrays of ranks";
  return success();
}

#define GET_OP_CLASSES
#include "muon/Dialect/Muon/IR/MuonOps.cpp.inc"
