//===- PlanFile.cpp - The plan file (muon-plan/1) -------------------------===//
#include "muon/Plan/PlanFile.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Plan/GroupSettings.h"
#include "muon/Plan/Validate.h"
#include "muon/Support/Json.h"
#include "muon/Support/JsonWriter.h"
#include "muon/Support/Limits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>

namespace muon {

namespace {

/// Whether the plan has several Newton-Schulz configurations: one is
/// written flat, as before configurations existed, so such plans keep their
/// bytes; several go in "configs", which the groups and the NS batches
/// index.
bool severalConfigs(const Plan &plan) { return plan.ns.configs.size() > 1; }

/// The plan's settings and its mesh.
void writeHead(json::Writer &j, const Plan &plan) {
  j.member("format", "muon-plan/1");
  j.member("world_size", plan.worldSize);
  j.member("wire_dtype", plan.wireDtype);
  j.member("distributed", plan.distributed);
  j.member("async", plan.async);
  j.member("prefetch_count", plan.prefetchCount);
  j.member("inflight_limit", plan.inflightLimit);
  j.member("gather_budget_bytes", plan.gatherBudgetBytes);
  j.key("mesh");
  j.beginObject();
  j.key("shape");
  j.integers(plan.mesh.shape);
  j.key("devices");
  j.integers(plan.mesh.devices);
  j.endObject();
}

/// The Newton-Schulz configurations and the one precision.
void writeNewtonSchulz(json::Writer &j, const Plan &plan) {
  auto writeConfig = [&](const NewtonSchulzConfig &c) {
    j.member("ns_steps", c.nsSteps);
    j.key("ns_coefficients");
    j.beginArray();
    for (const auto &abc : c.coefficients) {
      j.beginArray();
      for (double x : abc)
        j.value(x);
      j.endArray();
    }
    j.endArray();
    j.member("eps", c.eps);
  };
  j.key("newton_schulz");
  j.beginObject();
  if (severalConfigs(plan)) {
    j.key("configs");
    j.beginArray();
    for (const NewtonSchulzConfig &c : plan.ns.configs) {
      j.beginObject();
      writeConfig(c);
      j.endObject();
    }
    j.endArray();
  } else if (!plan.ns.configs.empty()) {
    writeConfig(plan.ns.configs[0]);
  }
  j.member("ns_dtype", plan.ns.nsDtype);
  j.endObject();
}

/// The groups, each with its settings; without `withGroupSettings`
/// (planHash: ranks must agree on the plan proper) only the fixed ones.
void writeGroups(json::Writer &j, const Plan &plan, bool withGroupSettings) {
  j.key("groups");
  j.beginArray();
  for (const PlanGroup &g : plan.groups) {
    j.beginObject();
    j.member("name", g.name);
    j.member("algorithm", algorithmName(g.algorithm));
    // Fixed by the plan: in the hashed text too.
    if (g.orthogonalizes() && severalConfigs(plan))
      j.member("ns_config", g.nsConfig);
    // Every setting of the group's algorithm (GroupSettings.h) that files
    // hold; without group settings (planHash: ranks must agree on the plan
    // proper) only the fixed ones.
    for (const SettingEntry &e : settingEntries(g, !withGroupSettings)) {
      const GroupSetting &s = *e.setting;
      if (std::string_view(s.jsonKey) != s.name) {
        j.key(s.jsonKey); // settings sharing the key ("betas")
        j.beginArray();
        for (double x : e.numbers)
          j.value(x);
        j.endArray();
      } else if (s.kind == GroupSetting::Kind::Name) {
        j.member(s.name, e.name);
      } else if (s.kind == GroupSetting::Kind::Flag) {
        j.member(s.name, e.numbers[0] != 0);
      } else {
        j.member(s.name, e.numbers[0]);
      }
    }
    j.endObject();
  }
  j.endArray();
}

/// The parameters and their layouts.
void writeParams(json::Writer &j, const Plan &plan) {
  j.key("params");
  j.beginArray();
  for (const PlanParam &p : plan.params) {
    j.beginObject();
    j.member("name", p.name);
    j.key("shape");
    j.integers(p.layout.shape);
    j.member("dtype", p.dtype);
    j.member("group", plan.groups[p.group].name);
    j.key("split");
    j.beginArray();
    for (const auto &axes : p.layout.splitAxes)
      j.integers(axes);
    j.endArray();
    j.key("partial");
    j.integers(p.layout.partialAxes);
    j.key("only");
    j.beginArray();
    for (auto [axis, coord] : p.layout.only)
      j.integers({axis, coord});
    j.endArray();
    // Per-head Newton-Schulz changes the matrices, so it is in the hashed
    // text; written only when on, so other plans keep their bytes.
    if (p.layout.numHeads > 1) {
      j.member("num_heads", p.layout.numHeads);
      j.member("head_split_dim", p.layout.headSplitDim);
    }
    j.endObject();
  }
  j.endArray();
}

void writeQkClip(json::Writer &j, const Plan &plan) {
  // Only with layers: plans without QK-clip stay byte-identical. The
  // threshold is part of it (ranks agree on it at start-up).
  if (!plan.qkClip.empty()) {
    j.key("qk_clip");
    j.beginArray();
    for (const QkClipLayer &l : plan.qkClip) {
      j.beginObject();
      j.member("name", l.name);
      j.member("query", l.query);
      j.member("key", l.key);
      j.member("num_heads", l.numHeads);
      j.member("num_kv_heads", l.numKvHeads);
      j.member("threshold", l.threshold);
      j.endObject();
    }
    j.endArray();
  }
}

void writeMatrices(json::Writer &j, const Plan &plan) {
  j.key("matrices");
  j.beginArray();
  for (const PlanMatrix &m : plan.matrices) {
    j.beginObject();
    j.member("param", m.paramIndex);
    j.member("slice", m.slice);
    j.member("rows", m.rows);
    j.member("cols", m.cols);
    j.member("owner", m.owner);
    // Only where set: plans without redundant matrices keep their text.
    if (m.redundant)
      j.member("redundant", true);
    j.member("ns_flops", m.nsFlops);
    j.endObject();
  }
  j.endArray();
}

/// The rounds and each exchange's transfers and reductions.
void writeExchanges(json::Writer &j, const Plan &plan) {
  j.key("rounds");
  j.beginArray();
  for (const auto &r : plan.rounds)
    j.integers(r);
  j.endArray();
  j.key("exchanges");
  j.beginArray();
  for (const Exchange &ex : plan.exchanges) {
    j.beginObject();
    j.member("phase", phaseName(ex.phase));
    j.member("round", ex.round);
    j.key("transfers");
    j.beginArray();
    for (const Transfer &t : ex.transfers)
      j.integers({t.src, t.dst, t.matrix, t.rows.begin, t.rows.end,
                  t.cols.begin, t.cols.end, t.summand});
    j.endArray();
    j.key("reductions");
    j.beginArray();
    for (const Reduction &r : ex.reductions)
      j.integers({r.src, r.dst, r.param, r.summand, r.elements});
    j.endArray();
    j.endObject();
  }
  j.endArray();
}

void writeSchedule(json::Writer &j, const Plan &plan) {
  j.key("schedule");
  j.beginArray();
  for (const ScheduleStep &s : plan.schedule) {
    j.beginArray();
    j.value(stepName(s.kind));
    j.value(s.index);
    j.endArray();
  }
  j.endArray();
}

/// Each rank's NS batches and its counts and offsets of every exchange.
void writeRanks(json::Writer &j, const Plan &plan) {
  std::vector<std::vector<RankExchangeView>> views;
  for (const Exchange &ex : plan.exchanges)
    views.push_back(rankExchangeViews(ex, plan.worldSize));
  j.key("ranks");
  j.beginArray();
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    j.beginObject();
    j.member("rank", r);
    j.key("ns_batches");
    j.beginArray();
    if (r < static_cast<int64_t>(plan.nsBatches.size()))
      for (const NsBatch &b : plan.nsBatches[r]) {
        j.beginObject();
        j.member("round", b.round);
        if (severalConfigs(plan))
          j.member("config", b.config);
        j.member("rows", b.rows);
        j.member("cols", b.cols);
        j.key("matrices");
        j.integers(b.matrices);
        j.endObject();
      }
    j.endArray();
    auto slices = [&](const std::vector<PeerSlice> &list) {
      j.beginArray();
      for (const PeerSlice &s : list)
        j.integers({s.peer, s.elements, s.offset});
      j.endArray();
    };
    j.key("exchanges");
    j.beginArray();
    for (const auto &perRank : views) {
      j.beginObject();
      j.key("send");
      slices(perRank[r].send);
      j.key("recv");
      slices(perRank[r].recv);
      j.endObject();
    }
    j.endArray();
    j.endObject();
  }
  j.endArray();
}

} // namespace

