//===- Validate.cpp - A plan checked against itself -----------------------===//
#include "muon/Plan/Validate.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Plan/GroupSettings.h"
#include "muon/Plan/ScheduleVerifier.h"
#include "muon/Support/Format.h"
#include "muon/Support/Limits.h"
#include "muon/Support/ModelLimits.h"
#include "muon/Support/NsCoefficients.h"
#include "muon/Support/Replicas.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

namespace muon {
namespace {
using json::index;
using json::key;
using limits::describe;

std::string num(int64_t v) { return std::to_string(v); }

/// (rows, cols, summand) of a piece: what identifies the data it holds.
using PieceKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;
PieceKey keyOf(const Range &rows, const Range &cols, int64_t summand) {
  return {rows.begin, rows.end, cols.begin, cols.end, summand};
}

std::string showBox(const Range &rows, const Range &cols) {
  return "rows [" + num(rows.begin) + ", " + num(rows.end) + ") cols [" +
         num(cols.begin) + ", " + num(cols.end) + ")";
}

class Checker {
public:
  explicit Checker(const Plan &plan) : plan(plan) {}

  Status run() {
    if (settings() && mesh() && params() && qkClip() &&
        (plan.isSlice() ? sliceMatrices() : matrices()) && rounds() &&
        batches() && exchanges() && transfers() && reductions())
      schedule();
    return err;
  }
  Status header() {
    if (settings() && mesh() && params())
      qkClip();
    return err;
  }
  Status newtonSchulzSettings() {
    newtonSchulz();
    return err;
  }

private:
  bool fail(const std::string &path, const std::string &message) {
    if (err.ok())
      err = invalidArgument(message, path);
    return false;
  }
  /// A list of `count` `what` must stay within `limit`.
  bool withinLimit(const std::string &path, size_t count, const char *what,
                   int64_t limit) {
    if (static_cast<int64_t>(count) <= limit)
      return true;
    return fail(path, "has " + num(count) + " " + what +
                          ", above the limit of " + describe(limit));
  }
  bool nonNegative(double v, const std::string &path) {
    if (!std::isfinite(v) || v < 0)
      return fail(path, "expected a finite number >= 0");
    return true;
  }

  bool settings();
  bool newtonSchulz();
  bool mesh();
  bool params();
  bool qkClip();
  bool matrices();
  bool sliceMatrices();
  bool rounds();
  bool batches();
  bool exchanges();
  bool transfers();
  bool reductions();
  void schedule();

  /// The piece `rank` holds of matrix `k`, or nullptr.
  const MatrixPiece *pieceOf(const std::vector<MatrixPiece> &pieces,
                             int64_t rank) const {
    auto it = std::lower_bound(
        pieces.begin(), pieces.end(), rank,
        [](const MatrixPiece &p, int64_t r) { return p.rank < r; });
    return it != pieces.end() && it->rank == rank ? &*it : nullptr;
  }
  /// The NS steps of parameter `i`'s group (indices checked by settings()
  /// and params()).
  int64_t nsStepsOf(int64_t i) const {
    return plan.ns.configs[nsConfigOf(plan, i)].nsSteps;
  }
  int64_t sliceOf(const PlanMatrix &m) const {
    return std::max<int64_t>(m.slice, 0);
  }
  std::string label(int64_t k) const {
    const PlanMatrix &m = plan.matrices[k];
    const std::string &name = plan.params[m.paramIndex].name;
    return "'" + (m.slice < 0 ? name : name + "[" + num(m.slice) + "]") + "'";
  }

  /// The piece `rank` holds of local matrix `k`; false when none.
  bool pieceAt(int64_t k, int64_t rank, Range &rows, Range &cols,
               int64_t &summand) const {
    const PlanMatrix &m = plan.matrices[k];
    const ParamLayout &layout = plan.params[m.paramIndex].layout;
    if (!layout.holdsMatrix(plan.mesh, coords[rank], sliceOf(m)))
      return false;
    std::vector<Range> box = layout.localBox(plan.mesh, coords[rank]);
    // In the matrix's coordinates: a head's block of the local box.
    Range headRows = layout.headRowsOf(sliceOf(m)),
          headCols = layout.headColsOf(sliceOf(m));
    rows = box[box.size() - 2];
    cols = box.back();
    rows = {std::max(rows.begin, headRows.begin) - headRows.begin,
            std::min(rows.end, headRows.end) - headRows.begin};
    cols = {std::max(cols.begin, headCols.begin) - headCols.begin,
            std::min(cols.end, headCols.end) - headCols.begin};
    summand = 0;
    for (int64_t axis : layout.partialAxes)
      summand = summand * plan.mesh.shape[axis] + coords[rank][axis];
    return true;
  }
  /// A slice's checks of a matrix its rank holds but does not own: its own
  /// gather to the owner (none when the owner holds the same data) and its
  /// new piece back, once.
  bool heldTransfers(int64_t k,
                     const std::vector<std::pair<int64_t, int64_t>> &gathers,
                     const std::vector<std::pair<int64_t, int64_t>> &scatters);
  /// A redundant matrix (once per replica) needs a replicated parameter.
  bool redundantOk(int64_t k, const std::string &path) {
    const PlanMatrix &m = plan.matrices[k];
    const ParamLayout &layout = plan.params[m.paramIndex].layout;
    if (replicaCount(plan.mesh, layout) > 1)
      return true;
    return fail(key(path, "redundant"),
                label(k) + " has a single replica (its parameter is not "
                           "replicated on any mesh axis): it cannot be "
                           "orthogonalized once per replica");
  }

