//===- Checkpoint.cpp - Optimizer state saved and loaded by global box ----===//
//
// A checkpoint (muon-checkpoint/2) is a directory:
//   state-<id>-rank-<r>.bin   one file per rank of the save: "MUONCKPT", a
//                             u32 version (2), a u64 header length, the
//                             header (JSON: format, save id, model and plan
//                             hashes, world size, rank, chunk size), the
//                             header's FNV-1a (u64), zeros up to a 64-byte
//                             boundary, the f32 data of every state slot of
//                             every piece, then each slot's table of chunk
//                             hashes (FNV-1a of every 4 KiB of its data, u64)
//   checkpoint.json           the manifest, written last by rank 0: the
//                             model, the step count, and the index of every
//                             file: per piece its parameter, global box,
//                             summand, AdamW step, and per state slot the
//                             byte offset and count of its data, where its
//                             chunk hashes are and the FNV-1a of that table
// Saving is stateDict, then each rank's file, then the manifest from the
// ranks' indexes (gathered to rank 0). Loading reads the manifest, chooses
// the saved states that cover this rank's pieces (StateCut.h, own file
// first), reads only the chunks that hold the overlap, checks each against
// its hash, and cuts them as loadStateDict does. docs/runtime.md,
// "Checkpoints", has the rules.
//
//===----------------------------------------------------------------------===//
#include "muon/Runtime/Optimizer.h"

#include "StateCut.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Runtime/MatrixStep.h"

#include "muon/Support/Fnv.h"
#include "muon/Support/Json.h"
#include "muon/Support/OutputFile.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <dirent.h>
#include <fcntl.h>
#include <fstream>
#include <map>
#include <tuple>
#include <sys/stat.h>
#include <unistd.h>
#include <unordered_map>

namespace muon::runtime {

using namespace statecut;

namespace {

constexpr char kMagic[8] = {'M', 'U', 'O', 'N', 'C', 'K', 'P', 'T'};
constexpr uint32_t kVersion = 2;
constexpr const char *kFormat = "muon-checkpoint/2";
constexpr const char *kManifest = "checkpoint.json";
/// Magic, version, header length.
constexpr int64_t kPrefixBytes = 20;
/// Data starts on a 64-byte boundary (cache lines; O_DIRECT readers may
/// want more, and can still align their own reads).
constexpr int64_t kDataAlign = 64;
/// A rank file's header is a few hundred bytes; more is not ours.
constexpr uint64_t kMaxHeaderBytes = 1 << 20;
/// Data is hashed in chunks of this many bytes, so that a rank that needs
/// part of a saved state reads (and checks) little more than that part:
/// at most one chunk beyond each end of a contiguous stretch, and 8 bytes
/// of hash per chunk (0.2%).
constexpr int64_t kChunkBytes = 4096;

/// What the writer builds: keys stay in the order written, so that a
/// manifest reads top-down (format first, the index last).
using Ordered = nlohmann::ordered_json;

std::string hex(uint64_t v) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(v));
  return text;
}

/// What makes two plans the same model: names, shapes, storage types and
/// the parameters' algorithms (their Algorithm::modelTag), in order (not
/// the layout, nor the hyper-parameters).
uint64_t modelHash(const Plan &plan) {
  uint64_t h = fnv1a(std::string_view("muon-model"));
  for (const PlanParam &p : plan.params) {
    std::string line =
        p.name + "|" + p.dtype + "|" + algorithmOf(p.algorithm).modelTag;
    for (int64_t d : p.layout.shape)
      line += "|" + std::to_string(d);
    h = fnv1a(line.data(), line.size() + 1, h);
  }
  return h;
}

std::string fileName(const std::string &id, int64_t rank) {
  return "state-" + id + "-rank-" + std::to_string(rank) + ".bin";
}

/// Creates `dir` and its missing parents (every rank does; the first
/// creates, the others find it there).
bool makeDirectories(const std::string &dir, std::string &error) {
  for (size_t at = dir.find('/', 1);; at = dir.find('/', at + 1)) {
    std::string prefix = dir.substr(0, at);
    if (::mkdir(prefix.c_str(), 0777) != 0 && errno != EEXIST) {
      error = "cannot create the checkpoint directory '" + prefix +
              "': " + std::strerror(errno);
      return false;
    }
    if (at == std::string::npos)
      return true;
  }
}

/// Flushes a directory's entries, so that files renamed into it survive a
/// crash (writeOutputs flushes the files themselves).
bool syncDirectory(const std::string &dir, std::string &error) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  bool ok = fd >= 0 && ::fsync(fd) == 0;
  if (!ok)
    error = "cannot flush the directory '" + dir + "': " + std::strerror(errno);
  if (fd >= 0)
    ::close(fd);
  return ok;
}