std::string renderPlan(const Plan &plan, bool withGroupSettings) {
  // Streamed: a large plan (a million transfers) never exists as a tree.
  std::string text;
  json::Writer j(text);
  j.beginObject();
  writeHead(j, plan);
  writeNewtonSchulz(j, plan);
  writeGroups(j, plan, withGroupSettings);
  writeParams(j, plan);
  writeQkClip(j, plan);
  writeMatrices(j, plan);
  writeExchanges(j, plan);
  writeSchedule(j, plan);
  writeRanks(j, plan);
  j.endObject();
  text += "\n";
  return text;
}

namespace {
using json::index;
using json::key;
using json::Value;

/// A rank's ready-made counts and offsets: per exchange, send and recv
/// lists of (peer, elements, offset).
using SliceTable = std::vector<std::array<std::vector<std::vector<int64_t>>, 2>>;

/// Reads the file into a Plan; the checks that need the whole plan are
/// validatePlan's.
class PlanReader {
public:
  bool read(const Value &root, Plan &plan, std::vector<SliceTable> &tables);
  const Status &error() const { return rd.error(); }

private:
  // The phases of read, in the file's order; each false (or the reader
  // failed) at the first problem.
  bool readHead(const Value &root, Plan &plan);
  bool readGroups(const Value &root, Plan &plan);
  /// The Newton-Schulz configurations: one flat, or several in "configs".
  void readNewtonSchulz(const Value &o, const std::string &p, Plan &plan);
  void readConfig(const Value &o, const std::string &p, Plan &plan);
  void readParams(const Value &root, Plan &plan);
  void readMatrices(const Value &root, Plan &plan);
  void readExchanges(const Value &root, Plan &plan);
  bool readSchedule(const Value &root, Plan &plan);
  bool readRanks(const Value &root, Plan &plan,
                 std::vector<SliceTable> &tables);

