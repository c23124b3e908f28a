//===- CheckpointFormat.cpp - Checkpoint files, encoded and decoded -------===//
//
// A checkpoint (muon-checkpoint/3) is a directory:
//   state-<id>-rank-<r>.bin   one file per rank of the save: "MUONCKPT", a
//                             u32 version (3), a u64 header length, the
//                             header (JSON: format, checkpoint id, model and
//                             plan hashes, world size, rank, steps, chunk
//                             size), the header's FNV-1a (u64), zeros up to
//                             a 64-byte boundary, the f32 data of every
//                             state slot of every piece, then each slot's
//                             table of chunk hashes (u64 each, keyed with
//                             the state's identity: CheckpointFormat.h)
//   checkpoint.json           the manifest, written last by rank 0: the
//                             model, the step count, the groups' settings,
//                             the index of every file (per piece its
//                             parameter, global box, summand, AdamW step, and
//                             per state slot the byte offset and count of its
//                             data, where its chunk hashes are and the
//                             FNV-1a of that table), and last the
//                             manifest_hash line: FNV-1a of all before it
//
//===----------------------------------------------------------------------===//
#include "muon/Runtime/CheckpointFormat.h"

#include "StateChecks.h"
#include "StateCut.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Runtime/MatrixStep.h"
#include "muon/Runtime/StepExecutor.h"
#include "muon/Support/Fnv.h"
#include "muon/Support/Json.h"
#include "muon/Support/Limits.h"
#include "muon/Support/OutputFile.h"

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <unordered_map>

namespace muon::runtime::checkpoint {

using statecut::boxText;

namespace {

constexpr char kMagic[8] = {'M', 'U', 'O', 'N', 'C', 'K', 'P', 'T'};
/// Magic, version, header length.
constexpr int64_t kPrefixBytes = 20;
/// Data starts on a 64-byte boundary (cache lines; O_DIRECT readers may
/// want more, and can still align their own reads).
constexpr int64_t kDataAlign = 64;
/// The manifest's last line but the closing brace: this, 16 hex digits,
/// then "\"\n}\n".
constexpr std::string_view kHashLine = "  \"manifest_hash\": \"";
constexpr std::string_view kHashLineEnd = "\"\n}\n";

/// What the writer builds: keys stay in the order written, so that a
/// manifest reads top-down (format first, the index last).
using Ordered = nlohmann::ordered_json;

std::string hex(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(v));
  return text;
}

/// Exactly 16 lowercase hex digits (what hex() writes).
bool parseHex(std::string_view text, uint64_t &out) {
  if (text.size() != 16 ||
      text.find_first_not_of("0123456789abcdef") != std::string_view::npos)
    return false;
  out = std::strtoull(std::string(text).c_str(), nullptr, 16);
  return true;
}

/// The bytes an identity hash is taken over: strings with their lengths
/// and integers as 8 bytes, so that no two identities share their bytes.
class IdentityBytes {
public:
  explicit IdentityBytes(std::string_view kind) { text(kind); }
  IdentityBytes &text(std::string_view s) {
    number(static_cast<int64_t>(s.size()));
    bytes.append(s);
    return *this;
  }
  IdentityBytes &number(int64_t v) {
    bytes.append(reinterpret_cast<const char *>(&v), 8);
    return *this;
  }
  uint64_t hash() const { return fnv1a(bytes); }

private:
  std::string bytes;
};

/// What every identity starts with: the format, the checkpoint, its step
/// count, the saving rank and the state's parameter and storage type.
IdentityBytes identityStart(std::string_view kind, const std::string &id,
                            int64_t steps, int64_t rank,
                            const std::string &param, const std::string &dtype,
                            std::string_view state) {
  IdentityBytes bytes(kFormat);
  bytes.text(kind).text(id).number(steps).number(rank).text(param).text(dtype);
  bytes.text("f32").text(state);
  return bytes;
}

uint64_t pieceIdentity(const std::string &id, int64_t steps, int64_t rank,
                       const PlanParam &param, std::string_view slot,
                       const std::vector<Range> &box, int64_t summand,
                       int64_t summands, int64_t step) {
  IdentityBytes bytes =
      identityStart("piece", id, steps, rank, param.name, param.dtype, slot);
  bytes.number(static_cast<int64_t>(box.size()));
  for (const Range &r : box)
    bytes.number(r.begin).number(r.end);
  return bytes.number(summand).number(summands).number(step).hash();
}

uint64_t rowIdentity(const std::string &id, int64_t steps, int64_t rank,
                     const PlanParam &param, std::string_view state,
                     int64_t slice, int64_t rows) {
  return identityStart("rows", id, steps, rank, param.name, param.dtype, state)
      .number(slice)
      .number(rows)
      .hash();
}

/// A state's entry of the index: where its data and chunk hashes are.
Ordered stateEntry(int64_t offset, int64_t bytes, int64_t table,
                   const std::vector<uint64_t> &hashes) {
  return {{"offset", offset},
          {"bytes", bytes},
          {"chunk_hashes", table},
          {"hash", hex(fnv1a(hashes.data(), hashes.size() * 8))}};
}

} // namespace

