//===- SpecImport.cpp - muon-spec/1 JSON to the muon dialect --------------===//
#include "muon/Target/Spec/SpecImport.h"
#include "muon/Dialect/Muon/IR/GroupSettingAttrs.h"
#include "muon/Dialect/Muon/IR/MuonOps.h"
#include "muon/Dialect/Muon/IR/ShardAdapter.h"
#include "muon/Plan/Algorithm.h"
#include "muon/Plan/Validate.h"
#include "muon/Plan/Placement.h"
#include "muon/Support/Escape.h"
#include "muon/Support/Json.h"
#include "muon/Support/Limits.h"
#include "muon/Support/ModelLimits.h"
#include "muon/Support/NsCoefficients.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <vector>

using namespace mlir;
using namespace mlir::muon;
using JsonValue = ::muon::json::Value;
using ::muon::parseDecimal;
namespace limits = ::muon::limits;

namespace {

/// One spec being imported. Errors are emitted at NameLoc(json path); the
/// first one stops the import.
class SpecImporter {
public:
  SpecImporter(MLIRContext *ctx) : ctx(ctx), builder(ctx) {}

  OwningOpRef<ModuleOp> run(StringRef text);
  OwningOpRef<ModuleOp> run(const JsonValue &document);

private:
  Location at(const std::string &path) {
    return NameLoc::get(StringAttr::get(ctx, ::muon::json::showPath(path)));
  }
  /// Reports `message` at `path`; always returns failure.
  LogicalResult fail(const std::string &path, const Twine &message) {
    emitError(at(path)) << message;
    return failure();
  }
  static std::string key(const std::string &path, std::string_view k) {
    return ::muon::json::key(path, k);
  }
  static std::string index(const std::string &path, size_t i) {
    return ::muon::json::index(path, i);
  }
  static const JsonValue *get(const JsonValue &object, std::string_view k) {
    return ::muon::json::Reader::get(object, k);
  }

  // Typed accessors: fail with the path when the value has the wrong type.
  /// Emits the reader's error; returns nullptr.
  const JsonValue *report();
  const JsonValue *getObject(const JsonValue &v, const std::string &path);
  const JsonValue *getArray(const JsonValue &v, const std::string &path);
  std::optional<int64_t> getInt(const JsonValue &v, const std::string &path,
                                int64_t min);
  std::optional<int64_t> getLimited(const JsonValue &v,
                                    const std::string &path, int64_t min,
                                    int64_t limit, const std::string &what);
  std::optional<double> getNumber(const JsonValue &v, const std::string &path);
  std::optional<std::string> getString(const JsonValue &v,
                                       const std::string &path);
  std::optional<bool> getBool(const JsonValue &v, const std::string &path);
  LogicalResult checkKeys(const JsonValue &obj, const std::string &path,
                          std::initializer_list<std::string_view> allowed);
  /// checkKeys with `allowed` and the JSON keys of the group settings the
  /// op `opName` does not declare (GroupSettingAttrs.h).
  LogicalResult checkGroupKeys(const JsonValue &obj, const std::string &path,
                               std::initializer_list<std::string_view> allowed,
                               StringRef opName,
                               ::muon::AlgorithmId algorithm);
  /// The group settings `opName` does not declare, from the group's object
  /// `o` into attributes of `state`: each of its kind, valid
  /// (checkSetting), and only with its flag on (onlyWith).
  LogicalResult importTableSettings(const JsonValue &o,
                                    const std::string &path,
                                    ::muon::AlgorithmId algorithm,
                                    OperationState &state);

  LogicalResult importMesh(const JsonValue &v);
  LogicalResult importGroups(const JsonValue &root);
  /// One Muon or AdamW group: the spec's `optimizer` / `adamw`, or an entry
  /// of `param_groups` (which also has `name` and `algorithm`) at `path`.
  LogicalResult importOptimizer(const JsonValue &v, const std::string &path,
                                bool inParamGroups);
  /// A Muon group's `ns_coefficients` (`x`, of the group object `o`): a
  /// preset resolved for the group's ns_steps, or a table of triples.
  LogicalResult importNsCoefficients(const JsonValue &o, const JsonValue &x,
                                     const std::string &path,
                                     OperationState &state);
  LogicalResult importAdamW(const JsonValue &v, const std::string &path,
                            bool inParamGroups);
  /// A `param_groups` entry of any other algorithm: a muon.param_group
  /// whose settings are the table's (GroupSettings.h).
  LogicalResult importTableGroup(const JsonValue &v, const std::string &path,
                                 ::muon::AlgorithmId algorithm);
  /// `param_groups`: the groups in order (groupOrder, groupAlgorithms).
  LogicalResult importParamGroups(const JsonValue &v);
  /// The groups parameters may name: `param_groups`' names with their
  /// index, or "muon" and "adamw" when the spec has no param_groups.
  std::vector<std::pair<std::string, size_t>> groupOrder;
  std::map<std::string, ::muon::AlgorithmId> groupAlgorithms;
  bool hasParamGroups = false;
  LogicalResult importDistributed(const JsonValue &v);
  LogicalResult importParams(const JsonValue &v, const JsonValue &root);
  // importParams' phases: the names, then tp_dim_per_param, then each
  // parameter (its shape, dtype, algorithm and group, layout).
  LogicalResult importParamNames(const JsonValue &params);
  LogicalResult importTpDims(const JsonValue &root, size_t count,
                             std::vector<std::optional<int64_t>> &tpDim,
                             std::optional<int64_t> &tpAll);
  LogicalResult importParam(const JsonValue &p, size_t i,
                            std::optional<int64_t> tpDim,
                            std::optional<int64_t> tpAll);
  FailureOr<SmallVector<int64_t>> importShape(const JsonValue &p,
                                              const std::string &path);
  FailureOr<Type> importDtype(const JsonValue &p, const std::string &path);
  /// The parameter's algorithm (its optimizer or group's, else the default
  /// for its rank) and group, as attributes of `state`.
  FailureOr<::muon::AlgorithmId>
  importParamAlgorithm(const JsonValue &p, const std::string &path,
                       const std::string &paramName, int64_t rank,
                       OperationState &state);
  /// The process-group style's placement: tp_dim, stage, expert.
  LogicalResult importProcessGroupPlacement(const JsonValue &p,
                                            const std::string &path, size_t i,
                                            int64_t rank,
                                            std::optional<int64_t> tpGiven,
                                            std::optional<int64_t> tpAll,
                                            OperationState &state);
  LogicalResult importHeads(const JsonValue &p, const std::string &path,
                            ArrayRef<int64_t> shape, bool orthogonalized,
                            OperationState &state);
  LogicalResult importParamLayout(const JsonValue &p, const std::string &path,
                                  int64_t rank, OperationState &state);
  /// A layout's `only`: (axis, coordinate) pairs sorted by axis, each on an
  /// axis whose placement (`kind`) is replicated.
  LogicalResult importOnly(const JsonValue &only, const std::string &opath,
                           const std::vector<char> &kind,
                           SmallVector<int64_t> &onlyPairs);
  /// Resolves a mesh axis given by name or index.
  std::optional<int64_t> resolveAxis(StringRef text, const std::string &path);
  std::optional<int64_t> resolveAxisValue(const JsonValue &v,
                                          const std::string &path);
  LogicalResult importAssignments(const JsonValue &v, const std::string &path);
  /// `qk_clip`: the attention layers QK-clip rescales, each checked against
  /// the spec's parameters (checkQkClipLayer), one muon.qk_clip op each.
  LogicalResult importQkClip(const JsonValue &v, const JsonValue &params);