  const Value *get(const Value &o, std::string_view k) {
    return json::Reader::get(o, k);
  }
  const Value *object(const Value &parent, const std::string &path,
                      std::string_view k,
                      std::initializer_list<std::string_view> keys) {
    const Value *o = rd.object(get(parent, k), key(path, k));
    if (o && !rd.knownKeys(*o, key(path, k), keys))
      return nullptr;
    return o;
  }
  /// Array members of an object, each an object with only `keys`.
  template <typename Fn>
  bool objects(const Value &parent, const std::string &path, std::string_view k,
               std::initializer_list<std::string_view> keys, Fn fn) {
    return objects(parent, path, k, std::vector<std::string_view>(keys), fn);
  }
  template <typename Fn>
  bool objects(const Value &parent, const std::string &path, std::string_view k,
               const std::vector<std::string_view> &keys, Fn fn) {
    std::string apath = key(path, k);
    const Value *a = rd.array(get(parent, k), apath);
    if (!a)
      return false;
    for (size_t i = 0; i < a->size() && rd.ok(); ++i) {
      std::string ipath = index(apath, i);
      const Value *o = rd.object(&(*a)[i], ipath);
      if (!o || !rd.knownKeys(*o, ipath, keys))
        return false;
      fn(*o, ipath);
    }
    return rd.ok();
  }
  int64_t integer(const Value &o, const std::string &path, std::string_view k,
                  int64_t min = json::Reader::kMin) {
    return rd.integer(get(o, k), key(path, k), min).value_or(0);
  }
  double number(const Value &o, const std::string &path, std::string_view k) {
    return rd.number(get(o, k), key(path, k)).value_or(0);
  }
  /// The settings of g's algorithm from `o` (GroupSettings.h): each
  /// required unless optional (then it keeps its default), a setting of a
  /// flag only with the flag on, the settings sharing a JSON key as one
  /// array ("betas": [beta1, beta2]).
  void readSettings(const Value &o, const std::string &p, PlanGroup &g) {
    const std::vector<GroupSetting> &settings =
        algorithmOf(g.algorithm).settings;
    for (size_t i = 0; i < settings.size() && rd.ok(); ++i) {
      const GroupSetting &s = settings[i];
      const Value *v = get(o, s.jsonKey);
      const std::string path = key(p, s.jsonKey);
      if (!v && settingOptional(s))
        continue;
      if (s.onlyWith &&
          settingValue(*findGroupSetting(s.algorithm, s.onlyWith), g) == 0) {
        rd.fail(path, std::string("only with \"") + s.onlyWith +
                          "\": true (" + s.onlyWithNote + ")");
        return;
      }
      if (std::string_view(s.jsonKey) != s.name) {
        const SharedJsonKey shared = sharedJsonKey(settings, i);
        if (!shared.first)
          continue; // read with the first of its key
        const size_t n = shared.count;
        const Value *a = rd.array(v, path);
        if (a && a->size() != n)
          rd.fail(path, "expected [" + shared.names + "]");
        for (size_t k = 0; a && k < n && rd.ok(); ++k)
          setSettingValue(settings[i + k], g,
                          rd.number(&(*a)[k], index(path, k)).value_or(0));
        continue;
      }
      switch (s.kind) {
      case GroupSetting::Kind::Number:
        setSettingValue(s, g, rd.number(v, path).value_or(0));
        break;
      case GroupSetting::Kind::Flag:
        if (std::optional<bool> flag = rd.boolean(v, path))
          setSettingValue(s, g, *flag ? 1.0 : 0.0);
        break;
      case GroupSetting::Kind::Name:
        if (std::optional<std::string> name = rd.oneOf(
                v, path,
                std::vector<std::string_view>(s.names, s.names + s.nameCount)))
          setSettingName(s, g, *name);
        break;
      }
    }
  }
  std::vector<int64_t> ints(const Value *v, const std::string &path,
                            int64_t min = json::Reader::kMin) {
    return rd.integers(v, path, min).value_or(std::vector<int64_t>());
  }
  /// An array of arrays of integers; `width` > 0 fixes the inner size.
  std::vector<std::vector<int64_t>> rows(const Value *v,
                                         const std::string &path, size_t width,
                                         const char *shape,
                                         int64_t min = json::Reader::kMin) {
    std::vector<std::vector<int64_t>> out;
    const Value *a = rd.array(v, path);
    for (size_t i = 0; a && i < a->size() && rd.ok(); ++i) {
      std::vector<int64_t> row = ints(&(*a)[i], index(path, i), min);
      if (rd.ok() && width && row.size() != width)
        rd.fail(index(path, i), std::string("expected ") + shape);
      out.push_back(std::move(row));
    }
    // Callers index the rows by their width: nothing half-read escapes.
    if (!rd.ok())
      out.clear();
    return out;
  }