/// Reads `bytes` bytes at `offset` of `fd`, retrying short reads and EINTR.
/// False with errno set (EIO for a read past the end).
bool readFully(int fd, void *to, int64_t bytes, int64_t offset) {
  char *at = static_cast<char *>(to);
  while (bytes > 0) {
    ssize_t got = ::pread(fd, at, static_cast<size_t>(bytes), offset);
    if (got < 0 && errno == EINTR)
      continue;
    if (got <= 0) {
      if (got == 0)
        errno = EIO;
      return false;
    }
    at += got;
    offset += got;
    bytes -= got;
  }
  return true;
}

/// Opens a rank file for reading: its descriptor, or -1 with `error`
/// saying whether it is missing or unreadable.
int openRankFile(const std::string &path, std::string &error) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    error = errno == ENOENT ? "checkpoint file '" + path + "' is missing"
                            : "cannot read checkpoint file '" + path +
                                  "': " + std::strerror(errno);
  return fd;
}

/// Every rank's outcome of its local part (`mine`, empty for success):
/// true when every rank succeeded. Otherwise `error` is this rank's own
/// problem or, on a rank that had none, the first failing rank's, so that
/// every rank's message says what went wrong and where.
bool agree(Communicator &comm, const std::string &mine, double timeoutSeconds,
           std::string &error) {
  std::vector<std::vector<char>> all;
  if (!comm.allGatherBytes(std::vector<char>(mine.begin(), mine.end()), all,
                           timeoutSeconds, error))
    return false;
  if (!mine.empty()) {
    error = mine;
    return false;
  }
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty()) {
      error = "rank " + std::to_string(r) + ": " +
              std::string(all[r].begin(), all[r].end());
      return false;
    }
  return true;
}

/// A saved state's place in its rank file: its data, and its table of
/// chunk hashes with the table's own hash.
struct SlotRef {
  int64_t offset = 0, bytes = 0, table = 0;
  uint64_t hash = 0;
};

int64_t chunkCount(int64_t bytes, int64_t chunkBytes) {
  return (bytes + chunkBytes - 1) / chunkBytes;
}

/// Reads chunks [c0, c1) of the saved state `ref` into `to` and checks
/// each against its hash in the file's table, and the table against the
/// manifest's hash when all of it is read. `what` names the state ("the
/// momentum state of 'w' [0:2, 0:4]") in `error`. Counts what it reads.
bool readChunks(int fd, const std::string &path, const SlotRef &ref,
                int64_t chunkBytes, int64_t c0, int64_t c1, char *to,
                const std::string &what, int64_t &bytesRead,
                std::string &error) {
  const int64_t begin = c0 * chunkBytes,
                end = std::min(c1 * chunkBytes, ref.bytes);
  std::vector<uint64_t> table(c1 - c0);
  if (!readFully(fd, table.data(), static_cast<int64_t>(table.size()) * 8,
                 ref.table + c0 * 8) ||
      !readFully(fd, to, end - begin, ref.offset + begin)) {
    error =
        "cannot read checkpoint file '" + path + "': " + std::strerror(errno);
    return false;
  }
  bytesRead += static_cast<int64_t>(table.size()) * 8 + (end - begin);
  std::vector<uint64_t> hashes(table.size());
  fnv1aChunks(to, end - begin, chunkBytes, hashes.data());
  bool ok =
      hashes == table && (c0 > 0 || c1 < chunkCount(ref.bytes, chunkBytes) ||
                          fnv1a(table.data(), table.size() * 8) == ref.hash);
  if (!ok)
    error = "checkpoint file '" + path + "' is damaged: " + what +
            " does not match its checksum";
  return ok;
}

/// The manifest, as a load needs it.
struct Manifest {
  std::string save; // the save's id
  int64_t steps = 0;
  int64_t chunkBytes = kChunkBytes;
  struct File {
    std::string name;
    int64_t bytes = 0;
  };
  std::vector<File> files; // by saving rank
  /// Every saved piece, with its file and the place of each state.
  struct Piece {
    size_t file = 0;
    Source source;
    std::vector<SlotRef> slots = std::vector<SlotRef>(slotCount());
  };
  std::vector<Piece> pieces;
  /// Every saved per-row state (NorMuon's), with its file and place.
  struct Row {
    size_t file = 0;
    int64_t param = 0, slice = 0, rows = 0;
    int step = 0; // its per-matrix step (MatrixStep.h)
    SlotRef ref;
  };
  std::vector<Row> rows;
  /// The groups' hyper-parameters at the save.
  std::vector<PlanGroup> groups;
};