const char *stateSlotName(int slot) { return statecut::slotName(slot); }
int stateSlotCount() { return statecut::slotCount(); }
int valuesStateSlot() { return statecut::valuesSlot(); }

uint64_t modelHash(const Plan &plan) {
  uint64_t h = fnv1a(std::string_view("muon-model"));
  for (const PlanParam &p : plan.params) {
    // The parameters' algorithms by their Algorithm::modelTag.
    std::string line =
        p.name + "|" + p.dtype + "|" + algorithmOf(p.algorithm).modelTag;
    for (int64_t d : p.layout.shape)
      line += "|" + std::to_string(d);
    h = fnv1a(line.data(), line.size() + 1, h);
  }
  return h;
}

std::string rankFileName(const std::string &id, int64_t rank) {
  return "state-" + id + "-rank-" + std::to_string(rank) + ".bin";
}

int64_t chunkCount(int64_t bytes, int64_t chunkBytes) {
  return (bytes + chunkBytes - 1) / chunkBytes;
}

uint64_t pieceStateIdentity(const Manifest &manifest, const Plan &plan,
                            const SavedPiece &piece, int slot) {
  return pieceIdentity(manifest.id, manifest.steps,
                       static_cast<int64_t>(piece.file),
                       plan.params[piece.param], stateSlotName(slot), piece.box,
                       piece.summand, piece.summands, piece.step);
}

uint64_t rowStateIdentity(const Manifest &manifest, const Plan &plan,
                          const SavedRows &rows) {
  return rowIdentity(manifest.id, manifest.steps,
                     static_cast<int64_t>(rows.file), plan.params[rows.param],
                     matrixSteps()[rows.matrixStep].state, rows.slice,
                     rows.rows);
}

void hashChunks(const void *data, int64_t bytes, int64_t chunkBytes,
                uint64_t identity, int64_t firstChunk, uint64_t *out) {
  fnv1aKeyedChunks(data, static_cast<size_t>(bytes),
                   static_cast<size_t>(chunkBytes), identity,
                   static_cast<uint64_t>(firstChunk), out);
}

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

bool RankFile::write(int fd) const {
  bool ok = writeFully(fd, head.data(), head.size());
  for (size_t k = 0; ok && k < data.size(); ++k)
    ok = writeFully(fd, reinterpret_cast<const char *>(data[k]->data()),
                    data[k]->size() * 4);
  for (size_t k = 0; ok && k < tables.size(); ++k)
    ok = writeFully(fd, reinterpret_cast<const char *>(tables[k].data()),
                    tables[k].size() * 8);
  return ok;
}

std::string RankFile::toBytes() const {
  std::string out = head;
  for (const std::vector<float> *d : data)
    out.append(reinterpret_cast<const char *>(d->data()), d->size() * 4);
  for (const std::vector<uint64_t> &t : tables)
    out.append(reinterpret_cast<const char *>(t.data()), t.size() * 8);
  return out;
}