  const Plan &plan;
  Status err;
  std::vector<std::vector<int64_t>> coords; // per rank
  std::vector<int64_t> roundOf;             // per matrix
};

bool Checker::settings() {
  if (plan.worldSize < 1 || plan.worldSize > limits::kMaxWorldSize)
    return fail("world_size", num(plan.worldSize) +
                                  " is outside [1, " +
                                  describe(limits::kMaxWorldSize) + "]");
  if (!wireDtypeBytes(plan.wireDtype))
    return fail("wire_dtype", "unknown wire dtype \"" + plan.wireDtype +
                                  "\"; expected \"f32\" or \"bf16\"");
  if (plan.wireBytes != wireDtypeBytes(plan.wireDtype))
    return fail("wire_dtype", "element size does not match the wire dtype");
  if (plan.prefetchCount < 0 || plan.prefetchCount > limits::kMaxPrefetchCount)
    return fail("prefetch_count",
                num(plan.prefetchCount) + " is outside [0, " +
                    describe(limits::kMaxPrefetchCount) + "]");
  if (!plan.async && plan.prefetchCount != 0)
    return fail("prefetch_count", "the sequential debug order (async false) "
                                  "prefetches nothing; expected 0");
  if (plan.inflightLimit != plan.prefetchCount + 1)
    return fail("inflight_limit",
                "expected prefetch_count + 1 = " + num(plan.prefetchCount + 1));
  if (plan.gatherBudgetBytes < 0)
    return fail("gather_budget_bytes", "expected a number of bytes >= 0");
  if (!newtonSchulz())
    return false;
  if (plan.groups.empty())
    return fail("groups", "expected at least one group");
  if (!withinLimit("groups", plan.groups.size(), "groups", limits::kMaxParams))
    return false;
  std::map<std::string, size_t> names;
  for (size_t i = 0; i < plan.groups.size(); ++i) {
    const PlanGroup &g = plan.groups[i];
    std::string path = index("groups", i);
    if (g.name.empty())
      return fail(key(path, "name"), "group names must not be empty");
    for (unsigned char c : g.name)
      if (c < 0x20)
        return fail(key(path, "name"), "holds a control character");
    if (auto [it, inserted] = names.try_emplace(g.name, i); !inserted)
      return fail(key(path, "name"), "'" + g.name + "' is also the name of " +
                                         index("groups", it->second));
    if (Status bad = checkGroupSettings(g); !bad.ok())
      return fail(bad.location().empty() ? path : key(path, bad.location()),
                  bad.message());
    const int64_t configs = static_cast<int64_t>(plan.ns.configs.size());
    if (g.orthogonalizes() && (g.nsConfig < 0 || g.nsConfig >= configs))
      return fail(key(path, "ns_config"),
                  "Newton-Schulz configuration " + num(g.nsConfig) +
                      " is out of range (" + num(configs) + " configurations)");
    if (!g.orthogonalizes() && g.nsConfig != 0)
      return fail(key(path, "ns_config"), "only Muon groups run Newton-Schulz");
  }
  return true;
}

bool Checker::newtonSchulz() {
  const std::vector<NewtonSchulzConfig> &configs = plan.ns.configs;
  if (configs.empty())
    return fail("newton_schulz", "expected at least one configuration");
  if (!withinLimit("newton_schulz.configs", configs.size(), "configurations",
                   limits::kMaxParams))
    return false;
  for (size_t c = 0; c < configs.size(); ++c) {
    const NewtonSchulzConfig &m = configs[c];
    // Where the file holds it: flat when alone (PlanFile.cpp).
    const std::string path = configs.size() == 1
                                 ? "newton_schulz"
                                 : index("newton_schulz.configs", c);
    // The normalization's floor: X / max(||X||, eps) divides a zero
    // update by zero where eps is 0.
    if (!std::isfinite(m.eps) || m.eps <= 0)
      return fail(key(path, "eps"), "expected a finite number > 0");
    if (m.nsSteps < 1 || m.nsSteps > limits::kMaxNsSteps)
      return fail(key(path, "ns_steps"), num(m.nsSteps) + " is outside [1, " +
                                             num(limits::kMaxNsSteps) + "]");
    if (static_cast<int64_t>(m.coefficients.size()) != m.nsSteps)
      return fail(key(path, "ns_coefficients"),
                  "expected one [a, b, c] per NS step (" + num(m.nsSteps) +
                      ")");
    for (size_t i = 0; i < m.coefficients.size(); ++i)
      for (size_t j = 0; j < 3; ++j)
        if (!std::isfinite(m.coefficients[i][j]))
          return fail(index(index(key(path, "ns_coefficients"), i), j),
                      "expected a finite number");
    if (Status why = checkNsCoefficients(m.coefficients, m.nsSteps,
                                         plan.ns.nsDtype);
        !why.ok() && nsLargestValue(plan.ns.nsDtype))
      return fail(key(path, "ns_coefficients"), why.message());
  }
  const std::string &dtype = plan.ns.nsDtype;
  if (dtype != "auto" && dtype != "f32" && dtype != "bf16" && dtype != "f16")
    return fail("newton_schulz.ns_dtype",
                "unknown value \"" + dtype +
                    "\"; expected \"auto\", \"f32\", \"bf16\" or \"f16\"");
  return true;
}

bool Checker::qkClip() {
  if (!withinLimit("qk_clip", plan.qkClip.size(), "layers", limits::kMaxParams))
    return false;
  std::map<std::string, const PlanParam *> byName;
  for (const PlanParam &p : plan.params)
    byName[p.name] = &p;
  auto shapeOf = [&](const std::string &name) -> const std::vector<int64_t> * {
    auto it = byName.find(name);
    return it == byName.end() ? nullptr : &it->second->layout.shape;
  };
  std::map<std::string, size_t> names;
  for (size_t i = 0; i < plan.qkClip.size(); ++i) {
    const QkClipLayer &l = plan.qkClip[i];
    std::string path = index("qk_clip", i);
    if (l.name.empty())
      return fail(key(path, "name"), "layer names must not be empty");
    if (auto [it, inserted] = names.try_emplace(l.name, i); !inserted)
      return fail(key(path, "name"), "'" + l.name + "' is also the name of " +
                                         index("qk_clip", it->second));
    if (Status bad = checkQkClipLayer(l, shapeOf(l.query), shapeOf(l.key));
        !bad.ok())
      return fail(key(path, bad.location()), bad.message());
  }
  return true;
}

bool Checker::mesh() {
  if (::muon::Status bad = checkMeshLimits(plan.mesh); !bad.ok())
    return fail("mesh", bad.message());
  if (plan.mesh.numDevices() != plan.worldSize)
    return fail("mesh.shape", "has " + num(plan.mesh.numDevices()) +
                                  " devices but world_size is " +
                                  num(plan.worldSize));
  // Every rank's coordinates, once (the device table may permute them).
  coords.assign(plan.worldSize, {});
  for (int64_t linear = 0; linear < plan.worldSize; ++linear) {
    int64_t rank =
        plan.mesh.devices.empty() ? linear : plan.mesh.devices[linear];
    coords[rank] = plan.mesh.coordsOfLinear(linear);
  }
  return true;
}

bool Checker::params() {
  if (!withinLimit("params", plan.params.size(), "parameters",
                   limits::kMaxParams))
    return false;
  int64_t meshRank = plan.mesh.rank();
  std::map<std::string, size_t> names;
  std::vector<ParamLayout> layouts;
  std::vector<bool> orthogonalized;
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const PlanParam &p = plan.params[i];
    std::string path = index("params", i);
    // Its algorithm's role before the group check below: a known one.
    const bool orth = validAlgorithm(p.algorithm) && p.orthogonalized();
    if (p.name.empty())
      return fail(key(path, "name"), "parameter names must not be empty");
    for (unsigned char c : p.name)
      if (c < 0x20)
        return fail(key(path, "name"), "holds a control character");
    if (auto [it, inserted] = names.try_emplace(p.name, i); !inserted)
      return fail(key(path, "name"), "'" + p.name + "' is also the name of " +
                                         index("params", it->second));
    if (p.dtype != "f32" && p.dtype != "bf16" && p.dtype != "f16")
      return fail(key(path, "dtype"), "unknown dtype \"" + p.dtype +
                                          "\"; expected \"f32\", \"bf16\" or "
                                          "\"f16\"");
    const ParamLayout &pl = p.layout;
    if (::muon::Status bad = checkShapeLimits(pl.shape, orth); !bad.ok())
      return fail(key(path, "shape"), "parameter '" + p.name + "' " + bad.message());
    if (pl.splitAxes.size() != pl.shape.size())
      return fail(key(path, "split"), "expected one entry per dim (" +
                                          num(pl.shape.size()) + ")");
    if (::muon::Status bad =
            checkHeads(pl.shape, orth, pl.numHeads, pl.headSplitDim); !bad.ok())
      return fail(key(path, "num_heads"), "parameter '" + p.name + "': " + bad.message());
    // Each mesh axis plays at most one role.
    std::vector<std::string> role(meshRank);
    auto claim = [&](int64_t axis, const std::string &at,
                     const std::string &what) {
      if (axis < 0 || axis >= meshRank)
        return fail(at, "mesh axis " + num(axis) + " is out of range (the "
                                                   "mesh has " +
                            num(meshRank) + " axes)");
      if (!role[axis].empty())
        return fail(at, "mesh axis " + num(axis) + " is used twice (" +
                            role[axis] + " and " + what + ")");
      role[axis] = what;
      return true;
    };
    for (size_t d = 0; d < pl.splitAxes.size(); ++d)
      for (size_t k = 0; k < pl.splitAxes[d].size(); ++k)
        if (!claim(pl.splitAxes[d][k], index(index(key(path, "split"), d), k),
                   "split of dim " + num(d)))
          return false;
    for (size_t k = 0; k < pl.partialAxes.size(); ++k)
      if (!claim(pl.partialAxes[k], index(key(path, "partial"), k),
                 "partial"))
        return false;
    for (size_t k = 0; k < pl.only.size(); ++k) {
      auto [axis, coord] = pl.only[k];
      std::string at = index(key(path, "only"), k);
      if (!claim(axis, at, "only"))
        return false;
      if (coord < 0 || coord >= plan.mesh.shape[axis])
        return fail(at, "coordinate " + num(coord) + " is off mesh axis " +
                            num(axis) + " of size " +
                            num(plan.mesh.shape[axis]));
    }
    if (!plan.distributed && (pl.isSharded() || pl.isPartial()))
      return fail(key(path, pl.isSharded() ? "split" : "partial"),
                  "parameter '" + p.name +
                      "' is sharded or partial but the plan has no "
                      "distributed config");
    if (p.group < 0 || p.group >= static_cast<int64_t>(plan.groups.size()))
      return fail(key(path, "group"), "group " + num(p.group) +
                                          " is out of range (" +
                                          num(plan.groups.size()) + " groups)");
    const PlanGroup &group = plan.groups[p.group];
    if (p.algorithm != group.algorithm)
      return fail(key(path, "group"),
                  "parameter '" + p.name + "' is marked " +
                      (validAlgorithm(p.algorithm) ? algorithmName(p.algorithm)
                                                   : "an unknown algorithm") +
                      " but its group '" + group.name + "' is " +
                      algorithmName(group.algorithm));
    layouts.push_back(pl);
    orthogonalized.push_back(orth);
  }
  ModelLimitError limit;
  if (!checkModelLimits(plan.mesh, layouts, orthogonalized,
                        maxNsSteps(plan.ns), limit))
    return fail(limit.param < 0 ? "params" : index("params", limit.param),
                limit.message);
  return true;
}

bool Checker::matrices() {
  size_t k = 0;
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const PlanParam &p = plan.params[i];
    if (!p.orthogonalized())
      continue;
    int64_t rows = p.layout.matrixRows(), cols = p.layout.matrixCols();
    int64_t count = p.layout.numMatrices();
    for (int64_t s = 0; s < count; ++s, ++k) {
      std::string path = index("matrices", k);
      if (k >= plan.matrices.size())
        return fail("matrices", "has " + num(plan.matrices.size()) +
                                    " entries; the Muon parameters have "
                                    "more matrices");
      const PlanMatrix &m = plan.matrices[k];
      int64_t slice = p.layout.slicedMatrices() ? s : -1;
      int64_t flops = nsFlops(rows, cols, nsStepsOf(i));
      if (m.paramIndex != static_cast<int64_t>(i) || m.slice != slice ||
          m.rows != rows || m.cols != cols || m.nsFlops != flops ||
          m.param != p.name)
        return fail(path, "expected matrix " + num(s) + " of parameter " +
                              num(i) + " ('" + p.name + "'): slice " +
                              num(slice) + ", " + num(rows) + " x " +
                              num(cols) + ", " + num(flops) + " NS flops");
      if (!plan.distributed) {
        if (m.owner != -1)
          return fail(key(path, "owner"), "a plan without a distributed "
                                          "config has no owners; expected -1");
        if (m.redundant)
          return fail(key(path, "redundant"),
                      "a plan without a distributed config has no owners "
                      "to place (every holder runs Newton-Schulz already)");
        continue;
      }
      if (m.owner < 0 || m.owner >= plan.worldSize)
        return fail(key(path, "owner"), "expected a rank in [0, " +
                                            num(plan.worldSize - 1) + "]");
      if (!p.layout.holdsMatrix(plan.mesh, coords[m.owner], s))
        return fail(key(path, "owner"), "rank " + num(m.owner) +
                                            " holds no piece of " + label(k));
      if (m.redundant && !redundantOk(k, path))
        return false;
    }
  }
  if (k != plan.matrices.size())
    return fail(index("matrices", k),
                "is one more than the Muon parameters have (" + num(k) + ")");
  return true;
}