/// Reads and checks `dir`'s manifest against `plan`: format, model, and
/// every indexed piece (a known parameter, a box inside it, states of its
/// group with byte ranges inside their file).
bool readManifest(const std::string &dir, const Plan &plan, bool withParameters,
                  Manifest &out, int64_t &bytesRead, std::string &error) {
  std::string path = dir + "/" + kManifest, text;
  {
    std::ifstream in(path, std::ios::binary);
    if (in)
      text.assign(std::istreambuf_iterator<char>(in), {});
    if (!in || in.bad()) {
      error = "no checkpoint in '" + dir + "' (" + path + " cannot be read)";
      return false;
    }
  }
  bytesRead = static_cast<int64_t>(text.size());
  json::Value manifest;
  json::Error jsonError;
  if (!json::parse(text, manifest, jsonError)) {
    error = path + ": " + jsonError.str();
    return false;
  }
  json::Reader rd;
  auto get = [](const json::Value &o, const char *k) {
    return json::Reader::get(o, k);
  };
  const json::Value *root = rd.object(&manifest, "");
  std::optional<std::string> format =
      root ? rd.string(get(*root, "format"), "format") : std::nullopt;
  if (format && *format == "muon-checkpoint/1") {
    error = "the checkpoint in '" + dir +
            "' is in the older format muon-checkpoint/1 (no index: every "
            "rank read every file); this runtime reads " +
            kFormat + " only";
    return false;
  }
  if (format && *format != kFormat)
    rd.fail("format", std::string("expected \"") + kFormat + "\"");
  std::optional<std::string> model =
      root ? rd.string(get(*root, "model"), "model") : std::nullopt;
  if (rd.ok() && *model != hex(modelHash(plan))) {
    // Name the first difference when the manifest lists its parameters.
    std::string which = "its parameters differ from this model's";
    if (const json::Value *ps = get(*root, "params"))
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
    error = "the checkpoint in '" + dir + "' is of another model: " + which;
    return false;
  }
  if (root) {
    out.save = rd.string(get(*root, "save"), "save").value_or("");
    out.steps = rd.integer(get(*root, "steps"), "steps", 0).value_or(0);
    out.chunkBytes = rd.integer(get(*root, "chunk_bytes"), "chunk_bytes", 4,
                                int64_t(1) << 30)
                         .value_or(kChunkBytes);
    if (rd.ok() && out.chunkBytes % 4)
      rd.fail("chunk_bytes", "not a whole number of f32 values");
    // The groups' settings as saved (checked against the optimizer's
    // groups by the caller).
    const json::Value *groups = rd.array(get(*root, "groups"), "groups");
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
  }
  bool parameters =
      root ? rd.boolean(get(*root, "parameters"), "parameters").value_or(false)
           : false;
  if (rd.ok() && withParameters && !parameters) {
    error = "the checkpoint in '" + dir + "' holds no parameter values";
    return false;
  }
  std::unordered_map<std::string, int64_t> paramIndex;
  for (size_t i = 0; i < plan.params.size(); ++i)
    paramIndex[plan.params[i].name] = static_cast<int64_t>(i);
  const json::Value *files =
      root ? rd.array(get(*root, "files"), "files") : nullptr;
  for (size_t f = 0; files && f < files->size() && rd.ok(); ++f) {
    std::string fp = json::index("files", f);
    const json::Value *file = rd.object(&(*files)[f], fp);
    if (!file)
      break;
    Manifest::File &mf = out.files.emplace_back();
    mf.name = rd.string(get(*file, "name"), fp + ".name").value_or("");
    if (rd.ok() && (mf.name.empty() || mf.name.find('/') != std::string::npos))
      rd.fail(fp + ".name", "not a file name: '" + mf.name + "'");
    rd.integer(get(*file, "rank"), fp + ".rank", static_cast<int64_t>(f),
               static_cast<int64_t>(f));
    mf.bytes = rd.integer(get(*file, "bytes"), fp + ".bytes", 0).value_or(0);
    const json::Value *pieces = rd.array(get(*file, "pieces"), fp + ".pieces");
    for (size_t k = 0; pieces && k < pieces->size() && rd.ok(); ++k) {
      std::string pp = json::index(fp + ".pieces", k);
      const json::Value *o = rd.object(&(*pieces)[k], pp);
      if (!o)
        break;
      Manifest::Piece &piece = out.pieces.emplace_back();
      piece.file = f;
      Source &s = piece.source;
      std::string name =
          rd.string(get(*o, "param"), pp + ".param").value_or("");
      auto it = paramIndex.find(name);
      if (rd.ok() && it == paramIndex.end()) {
        rd.fail(pp + ".param", "no parameter '" + name + "' in this model");
        break;
      }
      if (!rd.ok())
        break;
      s.param = it->second;
      s.summands =
          rd.integer(get(*o, "summands"), pp + ".summands", 1).value_or(1);
      s.summand =
          rd.integer(get(*o, "summand"), pp + ".summand", 0).value_or(0);
      s.step = rd.integer(get(*o, "step"), pp + ".step", 0).value_or(0);
      const json::Value *box = rd.array(get(*o, "box"), pp + ".box");
      for (size_t d = 0; box && d < box->size() && rd.ok(); ++d) {
        std::optional<std::vector<int64_t>> r =
            rd.integers(&(*box)[d], json::index(pp + ".box", d), 0);
        if (r && r->size() != 2)
          rd.fail(json::index(pp + ".box", d), "expected [begin, end]");
        if (rd.ok())
          s.box.push_back({(*r)[0], (*r)[1]});
      }
      const json::Value *states = rd.object(get(*o, "states"), pp + ".states");
      for (auto st = states ? states->begin() : json::Value::const_iterator();
           states && st != states->end() && rd.ok(); ++st) {
        std::string sp = json::key(pp + ".states", st.key());
        const AlgorithmId algorithm = plan.params[s.param].algorithm;
        int slot = slotNamed(algorithm, st.key());
        if (slot < 0) {
          rd.fail(sp, "unknown state (expected " + slotNames(algorithm) + ")");
          break;
        }
        const json::Value *ref = rd.object(&st.value(), sp);
        if (!ref)
          break;
        SlotRef &at = piece.slots[slot];
        at.offset =
            rd.integer(get(*ref, "offset"), sp + ".offset", 0).value_or(0);
        at.bytes = rd.integer(get(*ref, "bytes"), sp + ".bytes", 0).value_or(0);
        at.table =
            rd.integer(get(*ref, "chunk_hashes"), sp + ".chunk_hashes", 0)
                .value_or(0);
        std::optional<std::string> h =
            rd.string(get(*ref, "hash"), sp + ".hash");
        if (h && (h->size() != 16 || h->find_first_not_of("0123456789abcdef") !=
                                         std::string::npos))
          rd.fail(sp + ".hash", "expected 16 hex digits");
        at.hash = h ? std::strtoull(h->c_str(), nullptr, 16) : 0;
        s.has[slot] = true;
      }
      if (!rd.ok())
        break;
      std::string why;
      if (!checkSource(plan, s, pp, why)) {
        error = path + ": " + why;
        return false;
      }
      int64_t bytes = 4;
      for (const Range &r : s.box)
        bytes *= r.size();
      for (int slot = 0; slot < slotCount() && rd.ok(); ++slot) {
        const SlotRef &at = piece.slots[slot];
        if (s.has[slot] &&
            (at.bytes != bytes || at.offset > mf.bytes - bytes ||
             at.table > mf.bytes - 8 * chunkCount(bytes, out.chunkBytes)))
          rd.fail(json::key(pp + ".states", slotName(slot)),
                  "its data or chunk hashes do not fit its box or its file");
      }
    }
    // Per-row states (NorMuon's), by parameter and slice; absent in
    // checkpoints without them.
    const json::Value *rows = get(*file, "row_states")
                                  ? rd.array(get(*file, "row_states"),
                                             fp + ".row_states")
                                  : nullptr;
    for (size_t k = 0; rows && k < rows->size() && rd.ok(); ++k) {
      std::string rp = json::index(fp + ".row_states", k);
      const json::Value *o = rd.object(&(*rows)[k], rp);
      if (!o)
        break;
      Manifest::Row &row = out.rows.emplace_back();
      row.file = f;
      std::string name =
          rd.string(get(*o, "param"), rp + ".param").value_or("");
      auto it = paramIndex.find(name);
      if (rd.ok() && it == paramIndex.end()) {
        rd.fail(rp + ".param", "no parameter '" + name + "' in this model");
        break;
      }
      std::string state =
          rd.string(get(*o, "state"), rp + ".state").value_or("");
      row.step = matrixStepOfState(state);
      if (rd.ok() && row.step < 0)
        rd.fail(rp + ".state", "unknown state '" + state + "' (expected " +
                                   matrixStateNames() + ")");
      if (!rd.ok())
        break;
      row.param = it->second;
      const ParamLayout &layout = plan.params[row.param].layout;
      const std::vector<int64_t> &shape = layout.shape;
      if (shape.size() < 2 || !plan.params[row.param].orthogonalized()) {
        rd.fail(rp + ".param", "'" + name + "' is not a Muon matrix");
        break;
      }
      row.slice = rd.integer(get(*o, "slice"), rp + ".slice", 0,
                             layout.numMatrices() - 1)
                      .value_or(0);
      row.rows = layout.matrixRows();
      rd.integer(get(*o, "rows"), rp + ".rows", row.rows, row.rows);
      row.ref.offset =
          rd.integer(get(*o, "offset"), rp + ".offset", 0).value_or(0);
      row.ref.bytes =
          rd.integer(get(*o, "bytes"), rp + ".bytes", 0).value_or(0);
      row.ref.table =
          rd.integer(get(*o, "chunk_hashes"), rp + ".chunk_hashes", 0)
              .value_or(0);
      std::optional<std::string> h = rd.string(get(*o, "hash"), rp + ".hash");
      if (h && (h->size() != 16 || h->find_first_not_of("0123456789abcdef") !=
                                       std::string::npos))
        rd.fail(rp + ".hash", "expected 16 hex digits");
      row.ref.hash = h ? std::strtoull(h->c_str(), nullptr, 16) : 0;
      const int64_t bytes = row.rows * 4;
      if (rd.ok() &&
          (row.ref.bytes != bytes || row.ref.offset > mf.bytes - bytes ||
           row.ref.table > mf.bytes - 8 * chunkCount(bytes, out.chunkBytes)))
        rd.fail(rp, "its data or chunk hashes do not fit its rows or its file");
    }
  }
  if (!rd.ok()) {
    error = path + ": " + rd.error().str();
    return false;
  }
  return true;
}

