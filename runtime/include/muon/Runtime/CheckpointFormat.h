//===- CheckpointFormat.h - Checkpoint files, encoded, decoded -*- C++ -*-===//
//
// The checkpoint format (muon-checkpoint/3; docs/runtime.md, "Checkpoints")
// as pure functions over bytes: what Optimizer::saveCheckpoint writes and
// Optimizer::loadCheckpoint reads (Checkpoint.cpp does the files, the ranks
// and the state), and what tests and fuzzers call to read, forge or damage
// checkpoints without an optimizer.
//
// Integrity, from the outside in:
//  - the manifest ends with `manifest_hash`, the FNV-1a of every byte before
//    that line: any byte changed anywhere in it is found before anything
//    in it is believed;
//  - each rank file's header names the checkpoint (`checkpoint_id`, a random
//    64-bit id of the save), its rank, model, plan, step count and world
//    size, with its own hash, and must say what the manifest says;
//  - the data is hashed in chunks, each hash keyed with the identity of
//    the state it belongs to (checkpoint id, step counts, rank, parameter
//    name and dtype, slot, global box, summand; rows: matrix and state) and
//    the chunk's number: the bytes of one state never verify as another's,
//    at another place of the state, in another rank's file or in another
//    checkpoint, even under a manifest whose hash was made to match.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CHECKPOINTFORMAT_H
#define MUON_RUNTIME_CHECKPOINTFORMAT_H

