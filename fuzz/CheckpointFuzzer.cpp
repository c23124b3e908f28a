//===- CheckpointFuzzer.cpp - Fuzz the checkpoint readers -----------------===//
//
// Input: a checkpoint as one byte string, its manifest and then each rank
// file, separated by kSeparator. The manifest reader (decodeManifest) and
// the rank-file readers (checkRankFile, readChunks) run on it against a
// fixed model, three times: as it is; with the manifest's hash made to
// match (resealManifest); and with the rank files' header hashes made to
// match too, as an editor would, so that damage reaches every check behind
// the hashes. Whatever the bytes, nothing may crash or read out of bounds.
//
// And the chunk identities must hold: where a rank file is byte for byte
// one the writer wrote (the base checkpoints, written with the format's own
// encoder at start-up), every chunk a reader verifies, whatever the
// manifest says, is the writer's bytes of that chunk of the state of that
// identity: no edit of the index makes one state's data load as another's.
// (Where the rank file's bytes are changed too, nothing is asserted: the
// hashes are checksums, not signatures, and libFuzzer's comparison tracing
// can write a computed hash into the input, as anyone who edits a file on
// purpose can.)
//
// `muon-checkpoint-fuzzer --write-seeds=DIR` writes the base checkpoint
// (and a one-rank one) as seeds and exits (fuzz/run.sh does).
//
//===----------------------------------------------------------------------===//
#include "FuzzChecks.h"

#include "muon/Runtime/CheckpointFormat.h"
#include "muon/Runtime/MatrixStep.h"
#include "muon/Runtime/Testing/Synthetic.h"
#include "muon/Support/Fnv.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <string_view>
#include <vector>

using namespace muon;
using namespace muon::runtime;
using namespace muon::runtime::checkpoint;

namespace {

constexpr std::string_view kSeparator = "\n--muon-checkpoint-file--\n";

/// The model every input is read against: a Muon matrix, a batched Muon
/// parameter, an AdamW matrix whose states span two 4 KiB chunks (a last
/// chunk read alone is a partial read), and an AdamW vector.
const Plan &model() {
  static const Plan plan = [] {
    Plan p;
    auto add = [&](const char *name, std::vector<int64_t> shape,
                   AlgorithmId algorithm) {
      PlanParam q;
      q.name = name;
      q.algorithm = algorithm;
      q.group = algorithm == kMuon ? 0 : 1;
      q.layout.shape = std::move(shape);
      q.layout.splitAxes.assign(q.layout.shape.size(), {});
      p.params.push_back(q);
    };
    add("w", {6, 8}, kMuon);
    add("stack", {2, 3, 5}, kMuon);
    add("emb", {520, 4}, kAdamW);
    add("b", {7}, kAdamW);
    p.ns.configs[0].coefficients.assign(p.ns.configs[0].nsSteps,
                                        {3.4445, -4.775, 2.0315});
    return referencePlan(p);
  }();
  return plan;
}

/// Deterministic values (not zeros: a reader must tell states apart).
std::vector<float> values(int64_t count, uint64_t seed) {
  std::vector<float> out(count);
  for (float &v : out) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<float>(static_cast<int64_t>(seed >> 40) - (1 << 23)) /
        (1 << 23);
  }
  return out;
}

StatePiece piece(const char *param, std::vector<Range> box, int64_t summand,
                 int64_t summands, int64_t step,
                 std::vector<const char *> states, uint64_t seed) {
  StatePiece p;
  p.param = param;
  p.box = std::move(box);
  p.summand = summand;
  p.summands = summands;
  p.step = step;
  int64_t elements = 1;
  for (const Range &r : p.box)
    elements *= r.size();
  for (const char *s : states)
    p.states[s] = values(elements, seed++);
  return p;
}

