//===- SpecImport.cpp - muon-spec/1 JSON to the muon dialect --------------===//
#include "muon/Target/Spec/SpecImport.h"
#include "muon/Dialect/Muon/IR/MuonOps.h"
#include "muon/Dialect/Muon/IR/ShardAdapter.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <optional>

using namespace mlir;
using namespace mlir::muon;
namespace json = llvm::json;

namespace {

/// One spec being imported. Errors are emitted at NameLoc(json path); the
/// first one stops the import.
class SpecImporter {
public:
  SpecImporter(MLIRContext *ctx) : ctx(ctx), builder(ctx) {}

  OwningOpRef<ModuleOp> run(StringRef text);

private:
  Location at(const std::string &path) {
    return NameLoc::get(StringAttr::get(ctx, path.empty() ? "<root>" : path));
  }
  /// Reports `message` at `path`; always returns failure.
  LogicalResult fail(const std::string &path, const Twine &message) {
    emitError(at(path)) << message;
    return failure();
  }
  static std::string key(const std::string &path, StringRef k) {
    return path.empty() ? k.str() : path + "." + k.str();
  }
  static std::string index(const std::string &path, size_t i) {
    return path + "[" + std::to_string(i) + "]";
  }

  // Typed accessors: fail with the path when the value has the wrong type.
  const json::Object *getObject(const json::Value &v, const std::string &path);
  const json::Array *getArray(const json::Value &v, const std::string &path);
  std::optional<int64_t> getInt(const json::Value &v, const std::string &path,
                                int64_t min);
  std::optional<double> getNumber(const json::Value &v,
                                  const std::string &path);
  std::optional<StringRef> getString(const json::Value &v,
                                     const std::string &path);
  std::optional<bool> getBool(const json::Value &v, const std::string &path);
  LogicalResult checkKeys(const json::Object &obj, const std::string &path,
                          ArrayRef<StringRef> allowed);

  LogicalResult importMesh(const json::Value &v);
  LogicalResult importGroups(const json::Object &root);
  LogicalResult importOptimizer(const json::Value &v);
  LogicalResult importAdamW(const json::Value &v);
  LogicalResult importDistributed(const json::Value &v);
  LogicalResult importParams(const json::Value &v, const json::Object &root);
  LogicalResult importParamLayout(const json::Object &p,
                                  const std::string &path, int64_t rank,
                                  OperationState &state);
  /// Resolves a mesh axis given by name or index.
  std::optional<int64_t> resolveAxis(StringRef text, const std::string &path);
  std::optional<int64_t> resolveAxisValue(const json::Value &v,
                                          const std::string &path);
  LogicalResult importAssignments(const json::Value &v,
                                  const std::string &path);