  MLIRContext *ctx;
  OpBuilder builder;
  ::muon::json::Reader rd;
  ModelOp model;
  bool processGroups = false;
  std::vector<int64_t> meshShape;
  std::vector<std::string> axisNames;
  std::vector<std::string> paramNames;
  llvm::StringMap<size_t> paramIndex;
};

const JsonValue *SpecImporter::report() {
  (void)fail(rd.error().location(), rd.error().message());
  rd.clear();
  return nullptr;
}

const JsonValue *SpecImporter::getObject(const JsonValue &v,
                                         const std::string &path) {
  if (const JsonValue *o = rd.object(&v, path))
    return o;
  return report();
}

const JsonValue *SpecImporter::getArray(const JsonValue &v,
                                        const std::string &path) {
  if (const JsonValue *a = rd.array(&v, path))
    return a;
  return report();
}

std::optional<int64_t> SpecImporter::getInt(const JsonValue &v,
                                            const std::string &path,
                                            int64_t min) {
  if (std::optional<int64_t> i = rd.integer(&v, path, min))
    return i;
  report();
  return std::nullopt;
}

std::optional<int64_t> SpecImporter::getLimited(const JsonValue &v,
                                                const std::string &path,
                                                int64_t min, int64_t limit,
                                                const std::string &what) {
  if (std::optional<int64_t> i = rd.limited(&v, path, min, limit, what))
    return i;
  report();
  return std::nullopt;
}

std::optional<double> SpecImporter::getNumber(const JsonValue &v,
                                              const std::string &path) {
  if (std::optional<double> d = rd.number(&v, path))
    return d;
  report();
  return std::nullopt;
}

std::optional<std::string> SpecImporter::getString(const JsonValue &v,
                                                   const std::string &path) {
  if (std::optional<std::string> s = rd.string(&v, path))
    return s;
  report();
  return std::nullopt;
}

std::optional<bool> SpecImporter::getBool(const JsonValue &v,
                                          const std::string &path) {
  if (std::optional<bool> b = rd.boolean(&v, path))
    return b;
  report();
  return std::nullopt;
}

LogicalResult SpecImporter::checkKeys(const JsonValue &obj,
                                      const std::string &path,
                                      std::initializer_list<std::string_view>
                                          allowed) {
  if (rd.knownKeys(obj, path, allowed))
    return success();
  report();
  return failure();
}

LogicalResult SpecImporter::checkGroupKeys(
    const JsonValue &obj, const std::string &path,
    std::initializer_list<std::string_view> allowed, StringRef opName,
    ::muon::AlgorithmId algorithm) {
  std::vector<std::string_view> keys(allowed);
  OperationName op(opName, builder.getContext());
  for (const ::muon::GroupSetting &s : ::muon::algorithmOf(algorithm).settings)
    if (!declaresSetting(op, s) &&
        std::find(keys.begin(), keys.end(), s.jsonKey) == keys.end())
      keys.push_back(s.jsonKey);
  if (rd.knownKeys(obj, path, keys))
    return success();
  report();
  return failure();
}

LogicalResult SpecImporter::importTableSettings(const JsonValue &o,
                                                const std::string &path,
                                                ::muon::AlgorithmId algorithm,
                                                OperationState &state) {
  using ::muon::GroupSetting;
  ::muon::PlanGroup g(algorithm);
  std::vector<const GroupSetting *> given;
  const std::vector<GroupSetting> &settings =
      ::muon::algorithmOf(algorithm).settings;
  for (size_t i = 0; i < settings.size(); ++i) {
    const GroupSetting &s = settings[i];
    if (declaresSetting(state.name, s))
      continue;
    // Settings that share a JSON key ("betas": [beta1, beta2]) are one
    // array, read with the first of them.
    if (std::string_view(s.jsonKey) != s.name) {
      const ::muon::SharedJsonKey shared = ::muon::sharedJsonKey(settings, i);
      if (!shared.first)
        continue;
      const JsonValue *x = get(o, s.jsonKey);
      if (!x)
        continue;
      const std::string at = key(path, s.jsonKey);
      const JsonValue *a = getArray(*x, at);
      if (!a)
        return failure();
      if (a->size() != shared.count)
        return fail(at, "expected [" + shared.names + "]");
      for (size_t k = 0; k < shared.count; ++k) {
        const GroupSetting &part = settings[i + k];
        std::optional<double> d = getNumber((*a)[k], index(at, k));
        if (!d)
          return failure();
        ::muon::setSettingValue(part, g, *d);
        if (::muon::Status why = ::muon::checkSetting(part, g); !why.ok())
          return fail(index(at, k), why.message());
        given.push_back(&part);
      }
      continue;
    }
    const JsonValue *x = get(o, s.jsonKey);
    if (!x)
      continue;
    const std::string at = key(path, s.jsonKey);
    switch (s.kind) {
    case GroupSetting::Kind::Number: {
      std::optional<double> d = getNumber(*x, at);
      if (!d)
        return failure();
      ::muon::setSettingValue(s, g, *d);
      break;
    }
    case GroupSetting::Kind::Flag: {
      std::optional<bool> b = getBool(*x, at);
      if (!b)
        return failure();
      ::muon::setSettingValue(s, g, *b ? 1.0 : 0.0);
      break;
    }
    case GroupSetting::Kind::Name: {
      std::optional<std::string> name = getString(*x, at);
      if (!name)
        return failure();
      ::muon::setSettingName(s, g, *name);
      break;
    }
    }
    if (::muon::Status why = ::muon::checkSetting(s, g); !why.ok())
      return fail(at, why.message());
    given.push_back(&s);
  }
  // A flag the op declares is not in g: read it from the object.
  auto flagOn = [&](const GroupSetting &flag) {
    if (!declaresSetting(state.name, flag))
      return ::muon::settingValue(flag, g) != 0;
    const JsonValue *x = get(o, flag.jsonKey);
    return x && x->is_boolean() ? x->get<bool>() : flag.defaultNumber != 0;
  };
  for (const GroupSetting *s : given) {
    if (s->onlyWith &&
        !flagOn(*::muon::findGroupSetting(algorithm, s->onlyWith)))
      return fail(key(path, s->jsonKey),
                  std::string(s->name) + " is " + s->onlyWithNote +
                      "; set \"" + s->onlyWith +
                      "\": true in this group or leave it out");
    state.addAttribute(s->name, settingAttr(builder, *s, g));
  }
  return success();
}

std::optional<int64_t> SpecImporter::resolveAxis(StringRef text,
                                                 const std::string &path) {
  for (size_t a = 0; a < axisNames.size(); ++a)
    if (axisNames[a] == text)
      return a;
  std::optional<int64_t> axis = parseDecimal(text.str());
  if (axis && *axis < static_cast<int64_t>(meshShape.size()))
    return axis;
  std::string names = "axes";
  for (const std::string &n : axisNames)
    names += " '" + n + "'";
  (void)fail(path, "unknown mesh axis '" + text.str() + "'; the mesh has " +
                       names + " (or indices 0.." +
                       std::to_string(meshShape.size() - 1) + ")");
  return std::nullopt;
}

std::optional<int64_t> SpecImporter::resolveAxisValue(const JsonValue &v,
                                                      const std::string &path) {
  if (v.is_string())
    return resolveAxis(v.get<std::string>(), path);
  if (v.is_number_integer())
    return resolveAxis(std::to_string(v.get<int64_t>()), path);
  (void)fail(path, "expected a mesh axis name or index");
  return std::nullopt;
}

LogicalResult SpecImporter::importMesh(const JsonValue &v) {
  const JsonValue *mesh = getObject(v, "mesh");
  if (!mesh || failed(checkKeys(*mesh, "mesh", {"shape", "names"})))
    return failure();
  const JsonValue *shape = get(*mesh, "shape");
  if (!shape)
    return fail("mesh", "missing key 'shape'");
  const JsonValue *dims = getArray(*shape, "mesh.shape");
  if (!dims)
    return failure();
  if (dims->empty())
    return fail("mesh.shape", "a mesh needs at least one axis; a single "
                              "device is [1]");
  if (static_cast<int64_t>(dims->size()) > limits::kMaxMeshAxes)
    return fail("mesh.shape", "a mesh of " + std::to_string(dims->size()) +
                                  " axes is above the limit of " +
                                  limits::describe(limits::kMaxMeshAxes));
  for (size_t i = 0; i < dims->size(); ++i) {
    std::optional<int64_t> s =
        getLimited((*dims)[i], index("mesh.shape", i), 1,
                   limits::kMaxWorldSize, "ranks");
    if (!s)
      return failure();
    meshShape.push_back(*s);
  }
  ::muon::Mesh checked;
  checked.shape = meshShape;
  if (::muon::Status bad = ::muon::checkMeshLimits(checked); !bad.ok())
    return fail("mesh.shape", bad.message());
  axisNames.assign(meshShape.size(), "");
  if (const JsonValue *names = get(*mesh, "names")) {
    const JsonValue *list = getArray(*names, "mesh.names");
    if (!list)
      return failure();
    if (list->size() != meshShape.size())
      return fail("mesh.names", "has " + std::to_string(list->size()) +
                                    " names but mesh.shape has " +
                                    std::to_string(meshShape.size()) + " axes");
    llvm::StringSet<> seen;
    for (size_t i = 0; i < list->size(); ++i) {
      std::optional<std::string> n =
          getString((*list)[i], index("mesh.names", i));
      if (!n)
        return failure();
      if (n->empty())
        return fail(index("mesh.names", i), "axis names must not be empty");
      if (!seen.insert(*n).second)
        return fail(index("mesh.names", i),
                    "axis name '" + *n + "' is used twice");
      axisNames[i] = *n;
    }
  }
  Operation *grid =
      shard_adapter::createGrid(builder, at("mesh"), "mesh", meshShape);
  if (get(*mesh, "names")) {
    SmallVector<Attribute> names;
    for (const std::string &n : axisNames)
      names.push_back(builder.getStringAttr(n));
    grid->setAttr(MuonDialect::kAxisNamesAttr, builder.getArrayAttr(names));
  }
  return success();
}

LogicalResult SpecImporter::importGroups(const JsonValue &root) {
  const JsonValue *ws = get(root, "world_size");
  if (!ws)
    return fail("", "process groups need 'world_size'");
  std::optional<int64_t> world =
      getLimited(*ws, "world_size", 1, limits::kMaxWorldSize, "ranks");
  if (!world)
    return failure();
  model.setWorldSizeAttr(builder.getI64IntegerAttr(*world));
  if (const JsonValue *d = get(root, "fsdp_dim")) {
    std::optional<int64_t> dim = getLimited(
        *d, "fsdp_dim", 0, limits::kMaxTensorDims - 1, "for a tensor dim");
    if (!dim)
      return failure();
    model.setFsdpDimAttr(builder.getI64IntegerAttr(*dim));
  }
  if (const JsonValue *n = get(root, "num_experts")) {
    std::optional<int64_t> num =
        getLimited(*n, "num_experts", 1, limits::kMaxExperts, "experts");
    if (!num)
      return failure();
    model.setNumExpertsAttr(builder.getI64IntegerAttr(*num));
  }
  const JsonValue *g = get(root, "groups");
  if (!g)
    return fail("", "process-group style needs 'groups' next to 'world_size'");
  const JsonValue *groups = getObject(*g, "groups");
  if (!groups || failed(checkKeys(*groups, "groups",
                                  {"fsdp", "shard", "tp", "ddp", "replicate",
                                   "cp", "ep", "pp"})))
    return failure();
  if (groups->empty())
    return fail("groups", "expected at least one process-group kind");
  // Kinds in a fixed order, so the output does not depend on key order.
  for (StringRef kind :
       {"pp", "ep", "ddp", "replicate", "cp", "fsdp", "shard", "tp"}) {
    const JsonValue *v = get(*groups, kind);
    if (!v)
      continue;
    std::string path = key("groups", kind);
    const JsonValue *list = getArray(*v, path);
    if (!list)
      return failure();
    // A kind partitions the world: more ranks than that cannot be valid.
    int64_t listed = 0;
    SmallVector<Attribute> lists;
    for (size_t i = 0; i < list->size(); ++i) {
      const JsonValue *group = getArray((*list)[i], index(path, i));
      if (!group)
        return failure();
      listed += group->size();
      if (listed > *world)
        return fail(index(path, i),
                    "'" + kind.str() + "' groups list more than world_size = " +
                        std::to_string(*world) + " ranks");
      SmallVector<int64_t> ranks;
      for (size_t j = 0; j < group->size(); ++j) {
        std::optional<int64_t> r =
            getInt((*group)[j], index(index(path, i), j), 0);
        if (!r)
          return failure();
        ranks.push_back(*r);
      }
      lists.push_back(builder.getDenseI64ArrayAttr(ranks));
    }
    GroupOp::create(builder, at(path), *symbolizeProcessGroupKind(kind),
                    builder.getArrayAttr(lists));
  }
  return success();
}

LogicalResult SpecImporter::importNsCoefficients(const JsonValue &o,
                                                 const JsonValue &x,
                                                 const std::string &path,
                                                 OperationState &state) {
  if (x.is_string()) {
    // A preset resolves to its table here; the IR keeps the table. A preset
    // with one triple per step resolves for ns_steps steps (default 5).
    const std::string name = x.get<std::string>();
    int64_t steps = 5;
    if (const JsonValue *n = get(o, "ns_steps"))
      steps = n->is_number_integer() ? n->get<int64_t>() : steps;
    std::optional<std::vector<::muon::NsTriple>> preset =
        ::muon::nsPreset(name, std::clamp<int64_t>(steps, 1, 99));
    if (!preset)
      return fail(key(path, "ns_coefficients"),
                  "unknown preset '" + name + "'; expected a preset (" +
                      ::muon::nsPresetList() +
                      ") or a table of [a, b, c] triples");
    // Out-of-range ns_steps: the verifier reports it, not a table mismatch.
    if (steps >= 1 && steps <= 99) {
      SmallVector<Attribute> table;
      for (const ::muon::NsTriple &abc : *preset)
        table.push_back(builder.getDenseF64ArrayAttr(abc));
      state.addAttribute("ns_coefficients", builder.getArrayAttr(table));
    }
    return success();
  }
  const JsonValue *rows = getArray(x, key(path, "ns_coefficients"));
  if (!rows)
    return failure();
  if (rows->empty())
    return fail(key(path, "ns_coefficients"),
                "expected at least one [a, b, c] triple");
  if (static_cast<int64_t>(rows->size()) > limits::kMaxNsSteps)
    return fail(key(path, "ns_coefficients"),
                "has " + std::to_string(rows->size()) +
                    " triples, more than the limit of " +
                    std::to_string(limits::kMaxNsSteps) + " NS steps");
  SmallVector<Attribute> table;
  for (size_t i = 0; i < rows->size(); ++i) {
    std::string rowPath = index(key(path, "ns_coefficients"), i);
    const JsonValue *row = getArray((*rows)[i], rowPath);
    if (!row)
      return failure();
    if (row->size() != 3)
      return fail(rowPath, "expected an [a, b, c] triple, got " +
                               std::to_string(row->size()) + " numbers");
    SmallVector<double> abc;
    for (size_t j = 0; j < 3; ++j) {
      std::optional<double> d = getNumber((*row)[j], index(rowPath, j));
      if (!d)
        return failure();
      abc.push_back(*d);
    }
    table.push_back(builder.getDenseF64ArrayAttr(abc));
  }
  state.addAttribute("ns_coefficients", builder.getArrayAttr(table));
  return success();
}

LogicalResult SpecImporter::importOptimizer(const JsonValue &v,
                                            const std::string &path,
                                            bool inParamGroups) {
  const JsonValue *o = getObject(v, path);
  const StringRef opName = OptimizerOp::getOperationName();
  if (!o ||
      failed(checkGroupKeys(
          *o, path,
          inParamGroups
              ? std::initializer_list<std::string_view>{"name", "algorithm",
                                                        "lr", "momentum",
                                                        "nesterov",
                                                        "weight_decay",
                                                        "ns_steps",
                                                        "ns_coefficients",
                                                        "eps", "adjust_lr",
                                                        "ns_dtype",
                                                        "weight_decay_mode"}
              : std::initializer_list<std::string_view>{
                    "lr", "momentum", "nesterov", "weight_decay", "ns_steps",
                    "ns_coefficients", "eps", "adjust_lr", "ns_dtype",
                    "weight_decay_mode"},
          opName, ::muon::kMuon)))
    return failure();
  OperationState state(at(path), opName);
  if (inParamGroups)
    state.addAttribute("group_name", builder.getStringAttr(
                                         get(*o, "name")->get<std::string>()));
  for (StringRef k : {"lr", "momentum", "weight_decay", "eps"})
    if (const JsonValue *x = get(*o, k)) {
      std::optional<double> d = getNumber(*x, key(path, k));
      if (!d)
        return failure();
      state.addAttribute(k, builder.getF64FloatAttr(*d));
    }
  if (const JsonValue *x = get(*o, "nesterov")) {
    std::optional<bool> b = getBool(*x, key(path, "nesterov"));
    if (!b)
      return failure();
    state.addAttribute("nesterov", builder.getBoolAttr(*b));
  }
  if (failed(importTableSettings(*o, path, ::muon::kMuon, state)))
    return failure();
  if (const JsonValue *x = get(*o, "ns_steps")) {
    // The verifier names the range; any integer is carried to it.
    std::optional<int64_t> n =
        getInt(*x, key(path, "ns_steps"), std::numeric_limits<int64_t>::min());
    if (!n)
      return failure();
    state.addAttribute("ns_steps", builder.getI64IntegerAttr(*n));
  }
  if (const JsonValue *x = get(*o, "ns_coefficients");
      x && failed(importNsCoefficients(*o, *x, path, state)))
    return failure();
  // The dialect's closed set, 'a', 'b' or 'c'.
  auto adjustLrNames = [] {
    std::string list;
    uint32_t last = getMaxEnumValForAdjustLr();
    for (uint32_t i = 0; i <= last; ++i)
      list += (i == 0 ? "'" : i == last ? " or '" : ", '") +
              stringifyAdjustLr(static_cast<AdjustLr>(i)).str() + "'";
    return list;
  };
  if (const JsonValue *x = get(*o, "adjust_lr")) {
    std::optional<std::string> s = getString(*x, key(path, "adjust_lr"));
    if (!s)
      return failure();
    std::optional<AdjustLr> adjust = symbolizeAdjustLr(*s);
    if (!adjust)
      return fail(key(path, "adjust_lr"),
                  "unknown adjust_lr '" + *s + "'; expected " +
                      adjustLrNames());
    state.addAttribute("adjust_lr", AdjustLrAttr::get(ctx, *adjust));
  }
  if (const JsonValue *x = get(*o, "weight_decay_mode")) {
    std::optional<std::string> s =
        getString(*x, key(path, "weight_decay_mode"));
    if (!s)
      return failure();
    std::optional<WeightDecayMode> mode = symbolizeWeightDecayMode(*s);
    if (!mode)
      return fail(key(path, "weight_decay_mode"),
                  "unknown weight_decay_mode '" + *s +
                      "'; expected 'decoupled', 'cautious' or 'none'");
    state.addAttribute("weight_decay_mode",
                       WeightDecayModeAttr::get(ctx, *mode));
  }
  if (const JsonValue *x = get(*o, "ns_dtype")) {
    // Absent: the running device chooses (IR `auto`).
    std::optional<std::string> s = getString(*x, key(path, "ns_dtype"));
    if (!s)
      return failure();
    std::optional<NsDtype> dtype = symbolizeNsDtype(*s);
    if (!dtype || *dtype == NsDtype::Auto)
      return fail(key(path, "ns_dtype"),
                  "unknown ns_dtype '" + *s +
                      "'; expected 'f32', 'bf16' or 'f16'");
    state.addAttribute("ns_dtype", NsDtypeAttr::get(ctx, *dtype));
  }
  builder.create(state);
  return success();
}

LogicalResult SpecImporter::importParamGroups(const JsonValue &v) {
  const JsonValue *groups = getArray(v, "param_groups");
  if (!groups)
    return failure();
  if (groups->empty())
    return fail("param_groups", "expected at least one group");
  if (static_cast<int64_t>(groups->size()) > limits::kMaxParams)
    return fail("param_groups", "has " + std::to_string(groups->size()) +
                                    " groups, above the limit of " +
                                    limits::describe(limits::kMaxParams));
  for (size_t i = 0; i < groups->size(); ++i) {
    std::string path = index("param_groups", i);
    const JsonValue *g = getObject((*groups)[i], path);
    if (!g)
      return failure();
    const JsonValue *name = get(*g, "name");
    if (!name)
      return fail(path, "missing key 'name'");
    std::optional<std::string> n = getString(*name, key(path, "name"));
    if (!n)
      return failure();
    if (n->empty())
      return fail(key(path, "name"), "group names must not be empty");
    for (const auto &[other, at] : groupOrder)
      if (other == *n)
        return fail(key(path, "name"), "'" + *n + "' is also the name of " +
                                           index("param_groups", at));
    const JsonValue *algorithm = get(*g, "algorithm");
    if (!algorithm)
      return fail(path, "missing key 'algorithm' (" +
                            ::muon::algorithmNames() + ")");
    std::optional<std::string> a =
        getString(*algorithm, key(path, "algorithm"));
    if (!a)
      return failure();
    std::optional<::muon::AlgorithmId> id = ::muon::findAlgorithm(*a);
    if (!id)
      return fail(key(path, "algorithm"),
                  "unknown algorithm '" + *a + "'; expected " +
                      ::muon::algorithmNames('\''));
    if (failed(*id == ::muon::kMuon    ? importOptimizer(*g, path, true)
               : *id == ::muon::kAdamW ? importAdamW(*g, path, true)
                                       : importTableGroup(*g, path, *id)))
      return failure();
    groupOrder.push_back({*n, i});
    groupAlgorithms[*n] = *id;
  }
  return success();
}

LogicalResult SpecImporter::importAdamW(const JsonValue &v,
                                        const std::string &path,
                                        bool inParamGroups) {
  const JsonValue *o = getObject(v, path);
  const StringRef opName = AdamWOp::getOperationName();
  if (!o ||
      failed(checkGroupKeys(
          *o, path,
          inParamGroups
              ? std::initializer_list<std::string_view>{"name", "algorithm",
                                                        "lr", "betas", "eps",
                                                        "weight_decay"}
              : std::initializer_list<std::string_view>{"lr", "betas", "eps",
                                                        "weight_decay"},
          opName, ::muon::kAdamW)))
    return failure();
  OperationState state(at(path), opName);
  if (failed(importTableSettings(*o, path, ::muon::kAdamW, state)))
    return failure();
  if (inParamGroups)
    state.addAttribute("group_name", builder.getStringAttr(
                                         get(*o, "name")->get<std::string>()));
  for (StringRef k : {"lr", "eps", "weight_decay"})
    if (const JsonValue *x = get(*o, k)) {
      std::optional<double> d = getNumber(*x, key(path, k));
      if (!d)
        return failure();
      state.addAttribute(k, builder.getF64FloatAttr(*d));
    }
  if (const JsonValue *x = get(*o, "betas")) {
    const JsonValue *betas = getArray(*x, key(path, "betas"));
    if (!betas)
      return failure();
    if (betas->size() != 2)
      return fail(key(path, "betas"), "expected [beta1, beta2]");
    SmallVector<double> b;
    for (size_t i = 0; i < 2; ++i) {
      std::optional<double> d =
          getNumber((*betas)[i], index(key(path, "betas"), i));
      if (!d)
        return failure();
      b.push_back(*d);
    }
    state.addAttribute("betas", builder.getDenseF64ArrayAttr(b));
  }
  builder.create(state);
  return success();
}

LogicalResult SpecImporter::importTableGroup(const JsonValue &v,
                                             const std::string &path,
                                             ::muon::AlgorithmId algorithm) {
  const JsonValue *o = getObject(v, path);
  const StringRef opName = ParamGroupOp::getOperationName();
  if (!o || failed(checkGroupKeys(*o, path, {"name", "algorithm"}, opName,
                                  algorithm)))
    return failure();
  OperationState state(at(path), opName);
  state.addAttribute("algorithm", builder.getStringAttr(
                                      ::muon::algorithmName(algorithm)));
  state.addAttribute("group_name", builder.getStringAttr(
                                       get(*o, "name")->get<std::string>()));
  if (failed(importTableSettings(*o, path, algorithm, state)))
    return failure();
  builder.create(state);
  return success();
}

LogicalResult SpecImporter::importDistributed(const JsonValue &v) {
  if (v.is_null())
    return success(); // no distributed config
  const JsonValue *o = getObject(v, "distributed");
  if (!o || failed(checkKeys(*o, "distributed",
                             {"prefetch_count", "async", "assignments",
                              "placement", "redundant_below"})))
    return failure();
  OperationState state(at("distributed"), DistributedOp::getOperationName());
  // Newton-Schulz placement: written only where the spec says, so that
  // specs without it import to the same IR as before.
  std::optional<std::string> placement;
  if (const JsonValue *x = get(*o, "placement")) {
    placement = getString(*x, "distributed.placement");
    if (!placement)
      return failure();
    if (!::muon::parsePlacement(*placement))
      return fail("distributed.placement",
                  "expected \"auto\", \"once\" or \"redundant_below\", "
                  "got \"" + *placement + "\"");
    state.addAttribute("placement", builder.getStringAttr(*placement));
  }
  if (const JsonValue *x = get(*o, "redundant_below")) {
    if (placement != std::string("redundant_below"))
      return fail("distributed.redundant_below",
                  "goes with \"placement\": \"redundant_below\" only");
    std::optional<int64_t> n =
        getLimited(*x, "distributed.redundant_below", 0,
                   std::numeric_limits<int64_t>::max(), "elements");
    if (!n)
      return failure();
    state.addAttribute("redundant_below", builder.getI64IntegerAttr(*n));
  } else if (placement == std::string("redundant_below")) {
    return fail("distributed",
                "\"placement\": \"redundant_below\" needs "
                "\"redundant_below\" (a matrix size in elements)");
  }
  if (const JsonValue *x = get(*o, "prefetch_count")) {
    std::optional<int64_t> n =
        getLimited(*x, "distributed.prefetch_count", 0,
                   limits::kMaxPrefetchCount, "exchanges prefetched");
    if (!n)
      return failure();
    state.addAttribute("prefetch_count", builder.getI64IntegerAttr(*n));
  }
  if (const JsonValue *x = get(*o, "async")) {
    std::optional<bool> b = getBool(*x, "distributed.async");
    if (!b)
      return failure();
    state.addAttribute("async", builder.getBoolAttr(*b));
  }
  builder.create(state);
  return success();
}

LogicalResult SpecImporter::importQkClip(const JsonValue &v,
                                         const JsonValue &params) {
  const JsonValue *o = getObject(v, "qk_clip");
  if (!o || failed(checkKeys(*o, "qk_clip", {"threshold", "layers"})))
    return failure();
  std::optional<double> threshold;
  if (const JsonValue *t = get(*o, "threshold"))
    if (!(threshold = getNumber(*t, "qk_clip.threshold")))
      return failure();
  const JsonValue *layersV = get(*o, "layers");
  if (!layersV)
    return fail("qk_clip", "missing key 'layers'");
  const JsonValue *layers = getArray(*layersV, "qk_clip.layers");
  if (!layers)
    return failure();
  if (layers->empty())
    return fail("qk_clip.layers", "expected at least one layer");
  // The parameters' shapes, as importParams read them.
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const JsonValue &p : params) {
    const JsonValue *name = get(p, "name"), *shape = get(p, "shape");
    if (name && name->is_string() && shape && shape->is_array()) {
      std::vector<int64_t> dims;
      for (const JsonValue &d : *shape)
        dims.push_back(d.is_number_integer() ? d.get<int64_t>() : 0);
      shapes[name->get<std::string>()] = dims;
    }
  }
  std::map<std::string, size_t> seen;
  for (size_t i = 0; i < layers->size(); ++i) {
    std::string path = index("qk_clip.layers", i);
    const JsonValue *l = getObject((*layers)[i], path);
    if (!l || failed(checkKeys(*l, path,
                               {"name", "query", "key", "num_heads",
                                "num_kv_heads", "threshold"})))
      return failure();
    ::muon::QkClipLayer layer;
    for (auto [k, out] :
         {std::pair{"name", &layer.name}, std::pair{"query", &layer.query},
          std::pair{"key", &layer.key}}) {
      const JsonValue *x = get(*l, k);
      if (!x)
        return fail(path, std::string("missing key '") + k + "'");
      std::optional<std::string> s = getString(*x, key(path, k));
      if (!s)
        return failure();
      *out = *s;
    }
    if (layer.name.empty())
      return fail(key(path, "name"), "layer names must not be empty");
    if (auto [it, inserted] = seen.try_emplace(layer.name, i); !inserted)
      return fail(key(path, "name"), "'" + layer.name +
                                         "' is also the name of " +
                                         index("qk_clip.layers", it->second));
    const JsonValue *heads = get(*l, "num_heads");
    if (!heads)
      return fail(path, "missing key 'num_heads'");
    std::optional<int64_t> n = getInt(*heads, key(path, "num_heads"), 1);
    if (!n)
      return failure();
    layer.numHeads = layer.numKvHeads = *n;
    if (const JsonValue *kv = get(*l, "num_kv_heads")) {
      std::optional<int64_t> m = getInt(*kv, key(path, "num_kv_heads"), 1);
      if (!m)
        return failure();
      layer.numKvHeads = *m;
    }
    std::optional<double> t = threshold;
    if (const JsonValue *x = get(*l, "threshold"))
      if (!(t = getNumber(*x, key(path, "threshold"))))
        return failure();
    if (!t)
      return fail(path, "missing key 'threshold' (here or in qk_clip)");
    layer.threshold = *t;
    auto shapeOf = [&](const std::string &name) {
      auto it = shapes.find(name);
      return it == shapes.end() ? nullptr : &it->second;
    };
    ::muon::Status bad = ::muon::checkQkClipLayer(layer, shapeOf(layer.query),
                                                  shapeOf(layer.key));
    if (!bad.ok()) {
      // The threshold inherited from qk_clip is reported there.
      std::string at = bad.location() == "threshold" && !get(*l, "threshold")
                           ? std::string("qk_clip.threshold")
                           : key(path, bad.location());
      return fail(at, bad.message());
    }
    QkClipOp::create(builder, at(path), builder.getStringAttr(layer.name),
                     FlatSymbolRefAttr::get(ctx, layer.query),
                     FlatSymbolRefAttr::get(ctx, layer.key),
                     builder.getI64IntegerAttr(layer.numHeads),
                     builder.getI64IntegerAttr(layer.numKvHeads),
                     builder.getF64FloatAttr(layer.threshold));
  }
  return success();
}