/// Checks the header of an open rank file against the manifest: a muon
/// checkpoint file of this save, of the rank the manifest says, of the
/// size it says. Counts the bytes it reads.
bool checkRankFile(int fd, const std::string &path, const Manifest &manifest,
                   size_t file, int64_t &bytesRead, std::string &error) {
  auto bad = [&](const std::string &why) {
    error = "checkpoint file '" + path + "' is damaged or foreign: " + why;
    return false;
  };
  char prefix[kPrefixBytes];
  uint32_t version;
  uint64_t headerBytes;
  if (!readFully(fd, prefix, kPrefixBytes, 0))
    return bad("it does not start like a muon checkpoint file");
  bytesRead += kPrefixBytes;
  std::memcpy(&version, prefix + 8, 4);
  std::memcpy(&headerBytes, prefix + 12, 8);
  if (std::memcmp(prefix, kMagic, 8) != 0)
    return bad("it does not start like a muon checkpoint file");
  if (version != kVersion)
    return bad("version " + std::to_string(version) + ", expected " +
               std::to_string(kVersion));
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size != manifest.files[file].bytes)
    return bad("it has " + std::to_string(st.st_size) +
               " bytes, the manifest says " +
               std::to_string(manifest.files[file].bytes));
  if (headerBytes > kMaxHeaderBytes ||
      kPrefixBytes + static_cast<int64_t>(headerBytes) + 8 > st.st_size)
    return bad("its header length is out of range");
  std::string header(headerBytes + 8, '\0');
  if (!readFully(fd, header.data(), header.size(), kPrefixBytes))
    return bad(std::string("its header cannot be read: ") +
               std::strerror(errno));
  bytesRead += static_cast<int64_t>(header.size());
  uint64_t hash;
  std::memcpy(&hash, header.data() + headerBytes, 8);
  header.resize(headerBytes);
  if (hash != fnv1a(header))
    return bad("its header does not match its checksum");
  json::Value h;
  json::Error jsonError;
  if (!json::parse(header, h, jsonError) || !h.is_object())
    return bad("its header is not a JSON object");
  if (h.value("format", "") != kFormat ||
      h.value("save", "") != manifest.save ||
      h.value("rank", int64_t(-1)) != static_cast<int64_t>(file))
    return bad("it is not rank " + std::to_string(file) + "'s file of save " +
               manifest.save);
  return true;
}

} // namespace