  MLIRContext *ctx;
  OpBuilder builder;
  ModelOp model;
  bool processGroups = false;
  std::vector<int64_t> meshShape;
  std::vector<std::string> axisNames;
  std::vector<std::string> paramNames;
  std::vector<int64_t> paramRanks;
  llvm::StringMap<size_t> paramIndex;
};

const json::Object *SpecImporter::getObject(const json::Value &v,
                                            const std::string &path) {
  if (const json::Object *o = v.getAsObject())
    return o;
  (void)fail(path, "expected an object");
  return nullptr;
}

const json::Array *SpecImporter::getArray(const json::Value &v,
                                          const std::string &path) {
  if (const json::Array *a = v.getAsArray())
    return a;
  (void)fail(path, "expected an array");
  return nullptr;
}

std::optional<int64_t> SpecImporter::getInt(const json::Value &v,
                                            const std::string &path,
                                            int64_t min) {
  std::optional<int64_t> i = v.getAsInteger();
  if (!i) {
    (void)fail(path, "expected an integer");
    return std::nullopt;
  }
  if (*i < min) {
    (void)fail(path, "expected an integer >= " + std::to_string(min) +
                         ", got " + std::to_string(*i));
    return std::nullopt;
  }
  return i;
}

std::optional<double> SpecImporter::getNumber(const json::Value &v,
                                              const std::string &path) {
  if (std::optional<double> d = v.getAsNumber(); d && std::isfinite(*d))
    return d;
  (void)fail(path, "expected a finite number");
  return std::nullopt;
}

std::optional<StringRef> SpecImporter::getString(const json::Value &v,
                                                 const std::string &path) {
  if (std::optional<StringRef> s = v.getAsString())
    return s;
  (void)fail(path, "expected a string");
  return std::nullopt;
}

std::optional<bool> SpecImporter::getBool(const json::Value &v,
                                          const std::string &path) {
  if (std::optional<bool> b = v.getAsBoolean())
    return b;
  (void)fail(path, "expected true or false");
  return std::nullopt;
}

LogicalResult SpecImporter::checkKeys(const json::Object &obj,
                                      const std::string &path,
                                      ArrayRef<StringRef> allowed) {
  // Report unknown keys in a stable (sorted) order.
  std::vector<std::string> keys;
  for (const auto &kv : obj)
    keys.push_back(kv.first.str());
  llvm::sort(keys);
  for (const std::string &k : keys)
    if (!llvm::is_contained(allowed, k))
      return fail(key(path, k), "unknown key '" + k + "'; expected one of " +
                                    llvm::join(allowed, ", "));
  return success();
}

std::optional<int64_t> SpecImporter::resolveAxis(StringRef text,
                                                 const std::string &path) {
  for (size_t a = 0; a < axisNames.size(); ++a)
    if (axisNames[a] == text)
      return a;
  int64_t axis;
  if (!text.getAsInteger(10, axis) && axis >= 0 &&
      axis < static_cast<int64_t>(meshShape.size()))
    return axis;
  std::string names = "axes";
  for (const std::string &n : axisNames)
    names += " '" + n + "'";
  (void)fail(path, "unknown mesh axis '" + text.str() + "'; the mesh has " +
                       names + " (or indices 0.." +
                       std::to_string(meshShape.size() - 1) + ")");
  return std::nullopt;
}

std::optional<int64_t> SpecImporter::resolveAxisValue(const json::Value &v,
                                                      const std::string &path) {
  if (std::optional<StringRef> s = v.getAsString())
    return resolveAxis(*s, path);
  if (std::optional<int64_t> i = v.getAsInteger())
    return resolveAxis(StringRef(std::to_string(*i)), path);
  (void)fail(path, "expected a mesh axis name or index");
  return std::nullopt;
}

LogicalResult SpecImporter::importMesh(const json::Value &v) {
  const json::Object *mesh = getObject(v, "mesh");
  if (!mesh || failed(checkKeys(*mesh, "mesh", {"shape", "names"})))
    return failure();
  const json::Value *shape = mesh->get("shape");
  if (!shape)
    return fail("mesh", "missing key 'shape'");
  const json::Array *dims = getArray(*shape, "mesh.shape");
  if (!dims)
    return failure();
  if (dims->empty())
    return fail("mesh.shape", "a mesh needs at least one axis; a single "
                              "device is [1]");
  for (size_t i = 0; i < dims->size(); ++i) {
    std::optional<int64_t> s = getInt((*dims)[i], index("mesh.shape", i), 1);
    if (!s)
      return failure();
    meshShape.push_back(*s);
  }
  axisNames.assign(meshShape.size(), "");
  if (const json::Value *names = mesh->get("names")) {
    const json::Array *list = getArray(*names, "mesh.names");
    if (!list)
      return failure();
    if (list->size() != meshShape.size())
      return fail("mesh.names", "has " + std::to_string(list->size()) +
                                    " names but mesh.shape has " +
                                    std::to_string(meshShape.size()) + " axes");
    llvm::StringSet<> seen;
    for (size_t i = 0; i < list->size(); ++i) {
      std::optional<StringRef> n =
          getString((*list)[i], index("mesh.names", i));
      if (!n)
        return failure();
      if (n->empty())
        return fail(index("mesh.names", i), "axis names must not be empty");
      if (!seen.insert(*n).second)
        return fail(index("mesh.names", i),
                    "axis name '" + n->str() + "' is used twice");
      axisNames[i] = n->str();
    }
  }
  Operation *grid =
      shard_adapter::createGrid(builder, at("mesh"), "mesh", meshShape);
  if (mesh->get("names")) {
    SmallVector<Attribute> names;
    for (const std::string &n : axisNames)
      names.push_back(builder.getStringAttr(n));
    grid->setAttr(MuonDialect::kAxisNamesAttr, builder.getArrayAttr(names));
  }
  return success();
}

LogicalResult SpecImporter::importGroups(const json::Object &root) {
  const json::Value *ws = root.get("world_size");
  if (!ws)
    return fail("", "process groups need 'world_size'");
  std::optional<int64_t> world = getInt(*ws, "world_size", 1);
  if (!world)
    return failure();
  model.setWorldSizeAttr(builder.getI64IntegerAttr(*world));
  if (const json::Value *d = root.get("fsdp_dim")) {
    std::optional<int64_t> dim = getInt(*d, "fsdp_dim", 0);
    if (!dim)
      return failure();
    model.setFsdpDimAttr(builder.getI64IntegerAttr(*dim));
  }
  if (const json::Value *n = root.get("num_experts")) {
    std::optional<int64_t> num = getInt(*n, "num_experts", 1);
    if (!num)
      return failure();
    model.setNumExpertsAttr(builder.getI64IntegerAttr(*num));
  }
  const json::Value *g = root.get("groups");
  if (!g)
    return fail("", "process-group style needs 'groups' next to 'world_size'");
  const json::Object *groups = getObject(*g, "groups");
  if (!groups || failed(checkKeys(*groups, "groups",
                                  {"fsdp", "shard", "tp", "ddp", "replicate",
                                   "cp", "ep", "pp"})))
    return failure();
  if (groups->empty())
    return fail("groups", "expected at least one process-group kind");
  // Kinds in a fixed order, so the output does not depend on key order.
  for (StringRef kind :
       {"pp", "ep", "ddp", "replicate", "cp", "fsdp", "shard", "tp"}) {
    const json::Value *v = groups->get(kind);
    if (!v)
      continue;
    std::string path = key("groups", kind);
    const json::Array *list = getArray(*v, path);
    if (!list)
      return failure();
    SmallVector<Attribute> lists;
    for (size_t i = 0; i < list->size(); ++i) {
      const json::Array *group = getArray((*list)[i], index(path, i));
      if (!group)
        return failure();
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
    GroupOp::create(builder, at(path), builder.getStringAttr(kind),
                    builder.getArrayAttr(lists));
  }
  return success();
}

LogicalResult SpecImporter::importOptimizer(const json::Value &v) {
  const json::Object *o = getObject(v, "optimizer");
  if (!o ||
      failed(checkKeys(*o, "optimizer",
                       {"lr", "momentum", "nesterov", "weight_decay",
                        "ns_steps", "ns_coefficients", "eps", "adjust_lr"})))
    return failure();
  OperationState state(at("optimizer"), OptimizerOp::getOperationName());
  for (StringRef k : {"lr", "momentum", "weight_decay", "eps"})
    if (const json::Value *x = o->get(k)) {
      std::optional<double> d = getNumber(*x, key("optimizer", k));
      if (!d)
        return failure();
      state.addAttribute(k, builder.getF64FloatAttr(*d));
    }
  if (const json::Value *x = o->get("nesterov")) {
    std::optional<bool> b = getBool(*x, "optimizer.nesterov");
    if (!b)
      return failure();
    state.addAttribute("nesterov", builder.getBoolAttr(*b));
  }
  if (const json::Value *x = o->get("ns_steps")) {
    std::optional<int64_t> n =
        getInt(*x, "optimizer.ns_steps", std::numeric_limits<int64_t>::min());
    if (!n)
      return failure();
    state.addAttribute("ns_steps", builder.getI64IntegerAttr(*n));
  }
  if (const json::Value *x = o->get("ns_coefficients")) {
    const json::Array *rows = getArray(*x, "optimizer.ns_coefficients");
    if (!rows)
      return failure();
    if (rows->empty())
      return fail("optimizer.ns_coefficients",
                  "expected at least one [a, b, c] triple");
    SmallVector<Attribute> table;
    for (size_t i = 0; i < rows->size(); ++i) {
      std::string path = index("optimizer.ns_coefficients", i);
      const json::Array *row = getArray((*rows)[i], path);
      if (!row)
        return failure();
      if (row->size() != 3)
        return fail(path, "expected an [a, b, c] triple, got " +
                              std::to_string(row->size()) + " numbers");
      SmallVector<double> abc;
      for (size_t j = 0; j < 3; ++j) {
        std::optional<double> d = getNumber((*row)[j], index(path, j));
        if (!d)
          return failure();
        abc.push_back(*d);
      }
      table.push_back(builder.getDenseF64ArrayAttr(abc));
    }
    state.addAttribute("ns_coefficients", builder.getArrayAttr(table));
  }
  if (const json::Value *x = o->get("adjust_lr")) {
    std::optional<StringRef> s = getString(*x, "optimizer.adjust_lr");
    if (!s)
      return failure();
    if (*s != "original" && *s != "match_rms_adamw")
      return fail("optimizer.adjust_lr",
                  "unknown adjust_lr '" + s->str() +
                      "'; expected 'original' or 'match_rms_adamw'");
    state.addAttribute("adjust_lr", builder.getStringAttr(*s));
  }
  builder.create(state);
  return success();
}

LogicalResult SpecImporter::importAdamW(const json::Value &v) {
  const json::Object *o = getObject(v, "adamw");
  if (!o ||
      failed(checkKeys(*o, "adamw", {"lr", "betas", "eps", "weight_decay"})))
    return failure();
  OperationState state(at("adamw"), AdamWOp::getOperationName());
  for (StringRef k : {"lr", "eps", "weight_decay"})
    if (const json::Value *x = o->get(k)) {
      std::optional<double> d = getNumber(*x, key("adamw", k));
      if (!d)
        return failure();
      state.addAttribute(k, builder.getF64FloatAttr(*d));
    }
  if (const json::Value *x = o->get("betas")) {
    const json::Array *betas = getArray(*x, "adamw.betas");
    if (!betas)
      return failure();
    if (betas->size() != 2)
      return fail("adamw.betas", "expected [beta1, beta2]");
    SmallVector<double> b;
    for (size_t i = 0; i < 2; ++i) {
      std::optional<double> d = getNumber((*betas)[i], index("adamw.betas", i));
      if (!d)
        return failure();
      b.push_back(*d);
    }
    state.addAttribute("betas", builder.getDenseF64ArrayAttr(b));
  }
  builder.create(state);
  return success();
}

LogicalResult SpecImporter::importDistributed(const json::Value &v) {
  if (v.kind() == json::Value::Null)
    return success(); // no distributed config
  const json::Object *o = getObject(v, "distributed");
  if (!o || failed(checkKeys(*o, "distributed",
                             {"prefetch_count", "async", "assignments"})))
    return failure();
  OperationState state(at("distributed"), DistributedOp::getOperationName());
  if (const json::Value *x = o->get("prefetch_count")) {
    std::optional<int64_t> n = getInt(*x, "distributed.prefetch_count", 0);
    if (!n)
      return failure();
    state.addAttribute("prefetch_count", builder.getI64IntegerAttr(*n));
  }
  if (const json::Value *x = o->get("async")) {
    std::optional<bool> b = getBool(*x, "distributed.async");
    if (!b)
      return failure();
    state.addAttribute("async", builder.getBoolAttr(*b));
  }
  builder.create(state);
  return success();
}

LogicalResult SpecImporter::importAssignments(const json::Value &v,
                                              const std::string &path) {
  const json::Object *o = getObject(v, path);
  if (!o)
    return failure();
  // Ranks in numeric order, for output that does not depend on key order.
  std::vector<std::pair<int64_t, std::string>> ranks;
  for (const auto &kv : *o) {
    int64_t r;
    if (kv.first.str().empty() || StringRef(kv.first).getAsInteger(10, r) ||
        r < 0)
      return fail(key(path, kv.first.str()),
                  "expected a rank (a non-negative integer) as key");
    ranks.push_back({r, kv.first.str()});
  }
  llvm::sort(ranks);
  for (auto &[rank, k] : ranks) {
    std::string rpath = key(path, k);
    const json::Array *names = getArray(*o->get(k), rpath);
    if (!names)
      return failure();
    SmallVector<Attribute> refs;
    SmallVector<int64_t> slices;
    for (size_t i = 0; i < names->size(); ++i) {
      std::optional<StringRef> n = getString((*names)[i], index(rpath, i));
      if (!n)
        return failure();
      // "name" or "name[i]" for one matrix of a batched parameter.
      StringRef base = *n;
      int64_t slice = -1;
      if (n->ends_with("]") && paramIndex.find(*n) == paramIndex.end()) {
        size_t open = n->rfind('[');
        if (open != StringRef::npos &&
            !n->slice(open + 1, n->size() - 1).getAsInteger(10, slice)) {
          base = n->take_front(open);
        } else {
          slice = -1;
        }
      }
      if (paramIndex.find(base) == paramIndex.end())
        return fail(index(rpath, i), "unknown parameter '" + n->str() + "'");
      refs.push_back(FlatSymbolRefAttr::get(ctx, base));
      slices.push_back(slice);
    }
    AssignOp::create(builder, at(rpath), rank, builder.getArrayAttr(refs),
                     builder.getDenseI64ArrayAttr(slices));
  }
  return success();
}

/// DTensor placements (`R`, `P`, `S(d)`), `split` and `only` of one param.
LogicalResult SpecImporter::importParamLayout(const json::Object &p,
                                              const std::string &path,
                                              int64_t rank,
                                              OperationState &state) {
  size_t meshRank = meshShape.size();
  // Per mesh axis: 'R', 'P' or 'S' with its dim (-1: "S" under split).
  std::vector<char> kind(meshRank, 'R');
  std::vector<int64_t> shardDim(meshRank, -1);
  const json::Value *placements = p.get("placements");
  const json::Value *split = p.get("split");
  if (!placements && !split)
    return fail(path, "missing key 'placements' (one entry per mesh axis) or "
                      "'split'");
  if (placements) {
    std::string ppath = key(path, "placements");
    const json::Array *list = getArray(*placements, ppath);
    if (!list)
      return failure();
    if (list->size() != meshRank)
      return fail(ppath, "has " + std::to_string(list->size()) +
                             " entries but the mesh has " +
                             std::to_string(meshRank) +
                             " axes; expected one placement per mesh axis");
    for (size_t a = 0; a < meshRank; ++a) {
      std::string epath = index(ppath, a);
      std::optional<StringRef> s = getString((*list)[a], epath);
      if (!s)
        return failure();
      int64_t d;
      if (*s == "R" || *s == "P") {
        kind[a] = (*s)[0];
      } else if (*s == "S" && split) {
        kind[a] = 'S';
      } else if (s->starts_with("S(") && s->ends_with(")") &&
                 !s->drop_front(2).drop_back(1).getAsInteger(10, d)) {
        if (d < 0 || d >= rank)
          return fail(epath, s->str() + " is out of range for a tensor of " +
                                 std::to_string(rank) + " dim(s)");
        kind[a] = 'S';
        shardDim[a] = d;
      } else {
        return fail(epath, "expected \"R\", \"P\" or \"S(<dim>)\", got \"" +
                               s->str() + "\"");
      }
    }
  }
  std::vector<SmallVector<int64_t>> splitAxes(rank);
  if (split) {
    std::string spath = key(path, "split");
    const json::Object *o = getObject(*split, spath);
    if (!o)
      return failure();
    std::vector<int64_t> dimOfAxis(meshRank, -1);
    for (const auto &kv : *o) {
      std::string dpath = key(spath, kv.first.str());
      int64_t d;
      if (StringRef(kv.first).getAsInteger(10, d) || d < 0 || d >= rank)
        return fail(dpath, "expected a tensor dim in 0.." +
                               std::to_string(rank - 1) + " as key, got '" +
                               kv.first.str() + "'");
      const json::Array *axes = getArray(kv.second, dpath);
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
        dimOfAxis[*axis] = d;
        splitAxes[d].push_back(*axis);
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
  if (const json::Value *only = p.get("only")) {
    std::string opath = key(path, "only");
    const json::Object *o = getObject(*only, opath);
    if (!o)
      return failure();
    std::vector<std::pair<int64_t, int64_t>> pairs;
    for (const auto &kv : *o) {
      std::string apath = key(opath, kv.first.str());
      std::optional<int64_t> axis = resolveAxis(StringRef(kv.first), apath);
      if (!axis)
        return failure();
      std::optional<int64_t> coord = getInt(kv.second, apath, 0);
      if (!coord)
        return failure();
      if (*coord >= meshShape[*axis])
        return fail(apath, "coordinate " + std::to_string(*coord) +
                               " is out of range for mesh axis '" +
                               kv.first.str() + "' of size " +
                               std::to_string(meshShape[*axis]));
      if (kind[*axis] != 'R')
        return fail(apath, "the parameter is restricted to this axis, so its "
                           "placement on it must be \"R\"");
      pairs.push_back({*axis, *coord});
    }
    llvm::sort(pairs);
    for (auto [a, c] : pairs)
      onlyPairs.append({a, c});
  }
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

LogicalResult SpecImporter::importParams(const json::Value &v,
                                         const json::Object &root) {
  const json::Array *params = getArray(v, "params");
  if (!params)
    return failure();
  // Names first: assignments and tp_dim_per_param refer to them.
  for (size_t i = 0; i < params->size(); ++i) {
    std::string path = index("params", i);
    const json::Object *p = getObject((*params)[i], path);
    if (!p)
      return failure();
    const json::Value *n = p->get("name");
    if (!n)
      return fail(path, "missing key 'name'");
    std::optional<StringRef> name = getString(*n, key(path, "name"));
    if (!name)
      return failure();
    if (name->empty())
      return fail(key(path, "name"), "parameter names must not be empty");
    auto [it, inserted] = paramIndex.try_emplace(*name, i);
    if (!inserted)
      return fail(key(path, "name"), "duplicate parameter name '" +
                                         name->str() + "' (first at params[" +
                                         std::to_string(it->second) + "])");
    paramNames.push_back(name->str());
  }

  // tp_dim_per_param: {"<param index>": dim} or one int for every matrix.
  std::vector<std::optional<int64_t>> tpDim(params->size());
  std::optional<int64_t> tpAll;
  if (const json::Value *t = root.get("tp_dim_per_param")) {
    if (t->getAsInteger()) {
      tpAll = getInt(*t, "tp_dim_per_param", 0);
    } else {
      const json::Object *o = getObject(*t, "tp_dim_per_param");
      if (!o)
        return failure();
      for (const auto &kv : *o) {
        std::string tpath = key("tp_dim_per_param", kv.first.str());
        int64_t i;
        if (StringRef(kv.first).getAsInteger(10, i) || i < 0 ||
            i >= static_cast<int64_t>(params->size()))
          return fail(tpath, "expected a parameter index in 0.." +
                                 std::to_string(params->size() - 1) +
                                 " as key, got '" + kv.first.str() + "'");
        tpDim[i] = getInt(kv.second, tpath, 0);
        if (!tpDim[i])
          return failure();
      }
    }
  }

  for (size_t i = 0; i < params->size(); ++i) {
    std::string path = index("params", i);
    const json::Object &p = *(*params)[i].getAsObject();
    static const StringRef dtensorKeys[] = {
        "name", "shape", "dtype", "optimizer", "placements", "split", "only"};
    static const StringRef groupKeys[] = {"name",      "shape", "dtype",
                                          "optimizer", "stage", "expert"};
    if (failed(checkKeys(p, path,
                         processGroups ? ArrayRef<StringRef>(groupKeys)
                                       : ArrayRef<StringRef>(dtensorKeys))))
      return failure();
    const json::Value *s = p.get("shape");
    if (!s)
      return fail(path, "missing key 'shape'");
    const json::Array *dims = getArray(*s, key(path, "shape"));
    if (!dims)
      return failure();
    SmallVector<int64_t> shape;
    for (size_t d = 0; d < dims->size(); ++d) {
      std::optional<int64_t> size =
          getInt((*dims)[d], index(key(path, "shape"), d), 1);
      if (!size)
        return failure();
      shape.push_back(*size);
    }
    int64_t rank = shape.size();
    Type elem = builder.getF32Type();
    if (const json::Value *d = p.get("dtype")) {
      std::optional<StringRef> dtype = getString(*d, key(path, "dtype"));
      if (!dtype)
        return failure();
      if (*dtype == "bf16")
        elem = builder.getBF16Type();
      else if (*dtype == "f16")
        elem = builder.getF16Type();
      else if (*dtype != "f32")
        return fail(key(path, "dtype"), "unknown dtype '" + dtype->str() +
                                            "'; expected f32, bf16 or f16");
    }
    OperationState state(at(path), ParamOp::getOperationName());
    state.addAttribute(SymbolTable::getSymbolAttrName(),
                       builder.getStringAttr(paramNames[i]));
    state.addAttribute("tensor_type",
                       TypeAttr::get(RankedTensorType::get(shape, elem)));
    if (const json::Value *o = p.get("optimizer")) {
      std::string opath = key(path, "optimizer");
      std::optional<StringRef> group = getString(*o, opath);
      if (!group)
        return failure();
      if (*group != "muon" && *group != "adamw")
        return fail(opath, "unknown optimizer '" + group->str() +
                               "'; expected 'muon' or 'adamw'");
      if (*group == "muon" && rank < 2)
        return fail(opath, "Muon orthogonalizes matrices but the parameter "
                           "has " +
                               std::to_string(rank) + " dim(s); use 'adamw'");
      state.addAttribute("group", builder.getStringAttr(*group));
    }
    if (processGroups) {
      std::optional<int64_t> tp = tpDim[i];
      if (!tp && tpAll && rank >= 2)
        tp = tpAll;
      if (tp) {
        if (*tp >= rank)
          return fail(tpDim[i] ? key("tp_dim_per_param", std::to_string(i))
                               : std::string("tp_dim_per_param"),
                      "TP dim " + std::to_string(*tp) +
                          " is out of range for parameter '" + paramNames[i] +
                          "' of " + std::to_string(rank) + " dim(s)");
        state.addAttribute("tp_dim", builder.getI64IntegerAttr(*tp));
      }
      for (StringRef k : {"stage", "expert"})
        if (const json::Value *x = p.get(k)) {
          std::optional<int64_t> n = getInt(*x, key(path, k), 0);
          if (!n)
            return failure();
          state.addAttribute(k, builder.getI64IntegerAttr(*n));
        }
    } else if (failed(importParamLayout(p, path, rank, state))) {
      return failure();
    }
    builder.create(state);
  }
  return success();
}

OwningOpRef<ModuleOp> SpecImporter::run(StringRef text) {
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed) {
    (void)fail("", "invalid JSON: " + llvm::toString(parsed.takeError()));
    return nullptr;
  }
  const json::Object *root = getObject(*parsed, "");
  if (!root)
    return nullptr;
  if (failed(checkKeys(*root, "",
                       {"format", "mesh", "world_size", "groups",
                        "tp_dim_per_param", "fsdp_dim", "num_experts",
                        "optimizer", "adamw", "distributed", "params"})))
    return nullptr;
  const json::Value *format = root->get("format");
  if (!format) {
    (void)fail("", "missing key 'format' (expected \"muon-spec/1\")");
    return nullptr;
  }
  std::optional<StringRef> f = getString(*format, "format");
  if (!f)
    return nullptr;
  if (*f != "muon-spec/1") {
    (void)fail("format", "unsupported format '" + f->str() +
                             "'; expected \"muon-spec/1\"");
    return nullptr;
  }
  bool hasMesh = root->get("mesh");
  processGroups = root->get("groups") || root->get("world_size");
  if (hasMesh && processGroups) {
    (void)fail(root->get("groups") ? "groups" : "world_size",
               "a spec uses either 'mesh' (DTensor style) or 'world_size' "
               "and 'groups' (process-group style), not both");
    return nullptr;
  }
  if (!hasMesh && !processGroups) {
    (void)fail("", "missing key 'mesh' (DTensor style) or 'world_size' and "
                   "'groups' (process-group style)");
    return nullptr;
  }
  if (!processGroups)
    for (StringRef k : {"tp_dim_per_param", "fsdp_dim", "num_experts"})
      if (root->get(k)) {
        (void)fail(k.str(), "'" + k.str() +
                                "' belongs to the process-group style; with "
                                "'mesh', give placements per parameter");
        return nullptr;
      }
  const json::Value *params = root->get("params");
  if (!params) {
    (void)fail("", "missing key 'params'");
    return nullptr;
  }

  OwningOpRef<ModuleOp> module = ModuleOp::create(at(""));
  builder.setInsertionPointToEnd(module->getBody());
  model = ModelOp::create(builder, at(""), "model");
  builder.setInsertionPointToEnd(&model.getBodyBlock());

  if (hasMesh ? failed(importMesh(*root->get("mesh")))
              : failed(importGroups(*root)))
    return nullptr;
  if (const json::Value *o = root->get("optimizer"))
    if (failed(importOptimizer(*o)))
      return nullptr;
  if (const json::Value *a = root->get("adamw"))
    if (failed(importAdamW(*a)))
      return nullptr;
  if (const json::Value *d = root->get("distributed")) {
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
  if (const json::Value *d = root->get("distributed"))
    if (const json::Object *o = d->getAsObject())
      if (const json::Value *a = o->get("assignments"))
        if (failed(importAssignments(*a, "distributed.assignments")))
          return nullptr;
  if (failed(verify(*module)))
    return nullptr;
  return module;
}

} // namespace

OwningOpRef<ModuleOp> mlir::muon::importSpec(StringRef json,
                                             MLIRContext *context,
                                             StringRef sourceName) {
  context->loadDialect<MuonDialect, shard::ShardDialect>();
  // The JSON path says where; a dump of the generic op would only be noise.
  context->printOpOnDiagnostic(false);
  SpecDiagnosticHandler handler(context, sourceName);
  return SpecImporter(context).run(json);
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
    os << source << ": " << name.getName().getValue() << ": " << severity
       << ": " << diag.str() << "\n";
    for (Diagnostic &note : diag.getNotes())
      os << source << ": note: " << note.str() << "\n";
    return success();
  });
}