RankFile encodeRankFile(const Plan &plan, const CheckpointHead &head,
                        int64_t rank, const StateDict &local) {
  std::unordered_map<std::string, const PlanParam *> params;
  for (const PlanParam &p : plan.params)
    params[p.name] = &p;
  static const PlanParam unknown;
  auto paramOf = [&](const std::string &name) -> const PlanParam & {
    auto it = params.find(name);
    return it == params.end() ? unknown : *it->second;
  };
  RankFile out;
  std::string headerText = Ordered({{"format", kFormat},
                                    {"checkpoint_id", head.id},
                                    {"model", hex(modelHash(plan))},
                                    {"plan", hex(planHash(plan))},
                                    {"world_size", plan.worldSize},
                                    {"rank", rank},
                                    {"steps", head.steps},
                                    {"chunk_bytes", kChunkBytes}})
                               .dump();
  uint64_t headerBytes = headerText.size(), headerHash = fnv1a(headerText);
  out.head.assign(kMagic, 8);
  out.head.append(reinterpret_cast<const char *>(&kVersion), 4);
  out.head.append(reinterpret_cast<const char *>(&headerBytes), 8);
  out.head += headerText;
  out.head.append(reinterpret_cast<const char *>(&headerHash), 8);
  out.head.resize((out.head.size() + kDataAlign - 1) / kDataAlign * kDataAlign,
                  0);
  // The data: every state of every piece, in order, then the per-row
  // states; then each state's chunk hashes.
  int64_t offset = static_cast<int64_t>(out.head.size()), tableAt = offset;
  for (const StatePiece &piece : local.pieces)
    for (const auto &[name, values] : piece.states)
      tableAt += static_cast<int64_t>(values.size()) * 4;
  for (const RowStatePiece &row : local.rowStates)
    tableAt += static_cast<int64_t>(row.values.size()) * 4;
  // Adds one state's data and chunk hashes; returns its index entry.
  auto add = [&](const std::vector<float> &values, uint64_t identity) {
    int64_t bytes = static_cast<int64_t>(values.size()) * 4;
    std::vector<uint64_t> &table =
        out.tables.emplace_back(chunkCount(bytes, kChunkBytes));
    hashChunks(values.data(), bytes, kChunkBytes, identity, 0, table.data());
    Ordered entry = stateEntry(offset, bytes, tableAt, table);
    out.data.push_back(&values);
    offset += bytes;
    tableAt += static_cast<int64_t>(table.size()) * 8;
    return entry;
  };
  Ordered pieces = Ordered::array();
  for (const StatePiece &piece : local.pieces) {
    Ordered box = Ordered::array(), states = Ordered::object();
    for (const Range &r : piece.box)
      box.push_back({r.begin, r.end});
    for (const auto &[name, values] : piece.states)
      states[name] =
          add(values, pieceIdentity(head.id, head.steps, rank,
                                    paramOf(piece.param), name, piece.box,
                                    piece.summand, piece.summands, piece.step));
    pieces.push_back({{"param", piece.param},
                      {"box", box},
                      {"summand", piece.summand},
                      {"summands", piece.summands},
                      {"step", piece.step},
                      {"states", states}});
  }
  // The per-row states after the pieces' (by parameter and slice: the
  // owner under another layout takes a matrix's rows whole).
  Ordered rows = Ordered::array();
  for (const RowStatePiece &row : local.rowStates) {
    const int64_t count = static_cast<int64_t>(row.values.size());
    Ordered entry = {{"param", row.param},
                     {"slice", row.slice},
                     {"state", row.state},
                     {"rows", count}};
    entry.update(add(row.values,
                     rowIdentity(head.id, head.steps, rank, paramOf(row.param),
                                 row.state, row.slice, count)));
    rows.push_back(entry);
  }
  out.bytes = tableAt;
  Ordered index = {{"name", rankFileName(head.id, rank)},
                   {"rank", rank},
                   {"bytes", out.bytes},
                   {"pieces", pieces}};
  if (!rows.empty())
    index["row_states"] = rows;
  out.index = index.dump();
  return out;
}

std::string encodeManifest(const Plan &plan, const CheckpointHead &head,
                           const std::vector<PlanGroup> &groups,
                           const std::vector<std::string> &indexes) {
  Ordered fields = {{"format", kFormat},
                    {"checkpoint_id", head.id},
                    {"model", hex(modelHash(plan))},
                    {"plan", hex(planHash(plan))},
                    {"world_size", plan.worldSize},
                    {"steps", head.steps},
                    {"parameters", head.parameters},
                    {"chunk_bytes", kChunkBytes}};
  // One line per field, per parameter, per group and per rank file (its
  // index as the rank made it).
  std::string text = "{\n";
  for (auto it = fields.begin(); it != fields.end(); ++it)
    text += "  \"" + it.key() + "\": " + it.value().dump() + ",\n";
  text += "  \"params\": [";
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const PlanParam &p = plan.params[i];
    text += (i ? ",\n    " : "\n    ") +
            Ordered({{"name", p.name},
                     {"shape", p.layout.shape},
                     {"dtype", p.dtype},
                     {"group", algorithmName(p.algorithm)}})
                .dump();
  }
  text += "\n  ],\n  \"groups\": [";
  for (size_t g = 0; g < groups.size(); ++g) {
    const PlanGroup &group = groups[g];
    Ordered o = {{"name", group.name},
                 {"algorithm", algorithmName(group.algorithm)}};
    // Every setting of the group's algorithm by its name (GroupSettings.h).
    for (const GroupSetting &setting : algorithmOf(group.algorithm).settings) {
      if (!settingWritten(setting, group))
        continue;
      if (setting.kind == GroupSetting::Kind::Name)
        o[setting.name] = settingName(setting, group);
      else if (setting.kind == GroupSetting::Kind::Flag)
        o[setting.name] = settingValue(setting, group) != 0;
      else
        o[setting.name] = settingValue(setting, group);
    }
    text += (g ? ",\n    " : "\n    ") + o.dump();
  }
  text += "\n  ],\n  \"files\": [";
  for (size_t r = 0; r < indexes.size(); ++r)
    text += (r ? ",\n    " : "\n    ") + indexes[r];
  text += "\n  ],\n";
  text += std::string(kHashLine) + hex(fnv1a(text)) + std::string(kHashLineEnd);
  return text;
}

