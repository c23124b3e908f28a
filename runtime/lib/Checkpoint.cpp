//===- Checkpoint.cpp - Optimizer state saved and loaded by global box ----===//
//
// A checkpoint is a directory:
//   checkpoint.json                  the manifest, written last by rank 0
//   state-<id>-rank-<r>.bin          one file per rank of the save
// A rank file is "MUONCKPT", a u32 version, a u64 header length, the header
// (JSON), the header's FNV-1a hash (u64), then f32 data. The header lists
// entries: (parameter, state, summand, global box, data offset and count,
// data hash). State is stored by global box, not by rank, so a checkpoint
// loads under any layout: each rank cuts what overlaps its own pieces.
// docs/runtime.md, "Checkpoints", describes the format and the rules.
//
//===----------------------------------------------------------------------===//
#include "muon/Runtime/Optimizer.h"

#include "muon/Support/Fnv.h"
#include "muon/Support/Json.h"
#include "muon/Support/OutputFile.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <limits>
#include <set>
#include <sys/stat.h>
#include <unistd.h>

namespace muon::runtime {
namespace {

constexpr char kMagic[8] = {'M', 'U', 'O', 'N', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 1;
constexpr const char *kFormat = "muon-checkpoint/1";
constexpr const char *kManifest = "checkpoint.json";

uint64_t fnv(const void *data, size_t bytes, uint64_t hash = kFnvOffsetBasis) {
  return fnv1a(data, bytes, hash);
}

std::string hex(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(v));
  return text;
}

/// What makes two plans the same model: names, shapes, storage types and
/// optimizer groups, in order (not the layout, nor the hyper-parameters).
uint64_t modelHash(const Plan &plan) {
  uint64_t h = fnv("muon-model", 10);
  for (const PlanParam &p : plan.params) {
    std::string line = p.name + "|" + p.dtype + "|" + (p.muon ? "m" : "a");
    for (int64_t d : p.layout.shape)
      line += "|" + std::to_string(d);
    h = fnv(line.data(), line.size() + 1, h);
  }
  return h;
}

int64_t boxElements(const std::vector<Range> &box) {
  int64_t n = 1;
  for (const Range &r : box)
    n *= r.size();
  return n;
}

/// One saved array: a state of a parameter's piece.
struct Entry {
  std::string param;
  std::string state; // momentum, exp_avg, exp_avg_sq, values
  int64_t summand = 0, summands = 1;
  std::vector<Range> box;
  int64_t offset = 0, count = 0; // in f32 elements from the data start
  uint64_t hash = 0;
};

struct RankFile {
  std::string name;
  int64_t rank = 0, steps = 0;
  std::map<std::string, int64_t> adamwSteps;
  std::vector<Entry> entries;
  int64_t dataStart = 0, dataElements = 0;
};

bool readAll(const std::string &path, std::string &text) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  text.assign(std::istreambuf_iterator<char>(in), {});
  return !in.bad();
}

/// Copies the overlap of `srcBox` (data `src`, row-major) into `dstBox`
/// (data `dst`), skipping elements `covered` already has; returns how many
/// it newly covered. With `add`, values are added instead of written.
int64_t copyOverlap(const float *src, const std::vector<Range> &srcBox,
                    float *dst, const std::vector<Range> &dstBox,
                    std::vector<char> &covered, bool add) {
  size_t rank = dstBox.size();
  std::vector<Range> overlap(rank);
  for (size_t d = 0; d < rank; ++d) {
    overlap[d] = {std::max(srcBox[d].begin, dstBox[d].begin),
                  std::min(srcBox[d].end, dstBox[d].end)};
    if (overlap[d].begin >= overlap[d].end)
      return 0;
  }
  int64_t total = boxElements(overlap), fresh = 0;
  std::vector<int64_t> at(rank);
  for (size_t d = 0; d < rank; ++d)
    at[d] = overlap[d].begin;
  for (int64_t n = 0; n < total; ++n) {
    int64_t from = 0, to = 0;
    for (size_t d = 0; d < rank; ++d) {
      from = from * srcBox[d].size() + (at[d] - srcBox[d].begin);
      to = to * dstBox[d].size() + (at[d] - dstBox[d].begin);
    }
    if (!covered[to]) {
      covered[to] = 1;
      dst[to] = add ? dst[to] + src[from] : src[from];
      ++fresh;
    }
    for (size_t d = rank; d-- > 0;) {
      if (++at[d] < overlap[d].end)
        break;
      at[d] = overlap[d].begin;
    }
  }
  return fresh;
}

} // namespace