  json::Reader rd;
};

bool PlanReader::read(const Value &root, Plan &plan,
                      std::vector<SliceTable> &tables) {
  if (!rd.object(&root, "") ||
      !rd.knownKeys(root, "",
                    {"format", "world_size", "wire_dtype", "distributed",
                     "async", "prefetch_count", "inflight_limit",
                     "gather_budget_bytes", "mesh", "optimizer", "adamw",
                     "newton_schulz", "groups", "params", "qk_clip",
                     "matrices", "rounds", "exchanges", "schedule", "ranks"}))
    return false;
  plan = Plan();
  if (!readHead(root, plan) || !readGroups(root, plan))
    return false;
  readParams(root, plan);
  readMatrices(root, plan);
  readExchanges(root, plan);
  if (!readSchedule(root, plan))
    return false;
  return readRanks(root, plan, tables);
}

bool PlanReader::readHead(const Value &root, Plan &plan) {
  std::optional<std::string> format = rd.string(get(root, "format"), "format");
  if (format && *format != "muon-plan/1")
    rd.fail("format", "expected \"muon-plan/1\", got \"" + *format + "\"");
  plan.worldSize = rd.limited(get(root, "world_size"), "world_size", 1,
                              limits::kMaxWorldSize, "ranks")
                       .value_or(1);
  plan.wireDtype = rd.oneOf(get(root, "wire_dtype"), "wire_dtype",
                            {"f32", "bf16"})
                       .value_or("f32");
  plan.wireBytes = wireDtypeBytes(plan.wireDtype);
  plan.distributed =
      rd.boolean(get(root, "distributed"), "distributed").value_or(false);
  plan.async = rd.boolean(get(root, "async"), "async").value_or(true);
  plan.prefetchCount = integer(root, "", "prefetch_count", 0);
  plan.inflightLimit = integer(root, "", "inflight_limit", 1);
  plan.gatherBudgetBytes = integer(root, "", "gather_budget_bytes", 0);
  if (!rd.ok())
    return false;

  if (const Value *mesh = object(root, "", "mesh", {"shape", "devices"})) {
    plan.mesh.shape = ints(get(*mesh, "shape"), "mesh.shape", 1);
    plan.mesh.devices = ints(get(*mesh, "devices"), "mesh.devices", 0);
  }
  return true;
}

void PlanReader::readConfig(const Value &o, const std::string &p,
                            Plan &plan) {
  NewtonSchulzConfig c;
  c.nsSteps = integer(o, p, "ns_steps", 1);
  c.eps = number(o, p, "eps");
  const Value *rowsV =
      rd.array(get(o, "ns_coefficients"), key(p, "ns_coefficients"));
  for (size_t i = 0; rowsV && i < rowsV->size() && rd.ok(); ++i) {
    std::string path = index(key(p, "ns_coefficients"), i);
    const Value *row = rd.array(&(*rowsV)[i], path);
    if (row && row->size() != 3)
      rd.fail(path, "expected [a, b, c]");
    if (!rd.ok())
      break;
    std::array<double, 3> abc{};
    for (size_t j = 0; j < 3; ++j)
      abc[j] = rd.number(&(*row)[j], index(path, j)).value_or(0);
    c.coefficients.push_back(abc);
  }
  plan.ns.configs.push_back(std::move(c));
}

void PlanReader::readNewtonSchulz(const Value &o, const std::string &p,
                                  Plan &plan) {
  plan.ns.configs.clear();
  // Absent in plans written before ns_dtype existed: the device chooses.
  plan.ns.nsDtype = rd.oneOf(get(o, "ns_dtype"), key(p, "ns_dtype"),
                             {"auto", "f32", "bf16", "f16"})
                        .value_or("auto");
  // One configuration flat, or several in "configs" (never both).
  if (!get(o, "configs")) {
    readConfig(o, p, plan);
    return;
  }
  for (std::string_view flat : {"ns_steps", "ns_coefficients", "eps"})
    if (get(o, flat))
      rd.fail(key(p, flat), "not allowed with \"configs\" (each "
                            "configuration holds its own)");
  if (rd.ok())
    objects(o, p, "configs", {"ns_steps", "ns_coefficients", "eps"},
            [&](const Value &c, const std::string &path) {
              readConfig(c, path, plan);
            });
  if (rd.ok() && plan.ns.configs.empty())
    rd.fail(key(p, "configs"), "expected at least one configuration");
}

bool PlanReader::readGroups(const Value &root, Plan &plan) {
  // Plans written before parameter groups have "optimizer" (the Newton-Schulz
  // settings and the "muon" group) and "adamw"; newer ones
  // "newton_schulz" and "groups".
  const bool legacy = !get(root, "groups");
  if (legacy && (get(root, "newton_schulz")))
    rd.fail("groups", "expected with \"newton_schulz\"");
  if (!legacy && (get(root, "optimizer") || get(root, "adamw")))
    rd.fail(get(root, "optimizer") ? "optimizer" : "adamw",
            "not allowed with \"groups\" (a plan has one or the other)");
  if (!rd.ok())
    return false;
  plan.groups = legacy ? defaultGroups() : std::vector<PlanGroup>();
  if (legacy) {
    if (const Value *o =
            object(root, "", "optimizer",
                   {"lr", "weight_decay", "momentum", "nesterov", "ns_steps",
                    "ns_coefficients", "eps", "adjust_lr", "ns_dtype",
                    "weight_decay_mode", "normuon", "normuon_beta2"})) {
      readNewtonSchulz(*o, "optimizer", plan);
      readSettings(*o, "optimizer", plan.groups[0]);
    }
    if (const Value *o =
            object(root, "", "adamw", {"lr", "betas", "eps", "weight_decay"}))
      readSettings(*o, "adamw", plan.groups[1]);
  } else {
    if (const Value *o = object(
            root, "", "newton_schulz",
            {"ns_steps", "ns_coefficients", "eps", "ns_dtype", "configs"}))
      readNewtonSchulz(*o, "newton_schulz", plan);
    // A group's keys: its name, its algorithm and the settings' JSON keys
    // (GroupSettings.h) of every algorithm, in registry order.
    std::vector<std::string_view> groupKeys = {"name", "algorithm",
                                               "ns_config"};
    std::vector<std::string_view> algorithmNames;
    for (size_t a = 0; a < algorithms().size(); ++a) {
      algorithmNames.push_back(algorithms()[a].name);
      for (std::string_view k : settingKeys(static_cast<AlgorithmId>(a)))
        if (std::find(groupKeys.begin(), groupKeys.end(), k) ==
            groupKeys.end())
          groupKeys.push_back(k);
    }
    objects(root, "", "groups", groupKeys,
            [&](const Value &o, const std::string &path) {
              std::string name =
                  rd.string(get(o, "name"), key(path, "name")).value_or("");
              std::optional<std::string> algorithm =
                  rd.oneOf(get(o, "algorithm"), key(path, "algorithm"),
                           algorithmNames);
              if (!rd.ok())
                return;
              PlanGroup g(findAlgorithm(*algorithm).value_or(kMuon));
              g.name = std::move(name);
              // Checked against the configurations by the validator.
              if (const Value *v = get(o, "ns_config")) {
                if (!g.orthogonalizes()) {
                  rd.fail(key(path, "ns_config"),
                          "only Muon groups run Newton-Schulz");
                  return;
                }
                g.nsConfig =
                    rd.integer(v, key(path, "ns_config"), 0).value_or(0);
              }
              // Only the keys of the group's own algorithm.
              const std::vector<std::string_view> mine =
                  settingKeys(g.algorithm);
              for (std::string_view k : groupKeys)
                if (k != "name" && k != "algorithm" && k != "ns_config" &&
                    std::find(mine.begin(), mine.end(), k) == mine.end() &&
                    get(o, k) && rd.ok())
                  rd.fail(key(path, k), std::string("not a setting of ") +
                                            algorithmName(g.algorithm) +
                                            " groups");
              if (!rd.ok())
                return;
              readSettings(o, path, g);
              plan.groups.push_back(std::move(g));
            });
  }
  if (!rd.ok())
    return false;
  return true;
}

void PlanReader::readParams(const Value &root, Plan &plan) {
  objects(root, "", "params",
          {"name", "shape", "dtype", "group", "split", "partial", "only",
           "num_heads", "head_split_dim"},
          [&](const Value &o, const std::string &path) {
            PlanParam p;
            p.name = rd.string(get(o, "name"), key(path, "name")).value_or("");
            p.dtype = rd.oneOf(get(o, "dtype"), key(path, "dtype"),
                               {"f32", "bf16", "f16"})
                          .value_or("f32");
            std::string group =
                rd.string(get(o, "group"), key(path, "group")).value_or("");
            if (!rd.ok())
              return;
            p.group = findGroup(plan.groups, group);
            if (p.group < 0) {
              rd.fail(key(path, "group"), "no group named \"" + group + "\"");
              return;
            }
            p.algorithm = plan.groups[p.group].algorithm;
            p.layout.shape = ints(get(o, "shape"), key(path, "shape"), 1);
            p.layout.splitAxes =
                rows(get(o, "split"), key(path, "split"), 0, "", 0);
            p.layout.partialAxes =
                ints(get(o, "partial"), key(path, "partial"), 0);
            for (const auto &pair : rows(get(o, "only"), key(path, "only"), 2,
                                         "[axis, coordinate]", 0))
              p.layout.only.push_back({pair[0], pair[1]});
            // Checked against the shape by the validator (Validate.cpp).
            if (const Value *v = get(o, "num_heads"))
              p.layout.numHeads =
                  rd.integer(v, key(path, "num_heads"), 1, limits::kMaxMatrices)
                      .value_or(1);
            if (const Value *v = get(o, "head_split_dim"))
              p.layout.headSplitDim =
                  rd.integer(v, key(path, "head_split_dim"), 0, 1).value_or(0);
            plan.params.push_back(std::move(p));
          });
  if (get(root, "qk_clip"))
    objects(root, "", "qk_clip",
            {"name", "query", "key", "num_heads", "num_kv_heads", "threshold"},
            [&](const Value &o, const std::string &path) {
              QkClipLayer l;
              l.name =
                  rd.string(get(o, "name"), key(path, "name")).value_or("");
              l.query =
                  rd.string(get(o, "query"), key(path, "query")).value_or("");
              l.key = rd.string(get(o, "key"), key(path, "key")).value_or("");
              l.numHeads = integer(o, path, "num_heads", 1);
              l.numKvHeads = integer(o, path, "num_kv_heads", 1);
              l.threshold = number(o, path, "threshold");
              plan.qkClip.push_back(std::move(l));
            });
}

void PlanReader::readMatrices(const Value &root, Plan &plan) {
  int64_t numParams = plan.params.size();
  objects(root, "", "matrices",
          {"param", "slice", "rows", "cols", "owner", "redundant",
           "ns_flops"},
          [&](const Value &o, const std::string &path) {
            PlanMatrix m;
            m.paramIndex = rd.integer(get(o, "param"), key(path, "param"), 0,
                                      numParams - 1)
                               .value_or(0);
            if (rd.ok())
              m.param = plan.params[m.paramIndex].name;
            m.slice = integer(o, path, "slice", -1);
            m.rows = integer(o, path, "rows", 1);
            m.cols = integer(o, path, "cols", 1);
            m.owner = integer(o, path, "owner", -1);
            if (const Value *v = get(o, "redundant"))
              m.redundant = rd.boolean(v, key(path, "redundant")).value_or(false);
            m.nsFlops = integer(o, path, "ns_flops", 0);
            plan.matrices.push_back(std::move(m));
          });
}

void PlanReader::readExchanges(const Value &root, Plan &plan) {
  plan.rounds = rows(get(root, "rounds"), "rounds", 0, "", 0);
  objects(
      root, "", "exchanges", {"phase", "round", "transfers", "reductions"},
      [&](const Value &o, const std::string &path) {
        Exchange ex;
        std::string phase = rd.oneOf(get(o, "phase"), key(path, "phase"),
                                     {phaseName(Exchange::Phase::Gather),
                                      phaseName(Exchange::Phase::Scatter),
                                      phaseName(Exchange::Phase::Reduce)})
                                .value_or("gather");
        ex.phase = parsePhase(phase).value_or(Exchange::Phase::Gather);
        ex.round = integer(o, path, "round", 0);
        for (const auto &v :
             rows(get(o, "transfers"), key(path, "transfers"), 8,
                  "[src, dst, matrix, row_begin, row_end, col_begin, "
                  "col_end, summand]",
                  0))
          ex.transfers.push_back(
              {v[0], v[1], v[2], {v[3], v[4]}, {v[5], v[6]}, v[7]});
        for (const auto &v :
             rows(get(o, "reductions"), key(path, "reductions"), 5,
                  "[src, dst, param, summand, elements]", 0))
          ex.reductions.push_back({v[0], v[1], v[2], v[3], v[4]});
        // Boxes must be non-empty and ordered before anything sizes them.
        for (size_t t = 0; t < ex.transfers.size() && rd.ok(); ++t) {
          const Transfer &tr = ex.transfers[t];
          if (tr.rows.begin >= tr.rows.end || tr.cols.begin >= tr.cols.end)
            rd.fail(index(key(path, "transfers"), t),
                    "expected a non-empty box");
        }
        plan.exchanges.push_back(std::move(ex));
      });
}

bool PlanReader::readSchedule(const Value &root, Plan &plan) {
  if (const Value *steps = rd.array(get(root, "schedule"), "schedule"))
    for (size_t i = 0; i < steps->size() && rd.ok(); ++i) {
      std::string path = index("schedule", i);
      const Value *step = rd.array(&(*steps)[i], path);
      if (step && step->size() != 2)
        rd.fail(path, "expected [step, index]");
      if (!rd.ok())
        break;
      using Kind = ScheduleStep::Kind;
      std::optional<std::string> name = rd.oneOf(
          &(*step)[0], index(path, 0),
          {stepName(Kind::Start), stepName(Kind::Done),
           stepName(Kind::NewtonSchulz), stepName(Kind::Momentum),
           stepName(Kind::ApplyUpdate), stepName(Kind::AdamW)});
      ScheduleStep s;
      if (name)
        s.kind = parseStepName(*name).value_or(Kind::Start);
      s.index = rd.integer(&(*step)[1], index(path, 1), 0).value_or(0);
      plan.schedule.push_back(s);
    }
  if (!rd.ok())
    return false;
  return true;
}

bool PlanReader::readRanks(const Value &root, Plan &plan,
                           std::vector<SliceTable> &tables) {
  const Value *ranks = rd.array(get(root, "ranks"), "ranks");
  if (ranks && static_cast<int64_t>(ranks->size()) != plan.worldSize)
    return rd.fail("ranks", "expected one entry per rank (" +
                                std::to_string(plan.worldSize) + ")");
  plan.nsMatrices.assign(plan.worldSize, {});
  plan.nsBatches.assign(plan.worldSize, {});
  tables.assign(plan.worldSize, {});
  int64_t r = 0;
  objects(
      root, "", "ranks", {"rank", "ns_batches", "exchanges"},
      [&](const Value &o, const std::string &path) {
        if (rd.integer(get(o, "rank"), key(path, "rank"), r, r))
          objects(o, path, "ns_batches",
                  {"round", "config", "rows", "cols", "matrices"},
                  [&](const Value &b, const std::string &bpath) {
                    NsBatch batch;
                    batch.round = integer(b, bpath, "round", 0);
                    // Absent with one configuration.
                    if (get(b, "config"))
                      batch.config = integer(b, bpath, "config", 0);
                    batch.rows = integer(b, bpath, "rows", 1);
                    batch.cols = integer(b, bpath, "cols", 1);
                    batch.matrices = ints(get(b, "matrices"),
                                          key(bpath, "matrices"), 0);
                    plan.nsMatrices[r].insert(plan.nsMatrices[r].end(),
                                              batch.matrices.begin(),
                                              batch.matrices.end());
                    plan.nsBatches[r].push_back(std::move(batch));
                  });
        const Value *views = rd.array(get(o, "exchanges"),
                                      key(path, "exchanges"));
        if (views && views->size() != plan.exchanges.size())
          rd.fail(key(path, "exchanges"),
                  "expected one entry per exchange (" +
                      std::to_string(plan.exchanges.size()) + ")");
        if (rd.ok())
          objects(o, path, "exchanges", {"send", "recv"},
                  [&](const Value &v, const std::string &vpath) {
                    tables[r].push_back(
                        {rows(get(v, "send"), key(vpath, "send"), 3,
                              "[peer, elements, offset]"),
                         rows(get(v, "recv"), key(vpath, "recv"), 3,
                              "[peer, elements, offset]")});
                  });
        ++r;
      });
  return rd.ok();
}

/// A JSON status as parsePlan returns it: its location the path as messages
/// show it ("<root>" for the document), so that text() is "path: message"
/// for every problem, as callers print it.
Status shown(const Status &bad) {
  return invalidArgument(bad.message(), json::showPath(bad.location()));
}
} // namespace