LogicalResult SpecImporter::importAssignments(const JsonValue &v,
                                              const std::string &path) {
  const JsonValue *o = getObject(v, path);
  if (!o)
    return failure();
  // Ranks in numeric order, for output that does not depend on key order.
  std::vector<std::pair<int64_t, std::string>> ranks;
  for (auto it = o->begin(); it != o->end(); ++it) {
    std::optional<int64_t> r = parseDecimal(it.key());
    if (!r)
      return fail(key(path, it.key()),
                  "expected a rank (a non-negative integer) as key");
    ranks.push_back({*r, it.key()});
  }
  llvm::sort(ranks);
  for (auto &[rank, k] : ranks) {
    std::string rpath = key(path, k);
    const JsonValue *names = getArray(o->at(k), rpath);
    if (!names)
      return failure();
    SmallVector<Attribute> refs;
    SmallVector<int64_t> slices;
    for (size_t i = 0; i < names->size(); ++i) {
      std::optional<std::string> text = getString((*names)[i], index(rpath, i));
      if (!text)
        return failure();
      // "name" or "name[i]" for one matrix of a batched parameter.
      StringRef n = *text, base = n;
      int64_t slice = -1;
      if (n.ends_with("]") && paramIndex.find(n) == paramIndex.end()) {
        size_t open = n.rfind('[');
        std::optional<int64_t> s;
        if (open != StringRef::npos)
          s = parseDecimal(n.slice(open + 1, n.size() - 1).str());
        if (s) {
          base = n.take_front(open);
          slice = *s;
        }
      }
      if (paramIndex.find(base) == paramIndex.end())
        return fail(index(rpath, i), "unknown parameter '" + *text + "'");
      refs.push_back(FlatSymbolRefAttr::get(ctx, base));
      slices.push_back(slice);
    }
    AssignOp::create(builder, at(rpath), rank, builder.getArrayAttr(refs),
                     builder.getDenseI64ArrayAttr(slices),
                     /*redundant=*/false);
  }
  return success();
}