bool Optimizer::saveCheckpointFiles(const std::string &dir, bool withParameters,
                                    std::string &error) {
  const Plan &plan = thePlan;
  const int64_t rank = comm.rank();
  // One name for this save on every rank (rank 0's random id).
  uint64_t proposal =
      fnv(&rank, sizeof(rank),
          static_cast<uint64_t>(
              std::chrono::steady_clock::now().time_since_epoch().count()) ^
              (static_cast<uint64_t>(getpid()) << 32));
  std::vector<uint64_t> ids;
  if (!comm.allGather(proposal, ids, options.timeoutSeconds, error)) {
    error = "saving a checkpoint: " + error;
    return false;
  }
  const std::string id = hex(ids[0]);
  ::mkdir(dir.c_str(), 0777); // every rank; the first one creates it

  // The header and the data, in memory.
  nlohmann::json entries = nlohmann::json::array();
  std::vector<float> data;
  std::string mine;
  auto add = [&](const ParamSlot &slot, const char *state, int64_t summand,
                 int64_t summands, const std::vector<float> &values) {
    entries.push_back({{"param", slot.name},
                       {"state", state},
                       {"summand", summand},
                       {"summands", summands},
                       {"box", nlohmann::json::array()},
                       {"offset", static_cast<int64_t>(data.size())},
                       {"count", static_cast<int64_t>(values.size())},
                       {"hash", hex(fnv(values.data(), values.size() * 4))}});
    for (const Range &r : slot.box)
      entries.back()["box"].push_back({r.begin, r.end});
    data.insert(data.end(), values.begin(), values.end());
  };
  nlohmann::json adamwSteps = nlohmann::json::object();
  for (size_t i = 0; i < slots.size(); ++i) {
    const ParamSlot &slot = slots[i];
    if (!slot.elements)
      continue;
    StepExecutor::State state = executor->state(i);
    std::vector<float> host(slot.elements);
    int64_t bytes = slot.elements * 4;
    int64_t summands = 1;
    for (int64_t axis : plan.params[i].layout.partialAxes)
      summands *= plan.mesh.shape[axis];
    if (slot.muon) {
      device.copyToHost(host.data(), state.momentum, bytes);
      add(slot, "momentum", slot.summand, summands, host);
    } else {
      device.copyToHost(host.data(), state.expAvg, bytes);
      add(slot, "exp_avg", slot.summand, summands, host);
      device.copyToHost(host.data(), state.expAvgSq, bytes);
      add(slot, "exp_avg_sq", slot.summand, summands, host);
      adamwSteps[slot.name] = *state.adamwStep;
    }
    if (withParameters) {
      if (!slot.bound) {
        mine = "parameter '" + slot.name + "' is not bound, so its values "
                                           "cannot be saved";
        break;
      }
      std::vector<char> typed(slot.elements * dtypeBytes(slot.dtype));
      device.copyToHost(typed.data(), values[i], typed.size());
      for (int64_t e = 0; e < slot.elements; ++e)
        host[e] = loadAs(typed.data(), slot.dtype, e);
      add(slot, "values", 0, 1, host);
    }
  }
  std::string name = "state-" + id + "-rank-" + std::to_string(rank) + ".bin";
  std::string path = dir + "/" + name;
  if (mine.empty()) {
    nlohmann::json header = {{"format", kFormat},
                             {"model", hex(modelHash(plan))},
                             {"plan", hex(planHash(plan))},
                             {"world_size", plan.worldSize},
                             {"rank", rank},
                             {"steps", steps},
                             {"parameters", withParameters},
                             {"adamw_steps", adamwSteps},
                             {"entries", entries}};
    std::string headerText = header.dump();
    std::string file(kMagic, 8);
    uint64_t headerBytes = headerText.size();
    uint64_t headerHash = fnv(headerText.data(), headerText.size());
    file.append(reinterpret_cast<const char *>(&kVersion), 4);
    file.append(reinterpret_cast<const char *>(&headerBytes), 8);
    file += headerText;
    file.append(reinterpret_cast<const char *>(&headerHash), 8);
    file.append(reinterpret_cast<const char *>(data.data()), data.size() * 4);
    writeOutput(path, file, mine);
  }
  // Every rank wrote its file, or nobody's counts.
  int64_t failed = std::numeric_limits<int64_t>::max();
  if (!comm.allReduceMin(mine.empty() ? failed : rank, failed,
                         options.timeoutSeconds, error)) {
    error = "saving a checkpoint: " + error;
    return false;
  }
  auto abandon = [&](const std::string &why) {
    ::unlink(path.c_str());
    error = why;
    return false;
  };
  if (failed != std::numeric_limits<int64_t>::max())
    return abandon(
        "saving a checkpoint: " +
        (mine.empty() ? "rank " + std::to_string(failed) + " could not write "
                            "its file"
                      : mine) +
        "; the previous checkpoint in '" + dir + "' is unchanged");
  // The manifest makes the save complete.
  std::string manifestError;
  if (rank == 0) {
    nlohmann::json files = nlohmann::json::array();
    for (int64_t r = 0; r < plan.worldSize; ++r)
      files.push_back("state-" + id + "-rank-" + std::to_string(r) + ".bin");
    nlohmann::json params = nlohmann::json::array();
    for (const PlanParam &p : plan.params)
      params.push_back({{"name", p.name},
                        {"shape", p.layout.shape},
                        {"dtype", p.dtype},
                        {"group", p.muon ? "muon" : "adamw"}});
    nlohmann::json manifest = {{"format", kFormat},
                               {"model", hex(modelHash(plan))},
                               {"plan", hex(planHash(plan))},
                               {"world_size", plan.worldSize},
                               {"steps", steps},
                               {"parameters", withParameters},
                               {"params", params},
                               {"files", files}};
    writeOutput(dir + "/" + kManifest, manifest.dump(2) + "\n",
                manifestError);
  }
  int64_t manifestOk = 0;
  if (!comm.allReduceMin(manifestError.empty() ? 1 : 0, manifestOk,
                         options.timeoutSeconds, error)) {
    error = "saving a checkpoint: " + error;
    return false;
  }
  if (!manifestOk)
    return abandon("saving a checkpoint: " +
                   (manifestError.empty()
                        ? std::string("rank 0 could not write the manifest")
                        : manifestError));
  // Files of earlier saves are no longer referenced.
  if (rank == 0)
    if (DIR *d = opendir(dir.c_str())) {
      std::vector<std::string> stale;
      while (dirent *e = readdir(d)) {
        std::string n = e->d_name;
        if (n.rfind("state-", 0) == 0 && n.find("-rank-") != std::string::npos &&
            n.rfind("state-" + id + "-", 0) != 0)
          stale.push_back(dir + "/" + n);
      }
      closedir(d);
      for (const std::string &f : stale)
        ::unlink(f.c_str());
    }
  return true;
}