/// A checkpoint of `world` (1 or 2) ranks of model(), encoded.
std::string encodeBase(int64_t world) {
  Plan saving = model();
  saving.worldSize = world; // the saving layout's (only its hash is kept)
  CheckpointHead head{world == 1 ? "00000000000000a1" : "00000000000000b2", 3,
                      true};
  std::vector<StateDict> ranks(world);
  for (int64_t r = 0; r < world; ++r) {
    StateDict &d = ranks[r];
    d.steps = head.steps;
    d.groups = saving.groups;
    const int64_t rows = 6 / world, embRows = 520 / world;
    d.pieces.push_back(piece("w", {{r * rows, (r + 1) * rows}, {0, 8}}, 0, 1, 0,
                             {"momentum", "values"}, 10 + r));
    d.pieces.push_back(piece("stack", {{0, 2}, {0, 3}, {0, 5}}, r, world, 0,
                             {"momentum", "values"}, 20 + r));
    d.pieces.push_back(piece("emb", {{r * embRows, (r + 1) * embRows}, {0, 4}},
                             0, 1, head.steps,
                             {"exp_avg", "exp_avg_sq", "values"}, 30 + r));
    d.pieces.push_back(piece("b", {{0, 7}}, 0, 1, head.steps,
                             {"exp_avg", "exp_avg_sq", "values"}, 40));
    RowStatePiece row;
    row.param = r == 0 ? "w" : "stack";
    row.slice = r == 0 ? 0 : 1;
    row.values = values(r == 0 ? 6 : 3, 50 + r);
    d.rowStates.push_back(row);
  }
  std::vector<RankFile> files;
  std::vector<std::string> indexes;
  for (int64_t r = 0; r < world; ++r) {
    files.push_back(encodeRankFile(saving, head, r, ranks[r]));
    indexes.push_back(files.back().index);
  }
  std::string input = encodeManifest(saving, head, saving.groups, indexes);
  for (const RankFile &f : files)
    input += std::string(kSeparator) + f.toBytes();
  return input;
}

std::vector<std::string> split(std::string_view input) {
  std::vector<std::string> sections;
  while (true) {
    size_t at = input.find(kSeparator);
    sections.emplace_back(input.substr(0, at));
    if (at == std::string_view::npos)
      return sections;
    input.remove_prefix(at + kSeparator.size());
  }
}

/// What the writer wrote: every state of the base checkpoints by identity.
std::map<uint64_t, std::string> &written() {
  static std::map<uint64_t, std::string> states;
  return states;
}

/// The base checkpoints' rank files, as written.
std::vector<std::string> &writtenFiles() {
  static std::vector<std::string> files;
  return files;
}

bool isWrittenFile(const std::string &bytes) {
  for (const std::string &f : writtenFiles())
    if (f == bytes)
      return true;
  return false;
}

/// Every state of a checkpoint (sections as split), by identity; traps
/// when it is not a sound checkpoint (the base must be).
void recordBase(const std::vector<std::string> &sections) {
  StatusOr<Manifest> decoded = decodeManifest(sections[0], "base", model());
  if (!decoded.ok())
    fuzz::trap("the base checkpoint's manifest is refused: " +
               decoded.status().message());
  const Manifest &m = *decoded;
  auto record = [&](size_t file, const StateRef &ref, uint64_t identity) {
    if (file + 1 >= sections.size())
      fuzz::trap("the base checkpoint lacks a rank file");
    written()[identity] = sections[file + 1].substr(ref.offset, ref.bytes);
  };
  for (const SavedPiece &p : m.pieces)
    for (int s = 0; s < stateSlotCount(); ++s)
      if (p.has[s])
        record(p.file, p.states[s], pieceStateIdentity(m, model(), p, s));
  for (const SavedRows &r : m.rows)
    record(r.file, r.ref, rowStateIdentity(m, model(), r));
  writtenFiles().insert(writtenFiles().end(), sections.begin() + 1,
                        sections.end());
}