/// DTensor placements (`R`, `P`, `S(d)`), `split` and `only` of one param.
LogicalResult SpecImporter::importOnly(const JsonValue &only,
                                       const std::string &opath,
                                       const std::vector<char> &kind,
                                       SmallVector<int64_t> &onlyPairs) {
  const JsonValue *o = getObject(only, opath);
  if (!o)
    return failure();
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (auto it = o->begin(); it != o->end(); ++it) {
    std::string apath = key(opath, it.key());
    std::optional<int64_t> axis = resolveAxis(it.key(), apath);
    if (!axis)
      return failure();
    std::optional<int64_t> coord = getInt(it.value(), apath, 0);
    if (!coord)
      return failure();
    if (*coord >= meshShape[*axis])
      return fail(apath, "coordinate " + std::to_string(*coord) +
                             " is out of range for mesh axis '" + it.key() +
                             "' of size " + std::to_string(meshShape[*axis]));
    if (kind[*axis] != 'R')
      return fail(apath, "the parameter is restricted to this axis, so its "
                         "placement on it must be \"R\"");
    if (llvm::any_of(pairs, [&](auto pr) { return pr.first == *axis; }))
      return fail(apath, "mesh axis '" + it.key() +
                             "' is restricted twice (by name and by index)");
    pairs.push_back({*axis, *coord});
  }
  llvm::sort(pairs);
  for (auto [a, c] : pairs)
    onlyPairs.append({a, c});
  return success();
}