//===----------------------------------------------------------------------===//
// Reading the manifest
//===----------------------------------------------------------------------===//

namespace {

/// Where the manifest_hash line starts (after the body it covers), or npos
/// when the text does not end with one.
size_t hashLineAt(std::string_view text) {
  size_t at = text.rfind("\n" + std::string(kHashLine));
  return at == std::string_view::npos ? at : at + 1;
}

/// Checks the manifest_hash line against the bytes before it. A manifest
/// without the line is refused, by its version when it is of an older
/// format.
Status checkIntegrity(std::string_view text, const std::string &name) {
  size_t at = hashLineAt(text);
  if (at == std::string_view::npos) {
    json::Value old;
    std::string format;
    if (json::parse(text, old).ok() && old.is_object() &&
        old.contains("format") && old["format"].is_string())
      format = old["format"].get<std::string>();
    if (format == "muon-checkpoint/1" || format == "muon-checkpoint/2")
      return invalidArgument(
          name + ": the checkpoint is in the older format " + format +
          " (without a manifest checksum or chunk identities); this "
          "runtime reads " +
          kFormat +
          " only: load it with the runtime that saved it and save it again");
    return dataLoss(name + " is damaged or not a checkpoint manifest: it "
                           "does not end with its manifest_hash line");
  }
  std::string_view line = text.substr(at);
  uint64_t stored = 0;
  if (line.size() != kHashLine.size() + 16 + kHashLineEnd.size() ||
      line.substr(kHashLine.size() + 16) != kHashLineEnd ||
      !parseHex(line.substr(kHashLine.size(), 16), stored))
    return dataLoss(name + " is damaged: its manifest_hash line is not 16 "
                           "hex digits followed by the end of the manifest");
  if (fnv1a(text.substr(0, at)) != stored)
    return dataLoss(name + " is damaged: its content does not match its "
                           "manifest_hash (it was changed after it was "
                           "written)");
  return okStatus();
}

/// Reads a parsed manifest against a plan; the first error sticks.
class ManifestReader {
public:
  ManifestReader(const Plan &plan, const std::string &name, Manifest &out)
      : plan(plan), name(name), out(out) {
    for (size_t i = 0; i < plan.params.size(); ++i)
      paramIndex[plan.params[i].name] = static_cast<int64_t>(i);
  }

  /// InvalidArgument with the first problem, named in full or at its JSON
  /// path.
  Status read(const json::Value &manifest) {
    const json::Value *root = rd.object(&manifest, "");
    if (root && readHead(*root) && readModel(*root) && readGroups(*root))
      readFiles(*root);
    if (problem.empty() && !rd.ok())
      problem = name + ": " + json::describe(rd.error());
    return problem.empty() ? okStatus() : invalidArgument(problem);
  }

private:
  static const json::Value *get(const json::Value &o, const char *k) {
    return json::Reader::get(o, k);
  }
  /// A problem stated in full (not at a JSON path).
  bool fail(const std::string &message) {
    if (problem.empty())
      problem = message;
    return false;
  }
  std::optional<uint64_t> hash(const json::Value *v, const std::string &path) {
    std::optional<std::string> text = rd.string(v, path);
    uint64_t value = 0;
    if (text && !parseHex(*text, value)) {
      rd.fail(path, "expected 16 hex digits");
      return std::nullopt;
    }
    return text ? std::optional<uint64_t>(value) : std::nullopt;
  }