/// Reads state `ref` whole and its last chunk alone. Of a file as the
/// writer wrote it (`asWritten`), each read the readers accept must be the
/// writer's bytes of that state.
void readState(RankFileBytes &file, const Manifest &m, const StateRef &ref,
               uint64_t identity, bool asWritten, bool expectAccepted) {
  const int64_t chunks = chunkCount(ref.bytes, m.chunkBytes);
  std::string data;
  int64_t read = 0;
  const ValueSink append = [&](const float *values, int64_t count) {
    data.append(reinterpret_cast<const char *>(values), count * 4);
  };
  // Whatever was handed on must be the writer's bytes, from chunk c0 on.
  auto check = [&](int64_t c0, const char *what) {
    auto it = written().find(identity);
    const int64_t offset = c0 * m.chunkBytes;
    const std::string where = std::string(" (") + what + ")";
    if (static_cast<int64_t>(data.size()) != ref.bytes - offset)
      fuzz::trap("a verified read handed on the wrong number of bytes" + where);
    if (!asWritten)
      return;
    if (it == written().end())
      fuzz::trap("a state no writer wrote passed its keyed hashes" + where);
    if (it->second.size() != static_cast<size_t>(ref.bytes) ||
        it->second.compare(offset, data.size(), data) != 0)
      fuzz::trap("another state's bytes passed its keyed hashes" + where);
  };
  ValueCheck values;
  if (Status whole = readChunks(file, "f", ref, identity, m.chunkBytes, 0,
                                chunks, append, "a state", read, &values);
      whole.ok())
    check(0, "a whole state");
  else if (expectAccepted)
    fuzz::trap("a state of the base checkpoint is refused: " +
               whole.message());
  data.clear();
  if (chunks > 1 && readChunks(file, "f", ref, identity, m.chunkBytes,
                               chunks - 1, chunks, append, "a state", read)
                        .ok())
    check(chunks - 1, "a state's last chunk");
}

void check(const std::vector<std::string> &sections, bool expectAccepted) {
  StatusOr<Manifest> decoded =
      decodeManifest(sections[0], "checkpoint.json", model());
  if (!decoded.ok()) {
    if (expectAccepted)
      fuzz::trap("the base manifest is refused: " +
                 decoded.status().message());
    return;
  }
  const Manifest &m = *decoded;
  for (size_t f = 0; f < m.files.size() && f + 1 < sections.size(); ++f) {
    MemoryBytes bytes(sections[f + 1]);
    const bool asWritten = isWrittenFile(sections[f + 1]);
    int64_t read = 0;
    if (Status header = checkRankFile(bytes, m.files[f].name, m, f, read);
        !header.ok()) {
      if (expectAccepted)
        fuzz::trap("a base rank file is refused: " + header.message());
      continue;
    }
    for (const SavedPiece &p : m.pieces)
      for (int s = 0; s < stateSlotCount(); ++s)
        if (p.file == f && p.has[s])
          readState(bytes, m, p.states[s], pieceStateIdentity(m, model(), p, s),
                    asWritten, expectAccepted);
    for (const SavedRows &r : m.rows)
      if (r.file == f)
        readState(bytes, m, r.ref, rowStateIdentity(m, model(), r), asWritten,
                  expectAccepted);
  }
}

/// Makes a rank file's header hash match its header, where the header
/// length leaves room for it.
void resealHeader(std::string &file) {
  if (file.size() < 20)
    return;
  uint64_t length;
  std::memcpy(&length, file.data() + 12, 8);
  if (length > file.size() || 20 + length + 8 > file.size())
    return;
  uint64_t hash = fnv1a(file.data() + 20, length);
  std::memcpy(file.data() + 20 + length, &hash, 8);
}

void writeSeeds(const std::string &dir) {
  for (int64_t world : {2, 1}) {
    std::string path = dir + "/base-" + std::to_string(world) + "-rank";
    std::ofstream out(path, std::ios::binary);
    out << encodeBase(world);
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", path.c_str());
      std::exit(1);
    }
  }
}

} // namespace

extern "C" int LLVMFuzzerInitialize(int *argc, char ***argv) {
  for (int i = 1; i < *argc; ++i) {
    std::string arg = (*argv)[i];
    if (arg.rfind("--write-seeds=", 0) == 0) {
      writeSeeds(arg.substr(14));
      std::exit(0);
    }
  }
  // The base checkpoints: what the writer wrote, and sound.
  for (int64_t world : {1, 2}) {
    std::vector<std::string> sections = split(encodeBase(world));
    recordBase(sections);
    check(sections, /*expectAccepted=*/true);
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::vector<std::string> sections =
      split(std::string_view(reinterpret_cast<const char *>(data), size));
  check(sections, false);
  // Again with the manifest's hash made to match, then the rank files'
  // header hashes too: otherwise nearly every mutation stops at a hash.
  resealManifest(sections[0]);
  check(sections, false);
  for (size_t f = 1; f < sections.size(); ++f)
    resealHeader(sections[f]);
  check(sections, false);
  return 0;
}