LogicalResult SpecImporter::importParamLayout(const JsonValue &p,
                                              const std::string &path,
                                              int64_t rank,
                                              OperationState &state) {
  size_t meshRank = meshShape.size();
  // Per mesh axis: 'R', 'P' or 'S' with its dim (-1: "S" under split).
  std::vector<char> kind(meshRank, 'R');
  std::vector<int64_t> shardDim(meshRank, -1);
  const JsonValue *placements = get(p, "placements");
  const JsonValue *split = get(p, "split");
  // Neither `placements` nor `split`: "R" on every mesh axis (contract 1.3),
  // which `kind` already holds.
  if (placements) {
    std::string ppath = key(path, "placements");
    const JsonValue *list = getArray(*placements, ppath);
    if (!list)
      return failure();
    if (list->size() != meshRank)
      return fail(ppath, "has " + std::to_string(list->size()) +
                             " entries but the mesh has " +
                             std::to_string(meshRank) +
                             " axes; expected one placement per mesh axis");
    for (size_t a = 0; a < meshRank; ++a) {
      std::string epath = index(ppath, a);
      std::optional<std::string> text = getString((*list)[a], epath);
      if (!text)
        return failure();
      StringRef s = *text;
      std::optional<int64_t> d;
      if (s.starts_with("S(") && s.ends_with(")"))
        d = parseDecimal(s.drop_front(2).drop_back(1).str());
      if (s == "R" || s == "P") {
        kind[a] = s[0];
      } else if (s == "S" && split) {
        kind[a] = 'S';
      } else if (d) {
        if (*d >= rank)
          return fail(epath, s.str() + " is out of range for a tensor of " +
                                 std::to_string(rank) + " dim(s)");
        kind[a] = 'S';
        shardDim[a] = *d;
      } else {
        return fail(epath, "expected \"R\", \"P\" or \"S(<dim>)\", got \"" +
                               s.str() + "\"");
      }
    }
  }
  std::vector<SmallVector<int64_t>> splitAxes(rank);
  if (split) {
    std::string spath = key(path, "split");
    const JsonValue *o = getObject(*split, spath);
    if (!o)
      return failure();
    std::vector<int64_t> dimOfAxis(meshRank, -1);
    for (auto it = o->begin(); it != o->end(); ++it) {
      std::string dpath = key(spath, it.key());
      std::optional<int64_t> d = parseDecimal(it.key());
      if (!d || *d >= rank)
        return fail(dpath, "expected a tensor dim in 0.." +
                               std::to_string(rank - 1) + " as key, got '" +
                               it.key() + "'");
      const JsonValue *axes = getArray(it.value(), dpath);
      if (!axes)
        return failure();
      for (size_t i = 0; i < axes->size(); ++i) {
        std::optional<int64_t> axis =
            resolveAxisValue((*axes)[i], index(dpath, i));
        if (!axis)
          return failure();
        if (dimOfAxis[*axis] >= 0)
          return fail(index(dpath, i),
                      "mesh axis '" +
                          (axisNames[*axis].empty() ? std::to_string(*axis)
                                                    : axisNames[*axis]) +
                          "' already splits dim " +
                          std::to_string(dimOfAxis[*axis]));
        dimOfAxis[*axis] = *d;
        splitAxes[*d].push_back(*axis);
      }
    }
    for (size_t a = 0; a < meshRank; ++a) {
      bool named = dimOfAxis[a] >= 0;
      if (placements) {
        std::string epath = index(key(path, "placements"), a);
        if (named && kind[a] != 'S')
          return fail(epath, "mesh axis " + std::to_string(a) +
                                 " splits a dim in 'split', so its placement "
                                 "must be \"S\"");
        if (!named && kind[a] == 'S')
          return fail(epath, "placement \"S\" on mesh axis " +
                                 std::to_string(a) +
                                 ", which no entry of 'split' names");
        if (named && shardDim[a] >= 0 && shardDim[a] != dimOfAxis[a])
          return fail(epath, "placement splits dim " +
                                 std::to_string(shardDim[a]) +
                                 " but 'split' says dim " +
                                 std::to_string(dimOfAxis[a]));
      }
      if (named)
        kind[a] = 'S';
    }
  } else {
    // DTensor order: the leftmost mesh axis is the major split.
    for (size_t a = 0; a < meshRank; ++a)
      if (kind[a] == 'S')
        splitAxes[shardDim[a]].push_back(a);
  }
  SmallVector<int64_t> partial, onlyPairs;
  for (size_t a = 0; a < meshRank; ++a)
    if (kind[a] == 'P')
      partial.push_back(a);
  if (const JsonValue *only = get(p, "only");
      only && failed(importOnly(*only, key(path, "only"), kind, onlyPairs)))
    return failure();
  SmallVector<Attribute> split2;
  for (const auto &axes : splitAxes)
    split2.push_back(builder.getDenseI64ArrayAttr(axes));
  state.addAttribute("grid", FlatSymbolRefAttr::get(ctx, "mesh"));
  state.addAttribute("split_axes", builder.getArrayAttr(split2));
  if (!partial.empty())
    state.addAttribute("partial_axes", builder.getDenseI64ArrayAttr(partial));
  if (!onlyPairs.empty())
    state.addAttribute("only", builder.getDenseI64ArrayAttr(onlyPairs));
  return success();
}