namespace {

/// Reads and checks one rank file's header (not its data).
bool readRankFile(const std::string &path, const std::string &text,
                  const Plan &plan, RankFile &file, std::string &error) {
  auto bad = [&](const std::string &why) {
    error = "checkpoint file '" + path + "' is damaged or foreign: " + why;
    return false;
  };
  if (text.size() < 20 || std::memcmp(text.data(), kMagic, 8) != 0)
    return bad("it does not start like a muon checkpoint file");
  uint32_t version;
  uint64_t headerBytes;
  std::memcpy(&version, text.data() + 8, 4);
  std::memcpy(&headerBytes, text.data() + 12, 8);
  if (version != kVersion)
    return bad("version " + std::to_string(version) + ", expected " +
               std::to_string(kVersion));
  if (headerBytes > text.size() - 28)
    return bad("it is truncated");
  std::string headerText = text.substr(20, headerBytes);
  uint64_t headerHash;
  std::memcpy(&headerHash, text.data() + 20 + headerBytes, 8);
  if (headerHash != fnv(headerText.data(), headerText.size()))
    return bad("its header does not match its checksum");
  json::Value header;
  json::Error jsonError;
  if (!json::parse(headerText, header, jsonError))
    return bad(jsonError.str());
  json::Reader rd;
  const json::Value *root = rd.object(&header, "");
  if (root && rd.string(json::Reader::get(*root, "format"), "format") !=
                  std::optional<std::string>(kFormat))
    rd.fail("format", std::string("expected \"") + kFormat + "\"");
  file.dataStart = static_cast<int64_t>(28 + headerBytes);
  file.dataElements = (static_cast<int64_t>(text.size()) - file.dataStart) / 4;
  if (root) {
    file.rank = rd.integer(json::Reader::get(*root, "rank"), "rank", 0)
                    .value_or(0);
    file.steps = rd.integer(json::Reader::get(*root, "steps"), "steps", 0)
                     .value_or(0);
    if (const json::Value *a = rd.object(
            json::Reader::get(*root, "adamw_steps"), "adamw_steps"))
      for (auto it = a->begin(); it != a->end() && rd.ok(); ++it)
        file.adamwSteps[it.key()] =
            rd.integer(&it.value(), json::key("adamw_steps", it.key()), 0)
                .value_or(0);
    const json::Value *list =
        rd.array(json::Reader::get(*root, "entries"), "entries");
    for (size_t i = 0; list && i < list->size() && rd.ok(); ++i) {
      std::string p = json::index("entries", i);
      const json::Value *o = rd.object(&(*list)[i], p);
      if (!o)
        break;
      Entry e;
      e.param = rd.string(json::Reader::get(*o, "param"), p + ".param")
                    .value_or("");
      e.state = rd.oneOf(json::Reader::get(*o, "state"), p + ".state",
                         {"momentum", "exp_avg", "exp_avg_sq", "values"})
                    .value_or("");
      e.summands =
          rd.integer(json::Reader::get(*o, "summands"), p + ".summands", 1)
              .value_or(1);
      e.summand = rd.integer(json::Reader::get(*o, "summand"), p + ".summand",
                             0, e.summands - 1)
                      .value_or(0);
      e.offset = rd.integer(json::Reader::get(*o, "offset"), p + ".offset", 0)
                     .value_or(0);
      e.count = rd.integer(json::Reader::get(*o, "count"), p + ".count", 1)
                    .value_or(1);
      std::optional<std::string> h =
          rd.string(json::Reader::get(*o, "hash"), p + ".hash");
      e.hash = h ? std::strtoull(h->c_str(), nullptr, 16) : 0;
      const json::Value *box = rd.array(json::Reader::get(*o, "box"), p + ".box");
      for (size_t d = 0; box && d < box->size() && rd.ok(); ++d) {
        std::optional<std::vector<int64_t>> r =
            rd.integers(&(*box)[d], json::index(p + ".box", d), 0);
        if (r && r->size() != 2)
          rd.fail(json::index(p + ".box", d), "expected [begin, end]");
        if (rd.ok())
          e.box.push_back({(*r)[0], (*r)[1]});
      }
      if (!rd.ok())
        break;
      // Against the model: a known parameter, its group's states, a box
      // inside its shape, data inside the file.
      const PlanParam *param = nullptr;
      for (const PlanParam &q : plan.params)
        if (q.name == e.param)
          param = &q;
      if (!param)
        return bad(p + ": no parameter '" + e.param + "' in this model");
      bool muonState = e.state == "momentum";
      if (e.state != "values" && muonState != param->muon)
        return bad(p + ": a " + e.state + " entry for '" + e.param + "'");
      if (e.box.size() != param->layout.shape.size())
        return bad(p + ".box: expected one range per dim of '" + e.param +
                   "'");
      for (size_t d = 0; d < e.box.size(); ++d)
        if (e.box[d].begin >= e.box[d].end ||
            e.box[d].end > param->layout.shape[d])
          return bad(p + ".box: outside '" + e.param + "'");
      if (e.count != boxElements(e.box) || e.offset > file.dataElements ||
          e.count > file.dataElements - e.offset)
        return bad(p + ": the data does not fit its box or the file");
      file.entries.push_back(std::move(e));
    }
  }
  if (!rd.ok())
    return bad(rd.error().str());
  return true;
}

} // namespace