  bool readHead(const json::Value &root) {
    std::optional<std::string> format =
        rd.string(get(root, "format"), "format");
    if (format && *format != kFormat)
      rd.fail("format", std::string("expected \"") + kFormat + "\"");
    auto hexField = [&](const char *key) {
      std::optional<uint64_t> value = hash(get(root, key), key);
      return value ? hex(*value) : std::string();
    };
    out.id = hexField("checkpoint_id");
    out.model = hexField("model");
    out.plan = hexField("plan");
    out.worldSize = rd.limited(get(root, "world_size"), "world_size", 1,
                               limits::kMaxWorldSize, "ranks")
                        .value_or(0);
    out.steps = rd.integer(get(root, "steps"), "steps", 0).value_or(0);
    out.parameters =
        rd.boolean(get(root, "parameters"), "parameters").value_or(false);
    out.chunkBytes =
        rd.integer(get(root, "chunk_bytes"), "chunk_bytes", 4, kMaxChunkBytes)
            .value_or(kChunkBytes);
    if (rd.ok() && out.chunkBytes % 4)
      rd.fail("chunk_bytes", "not a whole number of f32 values");
    return rd.ok();
  }

  bool readModel(const json::Value &root) {
    if (out.model == hex(modelHash(plan)))
      return true;
    // Name the first difference when the manifest lists its parameters.
    std::string which = "its parameters differ from this model's";
    if (const json::Value *ps = get(root, "params"); ps && ps->is_array()) {
      for (size_t i = 0; i < plan.params.size(); ++i) {
        const PlanParam &p = plan.params[i];
        if (i >= ps->size() || !(*ps)[i].is_object() ||
            (*ps)[i].value("name", "") != p.name ||
            (*ps)[i].value("shape", nlohmann::json()) !=
                nlohmann::json(p.layout.shape) ||
            (*ps)[i].value("dtype", "") != p.dtype) {
          return fail(
              name + ": the checkpoint is of another model: parameter " +
              std::to_string(i) + " ('" + p.name + "') differs or is missing");
        }
      }
      if (ps->size() > plan.params.size())
        which = "it has more parameters than this model";
    }
    return fail(name + ": the checkpoint is of another model: " + which);
  }

  /// The groups' settings as saved (checked against the optimizer's
  /// groups by the caller).
  bool readGroups(const json::Value &root) {
    const json::Value *groups = rd.array(get(root, "groups"), "groups");
    for (size_t g = 0; groups && g < groups->size() && rd.ok(); ++g) {
      std::string gp = json::index("groups", g);
      const json::Value *o = rd.object(&(*groups)[g], gp);
      if (!o)
        break;
      std::string name =
          rd.string(get(*o, "name"), gp + ".name").value_or("");
      std::vector<std::string_view> names;
      for (const Algorithm &a : algorithms())
        names.push_back(a.name);
      std::optional<std::string> algorithm =
          rd.oneOf(get(*o, "algorithm"), gp + ".algorithm", names);
      if (!rd.ok())
        break;
      PlanGroup &group = out.groups.emplace_back(
          findAlgorithm(*algorithm).value_or(kMuon));
      group.name = std::move(name);
      // Every setting of its algorithm by its name (GroupSettings.h): the
      // optional ones only where present (they keep their defaults).
      for (const GroupSetting &setting :
           algorithmOf(group.algorithm).settings) {
        const json::Value *v = get(*o, setting.name);
        if (!v && settingOptional(setting))
          continue;
        const std::string path = gp + "." + setting.name;
        if (setting.kind == GroupSetting::Kind::Name) {
          if (std::optional<std::string> text = rd.string(v, path))
            setSettingName(setting, group, *text);
        } else if (setting.kind == GroupSetting::Kind::Flag) {
          if (std::optional<bool> flag = rd.boolean(v, path))
            setSettingValue(setting, group, *flag ? 1.0 : 0.0);
        } else if (std::optional<double> number = rd.number(v, path)) {
          setSettingValue(setting, group, *number);
        }
      }
    }
    return rd.ok();
  }

  void readFiles(const json::Value &root) {
    const json::Value *files = rd.array(get(root, "files"), "files");
    if (files && static_cast<int64_t>(files->size()) != out.worldSize)
      rd.fail("files", std::to_string(files->size()) +
                           " rank files for a save on " +
                           std::to_string(out.worldSize) + " ranks");
    for (size_t f = 0; files && f < files->size() && ok(); ++f) {
      std::string fp = json::index("files", f);
      const json::Value *file = rd.object(&(*files)[f], fp);
      if (!file)
        break;
      ManifestFile &mf = out.files.emplace_back();
      mf.name = rd.string(get(*file, "name"), fp + ".name").value_or("");
      if (rd.ok() && mf.name != rankFileName(out.id, static_cast<int64_t>(f)))
        rd.fail(fp + ".name",
                "expected '" + rankFileName(out.id, static_cast<int64_t>(f)) +
                    "' (this checkpoint's file of rank " + std::to_string(f) +
                    ")");
      rd.integer(get(*file, "rank"), fp + ".rank", static_cast<int64_t>(f),
                 static_cast<int64_t>(f));
      mf.bytes = rd.integer(get(*file, "bytes"), fp + ".bytes", 0).value_or(0);
      const json::Value *pieces =
          rd.array(get(*file, "pieces"), fp + ".pieces");
      for (size_t k = 0; pieces && k < pieces->size() && ok(); ++k)
        readPiece(f, json::index(fp + ".pieces", k), (*pieces)[k]);
      // Per-row states (NorMuon's), by parameter and slice; absent in
      // checkpoints without them.
      const json::Value *rows =
          get(*file, "row_states")
              ? rd.array(get(*file, "row_states"), fp + ".row_states")
              : nullptr;
      for (size_t k = 0; rows && k < rows->size() && ok(); ++k)
        readRows(f, json::index(fp + ".row_states", k), (*rows)[k]);
    }
  }