LogicalResult SpecImporter::importParams(const JsonValue &v,
                                         const JsonValue &root) {
  const JsonValue *params = getArray(v, "params");
  if (!params)
    return failure();
  if (static_cast<int64_t>(params->size()) > limits::kMaxParams)
    return fail("params", "has " + std::to_string(params->size()) +
                              " parameters, above the limit of " +
                              limits::describe(limits::kMaxParams));
  // Names first: assignments and tp_dim_per_param refer to them.
  if (failed(importParamNames(*params)))
    return failure();
  std::vector<std::optional<int64_t>> tpDim(params->size());
  std::optional<int64_t> tpAll;
  if (failed(importTpDims(root, params->size(), tpDim, tpAll)))
    return failure();
  for (size_t i = 0; i < params->size(); ++i) {
    std::optional<int64_t> tp = tpDim[i];
    if (failed(importParam((*params)[i], i, tp, tpAll)))
      return failure();
  }
  return success();
}

LogicalResult SpecImporter::importParamNames(const JsonValue &params) {
  for (size_t i = 0; i < params.size(); ++i) {
    std::string path = index("params", i);
    const JsonValue *p = getObject(params[i], path);
    if (!p)
      return failure();
    const JsonValue *n = get(*p, "name");
    if (!n)
      return fail(path, "missing key 'name'");
    std::optional<std::string> name = getString(*n, key(path, "name"));
    if (!name)
      return failure();
    if (name->empty())
      return fail(key(path, "name"), "parameter names must not be empty");
    auto [it, inserted] = paramIndex.try_emplace(*name, i);
    if (!inserted)
      return fail(key(path, "name"), "duplicate parameter name '" + *name +
                                         "' (first at params[" +
                                         std::to_string(it->second) + "])");
    paramNames.push_back(*name);
  }
  return success();
}

LogicalResult
SpecImporter::importTpDims(const JsonValue &root, size_t count,
                           std::vector<std::optional<int64_t>> &tpDim,
                           std::optional<int64_t> &tpAll) {
  if (const JsonValue *t = get(root, "tp_dim_per_param")) {
    if (t->is_number_integer()) {
      tpAll = getLimited(*t, "tp_dim_per_param", 0,
                         limits::kMaxTensorDims - 1, "for a tensor dim");
      if (!tpAll)
        return failure();
    } else {
      const JsonValue *o = getObject(*t, "tp_dim_per_param");
      if (!o)
        return failure();
      for (auto it = o->begin(); it != o->end(); ++it) {
        std::string tpath = key("tp_dim_per_param", it.key());
        std::optional<int64_t> i = parseDecimal(it.key());
        if (!i || *i >= static_cast<int64_t>(count))
          return fail(tpath, "expected a parameter index in 0.." +
                                 std::to_string(count - 1) +
                                 " as key, got '" + it.key() + "'");
        tpDim[*i] = getLimited(it.value(), tpath, 0,
                               limits::kMaxTensorDims - 1, "for a tensor dim");
        if (!tpDim[*i])
          return failure();
      }
    }
  }
  return success();
}