bool Optimizer::loadCheckpointFiles(const std::string &dir, bool withParameters,
                                    std::string &error) {
  const Plan &plan = thePlan;
  const int64_t rank = comm.rank();
  // Everything is read and cut into staging buffers first; only when every
  // rank succeeded does anything change.
  std::string mine;
  struct Staged {
    std::vector<float> momentum, expAvg, expAvgSq, values;
    int64_t adamwStep = 0;
  };
  std::vector<Staged> staged(slots.size());
  int64_t savedSteps = 0;
  [&] {
    std::string manifestPath = dir + "/" + kManifest, text;
    if (!readAll(manifestPath, text)) {
      mine = "no checkpoint in '" + dir + "' (" + manifestPath +
             " cannot be read)";
      return;
    }
    json::Value manifest;
    json::Error jsonError;
    if (!json::parse(text, manifest, jsonError)) {
      mine = manifestPath + ": " + jsonError.str();
      return;
    }
    json::Reader rd;
    const json::Value *root = rd.object(&manifest, "");
    if (root && rd.string(json::Reader::get(*root, "format"), "format") !=
                    std::optional<std::string>(kFormat))
      rd.fail("format", std::string("expected \"") + kFormat + "\"");
    std::optional<std::string> model =
        root ? rd.string(json::Reader::get(*root, "model"), "model")
             : std::nullopt;
    std::optional<std::vector<std::string>> files;
    if (root)
      if (const json::Value *list =
              rd.array(json::Reader::get(*root, "files"), "files")) {
        files.emplace();
        for (size_t i = 0; i < list->size() && rd.ok(); ++i)
          if (std::optional<std::string> f =
                  rd.string(&(*list)[i], json::index("files", i)))
            files->push_back(*f);
      }
    bool parameters =
        root ? rd.boolean(json::Reader::get(*root, "parameters"), "parameters")
                   .value_or(false)
             : false;
    if (!rd.ok()) {
      mine = manifestPath + ": " + rd.error().str();
      return;
    }
    if (*model != hex(modelHash(plan))) {
      // Name the first difference when the manifest lists its parameters.
      std::string which = "its parameters differ from this model's";
      if (const json::Value *ps = json::Reader::get(*root, "params"))
        if (ps->is_array()) {
          for (size_t i = 0; i < plan.params.size(); ++i) {
            const PlanParam &p = plan.params[i];
            if (i >= ps->size() || !(*ps)[i].is_object() ||
                (*ps)[i].value("name", "") != p.name ||
                (*ps)[i].value("shape", nlohmann::json()) !=
                    nlohmann::json(p.layout.shape) ||
                (*ps)[i].value("dtype", "") != p.dtype) {
              which = "parameter " + std::to_string(i) + " ('" + p.name +
                      "') differs or is missing";
              break;
            }
          }
          if (which.rfind("parameter ", 0) != 0 &&
              ps->size() > plan.params.size())
            which = "it has more parameters than this model";
        }
      mine = "the checkpoint in '" + dir + "' is of another model: " + which;
      return;
    }
    if (withParameters && !parameters) {
      mine = "the checkpoint in '" + dir + "' holds no parameter values";
      return;
    }
    // Every rank file: headers first, then the data this rank needs.
    std::vector<RankFile> ranks;
    std::vector<std::string> texts;
    for (const std::string &f : *files) {
      if (f.find('/') != std::string::npos || f.empty()) {
        mine = manifestPath + ": bad file name '" + f + "'";
        return;
      }
      std::string path = dir + "/" + f, body;
      if (!readAll(path, body)) {
        mine = "checkpoint file '" + path + "' is missing";
        return;
      }
      RankFile rf;
      rf.name = f;
      if (!readRankFile(path, body, plan, rf, mine))
        return;
      ranks.push_back(std::move(rf));
      texts.push_back(std::move(body));
    }
    savedSteps = ranks.empty() ? 0 : ranks.front().steps;
    for (size_t i = 0; i < slots.size(); ++i) {
      const ParamSlot &slot = slots[i];
      if (!slot.elements)
        continue;
      Staged &s = staged[i];
      int64_t summands = 1;
      for (int64_t axis : plan.params[i].layout.partialAxes)
        summands *= plan.mesh.shape[axis];
      // Fills `out` from every entry of `state` (for `summand`, or any
      // when negative); returns the elements covered.
      auto fill = [&](const char *state, int64_t summand,
                      std::vector<float> &out, bool add) -> int64_t {
        std::vector<char> covered(slot.elements, 0);
        int64_t got = 0;
        for (size_t f = 0; f < ranks.size(); ++f)
          for (const Entry &e : ranks[f].entries) {
            if (e.param != slot.name || e.state != state ||
                (summand >= 0 && e.summand != summand))
              continue;
            std::vector<float> host(e.count);
            std::memcpy(host.data(),
                        texts[f].data() + ranks[f].dataStart + e.offset * 4,
                        e.count * 4);
            if (fnv(host.data(), host.size() * 4) != e.hash) {
              mine = "checkpoint file '" + dir + "/" + ranks[f].name +
                     "' is damaged: the " + e.state + " of '" + e.param +
                     "' does not match its checksum";
              return -1;
            }
            got += copyOverlap(host.data(), e.box, out.data(), slot.box,
                               covered, add);
          }
        return got;
      };
      auto require = [&](int64_t got, const char *state) {
        if (got < 0)
          return false;
        if (got != slot.elements && mine.empty())
          mine = "the checkpoint in '" + dir + "' does not cover the " +
                 state + " of rank " + std::to_string(rank) + "'s piece of '" +
                 slot.name + "'";
        return mine.empty();
      };
      if (slot.muon) {
        // Momentum is linear in the gradient, so only the summands' total
        // matters. The same split loads as saved; another gives the whole
        // total to summand 0.
        s.momentum.assign(slot.elements, 0.0f);
        std::set<int64_t> splits;
        for (const RankFile &rf : ranks)
          for (const Entry &e : rf.entries)
            if (e.param == slot.name && e.state == "momentum")
              splits.insert(e.summands);
        if (splits.size() != 1) {
          mine = "the checkpoint in '" + dir + "' has " +
                 (splits.empty() ? "no momentum" : "inconsistent momentum") +
                 " for '" + slot.name + "'";
          return;
        }
        int64_t savedSummands = *splits.begin();
        if (savedSummands == summands) {
          if (!require(fill("momentum", slot.summand, s.momentum, false),
                       "momentum"))
            return;
        } else if (slot.summand == 0) {
          for (int64_t k = 0; k < savedSummands; ++k)
            if (!require(fill("momentum", k, s.momentum, true), "momentum"))
              return;
        }
      } else {
        s.expAvg.assign(slot.elements, 0.0f);
        s.expAvgSq.assign(slot.elements, 0.0f);
        if (!require(fill("exp_avg", -1, s.expAvg, false), "AdamW moments") ||
            !require(fill("exp_avg_sq", -1, s.expAvgSq, false),
                     "AdamW moments"))
          return;
        for (const RankFile &rf : ranks)
          if (auto it = rf.adamwSteps.find(slot.name);
              it != rf.adamwSteps.end())
            s.adamwStep = it->second;
      }
      if (withParameters) {
        if (!slot.bound) {
          mine = "parameter '" + slot.name +
                 "' is not bound, so its values cannot be loaded";
          return;
        }
        s.values.assign(slot.elements, 0.0f);
        if (!require(fill("values", -1, s.values, false), "values"))
          return;
      }
    }
  }();
  // All or nothing.
  int64_t failed = std::numeric_limits<int64_t>::max();
  if (!comm.allReduceMin(mine.empty() ? failed : rank, failed,
                         options.timeoutSeconds, error)) {
    error = "loading a checkpoint: " + error;
    return false;
  }
  if (failed != std::numeric_limits<int64_t>::max()) {
    error = "loading a checkpoint: " +
            (mine.empty() ? "rank " + std::to_string(failed) + " could not "
                                "load its part"
                          : mine) +
            "; nothing was changed";
    return false;
  }
  for (size_t i = 0; i < slots.size(); ++i) {
    const ParamSlot &slot = slots[i];
    if (!slot.elements)
      continue;
    Staged &s = staged[i];
    StepExecutor::State state = executor->state(i);
    int64_t bytes = slot.elements * 4;
    if (slot.muon) {
      device.copyToDevice(state.momentum, s.momentum.data(), bytes);
    } else {
      device.copyToDevice(state.expAvg, s.expAvg.data(), bytes);
      device.copyToDevice(state.expAvgSq, s.expAvgSq.data(), bytes);
      *state.adamwStep = s.adamwStep;
    }
    if (withParameters) {
      std::vector<char> typed(slot.elements * dtypeBytes(slot.dtype));
      for (int64_t e = 0; e < slot.elements; ++e)
        storeAs(typed.data(), slot.dtype, e, s.values[e]);
      device.copyToDevice(values[i], typed.data(), typed.size());
    }
  }
  steps = savedSteps;
  return true;
}

} // namespace muon::runtime