  bool ok() const { return rd.ok() && problem.empty(); }

  /// A known parameter's index, or nothing (with the error recorded).
  std::optional<int64_t> param(const json::Value &o, const std::string &path) {
    std::string text = rd.string(get(o, "param"), path + ".param").value_or("");
    auto it = paramIndex.find(text);
    if (!rd.ok())
      return std::nullopt;
    if (it == paramIndex.end()) {
      rd.fail(path + ".param", "no parameter '" + text + "' in this model");
      return std::nullopt;
    }
    return it->second;
  }

  /// Reads a state's place; checks it holds `bytes` bytes inside file `f`.
  StateRef stateRef(const json::Value &o, const std::string &path, size_t f,
                    int64_t bytes) {
    StateRef ref;
    ref.offset = rd.integer(get(o, "offset"), path + ".offset", 0).value_or(0);
    ref.bytes = rd.integer(get(o, "bytes"), path + ".bytes", 0).value_or(0);
    ref.table = rd.integer(get(o, "chunk_hashes"), path + ".chunk_hashes", 0)
                    .value_or(0);
    ref.tableHash = hash(get(o, "hash"), path + ".hash").value_or(0);
    const int64_t fileBytes = out.files[f].bytes;
    if (rd.ok() &&
        (ref.bytes != bytes || ref.offset > fileBytes - bytes ||
         ref.table > fileBytes - 8 * chunkCount(bytes, out.chunkBytes)))
      rd.fail(path, "its data or chunk hashes do not fit its box or its file");
    return ref;
  }

  void readPiece(size_t f, const std::string &pp, const json::Value &value) {
    const json::Value *o = rd.object(&value, pp);
    std::optional<int64_t> index = o ? param(*o, pp) : std::nullopt;
    if (!index)
      return;
    SavedPiece &piece = out.pieces.emplace_back();
    piece.file = f;
    piece.param = *index;
    piece.summands =
        rd.integer(get(*o, "summands"), pp + ".summands", 1).value_or(1);
    piece.summand =
        rd.integer(get(*o, "summand"), pp + ".summand", 0).value_or(0);
    piece.step = rd.integer(get(*o, "step"), pp + ".step", 0).value_or(0);
    const json::Value *box = rd.array(get(*o, "box"), pp + ".box");
    if (box && static_cast<int64_t>(box->size()) > limits::kMaxTensorDims)
      rd.fail(pp + ".box", "more dims than the limit of " +
                               limits::describe(limits::kMaxTensorDims));
    for (size_t d = 0; box && d < box->size() && rd.ok(); ++d) {
      std::optional<std::vector<int64_t>> r =
          rd.integers(&(*box)[d], json::index(pp + ".box", d), 0);
      if (r && r->size() != 2)
        rd.fail(json::index(pp + ".box", d), "expected [begin, end]");
      if (rd.ok())
        piece.box.push_back({(*r)[0], (*r)[1]});
    }
    const json::Value *states = rd.object(get(*o, "states"), pp + ".states");
    if (!rd.ok())
      return;
    statecut::Source source;
    source.param = piece.param;
    source.box = piece.box;
    source.summand = piece.summand;
    source.summands = piece.summands;
    const AlgorithmId algorithm = plan.params[piece.param].algorithm;
    for (auto st = states->begin(); st != states->end(); ++st) {
      int slot = statecut::slotNamed(algorithm, st.key());
      if (slot < 0) {
        rd.fail(json::key(pp + ".states", st.key()),
                "unknown state (expected " + statecut::slotNames(algorithm) +
                    ")");
        return;
      }
      source.has[slot] = piece.has[slot] = true;
    }
    if (Status bad = statecut::checkSource(plan, source, pp); !bad.ok()) {
      fail(name + ": " + bad.message());
      return;
    }
    int64_t bytes = 4;
    for (const Range &r : piece.box)
      bytes *= r.size();
    for (auto st = states->begin(); st != states->end() && rd.ok(); ++st) {
      std::string sp = json::key(pp + ".states", st.key());
      if (const json::Value *ref = rd.object(&st.value(), sp))
        piece.states[statecut::slotNamed(algorithm, st.key())] =
            stateRef(*ref, sp, f, bytes);
    }
  }