FailureOr<SmallVector<int64_t>>
SpecImporter::importShape(const JsonValue &p, const std::string &path) {
  const JsonValue *s = get(p, "shape");
  if (!s)
    return fail(path, "missing key 'shape'");
  std::string shapePath = key(path, "shape");
  const JsonValue *dims = getArray(*s, shapePath);
  if (!dims)
    return failure();
  if (static_cast<int64_t>(dims->size()) > limits::kMaxTensorDims)
    return fail(shapePath, "has " + std::to_string(dims->size()) +
                               " dims, above the limit of " +
                               limits::describe(limits::kMaxTensorDims));
  SmallVector<int64_t> shape;
  for (size_t d = 0; d < dims->size(); ++d) {
    std::optional<int64_t> size =
        getLimited((*dims)[d], index(shapePath, d), 1,
                   limits::kMaxParamElements, "elements per parameter");
    if (!size)
      return failure();
    shape.push_back(*size);
  }
  return shape;
}

FailureOr<Type> SpecImporter::importDtype(const JsonValue &p,
                                          const std::string &path) {
  Type elem = builder.getF32Type();
  if (const JsonValue *d = get(p, "dtype")) {
    std::optional<std::string> dtype = getString(*d, key(path, "dtype"));
    if (!dtype)
      return failure();
    if (*dtype == "bf16")
      elem = builder.getBF16Type();
    else if (*dtype == "f16")
      elem = builder.getF16Type();
    else if (*dtype != "f32")
      return fail(key(path, "dtype"), "unknown dtype '" + *dtype +
                                          "'; expected f32, bf16 or f16");
  }
  return elem;
}

FailureOr<::muon::AlgorithmId>
SpecImporter::importParamAlgorithm(const JsonValue &p, const std::string &path,
                                   const std::string &paramName, int64_t rank,
                                   OperationState &state) {
  // The default for its rank: Muon for matrices, AdamW below.
  ::muon::AlgorithmId algorithm = rank >= 2 ? ::muon::kMuon : ::muon::kAdamW;
  std::optional<::muon::AlgorithmId> given;
  if (const JsonValue *o = get(p, "optimizer")) {
    std::string opath = key(path, "optimizer");
    std::optional<std::string> name = getString(*o, opath);
    if (!name)
      return failure();
    given = ::muon::findAlgorithm(*name);
    if (!given)
      return fail(opath, "unknown optimizer '" + *name + "'; expected " +
                             ::muon::algorithmNames('\''));
  }
  std::optional<std::string> groupName;
  if (const JsonValue *g = get(p, "group")) {
    std::string gpath = key(path, "group");
    groupName = getString(*g, gpath);
    if (!groupName)
      return failure();
    auto it = groupAlgorithms.find(*groupName);
    if (it == groupAlgorithms.end()) {
      std::string names;
      for (const auto &[n, at] : groupOrder)
        names += (names.empty() ? "'" : ", '") + n + "'";
      return fail(gpath, "no parameter group named '" + *groupName +
                             "' (the groups are " + names + ")");
    }
    if (given && *given != it->second)
      return fail(gpath, "group '" + *groupName + "' is a " +
                             ::muon::algorithmName(it->second) +
                             " group but " + key(path, "optimizer") +
                             " is '" + ::muon::algorithmName(*given) + "'");
    given = it->second;
  }
  if (given) {
    const bool byGroup = groupName && !get(p, "optimizer");
    if (::muon::algorithmOf(*given).orthogonalizes && rank < 2)
      return fail(key(path, byGroup ? "group" : "optimizer"),
                  "Muon orthogonalizes matrices but the parameter has " +
                      std::to_string(rank) + " dim(s); use " +
                      (byGroup ? "an AdamW group" : "'adamw'"));
    algorithm = *given;
    state.addAttribute("group", builder.getStringAttr(
                                    ::muon::algorithmName(algorithm)));
  }
  const ::muon::Algorithm &mine = ::muon::algorithmOf(algorithm);
  if (hasParamGroups) {
    // The first group of the parameter's algorithm, unless it names one.
    if (!groupName)
      for (const auto &[n, at] : groupOrder)
        if (groupAlgorithms[n] == algorithm) {
          groupName = n;
          break;
        }
    if (!groupName)
      return fail(path, std::string("parameter '") + paramName +
                            "' is a " + mine.title +
                            " parameter but param_groups has no " +
                            mine.name + " group");
  } else if (algorithm != ::muon::kMuon && algorithm != ::muon::kAdamW) {
    // Without param_groups a model has the two groups "muon" and "adamw".
    return fail(key(path, "optimizer"),
                std::string("a ") + mine.title + " parameter needs a " +
                    mine.name + " group in param_groups");
  }
  // Without param_groups, "muon" and "adamw" name the algorithm alone.
  if (groupName && hasParamGroups)
    state.addAttribute("param_group", builder.getStringAttr(*groupName));
  return algorithm;
}

LogicalResult
SpecImporter::importProcessGroupPlacement(const JsonValue &p,
                                          const std::string &path, size_t i,
                                          int64_t rank,
                                          std::optional<int64_t> tpGiven,
                                          std::optional<int64_t> tpAll,
                                          OperationState &state) {
  std::optional<int64_t> tp = tpGiven;
  if (!tp && tpAll && rank >= 2)
    tp = tpAll;
  if (tp) {
    if (*tp >= rank)
      return fail(tpGiven ? key("tp_dim_per_param", std::to_string(i))
                          : std::string("tp_dim_per_param"),
                  "TP dim " + std::to_string(*tp) +
                      " is out of range for parameter '" + paramNames[i] +
                      "' of " + std::to_string(rank) + " dim(s)");
    state.addAttribute("tp_dim", builder.getI64IntegerAttr(*tp));
  }
  for (StringRef k : {"stage", "expert"})
    if (const JsonValue *x = get(p, k)) {
      std::optional<int64_t> n =
          k == "stage"
              ? getLimited(*x, key(path, k), 0, limits::kMaxWorldSize - 1,
                           "for a pipeline stage")
              : getLimited(*x, key(path, k), 0, limits::kMaxExperts - 1,
                           "for an expert id");
      if (!n)
        return failure();
      state.addAttribute(k, builder.getI64IntegerAttr(*n));
    }
  return success();
}

LogicalResult SpecImporter::importParam(const JsonValue &p, size_t i,
                                        std::optional<int64_t> tpDim,
                                        std::optional<int64_t> tpAll) {
  std::string path = index("params", i);
  if (failed(checkKeys(
          p, path,
          processGroups
              ? std::initializer_list<std::string_view>{"name", "shape",
                                                        "dtype", "optimizer",
                                                        "group", "stage",
                                                        "expert", "num_heads",
                                                        "head_split_dim"}
              : std::initializer_list<std::string_view>{
                    "name", "shape", "dtype", "optimizer", "group",
                    "placements", "split", "only", "num_heads",
                    "head_split_dim"})))
    return failure();
  FailureOr<SmallVector<int64_t>> shape = importShape(p, path);
  if (failed(shape))
    return failure();
  const int64_t rank = shape->size();
  FailureOr<Type> elem = importDtype(p, path);
  if (failed(elem))
    return failure();
  OperationState state(at(path), ParamOp::getOperationName());
  state.addAttribute(SymbolTable::getSymbolAttrName(),
                     builder.getStringAttr(paramNames[i]));
  state.addAttribute("tensor_type",
                     TypeAttr::get(RankedTensorType::get(*shape, *elem)));
  FailureOr<::muon::AlgorithmId> algorithm =
      importParamAlgorithm(p, path, paramNames[i], rank, state);
  if (failed(algorithm))
    return failure();
  const ::muon::Algorithm &mine = ::muon::algorithmOf(*algorithm);
  const std::string shapePath = key(path, "shape");
  if (::muon::Status bad = ::muon::checkShapeLimits(
          std::vector<int64_t>(shape->begin(), shape->end()),
          mine.orthogonalizes); !bad.ok())
    return fail(shapePath, "parameter '" + paramNames[i] + "' " + bad.message());
  if (failed(importHeads(p, path, *shape, mine.orthogonalizes, state)))
    return failure();
  if (processGroups) {
    if (failed(importProcessGroupPlacement(p, path, i, rank, tpDim, tpAll,
                                           state)))
      return failure();
  } else if (failed(importParamLayout(p, path, rank, state))) {
    return failure();
  }
  builder.create(state);
  return success();
}