bool Checker::sliceMatrices() {
  int64_t me = plan.sliceRank;
  if (me >= plan.worldSize)
    return fail("", "the part of rank " + num(me) + " in a world of " +
                        num(plan.worldSize) + " ranks");
  if (plan.matrixIds.size() != plan.matrices.size())
    return fail("matrices", "expected one whole-plan index per matrix");
  std::vector<int64_t> first = {0};
  for (const PlanParam &p : plan.params)
    first.push_back(first.back() +
                    (p.orthogonalized() ? p.layout.numMatrices() : 0));
  if (plan.totalMatrices != first.back())
    return fail("matrices", "the plan has " + num(plan.totalMatrices) +
                                " matrices but its Muon parameters have " +
                                num(first.back()));
  int64_t prev = -1;
  for (size_t k = 0; k < plan.matrices.size(); ++k) {
    int64_t id = plan.matrixIds[k];
    std::string path = index("matrices", k);
    if (id <= prev || id >= first.back())
      return fail(path, "whole-plan matrix " + num(id) +
                            " is out of order or out of range [" +
                            num(prev + 1) + ", " + num(first.back()) + ")");
    prev = id;
    int64_t i =
        std::upper_bound(first.begin(), first.end(), id) - first.begin() - 1;
    const PlanParam &p = plan.params[i];
    const PlanMatrix &m = plan.matrices[k];
    int64_t s = id - first[i];
    int64_t slice = p.layout.slicedMatrices() ? s : -1;
    int64_t rows = p.layout.matrixRows(), cols = p.layout.matrixCols();
    int64_t flops = nsFlops(rows, cols, nsStepsOf(i));
    if (m.paramIndex != i || m.slice != slice || m.rows != rows ||
        m.cols != cols || m.nsFlops != flops || m.param != p.name)
      return fail(path, "expected matrix " + num(s) + " of parameter " +
                            num(i) + " ('" + p.name + "'): slice " +
                            num(slice) + ", " + num(rows) + " x " + num(cols) +
                            ", " + num(flops) + " NS flops");
    bool holds = p.layout.holdsMatrix(plan.mesh, coords[me], s);
    if (!plan.distributed) {
      if (m.owner != -1)
        return fail(key(path, "owner"), "a plan without a distributed "
                                        "config has no owners; expected -1");
    } else {
      if (m.owner < 0 || m.owner >= plan.worldSize)
        return fail(key(path, "owner"), "expected a rank in [0, " +
                                            num(plan.worldSize - 1) + "]");
      if (!p.layout.holdsMatrix(plan.mesh, coords[m.owner], s))
        return fail(key(path, "owner"), "rank " + num(m.owner) +
                                            " holds no piece of " + label(k));
      if (m.redundant && !redundantOk(k, path))
        return false;
    }
    if (!holds && m.owner != me)
      return fail(path, "rank " + num(me) + " neither holds nor owns " +
                            label(k) + "; its part lists only its matrices");
  }
  // Every matrix the rank holds a piece of is listed: a rank that skipped
  // one would never apply its update.
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const PlanParam &p = plan.params[i];
    if (!p.orthogonalized() || !p.layout.inSubmesh(coords[me]))
      continue;
    std::vector<Range> box = p.layout.localBox(plan.mesh, coords[me]);
    size_t batch = box.size() - 2;
    if (box[batch].size() == 0 || box[batch + 1].size() == 0)
      continue;
    std::vector<int64_t> at(batch);
    bool empty = false;
    for (size_t d = 0; d < batch; ++d) {
      at[d] = box[d].begin;
      empty |= box[d].size() == 0;
    }
    while (!empty) {
      int64_t s = 0;
      for (size_t d = 0; d < batch; ++d)
        s = s * p.layout.shape[d] + at[d];
      for (int64_t h = 0; h < p.layout.numHeads; ++h) {
        int64_t id = s * p.layout.numHeads + h;
        if (!p.layout.holdsMatrix(plan.mesh, coords[me], id))
          continue;
        if (!std::binary_search(plan.matrixIds.begin(), plan.matrixIds.end(),
                                first[i] + id))
          return fail(
              "matrices",
              "rank " + num(me) + " holds a piece of '" + p.name +
                  (p.layout.slicedMatrices() ? "[" + num(id) + "]" : "") +
                  "' but its part does not list it");
      }
      size_t d = batch;
      while (d > 0 && ++at[d - 1] == box[d - 1].end) {
        at[d - 1] = box[d - 1].begin;
        --d;
      }
      empty = d == 0;
    }
  }
  return true;
}