  void readRows(size_t f, const std::string &rp, const json::Value &value) {
    const json::Value *o = rd.object(&value, rp);
    std::optional<int64_t> index = o ? param(*o, rp) : std::nullopt;
    if (!index)
      return;
    SavedRows &row = out.rows.emplace_back();
    row.file = f;
    row.param = *index;
    std::string state = rd.string(get(*o, "state"), rp + ".state").value_or("");
    row.matrixStep = matrixStepOfState(state);
    if (rd.ok() && row.matrixStep < 0)
      rd.fail(rp + ".state", "unknown state '" + state + "' (expected " +
                                 matrixStateNames() + ")");
    const PlanParam &p = plan.params[row.param];
    if (rd.ok() && (p.layout.shape.size() < 2 || !p.orthogonalized()))
      rd.fail(rp + ".param", "'" + p.name + "' is not a Muon matrix");
    if (!rd.ok())
      return;
    row.slice = rd.integer(get(*o, "slice"), rp + ".slice", 0,
                           p.layout.numMatrices() - 1)
                    .value_or(0);
    row.rows = p.layout.matrixRows();
    rd.integer(get(*o, "rows"), rp + ".rows", row.rows, row.rows);
    if (rd.ok())
      row.ref = stateRef(*o, rp, f, row.rows * 4);
  }

  const Plan &plan;
  const std::string &name;
  Manifest &out;
  json::Reader rd;
  std::string problem;
  std::unordered_map<std::string, int64_t> paramIndex;
};

} // namespace

StatusOr<Manifest> decodeManifest(std::string_view text,
                                  const std::string &name, const Plan &plan) {
  MUON_RETURN_IF_ERROR(checkIntegrity(text, name));
  json::Value manifest;
  if (Status bad = json::parse(text, manifest); !bad.ok())
    return dataLoss(name + ": " + json::describe(bad));
  Manifest out;
  MUON_RETURN_IF_ERROR(ManifestReader(plan, name, out).read(manifest));
  return out;
}

void resealManifest(std::string &text) {
  size_t at = hashLineAt(text);
  if (at != std::string::npos)
    text.resize(at);
  text += std::string(kHashLine) + hex(fnv1a(text)) + std::string(kHashLineEnd);
}

//===----------------------------------------------------------------------===//
// Reading rank files
//===----------------------------------------------------------------------===//

Status MemoryBytes::read(void *to, int64_t count, int64_t offset) {
  const int64_t size = this->size();
  if (count < 0 || offset < 0 || offset > size || count > size - offset)
    return dataLoss("the file ends at byte " + std::to_string(size) +
                    ", before " + std::to_string(offset) + " + " +
                    std::to_string(count));
  std::memcpy(to, bytes.data() + offset, static_cast<size_t>(count));
  return okStatus();
}