#include "muon/Plan/ElementState.h"
#include "muon/Plan/Plan.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Support/InputFile.h"

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace muon::runtime::checkpoint {

inline constexpr const char *kFormat = "muon-checkpoint/3";
inline constexpr uint32_t kVersion = 3;
inline constexpr const char *kManifestName = "checkpoint.json";
/// Data is hashed in chunks of this many bytes, so that a rank that needs
/// part of a saved state reads (and checks) little more than that part:
/// at most one chunk beyond each end of a contiguous stretch, and 8 bytes
/// of hash per chunk (0.2%).
inline constexpr int64_t kChunkBytes = 4096;
/// The largest chunk a manifest may declare (the writer uses kChunkBytes).
inline constexpr int64_t kMaxChunkBytes = int64_t(1) << 24;
/// A rank file's header is a few hundred bytes; more is not ours.
inline constexpr int64_t kMaxHeaderBytes = int64_t(1) << 20;

/// The states a saved piece can hold: the per-element slots of every
/// algorithm (elementSlots(), by index), then the parameter's values
/// (valuesStateSlot()); stateSlotCount() in all.
int stateSlotCount();
int valuesStateSlot();
/// elementSlots()' names, then "values".
const char *stateSlotName(int slot);

/// Where one saved state is in its rank file: its data, its table of
/// chunk hashes, and the table's own hash (in the manifest).
struct StateRef {
  int64_t offset = 0, bytes = 0, table = 0;
  uint64_t tableHash = 0;
};

/// A piece as the manifest indexes it.
struct SavedPiece {
  size_t file = 0;   // the rank file (the saving rank)
  int64_t param = 0; // index into Plan::params
  std::vector<Range> box;
  int64_t summand = 0, summands = 1;
  int64_t step = 0; // AdamW's step count of the piece
  std::vector<bool> has = std::vector<bool>(stateSlotCount(), false);
  std::vector<StateRef> states = std::vector<StateRef>(stateSlotCount());
};

/// A per-row state (NorMuon's) as the manifest indexes it.
struct SavedRows {
  size_t file = 0;
  int64_t param = 0, slice = 0, rows = 0;
  int matrixStep = 0; // index into matrixSteps()
  StateRef ref;
};

struct ManifestFile {
  std::string name;
  int64_t bytes = 0;
};

/// The manifest, decoded and checked against a plan.
struct Manifest {
  std::string id;          // the checkpoint id (16 hex digits)
  std::string model, plan; // the model's and the layout's hashes (hex)
  int64_t worldSize = 0, steps = 0, chunkBytes = kChunkBytes;
  bool parameters = false;         // whether values were saved
  std::vector<ManifestFile> files; // by saving rank
  std::vector<SavedPiece> pieces;
  std::vector<SavedRows> rows;
  std::vector<PlanGroup> groups; // the groups' settings at the save
};

/// What makes two plans the same model: names, shapes, storage types and
/// optimizer groups, in order (not the layout, nor the hyper-parameters).
uint64_t modelHash(const Plan &plan);
/// "state-<id>-rank-<r>.bin".
std::string rankFileName(const std::string &id, int64_t rank);
int64_t chunkCount(int64_t bytes, int64_t chunkBytes);

/// The identity the chunk hashes of a saved state are keyed with (above).
uint64_t pieceStateIdentity(const Manifest &manifest, const Plan &plan,
                            const SavedPiece &piece, int slot);
uint64_t rowStateIdentity(const Manifest &manifest, const Plan &plan,
                          const SavedRows &rows);
/// The hash of each `chunkBytes` chunk of the `bytes` bytes at `data`, the
/// chunks numbered from `firstChunk`, of a state of identity `identity`:
/// FNV-1a of the chunk continued from FNV-1a of its number (u64) continued
/// from the identity. `out` has room for chunkCount(bytes, chunkBytes).
void hashChunks(const void *data, int64_t bytes, int64_t chunkBytes,
                uint64_t identity, int64_t firstChunk, uint64_t *out);

//===----------------------------------------------------------------------===//
// Writing
//===----------------------------------------------------------------------===//

/// What every file of one save says about it.
struct CheckpointHead {
  std::string id; // 16 hex digits
  int64_t steps = 0;
  bool parameters = false;
};

/// One rank's file as it is written: the bytes before the data (magic,
/// version, header, the header's hash, padding to 64 bytes), each state's
/// data in order (lent from the state dict it was made from), each state's
/// table of chunk hashes; and the rank's entry of the manifest's index.
struct RankFile {
  std::string head;
  std::vector<const std::vector<float> *> data;
  std::vector<std::vector<uint64_t>> tables;
  int64_t bytes = 0;
  std::string index; // compact JSON
  /// Writes the file's bytes to `fd` in order; false with errno set.
  bool write(int fd) const;
  /// The file's bytes in memory (tests, fuzzers).
  std::string toBytes() const;
};

/// Rank `rank`'s file of the checkpoint `head` holding `local` (the rank's
/// stateDict: every piece's states, its per-row states).
RankFile encodeRankFile(const Plan &plan, const CheckpointHead &head,
                        int64_t rank, const StateDict &local);
/// The manifest of the checkpoint `head` over the ranks' `indexes`
/// (RankFile::index, by rank), with the groups' current settings.
std::string encodeManifest(const Plan &plan, const CheckpointHead &head,
                           const std::vector<PlanGroup> &groups,
                           const std::vector<std::string> &indexes);

//===----------------------------------------------------------------------===//
// Reading
//===----------------------------------------------------------------------===//

/// Decodes the manifest `text` (of the file `name`, for messages) and
/// checks it against `plan`, in this order: its integrity (the
/// manifest_hash line, before anything is parsed; a checkpoint of an older
/// format is refused by its version), strict JSON, format, model (naming
/// the first parameter that differs), the groups' settings, and every
/// indexed file, piece and row state (a known parameter, a box inside it,
/// states of its group, byte ranges and chunk tables inside their file's
/// size). DataLoss for a damaged manifest, InvalidArgument for one that
/// does not fit, naming the file and the JSON path.
StatusOr<Manifest> decodeManifest(std::string_view text,
                                  const std::string &name, const Plan &plan);
/// Rewrites the manifest's manifest_hash to match its content (appending
/// the line if it is missing), as someone who edits a manifest would:
/// tests and fuzzers that want their edits to reach the checks behind the
/// hash use it.
void resealManifest(std::string &text);

/// The bytes of a rank file, read at offsets.
class RankFileBytes {
public:
  virtual ~RankFileBytes() = default;
  virtual int64_t size() const = 0;
  /// Exactly `bytes` bytes at `offset`; fails saying why.
  virtual Status read(void *to, int64_t bytes, int64_t offset) = 0;
};

/// An open rank file.
class FileBytes : public RankFileBytes {
public:
  explicit FileBytes(const InputFile &file) : file(file) {}
  int64_t size() const override { return file.size(); }
  Status read(void *to, int64_t bytes, int64_t offset) override {
    return file.readAt(to, bytes, offset);
  }

private:
  const InputFile &file;
};

/// A rank file in memory.
class MemoryBytes : public RankFileBytes {
public:
  explicit MemoryBytes(std::string_view bytes) : bytes(bytes) {}
  int64_t size() const override { return static_cast<int64_t>(bytes.size()); }
  Status read(void *to, int64_t count, int64_t offset) override;

private:
  std::string_view bytes;
};

/// Checks the header of rank file `file` (the manifest's file `index`,
/// called `name` in messages): a muon checkpoint file of this version, of
/// the size the manifest says, whose header matches its hash and says the
/// same checkpoint id, rank, world size, model, plan, steps and chunk size
/// as the manifest (DataLoss otherwise). Counts what it reads in
/// `bytesRead`.
Status checkRankFile(RankFileBytes &file, const std::string &name,
                     const Manifest &manifest, size_t index,
                     int64_t &bytesRead);

/// What readChunks checks of the f32 values it reads besides their hashes,
/// block by block while they are in cache (a load's plausibility rules:
/// every value finite and, with `nonNegative`, not below zero). `first`
/// gets the index in the state (in values) of the first value that breaks
/// them, and `value` that value; `first` stays -1 when none does.
struct ValueCheck {
  bool nonNegative = false;
  int64_t first = -1;
  float value = 0;
};

/// Where readChunks hands what it verified: `count` values, in order.
using ValueSink = std::function<void(const float *values, int64_t count)>;

/// Reads chunks [c0, c1) of the saved state `ref` (of identity `identity`)
/// and checks each against its hash in the file's table, and the table
/// against the manifest's hash when all of it is read; hands the values
/// to `sink` in blocks of about 1 MiB as they are verified (each block is
/// read, hashed, checked and handed on while it is in cache: a load makes
/// one pass over memory). `what` names the state ("the momentum state of
/// 'w' [0:2, 0:4]") in the failure (DataLoss for a damaged chunk); on a
/// failure, what was handed on is to be dropped. Counts what it reads. With
/// `values`, also checks the values read (`values->first` then says
/// whether one broke the rules).
Status readChunks(RankFileBytes &file, const std::string &name,
                  const StateRef &ref, uint64_t identity, int64_t chunkBytes,
                  int64_t c0, int64_t c1, const ValueSink &sink,
                  const std::string &what, int64_t &bytesRead,
                  ValueCheck *values = nullptr);

} // namespace muon::runtime::checkpoint

#endif // MUON_RUNTIME_CHECKPOINTFORMAT_H