bool Checker::rounds() {
  if (!withinLimit("rounds", plan.rounds.size(), "rounds",
                   limits::kMaxRounds))
    return false;
  roundOf.assign(plan.matrices.size(), -1);
  for (size_t r = 0; r < plan.rounds.size(); ++r)
    for (size_t i = 0; i < plan.rounds[r].size(); ++i) {
      int64_t k = plan.rounds[r][i];
      std::string path = index(index("rounds", r), i);
      if (k < 0 || k >= static_cast<int64_t>(plan.matrices.size()))
        return fail(path, "no matrix " + num(k));
      if (roundOf[k] >= 0)
        return fail(path, "matrix " + label(k) + " is also in round " +
                              num(roundOf[k]));
      roundOf[k] = r;
    }
  for (size_t k = 0; k < roundOf.size(); ++k)
    if (roundOf[k] < 0)
      return fail("rounds", "matrix " + label(k) + " is in no round");
  return true;
}

bool Checker::batches() {
  if (static_cast<int64_t>(plan.nsBatches.size()) != plan.worldSize ||
      static_cast<int64_t>(plan.nsMatrices.size()) != plan.worldSize)
    return fail("ranks", "expected one entry per rank");
  // What each rank must orthogonalize: what it owns, or without a
  // distributed config whatever it holds.
  std::vector<std::vector<int64_t>> expected(plan.worldSize);
  MatrixPieceCache pieceCache(plan.mesh);
  for (size_t k = 0; k < plan.matrices.size(); ++k) {
    const PlanMatrix &m = plan.matrices[k];
    // A slice lists only matrices its rank holds or owns (sliceMatrices).
    if (plan.isSlice() && !plan.distributed) {
      expected[plan.sliceRank].push_back(k);
      continue;
    }
    if (plan.distributed) {
      for (int64_t o : nsRanksOf(plan, k))
        if (!plan.isSlice() || o == plan.sliceRank)
          expected[o].push_back(k);
      continue;
    }
    for (const MatrixPiece &piece :
         pieceCache.pieces(plan.params[m.paramIndex].layout, sliceOf(m)))
      expected[piece.rank].push_back(k);
  }
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    std::string path = key(index("ranks", r), "ns_batches");
    if (plan.isSlice() && r != plan.sliceRank) {
      if (!plan.nsBatches[r].empty() || !plan.nsMatrices[r].empty())
        return fail(path, "a part of rank " + num(plan.sliceRank) +
                              " holds another rank's batches");
      continue;
    }
    std::vector<int64_t> listed;
    for (size_t b = 0; b < plan.nsBatches[r].size(); ++b) {
      const NsBatch &batch = plan.nsBatches[r][b];
      std::string bpath = index(path, b);
      if (batch.round < 0 ||
          batch.round >= static_cast<int64_t>(plan.rounds.size()))
        return fail(key(bpath, "round"), "no round " + num(batch.round));
      if (batch.config < 0 ||
          batch.config >= static_cast<int64_t>(plan.ns.configs.size()))
        return fail(key(bpath, "config"), "no Newton-Schulz configuration " +
                                              num(batch.config) + " (" +
                                              num(plan.ns.configs.size()) +
                                              " configurations)");
      for (size_t i = 0; i < batch.matrices.size(); ++i) {
        int64_t k = batch.matrices[i];
        std::string mpath = index(key(bpath, "matrices"), i);
        if (k < 0 || k >= static_cast<int64_t>(plan.matrices.size()))
          return fail(mpath, "no matrix " + num(k));
        const PlanMatrix &m = plan.matrices[k];
        if (m.rows != batch.rows || m.cols != batch.cols)
          return fail(mpath, "matrix " + label(k) + " is " + num(m.rows) +
                                 " x " + num(m.cols) + ", not " +
                                 num(batch.rows) + " x " + num(batch.cols));
        if (roundOf[k] != batch.round)
          return fail(mpath, "matrix " + label(k) + " is in round " +
                                 num(roundOf[k]) + ", not " +
                                 num(batch.round));
        // A batch runs one iteration: its matrices' groups must share it.
        const PlanGroup &g = plan.groups[plan.params[m.paramIndex].group];
        if (g.nsConfig != batch.config)
          return fail(mpath, "matrix " + label(k) +
                                 " runs Newton-Schulz configuration " +
                                 num(g.nsConfig) + " (group '" + g.name +
                                 "'), not the batch's " + num(batch.config));
        listed.push_back(k);
      }
    }
    std::vector<int64_t> want = expected[r], fromPlan = plan.nsMatrices[r];
    std::sort(listed.begin(), listed.end());
    std::sort(want.begin(), want.end());
    std::sort(fromPlan.begin(), fromPlan.end());
    if (listed != want) {
      auto dup = std::adjacent_find(listed.begin(), listed.end());
      if (dup != listed.end())
        return fail(path, "matrix " + label(*dup) + " is listed twice");
      for (int64_t k : want)
        if (!std::binary_search(listed.begin(), listed.end(), k))
          return fail(path, "matrix " + label(k) + " is missing: rank " +
                                num(r) +
                                (plan.distributed ? " owns it" : " holds it"));
      for (int64_t k : listed)
        if (!std::binary_search(want.begin(), want.end(), k))
          return fail(path, "matrix " + label(k) + " is not rank " + num(r) +
                                "'s to orthogonalize");
    }
    if (fromPlan != listed)
      return fail(index("ranks", r), "the rank's NS matrices do not match "
                                     "its batches");
  }
  return true;
}