StatusOr<Plan> parsePlan(const std::string &text) {
  Value root;
  if (Status bad = json::parse(text, root); !bad.ok())
    return shown(bad);
  Plan plan;
  PlanReader reader;
  std::vector<SliceTable> tables;
  if (!reader.read(root, plan, tables))
    return shown(reader.error());
  if (Status bad = validatePlan(plan); !bad.ok())
    return shown(bad);
  // The ready-made counts and offsets must match the transfers.
  for (size_t e = 0; e < plan.exchanges.size(); ++e) {
    std::vector<RankExchangeView> views =
        rankExchangeViews(plan.exchanges[e], plan.worldSize);
    for (int64_t r = 0; r < plan.worldSize; ++r)
      for (int side = 0; side < 2; ++side) {
        const std::vector<PeerSlice> &want =
            side ? views[r].recv : views[r].send;
        const std::vector<std::vector<int64_t>> &got = tables[r][e][side];
        bool same = got.size() == want.size();
        for (size_t k = 0; same && k < got.size(); ++k)
          same = got[k][0] == want[k].peer && got[k][1] == want[k].elements &&
                 got[k][2] == want[k].offset;
        if (!same)
          return invalidArgument(
              "counts and offsets do not match the transfers",
              key(index(key(index("ranks", r), "exchanges"), e),
                  side ? "recv" : "send"));
      }
  }
  return plan;
}

} // namespace muon