bool Optimizer::saveCheckpointFiles(const std::string &dir, bool withParameters,
                                    std::string &error) {
  const Plan &plan = thePlan;
  const int64_t rank = comm.rank();
  // One name for this save on every rank (rank 0's random id).
  uint64_t proposal =
      fnv1a(&rank, sizeof(rank),
            static_cast<uint64_t>(
                std::chrono::steady_clock::now().time_since_epoch().count()) ^
                (static_cast<uint64_t>(getpid()) << 32));
  std::vector<uint64_t> ids;
  if (!comm.allGather(proposal, ids, options.timeoutSeconds, error)) {
    error = "saving a checkpoint: " + error;
    return false;
  }
  const std::string id = hex(ids[0]);
  const std::string path = dir + "/" + fileName(id, rank);

  // This rank's file, and its entry of the manifest's index (compact JSON).
  std::string mine, index;
  bool wrote = false;
  [&] {
    if (dir.empty()) {
      mine = "no checkpoint directory given (the path is empty)";
      return;
    }
    if (!makeDirectories(dir, mine))
      return;
    StateDict local;
    if (!stateDictImpl(withParameters, local, mine))
      return;
    Ordered header = {{"format", kFormat},
                      {"save", id},
                      {"model", hex(modelHash(plan))},
                      {"plan", hex(planHash(plan))},
                      {"world_size", plan.worldSize},
                      {"rank", rank},
                      {"chunk_bytes", kChunkBytes}};
    std::string headerText = header.dump();
    uint64_t headerBytes = headerText.size(), headerHash = fnv1a(headerText);
    std::string head(kMagic, 8);
    head.append(reinterpret_cast<const char *>(&kVersion), 4);
    head.append(reinterpret_cast<const char *>(&headerBytes), 8);
    head += headerText;
    head.append(reinterpret_cast<const char *>(&headerHash), 8);
    head.resize((head.size() + kDataAlign - 1) / kDataAlign * kDataAlign, 0);
    // The data: every state of every piece, in order; then each state's
    // chunk hashes.
    std::vector<const std::vector<float> *> data;
    std::vector<std::vector<uint64_t>> tables;
    int64_t dataEnd = static_cast<int64_t>(head.size());
    for (const StatePiece &piece : local.pieces)
      for (const auto &[name, values] : piece.states)
        dataEnd += static_cast<int64_t>(values.size()) * 4;
    for (const RowStatePiece &row : local.rowStates)
      dataEnd += static_cast<int64_t>(row.values.size()) * 4;
    int64_t offset = static_cast<int64_t>(head.size()), tableAt = dataEnd;
    Ordered pieces = Ordered::array();
    for (const StatePiece &piece : local.pieces) {
      Ordered box = Ordered::array(), states;
      for (const Range &r : piece.box)
        box.push_back({r.begin, r.end});
      for (const auto &[name, values] : piece.states) {
        int64_t bytes = static_cast<int64_t>(values.size()) * 4;
        const char *at = reinterpret_cast<const char *>(values.data());
        std::vector<uint64_t> &table =
            tables.emplace_back(chunkCount(bytes, kChunkBytes));
        fnv1aChunks(at, bytes, kChunkBytes, table.data());
        states[name] = {{"offset", offset},
                        {"bytes", bytes},
                        {"chunk_hashes", tableAt},
                        {"hash", hex(fnv1a(table.data(), table.size() * 8))}};
        data.push_back(&values);
        offset += bytes;
        tableAt += static_cast<int64_t>(table.size()) * 8;
      }
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
      int64_t bytes = static_cast<int64_t>(row.values.size()) * 4;
      const char *at = reinterpret_cast<const char *>(row.values.data());
      std::vector<uint64_t> &table =
          tables.emplace_back(chunkCount(bytes, kChunkBytes));
      fnv1aChunks(at, bytes, kChunkBytes, table.data());
      rows.push_back({{"param", row.param},
                      {"slice", row.slice},
                      {"state", row.state},
                      {"rows", static_cast<int64_t>(row.values.size())},
                      {"offset", offset},
                      {"bytes", bytes},
                      {"chunk_hashes", tableAt},
                      {"hash", hex(fnv1a(table.data(), table.size() * 8))}});
      data.push_back(&row.values);
      offset += bytes;
      tableAt += static_cast<int64_t>(table.size()) * 8;
    }
    Ordered entry = {{"name", fileName(id, rank)},
                     {"rank", rank},
                     {"bytes", tableAt},
                     {"pieces", pieces}};
    if (!rows.empty())
      entry["row_states"] = rows;
    index = entry.dump();
    // Written straight from the state dict: a large state is not copied
    // into one buffer first.
    StreamedOutput file{
        path, [&](int fd, bool, std::string &why) {
          bool ok = writeFully(fd, head.data(), head.size());
          for (size_t k = 0; ok && k < data.size(); ++k)
            ok = writeFully(fd, reinterpret_cast<const char *>(data[k]->data()),
                            data[k]->size() * 4);
          for (size_t k = 0; ok && k < tables.size(); ++k)
            ok =
                writeFully(fd, reinterpret_cast<const char *>(tables[k].data()),
                           tables[k].size() * 8);
          if (!ok)
            why = std::strerror(errno);
          return ok;
        }};
    if (writeOutputs({}, {file}, mine) && syncDirectory(dir, mine))
      wrote = true;
  }();
  // Rank 0 collects the index; then every rank wrote its file, or nobody's
  // counts.
  std::vector<std::vector<char>> indexes;
  if (!comm.gatherToRoot(std::vector<char>(index.begin(), index.end()), indexes,
                         options.timeoutSeconds, error)) {
    error = "saving a checkpoint: " + error;
    return false;
  }
  auto abandon = [&]() {
    if (wrote)
      ::unlink(path.c_str());
    error = "saving a checkpoint: " + error + "; the previous checkpoint in '" +
            dir + "' is unchanged";
    return false;
  };
  if (!agree(comm, mine, options.timeoutSeconds, error))
    return abandon();
  // The manifest makes the save complete.
  std::string manifestError;
  if (rank == 0) {
    Ordered head = {{"format", kFormat},
                    {"save", id},
                    {"model", hex(modelHash(plan))},
                    {"plan", hex(planHash(plan))},
                    {"world_size", plan.worldSize},
                    {"steps", steps},
                    {"parameters", withParameters},
                    {"chunk_bytes", kChunkBytes}};
    // One line per field, per parameter and per rank file (its index as
    // the rank made it).
    std::string text = "{\n";
    for (auto it = head.begin(); it != head.end(); ++it)
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
    const std::vector<PlanGroup> &groups = executor->groups();
    for (size_t g = 0; g < groups.size(); ++g) {
      const PlanGroup &group = groups[g];
      Ordered o = {{"name", group.name},
                   {"algorithm", algorithmName(group.algorithm)}};
      // Every setting of the group's algorithm by its name (GroupSettings.h).
      for (const GroupSetting &setting :
           algorithmOf(group.algorithm).settings) {
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
      text += (r ? ",\n    " : "\n    ") +
              std::string(indexes[r].begin(), indexes[r].end());
    text += "\n  ]\n}\n";
    if (writeOutput(dir + "/" + kManifest, text, manifestError))
      syncDirectory(dir, manifestError);
  }
  if (!agree(comm, manifestError, options.timeoutSeconds, error))
    return abandon();
  // Files of earlier saves are no longer referenced.
  if (rank == 0)
    if (DIR *d = opendir(dir.c_str())) {
      std::vector<std::string> stale;
      while (dirent *e = readdir(d)) {
        std::string n = e->d_name;
        if (n.rfind("state-", 0) == 0 &&
            n.find("-rank-") != std::string::npos &&
            n.rfind("state-" + id + "-", 0) != 0)
          stale.push_back(dir + "/" + n);
      }
      closedir(d);
      for (const std::string &f : stale)
        ::unlink(f.c_str());
    }
  return true;
}

bool Optimizer::loadCheckpointFiles(const std::string &dir, bool withParameters,
                                    std::string &error) {
  const Plan &plan = thePlan;
  const int64_t rank = comm.rank();
  ioCounters = {};
  // Everything is read, checked and cut into `local` first; only when every
  // rank succeeded does anything change.
  StateDict local;
  std::string mine;
  [&] {
    if (dir.empty()) {
      mine = "no checkpoint directory given (the path is empty)";
      return;
    }
    if (withParameters)
      for (const ParamSlot &slot : slots)
        if (slot.elements && !slot.bound) {
          mine = "parameter '" + slot.name +
                 "' is not bound, so its values cannot be loaded";
          return;
        }
    Manifest manifest;
    if (!readManifest(dir, plan, withParameters, manifest,
                      ioCounters.manifestBytes, mine))
      return;
    mine = checkSavedGroups(manifest.groups);
    if (!mine.empty()) {
      mine = "the checkpoint in '" + dir + "': " + mine;
      return;
    }
    const std::string what = "the checkpoint in '" + dir + "'";
    // This rank's own file first: a resume on the same layout finds all
    // it needs there and opens nothing else.
    std::vector<Source> sources;
    std::vector<const Manifest::Piece *> pieceOf;
    for (bool own : {true, false})
      for (const Manifest::Piece &p : manifest.pieces)
        if ((static_cast<int64_t>(p.file) == rank) == own) {
          sources.push_back(p.source);
          pieceOf.push_back(&p);
        }
    std::vector<int64_t> splits;
    std::vector<std::vector<bool>> used;
    if (!checkSplits(plan, sources, what, splits, mine) ||
        !cut(plan, rank, slots, sources, splits, withParameters, what, nullptr,
             &used, mine))
      return;
    // The sources the cut uses, by file.
    std::map<size_t, std::vector<size_t>> byFile;
    for (size_t k = 0; k < sources.size(); ++k)
      if (std::find(used[k].begin(), used[k].end(), true) != used[k].end())
        byFile[pieceOf[k]->file].push_back(k);
    // Each needed file opened once; of each used state, only the chunks
    // that hold its overlap with this rank's piece, each checked against
    // its hash. What is read becomes a source of its own: the overlap box
    // and its data.
    std::vector<Source> readOf(sources.size());
    std::deque<std::vector<float>> buffers; // stable addresses
    std::vector<char> scratch;
    std::vector<std::array<int64_t, 3>> runs; // from, to, length
    const int64_t chunk = manifest.chunkBytes;
    for (const auto &[file, list] : byFile) {
      std::string path = dir + "/" + manifest.files[file].name;
      int fd = openRankFile(path, mine);
      if (fd < 0)
        return;
      ++ioCounters.filesOpened;
      bool ok = checkRankFile(fd, path, manifest, file,
                              ioCounters.rankFileBytes, mine);
      for (size_t n = 0; ok && n < list.size(); ++n) {
        const size_t k = list[n];
        const Source &src = sources[k];
        Source &r = readOf[k];
        r = src;
        intersect(src.box, slots[src.param].box, r.box);
        const bool whole = r.box == src.box;
        int64_t elements = 1;
        for (const Range &range : r.box)
          elements *= range.size();
        runs.clear();
        if (!whole)
          forEachRun(src.box, r.box,
                     [&](int64_t from, int64_t to, int64_t length) {
                       runs.push_back({from, to, length});
                     });
        for (int s = 0; ok && s < slotCount(); ++s) {
          r.has[s] = used[k][s];
          r.data[s] = nullptr;
          if (!used[k][s])
            continue;
          const SlotRef &ref = pieceOf[k]->slots[s];
          std::vector<float> &buffer = buffers.emplace_back(elements);
          r.data[s] = buffer.data();
          r.own[s] = &buffer;
          ++ioCounters.slotsRead;
          const std::string what = std::string("the ") + slotName(s) +
                                   " state of '" + plan.params[src.param].name +
                                   "' " + boxText(src.box);
          if (whole) {
            ok = readChunks(fd, path, ref, chunk, 0,
                            chunkCount(ref.bytes, chunk),
                            reinterpret_cast<char *>(buffer.data()), what,
                            ioCounters.rankFileBytes, mine);
            continue;
          }
          // Runs whose chunks touch are read together: one pread for a
          // stretch of rows, one per run where the runs lie far apart.
          for (size_t next = 0; ok && next < runs.size();) {
            int64_t c0 = runs[next][0] * 4 / chunk,
                    c1 = ((runs[next][0] + runs[next][2]) * 4 + chunk - 1) /
                         chunk;
            size_t last = next + 1;
            for (; last < runs.size() && runs[last][0] * 4 / chunk <= c1;
                 ++last)
              c1 = std::max(c1,
                            ((runs[last][0] + runs[last][2]) * 4 + chunk - 1) /
                                chunk);
            scratch.resize((c1 - c0) * chunk);
            ok = readChunks(fd, path, ref, chunk, c0, c1, scratch.data(), what,
                            ioCounters.rankFileBytes, mine);
            for (; ok && next < last; ++next)
              std::memcpy(buffer.data() + runs[next][1],
                          scratch.data() + runs[next][0] * 4 - c0 * chunk,
                          runs[next][2] * 4);
            next = last;
          }
        }
      }
      ::close(fd);
      if (!ok)
        return;
    }
    // The same cut on what was read, in the same order, now copying.
    std::vector<Source> read;
    for (size_t k = 0; k < sources.size(); ++k)
      if (readOf[k].param >= 0)
        read.push_back(std::move(readOf[k]));
    if (!cut(plan, rank, slots, read, splits, withParameters, what, &local,
             nullptr, mine))
      return;
    // The per-row states of the matrices this rank owns: each read whole,
    // from this rank's own file when it holds it.
    std::vector<RowStatePiece> savedRows;
    std::map<std::tuple<int64_t, int64_t, int>, const Manifest::Row *> rowOf;
    for (bool own : {true, false})
      for (const Manifest::Row &row : manifest.rows)
        if ((static_cast<int64_t>(row.file) == rank) == own)
          rowOf.emplace(std::make_tuple(row.param, row.slice, row.step), &row);
    for (const StepExecutor::RowSlot &slot : executor->rowSlots()) {
      const PlanMatrix &m = plan.matrices[slot.matrix];
      const char *state = matrixSteps()[slot.step].state;
      auto it = rowOf.find(
          {m.paramIndex, std::max<int64_t>(m.slice, 0), slot.step});
      if (it == rowOf.end())
        continue; // cutRowStates decides
      const Manifest::Row &row = *it->second;
      std::string path = dir + "/" + manifest.files[row.file].name;
      int fd = openRankFile(path, mine);
      if (fd < 0)
        return;
      ++ioCounters.filesOpened;
      RowStatePiece &saved = savedRows.emplace_back();
      saved.param = m.param;
      saved.slice = row.slice;
      saved.state = state;
      saved.values.resize(row.rows);
      ++ioCounters.slotsRead;
      bool ok = checkRankFile(fd, path, manifest, row.file,
                              ioCounters.rankFileBytes, mine) &&
                readChunks(fd, path, row.ref, chunk, 0,
                           chunkCount(row.ref.bytes, chunk),
                           reinterpret_cast<char *>(saved.values.data()),
                           std::string("the ") + state + " state of " +
                               m.label(),
                           ioCounters.rankFileBytes, mine);
      ::close(fd);
      if (!ok)
        return;
    }
    if (!cutRowStates(savedRows, manifest.groups, what, local.rowStates,
                      mine))
      return;
    local.steps = manifest.steps;
    local.groups = manifest.groups;
  }();
  // All or nothing.
  if (!agree(comm, mine, options.timeoutSeconds, error)) {
    error = "loading a checkpoint: " + error + "; nothing was changed";
    return false;
  }
  applyState(local, withParameters);
  return true;
}

} // namespace muon::runtime