bool Checker::exchanges() {
  int64_t count = plan.exchanges.size();
  int64_t rounds = plan.rounds.size();
  if (!plan.distributed) {
    if (count)
      return fail("exchanges", "a plan without a distributed config moves "
                               "nothing; expected no exchanges");
    return true;
  }
  if (count != 2 * rounds && count != 2 * rounds + 1)
    return fail("exchanges", "expected a gather and a scatter per round (" +
                                 num(2 * rounds) + ") and at most one "
                                                   "reduce, found " +
                                 num(count));
  if (!checkedMul(plan.worldSize, count) ||
      plan.worldSize * count > limits::kMaxRankExchanges)
    return fail("exchanges", num(plan.worldSize) + " ranks x " + num(count) +
                                 " exchanges is above the limit of " +
                                 describe(limits::kMaxRankExchanges));
  for (int64_t e = 0; e < count; ++e) {
    const Exchange &ex = plan.exchanges[e];
    std::string path = index("exchanges", e);
    if (e == 2 * rounds) {
      if (ex.phase != Exchange::Phase::Reduce || ex.round != 0 ||
          !ex.transfers.empty() ||
          (ex.reductions.empty() && !plan.isSlice()))
        return fail(path, "the exchange after the rounds' is the AdamW "
                          "reduce: phase \"reduce\", round 0, reductions "
                          "only, at least one");
      continue;
    }
    Exchange::Phase phase =
        e % 2 ? Exchange::Phase::Scatter : Exchange::Phase::Gather;
    if (ex.phase != phase || ex.round != e / 2 || !ex.reductions.empty())
      return fail(path, std::string("expected the ") +
                            phaseName(phase) + " of round " +
                            num(e / 2) + " (transfers only)");
    for (size_t t = 0; t < ex.transfers.size(); ++t) {
      const Transfer &tr = ex.transfers[t];
      std::string tpath = index(key(path, "transfers"), t);
      if (tr.src < 0 || tr.src >= plan.worldSize || tr.dst < 0 ||
          tr.dst >= plan.worldSize || tr.src == tr.dst)
        return fail(tpath, "expected two different ranks in [0, " +
                               num(plan.worldSize - 1) + "]");
      if (plan.isSlice() && tr.src != plan.sliceRank &&
          tr.dst != plan.sliceRank)
        return fail(tpath, "a part of rank " + num(plan.sliceRank) +
                               " holds a transfer between ranks " +
                               num(tr.src) + " and " + num(tr.dst));
      if (tr.matrix < 0 ||
          tr.matrix >= static_cast<int64_t>(plan.matrices.size()))
        return fail(tpath, "no matrix " + num(tr.matrix));
      if (roundOf[tr.matrix] != ex.round)
        return fail(tpath, "matrix " + label(tr.matrix) + " is in round " +
                               num(roundOf[tr.matrix]));
    }
  }
  return true;
}