/// Per-head Newton-Schulz (`num_heads`, `head_split_dim`) of one parameter.
LogicalResult SpecImporter::importHeads(const JsonValue &p,
                                        const std::string &path,
                                        ArrayRef<int64_t> shape,
                                        bool orthogonalized,
                                        OperationState &state) {
  std::optional<int64_t> heads, dim;
  if (const JsonValue *v = get(p, "num_heads")) {
    heads = getLimited(*v, key(path, "num_heads"), 1, limits::kMaxMatrices,
                       "heads");
    if (!heads)
      return failure();
  }
  if (const JsonValue *v = get(p, "head_split_dim")) {
    if (!heads)
      return fail(key(path, "head_split_dim"),
                  "only with num_heads (the dim it cuts into heads)");
    dim = getLimited(*v, key(path, "head_split_dim"), 0, limits::kMaxTensorDims,
                     "for a dim");
    if (!dim)
      return failure();
    if (*dim > 1)
      return fail(key(path, "head_split_dim"),
                  "expected 0 (the rows) or 1 (the columns) of the matrix, "
                  "got " +
                      std::to_string(*dim));
  }
  if (!heads)
    return success();
  std::vector<int64_t> dims(shape.begin(), shape.end());
  if (::muon::Status bad =
          ::muon::checkHeads(dims, orthogonalized, *heads, dim.value_or(0)); !bad.ok())
    return fail(key(path, "num_heads"), bad.message()); // the path names the parameter
  state.addAttribute("num_heads", builder.getI64IntegerAttr(*heads));
  if (dim)
    state.addAttribute("head_split_dim", builder.getI64IntegerAttr(*dim));
  return success();
}

OwningOpRef<ModuleOp> SpecImporter::run(StringRef text) {
  JsonValue parsed;
  ::muon::Status bad =
      ::muon::json::parse(std::string_view(text.data(), text.size()), parsed);
  if (!bad.ok()) {
    (void)fail(bad.location(), bad.message());
    return nullptr;
  }
  return run(parsed);
}

OwningOpRef<ModuleOp> SpecImporter::run(const JsonValue &document) {
  const JsonValue *root = getObject(document, "");
  if (!root)
    return nullptr;
  if (failed(checkKeys(*root, "",
                       {"format", "mesh", "world_size", "groups",
                        "tp_dim_per_param", "fsdp_dim", "num_experts",
                        "optimizer", "adamw", "param_groups", "distributed",
                        "params", "qk_clip"})))
    return nullptr;
  const JsonValue *format = get(*root, "format");
  if (!format) {
    (void)fail("", "missing key 'format' (expected \"muon-spec/1\")");
    return nullptr;
  }
  std::optional<std::string> f = getString(*format, "format");
  if (!f)
    return nullptr;
  if (*f != "muon-spec/1") {
    (void)fail("format", "unsupported format '" + *f +
                             "'; expected \"muon-spec/1\"");
    return nullptr;
  }
  bool hasMesh = get(*root, "mesh");
  processGroups = get(*root, "groups") || get(*root, "world_size");
  if (hasMesh && processGroups) {
    (void)fail(get(*root, "groups") ? "groups" : "world_size",
               "a spec uses either 'mesh' (DTensor style) or 'world_size' "
               "and 'groups' (process-group style), not both");
    return nullptr;
  }
  if (!processGroups)
    for (StringRef k : {"tp_dim_per_param", "fsdp_dim", "num_experts"})
      if (get(*root, k)) {
        (void)fail(k.str(), "'" + k.str() +
                                "' belongs to the process-group style; with "
                                "'mesh', give placements per parameter");
        return nullptr;
      }
  const JsonValue *params = get(*root, "params");
  if (!params) {
    (void)fail("", "missing key 'params'");
    return nullptr;
  }

  OwningOpRef<ModuleOp> module = ModuleOp::create(at(""));
  builder.setInsertionPointToEnd(module->getBody());
  model = ModelOp::create(builder, at(""), "model");
  builder.setInsertionPointToEnd(&model.getBodyBlock());

  if (processGroups) {
    if (failed(importGroups(*root)))
      return nullptr;
  } else if (hasMesh) {
    if (failed(importMesh(*get(*root, "mesh"))))
      return nullptr;
  } else {
    // No mesh and no groups: one device, as `"mesh": {"shape": [1]}`
    // (contract 1.3). The grid is located at the root: there is no key.
    meshShape = {1};
    axisNames = {""};
    shard_adapter::createGrid(builder, at(""), "mesh", meshShape);
  }
  if (const JsonValue *g = get(*root, "param_groups")) {
    // torch.optim's param_groups replace the two-group keys.
    for (StringRef k : {"optimizer", "adamw"})
      if (get(*root, k)) {
        (void)fail(k.str(), "'" + k.str() +
                                "' and 'param_groups' both give the groups' "
                                "settings; put them in param_groups");
        return nullptr;
      }
    hasParamGroups = true;
    if (failed(importParamGroups(*g)))
      return nullptr;
  } else {
    // The two groups of a spec without param_groups.
    groupOrder = {{"muon", 0}, {"adamw", 1}};
    groupAlgorithms = {{"muon", ::muon::kMuon}, {"adamw", ::muon::kAdamW}};
    if (const JsonValue *o = get(*root, "optimizer"))
      if (failed(importOptimizer(*o, "optimizer", false)))
        return nullptr;
    if (const JsonValue *a = get(*root, "adamw"))
      if (failed(importAdamW(*a, "adamw", false)))
        return nullptr;
  }
  if (const JsonValue *d = get(*root, "distributed")) {
    if (failed(importDistributed(*d)))
      return nullptr;
  } else if (processGroups) {
    // The groups are the distributed config in this style (the seeds'
    // create_auto_config); only an explicit null turns it off.
    builder.create(
        OperationState(at("distributed"), DistributedOp::getOperationName()));
  }
  if (failed(importParams(*params, *root)))
    return nullptr;
  if (const JsonValue *q = get(*root, "qk_clip"))
    if (failed(importQkClip(*q, *params)))
      return nullptr;
  if (const JsonValue *d = get(*root, "distributed"))
    if (d->is_object())
      if (const JsonValue *a = get(*d, "assignments"))
        if (failed(importAssignments(*a, "distributed.assignments")))
          return nullptr;
  if (failed(verify(*module)))
    return nullptr;
  return module;
}

} // namespace

/// The context as the importer needs it.
static void prepare(MLIRContext *context) {
  context->loadDialect<MuonDialect, shard::ShardDialect>();
  // The JSON path says where; a dump of the generic op would only be noise.
  context->printOpOnDiagnostic(false);
}

OwningOpRef<ModuleOp> mlir::muon::importSpec(StringRef json,
                                             MLIRContext *context) {
  prepare(context);
  return SpecImporter(context).run(json);
}

OwningOpRef<ModuleOp>
mlir::muon::importSpecDocument(const ::muon::json::Value &document,
                               MLIRContext *context) {
  prepare(context);
  return SpecImporter(context).run(document);
}

SpecDiagnosticHandler::SpecDiagnosticHandler(MLIRContext *context,
                                             StringRef sourceName)
    : ScopedDiagnosticHandler(context) {
  std::string source = sourceName.str();
  setHandler([source](Diagnostic &diag) -> LogicalResult {
    auto name = dyn_cast<NameLoc>(diag.getLocation());
    if (!name)
      return failure(); // not ours: let the next handler print it
    llvm::raw_ostream &os = llvm::errs();
    const char *severity = "error";
    if (diag.getSeverity() == DiagnosticSeverity::Warning)
      severity = "warning";
    else if (diag.getSeverity() == DiagnosticSeverity::Note)
      severity = "note";
    else if (diag.getSeverity() == DiagnosticSeverity::Remark)
      severity = "remark";
    // Messages quote the spec (names, keys, the bytes a parse stopped at):
    // escaped, as every message that quotes input is.
    os << ::muon::escapeBytes(source) << ": "
       << ::muon::escapeBytes(name.getName().getValue().str()) << ": "
       << severity << ": " << ::muon::escapeBytes(diag.str()) << "\n";
    for (Diagnostic &note : diag.getNotes())
      os << ::muon::escapeBytes(source)
         << ": note: " << ::muon::escapeBytes(note.str()) << "\n";
    return success();
  });
}