Status checkRankFile(RankFileBytes &file, const std::string &name,
                     const Manifest &manifest, size_t index,
                     int64_t &bytesRead) {
  auto bad = [&](const std::string &reason) {
    return dataLoss("checkpoint file '" + name +
                    "' is damaged or foreign: " + reason);
  };
  char prefix[kPrefixBytes];
  if (!file.read(prefix, kPrefixBytes, 0).ok() ||
      std::memcmp(prefix, kMagic, 8) != 0)
    return bad("it does not start like a muon checkpoint file");
  bytesRead += kPrefixBytes;
  uint32_t version;
  uint64_t headerBytes;
  std::memcpy(&version, prefix + 8, 4);
  std::memcpy(&headerBytes, prefix + 12, 8);
  if (version != kVersion)
    return bad("version " + std::to_string(version) + ", expected " +
               std::to_string(kVersion));
  if (file.size() != manifest.files[index].bytes)
    return bad("it has " + std::to_string(file.size()) +
               " bytes, the manifest says " +
               std::to_string(manifest.files[index].bytes));
  if (headerBytes > static_cast<uint64_t>(kMaxHeaderBytes) ||
      kPrefixBytes + static_cast<int64_t>(headerBytes) + 8 > file.size())
    return bad("its header length is out of range");
  std::string header(headerBytes + 8, '\0');
  if (Status read = file.read(header.data(),
                              static_cast<int64_t>(header.size()),
                              kPrefixBytes);
      !read.ok())
    return bad("its header cannot be read: " + read.message());
  bytesRead += static_cast<int64_t>(header.size());
  uint64_t hash;
  std::memcpy(&hash, header.data() + headerBytes, 8);
  header.resize(headerBytes);
  if (hash != fnv1a(header))
    return bad("its header does not match its checksum");
  json::Value h;
  if (!json::parse(header, h).ok() || !h.is_object())
    return bad("its header is not a JSON object");
  // Compared as JSON values: a field of the wrong type differs.
  const std::string id = h.value("checkpoint_id", nlohmann::json()).dump();
  const int64_t rank = static_cast<int64_t>(index);
  if (h.value("checkpoint_id", nlohmann::json()) != manifest.id ||
      h.value("rank", nlohmann::json()) != rank)
    return bad("it is not rank " + std::to_string(rank) +
               "'s file of checkpoint " + manifest.id + " (its header says " +
               "rank " + h.value("rank", nlohmann::json()).dump() +
               " of checkpoint " + id + ")");
  if (h.value("format", nlohmann::json()) != kFormat ||
      h.value("model", nlohmann::json()) != manifest.model ||
      h.value("plan", nlohmann::json()) != manifest.plan ||
      h.value("world_size", nlohmann::json()) != manifest.worldSize ||
      h.value("steps", nlohmann::json()) != manifest.steps ||
      h.value("chunk_bytes", nlohmann::json()) != manifest.chunkBytes)
    return bad("its header's format, model, plan, world size, steps or "
               "chunk size differ from the manifest's");
  return okStatus();
}

Status readChunks(RankFileBytes &file, const std::string &name,
                  const StateRef &ref, uint64_t identity, int64_t chunkBytes,
                  int64_t c0, int64_t c1, const ValueSink &sink,
                  const std::string &what, int64_t &bytesRead,
                  ValueCheck *values) {
  auto damaged = [&] {
    if (values)
      values->first = -1; // damaged data: its values say nothing
    return dataLoss("checkpoint file '" + name + "' is damaged: " + what +
                    " does not match its checksum");
  };
  auto unreadable = [&](const Status &read) {
    return read.withContext("cannot read checkpoint file '" + name + "': ");
  };
  const int64_t chunks = chunkCount(ref.bytes, chunkBytes);
  if (c0 < 0 || c0 > c1 || c1 > chunks)
    return invalidArgument("checkpoint file '" + name + "': chunks " +
                           std::to_string(c0) + " to " + std::to_string(c1) +
                           " of " + what + " asked for, of " +
                           std::to_string(chunks));
  std::vector<uint64_t> table(c1 - c0);
  if (Status read = file.read(table.data(),
                              static_cast<int64_t>(table.size()) * 8,
                              ref.table + c0 * 8);
      !read.ok())
    return unreadable(read);
  bytesRead += static_cast<int64_t>(table.size()) * 8;
  if (c0 == 0 && c1 == chunks &&
      fnv1a(table.data(), table.size() * 8) != ref.tableHash)
    return damaged();
  // Whole chunks, about 1 MiB at a time: read into a buffer that stays in
  // cache while it is hashed, checked and handed on.
  const int64_t blockChunks = std::max<int64_t>(1, (1 << 20) / chunkBytes);
  std::vector<float> block(static_cast<size_t>(
      std::min(blockChunks * chunkBytes,
               std::max<int64_t>(0, ref.bytes - c0 * chunkBytes)) /
      4));
    std::vector<uint64_t> hashes(std::min(blockChunks, c1 - c0));
  for (int64_t c = c0; c < c1; c += blockChunks) {
    const int64_t n = std::min(blockChunks, c1 - c);
    const int64_t from = c * chunkBytes,
                  bytes = std::min((c + n) * chunkBytes, ref.bytes) - from;
    char *at = reinterpret_cast<char *>(block.data());
    if (Status read = file.read(at, bytes, ref.offset + from); !read.ok())
      return unreadable(read);
    bytesRead += bytes;
    hashChunks(at, bytes, chunkBytes, identity, c, hashes.data());
    if (!std::equal(hashes.begin(), hashes.begin() + n,
                    table.begin() + (c - c0)))
      return damaged();
    if (values && values->first < 0) {
      int64_t e = statecut::firstImplausible(block.data(), bytes / 4,
                                             values->nonNegative);
      if (e >= 0) {
        values->first = from / 4 + e;
        values->value = block[e];
      }
    }
    sink(block.data(), bytes / 4);
  }
  return okStatus();
}

} // namespace muon::runtime::checkpoint