bool Checker::transfers() {
  if (!plan.distributed)
    return true;
  // Per matrix, its transfers: (exchange, index) for gathers and scatters.
  std::vector<std::vector<std::pair<int64_t, int64_t>>> gathers(
      plan.matrices.size()),
      scatters(plan.matrices.size());
  for (size_t e = 0; e < plan.exchanges.size(); ++e)
    for (size_t t = 0; t < plan.exchanges[e].transfers.size(); ++t) {
      const Exchange &ex = plan.exchanges[e];
      (ex.phase == Exchange::Phase::Gather ? gathers : scatters)
          [ex.transfers[t].matrix]
              .push_back({e, t});
    }
  auto pathOf = [](std::pair<int64_t, int64_t> at) {
    return index(key(index("exchanges", at.first), "transfers"), at.second);
  };
  MatrixPieceCache pieceCache(plan.mesh);
  for (size_t k = 0; k < plan.matrices.size(); ++k) {
    const PlanMatrix &m = plan.matrices[k];
    // A slice holds all the transfers of the matrices its rank owns (it is
    // one end of each), so those get the whole check; the others only this
    // rank's own.
    if (plan.isSlice() && ownerFor(plan, k, plan.sliceRank) != plan.sliceRank) {
      if (!heldTransfers(k, gathers[k], scatters[k]))
        return false;
      continue;
    }
    const std::vector<MatrixPiece> &all =
        pieceCache.pieces(plan.params[m.paramIndex].layout, sliceOf(m));
    // The replicas that run Newton-Schulz on the matrix: one (the owner's,
    // every holder) unless it is redundant; in a slice only its rank's.
    std::map<int64_t, std::vector<MatrixPiece>> replicas;
    for (const MatrixPiece &p : all) {
      int64_t o = ownerFor(plan, k, p.rank);
      if (!plan.isSlice() || o == plan.sliceRank)
        replicas[o].push_back(p);
    }
    auto replicaOf = [&](int64_t rank) { return ownerFor(plan, k, rank); };
    for (const auto &[owner, pieces] : replicas) {
    const MatrixPiece *own = pieceOf(pieces, owner);
    if (!own)
      return fail("matrices", "rank " + num(owner) + ", which orthogonalizes " +
                                  label(k) + ", holds no piece of it");
    // Gathers: the owner gets each (piece, summand) it lacks, once.
    std::set<PieceKey> distinct, received;
    for (const MatrixPiece &p : pieces)
      distinct.insert(keyOf(p.rows, p.cols, p.summand));
    for (auto at : gathers[k]) {
      const Transfer &t = plan.exchanges[at.first].transfers[at.second];
      if (replicaOf(t.src) != owner)
        continue; // another replica's
      if (t.dst != owner)
        return fail(pathOf(at), "gathers " + label(k) + " to rank " +
                                    num(t.dst) + ", but its owner is rank " +
                                    num(owner));
      const MatrixPiece *from = pieceOf(pieces, t.src);
      if (!from || !(from->rows == t.rows) || !(from->cols == t.cols) ||
          from->summand != t.summand)
        return fail(pathOf(at), "rank " + num(t.src) + " does not hold " +
                                    showBox(t.rows, t.cols) + " summand " +
                                    num(t.summand) + " of " + label(k));
      PieceKey pk = keyOf(t.rows, t.cols, t.summand);
      if (pk == keyOf(own->rows, own->cols, own->summand))
        return fail(pathOf(at), "sends the owner a piece of " + label(k) +
                                    " it holds already");
      if (!received.insert(pk).second)
        return fail(pathOf(at), "sends " + showBox(t.rows, t.cols) +
                                    " summand " + num(t.summand) + " of " +
                                    label(k) + " to its owner twice");
    }
    if (received.size() + 1 != distinct.size())
      return fail("exchanges", "the owner of " + label(k) + " (rank " +
                                   num(owner) + ") receives " +
                                   num(received.size()) + " of the " +
                                   num(distinct.size() - 1) +
                                   " pieces it lacks");
    // Scatters: every other holder gets its own new piece, once.
    std::set<int64_t> served;
    for (auto at : scatters[k]) {
      const Transfer &t = plan.exchanges[at.first].transfers[at.second];
      if (replicaOf(t.dst) != owner)
        continue; // another replica's
      if (t.src != owner)
        return fail(pathOf(at), "scatters " + label(k) + " from rank " +
                                    num(t.src) + ", but its owner is rank " +
                                    num(owner));
      const MatrixPiece *to = pieceOf(pieces, t.dst);
      if (!to || !(to->rows == t.rows) || !(to->cols == t.cols) ||
          t.summand != 0)
        return fail(pathOf(at), "rank " + num(t.dst) + " does not hold " +
                                    showBox(t.rows, t.cols) + " of " +
                                    label(k) + " (scatters carry summand 0)");
      if (!served.insert(t.dst).second)
        return fail(pathOf(at), "scatters " + label(k) + " to rank " +
                                    num(t.dst) + " twice");
    }
    if (served.size() + 1 != pieces.size())
      return fail("exchanges", num(pieces.size() - 1 - served.size()) +
                                   " holder(s) of " + label(k) +
                                   " never receive its new piece");
    }
  }
  return true;
}

bool Checker::heldTransfers(
    int64_t k, const std::vector<std::pair<int64_t, int64_t>> &gathers,
    const std::vector<std::pair<int64_t, int64_t>> &scatters) {
  int64_t me = plan.sliceRank;
  const int64_t owner = ownerFor(plan, k, me);
  auto pathOf = [](std::pair<int64_t, int64_t> at) {
    return index(key(index("exchanges", at.first), "transfers"), at.second);
  };
  Range rows, cols, ownRows, ownCols;
  int64_t summand = 0, ownSummand = 0;
  // sliceMatrices: the rank holds every matrix it does not own.
  if (!pieceAt(k, me, rows, cols, summand) ||
      !pieceAt(k, owner, ownRows, ownCols, ownSummand))
    return fail("matrices", "rank " + num(me) + " or the owner holds no "
                                                "piece of " +
                                label(k));
  for (size_t i = 0; i < gathers.size(); ++i) {
    const Transfer &t =
        plan.exchanges[gathers[i].first].transfers[gathers[i].second];
    if (t.dst != owner)
      return fail(pathOf(gathers[i]), "gathers " + label(k) + " to rank " +
                                          num(t.dst) +
                                          ", but its owner is rank " +
                                          num(owner));
    if (!(t.rows == rows) || !(t.cols == cols) || t.summand != summand)
      return fail(pathOf(gathers[i]),
                  "rank " + num(t.src) + " does not hold " +
                      showBox(t.rows, t.cols) + " summand " +
                      num(t.summand) + " of " + label(k));
    if (keyOf(rows, cols, summand) == keyOf(ownRows, ownCols, ownSummand))
      return fail(pathOf(gathers[i]), "sends the owner a piece of " +
                                          label(k) + " it holds already");
    if (i > 0)
      return fail(pathOf(gathers[i]), "sends " + showBox(t.rows, t.cols) +
                                          " summand " + num(t.summand) +
                                          " of " + label(k) +
                                          " to its owner twice");
  }
  for (size_t i = 0; i < scatters.size(); ++i) {
    const Transfer &t =
        plan.exchanges[scatters[i].first].transfers[scatters[i].second];
    if (t.src != owner)
      return fail(pathOf(scatters[i]), "scatters " + label(k) +
                                           " from rank " + num(t.src) +
                                           ", but its owner is rank " +
                                           num(owner));
    if (!(t.rows == rows) || !(t.cols == cols) || t.summand != 0)
      return fail(pathOf(scatters[i]),
                  "rank " + num(t.dst) + " does not hold " +
                      showBox(t.rows, t.cols) + " of " + label(k) +
                      " (scatters carry summand 0)");
    if (i > 0)
      return fail(pathOf(scatters[i]), "scatters " + label(k) + " to rank " +
                                           num(t.dst) + " twice");
  }
  if (scatters.empty())
    return fail("exchanges", "rank " + num(me) + " holds a piece of " +
                                 label(k) + " but never receives its new "
                                            "piece");
  return true;
}

bool Checker::reductions() {
  if (!plan.distributed)
    return true;
  const Exchange *reduce =
      plan.exchanges.size() == 2 * plan.rounds.size() + 1
          ? &plan.exchanges.back()
          : nullptr;
  std::string path = index("exchanges", plan.exchanges.size() - 1);
  std::vector<std::vector<int64_t>> byParam(plan.params.size());
  if (reduce)
    for (size_t i = 0; i < reduce->reductions.size(); ++i) {
      const Reduction &r = reduce->reductions[i];
      std::string rpath = index(key(path, "reductions"), i);
      if (r.src < 0 || r.src >= plan.worldSize || r.dst < 0 ||
          r.dst >= plan.worldSize || r.src == r.dst)
        return fail(rpath, "expected two different ranks in [0, " +
                               num(plan.worldSize - 1) + "]");
      if (plan.isSlice() && r.src != plan.sliceRank &&
          r.dst != plan.sliceRank)
        return fail(rpath, "a part of rank " + num(plan.sliceRank) +
                               " holds a reduction between ranks " +
                               num(r.src) + " and " + num(r.dst));
      if (r.param < 0 || r.param >= static_cast<int64_t>(plan.params.size()))
        return fail(rpath, "no parameter " + num(r.param));
      const PlanParam &p = plan.params[r.param];
      if (p.orthogonalized() || !p.layout.isPartial())
        return fail(rpath, "parameter '" + p.name +
                               "' is not an AdamW parameter with partial "
                               "axes; only those are reduced");
      byParam[r.param].push_back(i);
    }
  bool needed = false;
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const PlanParam &p = plan.params[i];
    if (p.orthogonalized() || !p.layout.isPartial())
      continue;
    std::vector<ParamPiece> pieces = paramPieces(plan.mesh, p.layout);
    // Box -> the summands held of it.
    std::map<std::vector<int64_t>, std::set<int64_t>> summandsOf;
    auto boxKey = [](const std::vector<Range> &box) {
      std::vector<int64_t> k;
      for (const Range &r : box)
        k.insert(k.end(), {r.begin, r.end});
      return k;
    };
    for (const ParamPiece &piece : pieces)
      summandsOf[boxKey(piece.box)].insert(piece.summand);
    auto find = [&](int64_t rank) -> const ParamPiece * {
      auto it = std::lower_bound(
          pieces.begin(), pieces.end(), rank,
          [](const ParamPiece &q, int64_t r) { return q.rank < r; });
      return it != pieces.end() && it->rank == rank ? &*it : nullptr;
    };
    std::map<int64_t, std::set<int64_t>> got; // dst -> summands received
    for (int64_t ri : byParam[i]) {
      const Reduction &r = reduce->reductions[ri];
      std::string rpath = index(key(path, "reductions"), ri);
      const ParamPiece *from = find(r.src), *to = find(r.dst);
      if (!from || from->summand != r.summand)
        return fail(rpath, "rank " + num(r.src) + " does not hold summand " +
                               num(r.summand) + " of '" + p.name + "'");
      if (!to || boxKey(to->box) != boxKey(from->box))
        return fail(rpath, "ranks " + num(r.src) + " and " + num(r.dst) +
                               " do not hold the same piece of '" + p.name +
                               "'");
      int64_t elements = 1;
      for (const Range &range : from->box)
        elements *= range.size();
      if (r.elements != elements)
        return fail(rpath, "the piece has " + num(elements) +
                               " elements, not " + num(r.elements));
      if (r.summand == to->summand || !got[r.dst].insert(r.summand).second)
        return fail(rpath, "rank " + num(r.dst) + " gets summand " +
                               num(r.summand) + " of '" + p.name +
                               "' twice or its own");
    }
    for (const ParamPiece &piece : pieces) {
      size_t want = summandsOf[boxKey(piece.box)].size() - 1;
      needed |= want > 0;
      // A slice sees only what its rank receives.
      if (plan.isSlice() && piece.rank != plan.sliceRank)
        continue;
      if (got[piece.rank].size() != want)
        return fail(reduce ? path : "exchanges",
                    "rank " + num(piece.rank) + " receives " +
                        num(got[piece.rank].size()) + " of the " + num(want) +
                        " other summands of its piece of '" + p.name + "'");
    }
  }
  if (reduce && !needed)
    return fail(path, "no parameter needs an AdamW reduce");
  return true;
}

void Checker::schedule() {
  if (::muon::Status bad = verifySchedule(plan); !bad.ok())
    fail("schedule", bad.message());
}

} // namespace

Status validatePlan(const Plan &plan) { return Checker(plan).run(); }

Status validatePlanHeader(const Plan &plan) { return Checker(plan).header(); }

Status checkNewtonSchulz(const Plan &plan) {
  return Checker(plan).newtonSchulzSettings();
}

Status validatePlanSlice(const Plan &plan) {
  if (!plan.isSlice())
    return invalidArgument("expected one rank's part of a plan");
  return Checker(plan).run();
}

namespace {
std::string shortNumber(double v) { return format("%g", v); }
} // namespace

Status checkQkClipLayer(const QkClipLayer &layer,
                        const std::vector<int64_t> *queryShape,
                        const std::vector<int64_t> *keyShape) {
  if (!std::isfinite(layer.threshold) || layer.threshold <= 0)
    return invalidArgument("expected a finite number > 0, got " +
                               shortNumber(layer.threshold),
                           "threshold");
  if (layer.numHeads < 1)
    return invalidArgument("expected at least 1, got " + num(layer.numHeads),
                           "num_heads");
  if (layer.numKvHeads < 1 || layer.numHeads % layer.numKvHeads)
    return invalidArgument("expected a divisor of num_heads (" +
                               num(layer.numHeads) + "), got " +
                               num(layer.numKvHeads),
                           "num_kv_heads");
  for (auto [field, name, shape, heads] :
       {std::tuple{"query", &layer.query, queryShape, layer.numHeads},
        std::tuple{"key", &layer.key, keyShape, layer.numKvHeads}}) {
    if (!shape)
      return invalidArgument("no parameter named '" + *name + "'", field);
    if (shape->size() != 2)
      return invalidArgument("parameter '" + *name + "' has " +
                                 num(shape->size()) +
                                 " dims; QK-clip scales the rows of a 2-D "
                                 "[out, in] weight",
                             field);
    if ((*shape)[0] % heads)
      return invalidArgument(
          "parameter '" + *name + "' has " + num((*shape)[0]) +
              " rows, not a multiple of its " + num(heads) + " heads",
          field);
  }
  if (layer.query == layer.key)
    return invalidArgument(
        "the same parameter as the query ('" + layer.key + "')", "key");
  return okStatus();
}

Status checkGroupSettings(const PlanGroup &group) {
  if (!validAlgorithm(group.algorithm))
    return invalidArgument("algorithm " + num(group.algorithm) +
                               " is not registered (" +
                               num(algorithms().size()) + " algorithms)",
                           "algorithm");
  const std::vector<GroupSetting> &settings =
      algorithmOf(group.algorithm).settings;
  if (group.settings.size() != settings.size())
    return invalidArgument(
        "holds " + num(group.settings.size()) + " settings but " +
        algorithmOf(group.algorithm).title + " has " + num(settings.size()));
  // The rules are the settings' own (GroupSettings.h), in its order.
  for (const GroupSetting &setting : settings)
    if (::muon::Status why = checkSetting(setting, group); !why.ok())
      return invalidArgument(why.message(), setting.errorField);
  return checkStepBounds(group);
}

Status checkStepBounds(const PlanGroup &group) {
  // A step moves a parameter by at most lr x scale x (Newton-Schulz's
  // bounded update, or AdamW's, Lion's unit one) and multiplies it by
  // 1 - lr x weight_decay: within these bounds no step of finite inputs
  // overflows float32, and none grows the parameters geometrically.
  const std::vector<GroupSetting> &settings =
      algorithmOf(group.algorithm).settings;
  auto value = [&](const char *name) -> std::optional<double> {
    for (const GroupSetting &s : settings)
      if (std::string_view(s.name) == name)
        return settingValue(s, group);
    return std::nullopt;
  };
  for (const char *rate : {"lr", "extra_scale_factor"})
    if (std::optional<double> v = value(rate); v && *v > kMaxStepRate)
      return invalidArgument(format("%g is beyond %g: a step would move the "
                                    "parameters past what float32 holds",
                                    *v, kMaxStepRate),
                             rate);
  std::optional<double> lr = value("lr"), decay = value("weight_decay");
  if (lr && decay && *lr * *decay > 2)
    return invalidArgument(
        format("lr x weight_decay is %g, above 2: every step would multiply "
               "the parameters by more than 1 in size, until they overflow",
               *lr * *decay),
        "weight_decay");
  return okStatus();
}

} // namespace muon
