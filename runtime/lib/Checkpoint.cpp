//===- Checkpoint.cpp - Checkpoints saved and loaded across ranks ---------===//
//
// OptimizerState::saveCheckpoint and loadCheckpoint over the format's encoder
// and decoder (CheckpointFormat.h). Saving is stateDict, then each rank's
// file, then the manifest from the ranks' indexes (gathered to rank 0).
// Loading reads the manifest (a bounded read of a regular file), chooses
// the saved states that cover this rank's pieces (StateCut.h, own file
// first), reads only the chunks that hold the overlap, checks each against
// its keyed hash and every value for sense (StateChecks.h) as it hashes
// them, and cuts them as loadStateDict does. Every rank's outcome is agreed on
// before anything is committed. docs/runtime.md, "Checkpoints", has the rules.
//
//===----------------------------------------------------------------------===//
#include "OptimizerState.h"

#include "ApiBoundary.h"
#include "StateChecks.h"
#include "StateCut.h"

#include "muon/Runtime/CheckpointFormat.h"
#include "muon/Runtime/MatrixStep.h"
#include "muon/Support/Escape.h"
#include "muon/Support/Fnv.h"
#include "muon/Support/InputFile.h"
#include "muon/Support/Limits.h"
#include "muon/Support/OutputFile.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <deque>
#include <dirent.h>
#include <map>
#include <random>
#include <tuple>
#include <unistd.h>

namespace muon::runtime {

using namespace statecut;
using checkpoint::Manifest;
using checkpoint::SavedPiece;
using checkpoint::SavedRows;

namespace {

/// This rank's proposal for the checkpoint id (rank 0's is taken): 64 bits
/// that differ between saves, processes and machines.
uint64_t idProposal(int64_t rank) {
  std::random_device device;
  uint64_t seed = static_cast<uint64_t>(device()) << 32 ^ device();
  seed ^= static_cast<uint64_t>(
              std::chrono::system_clock::now().time_since_epoch().count()) ^
          static_cast<uint64_t>(getpid()) << 40;
  return fnv1a(&rank, sizeof(rank), seed);
}

std::string hexId(uint64_t id) {
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx",
                static_cast<unsigned long long>(id));
  return text;
}

/// Every rank's outcome of its local part (`local`): ok when every rank
/// succeeded. Otherwise a `code` status (the call's: what failed locally is
/// reported as the call's kind of failure) with this rank's own problem or,
/// on a rank that had none, the first failing rank's, so that every rank's
/// message says what went wrong and where (escaped: it quotes what files
/// hold); a transport's failure as the transport says it.
Status agree(Communicator &comm, const Status &local, StatusCode code,
             double timeoutSeconds) {
  // An empty text says success to the other ranks: a failure always has one.
  const std::string mine = local.ok()                ? ""
                           : local.message().empty() ? "unknown error"
                                                     : local.message();
  MUON_ASSIGN_OR_RETURN(
      std::vector<std::vector<char>> all,
      comm.allGatherBytes(std::vector<char>(mine.begin(), mine.end()),
                          timeoutSeconds));
  if (!local.ok())
    return Status(code, escapeBytes(mine));
  for (size_t r = 0; r < all.size(); ++r)
    if (!all[r].empty())
      return Status(code,
                    "rank " + std::to_string(r) + ": " +
                        escapeBytes(std::string(all[r].begin(), all[r].end())));
  return okStatus();
}

/// Removes the rank files of earlier saves from `dir` (no longer named by
/// its manifest).
void removeStaleFiles(const std::string &dir, const std::string &id) {
  DIR *d = opendir(dir.c_str());
  if (!d)
    return;
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

/// A sink that appends what readChunks verified to `out`.
checkpoint::ValueSink appendTo(std::vector<float> &out) {
  return [&out](const float *values, int64_t count) {
    out.insert(out.end(), values, values + count);
  };
}

/// Reads and decodes the manifest in `dir` (at most limits::
/// kMaxTextFileBytes of a regular file).
StatusOr<Manifest> readManifest(const std::string &dir, const Plan &plan,
                                int64_t &bytesRead) {
  const std::string path = dir + "/" + checkpoint::kManifestName;
  StatusOr<std::string> text = readInputFile(
      path, limits::kMaxTextFileBytes, "the checkpoint manifest");
  if (!text.ok())
    return text.status().withContext("no checkpoint in '" + dir + "': ");
  bytesRead = static_cast<int64_t>(text->size());
  return checkpoint::decodeManifest(*text, path, plan);
}

/// Reads the saved states a load needs from the rank files of one
/// checkpoint: each file opened once and its header checked, only the
/// chunks each state needs read, each checked against its hash.
class StateReader {
public:
  StateReader(const std::string &dir, const Plan &plan,
              const Manifest &manifest, CheckpointIoCounters &io)
      : dir(dir), what("the checkpoint in '" + dir + "'"), plan(plan),
        manifest(manifest), io(io) {}

  /// Of every source the cut uses (`used`), the overlap of its box with
  /// this rank's piece (`slots`), read, as a source of its own in
  /// `readOf` (whose data this reader keeps).
  Status readPieces(const std::vector<ParamSlot> &slots,
                    const std::vector<Source> &sources,
                    const std::vector<const SavedPiece *> &pieceOf,
                    const std::vector<std::vector<bool>> &used,
                    std::vector<Source> &readOf) {
    std::map<size_t, std::vector<size_t>> byFile;
    for (size_t k = 0; k < sources.size(); ++k)
      if (std::find(used[k].begin(), used[k].end(), true) != used[k].end())
        byFile[pieceOf[k]->file].push_back(k);
    readOf.assign(sources.size(), Source());
    for (const auto &[file, list] : byFile) {
      InputFile opened;
      MUON_RETURN_IF_ERROR(open(file, opened));
      checkpoint::FileBytes bytes(opened);
      for (size_t k : list) {
        const Source &src = sources[k];
        Source &r = readOf[k];
        r = src;
        intersect(src.box, slots[src.param].box, r.box);
        for (int s = 0; s < slotCount(); ++s) {
          r.has[s] = used[k][s];
          r.data[s] = nullptr;
          if (!used[k][s])
            continue;
          std::vector<float> &buffer = buffers.emplace_back();
          MUON_RETURN_IF_ERROR(
              readOverlap(bytes, file, *pieceOf[k], s, r.box, buffer));
          r.data[s] = buffer.data();
          r.own[s] = &buffer;
        }
      }
    }
    return okStatus();
  }

  /// The per-row states of the matrices this rank keeps them for
  /// (`rowSlots`), each read whole, from this rank's own file when it
  /// holds it; a matrix the checkpoint has none for is left to
  /// cutRowStates.
  Status readRows(const std::vector<StepExecutor::RowSlot> &rowSlots,
                  int64_t rank, std::vector<RowStatePiece> &out) {
    std::map<std::tuple<int64_t, int64_t, int>, const SavedRows *> rowOf;
    for (bool own : {true, false})
      for (const SavedRows &row : manifest.rows)
        if ((static_cast<int64_t>(row.file) == rank) == own)
          rowOf.emplace(std::make_tuple(row.param, row.slice, row.matrixStep),
                        &row);
    for (const StepExecutor::RowSlot &slot : rowSlots) {
      const PlanMatrix &m = plan.matrices[slot.matrix];
      auto it =
          rowOf.find({m.paramIndex, std::max<int64_t>(m.slice, 0), slot.step});
      if (it == rowOf.end())
        continue;
      const SavedRows &row = *it->second;
      InputFile opened;
      MUON_RETURN_IF_ERROR(open(row.file, opened));
      checkpoint::FileBytes bytes(opened);
      RowStatePiece &saved = out.emplace_back();
      saved.param = m.param;
      saved.slice = row.slice;
      saved.state = matrixSteps()[slot.step].state;
      saved.values.reserve(row.rows);
      ++io.slotsRead;
      checkpoint::ValueCheck values{mustBeNonNegative(saved.state)};
      MUON_RETURN_IF_ERROR(checkpoint::readChunks(
          bytes, pathOf(row.file), row.ref,
          checkpoint::rowStateIdentity(manifest, plan, row),
          manifest.chunkBytes, 0,
          checkpoint::chunkCount(row.ref.bytes, manifest.chunkBytes),
          appendTo(saved.values),
          "the " + saved.state + " state of " + m.label(), io.rankFileBytes,
          &values));
      if (values.first >= 0)
        return invalidArgument(what + ": " +
                               implausibleRow(saved.state, saved.param,
                                              saved.slice, values.first,
                                              values.value));
    }
    return okStatus();
  }

private:
  std::string pathOf(size_t file) const {
    return dir + "/" + manifest.files[file].name;
  }

  /// Opens the manifest's file `file` and checks its header.
  Status open(size_t file, InputFile &opened) {
    const std::string path = pathOf(file);
    if (Status s = opened.open(path, "checkpoint file"); !s.ok())
      return s.code() == StatusCode::NotFound
                 ? notFound("checkpoint file '" + path + "' is missing")
                 : s;
    ++io.filesOpened;
    checkpoint::FileBytes bytes(opened);
    return checkpoint::checkRankFile(bytes, path, manifest, file,
                                     io.rankFileBytes);
  }

  /// Reads state `slot` of the saved `piece` where it overlaps `box` into
  /// `out` (row-major over `box`): the whole state in one read when the
  /// overlap is all of it; otherwise only the chunks that hold the
  /// overlap's runs, runs whose chunks touch in one read. Every value read
  /// is checked for sense as it is hashed (StateChecks.h).
  Status readOverlap(checkpoint::FileBytes &bytes, size_t file,
                     const SavedPiece &piece, int slot,
                     const std::vector<Range> &box, std::vector<float> &out) {
    const checkpoint::StateRef &ref = piece.states[slot];
    const int64_t chunk = manifest.chunkBytes;
    const uint64_t identity =
        checkpoint::pieceStateIdentity(manifest, plan, piece, slot);
    const std::string &param = plan.params[piece.param].name;
    const std::string state = std::string("the ") + slotName(slot) +
                              " state of '" + param + "' " + boxText(piece.box);
    int64_t elements = 1;
    for (const Range &range : box)
      elements *= range.size();
    ++io.slotsRead;
    checkpoint::ValueCheck values{mustBeNonNegative(slotName(slot))};
    // Names the first implausible value read, by its global index.
    auto sensible = [&] {
      if (values.first < 0)
        return okStatus();
      return invalidArgument(what + ": " +
                             implausibleElement(slotName(slot), param,
                                                piece.box, values.first,
                                                values.value));
    };
    // The whole state: appended as it is verified (no zeroed buffer first).
    if (box == piece.box) {
      out.clear();
      out.reserve(elements);
      MUON_RETURN_IF_ERROR(checkpoint::readChunks(
          bytes, pathOf(file), ref, identity, chunk, 0,
          checkpoint::chunkCount(ref.bytes, chunk), appendTo(out), state,
          io.rankFileBytes, &values));
      return sensible();
    }
    out.resize(elements);
    runs.clear();
    forEachRun(piece.box, box, [&](int64_t from, int64_t to, int64_t length) {
      runs.push_back({from, to, length});
    });
    auto endChunk = [&](size_t n) {
      return ((runs[n][0] + runs[n][2]) * 4 + chunk - 1) / chunk;
    };
    for (size_t next = 0; next < runs.size();) {
      int64_t c0 = runs[next][0] * 4 / chunk, c1 = endChunk(next);
      size_t last = next + 1;
      for (; last < runs.size() && runs[last][0] * 4 / chunk <= c1; ++last)
        c1 = std::max(c1, endChunk(last));
      scratch.clear();
      MUON_RETURN_IF_ERROR(checkpoint::readChunks(
          bytes, pathOf(file), ref, identity, chunk, c0, c1,
          appendTo(scratch), state, io.rankFileBytes, &values));
      MUON_RETURN_IF_ERROR(sensible());
      for (; next < last; ++next)
        std::memcpy(out.data() + runs[next][1],
                    scratch.data() + runs[next][0] - c0 * chunk / 4,
                    runs[next][2] * 4);
    }
    return okStatus();
  }

  const std::string &dir;
  const std::string what; // names the checkpoint in messages
  const Plan &plan;
  const Manifest &manifest;
  CheckpointIoCounters &io;
  std::deque<std::vector<float>> buffers; // stable addresses
  std::vector<float> scratch;
  std::vector<std::array<int64_t, 3>> runs; // from, to, length
};

} // namespace

Status OptimizerState::saveCheckpointFiles(const std::string &dir,
                                           bool withParameters) {
  const Plan &plan = thePlan;
  const int64_t rank = comm.rank();
  // One id for this save on every rank (rank 0's).
  StatusOr<std::vector<uint64_t>> ids =
      comm.allGather(idProposal(rank), options.timeoutSeconds);
  if (!ids.ok())
    return ids.status().withContext("saving a checkpoint: ");
  checkpoint::CheckpointHead head{hexId((*ids)[0]), steps, withParameters};
  const std::string path = dir + "/" + checkpoint::rankFileName(head.id, rank);

  // This rank's file, and its entry of the manifest's index.
  std::string index;
  bool wrote = false;
  const Status mine = guardedCall("", [&] {
    if (dir.empty())
      return invalidArgument(
          "no checkpoint directory given (the path is empty)");
    StateDict local;
    MUON_RETURN_IF_ERROR(makeDirectories(dir));
    MUON_RETURN_IF_ERROR(stateDictImpl(withParameters, local));
    checkpoint::RankFile file =
        checkpoint::encodeRankFile(plan, head, rank, local);
    index = file.index;
    // Written straight from the state dict: a large state is not copied
    // into one buffer first.
    StreamedOutput out{path, [&](int fd, bool) {
                         return file.write(fd)
                                    ? okStatus()
                                    : unavailable(std::strerror(errno));
                       }};
    Status written = writeOutputs({}, {out});
    if (written.ok())
      written = syncDirectory(dir);
    wrote = written.ok();
    return written;
  });
  // Rank 0 collects the index; then every rank wrote its file, or nobody's
  // counts.
  StatusOr<std::vector<std::vector<char>>> indexes = comm.gatherToRoot(
      std::vector<char>(index.begin(), index.end()), options.timeoutSeconds);
  if (!indexes.ok())
    return indexes.status().withContext("saving a checkpoint: ");
  auto abandon = [&](const Status &failure) {
    if (wrote)
      ::unlink(path.c_str());
    return Status(failure.code(), "saving a checkpoint: " + failure.message() +
                                      "; the previous checkpoint in '" +
                                      escapeBytes(dir) + "' is unchanged");
  };
  // A local failure is the files' (or an empty path, which is input).
  const StatusCode localCode =
      dir.empty() ? StatusCode::InvalidArgument : StatusCode::Unavailable;
  if (Status all = agree(comm, mine, localCode, options.timeoutSeconds);
      !all.ok())
    return abandon(all);
  // The manifest makes the save complete.
  Status manifestWritten;
  if (rank == 0)
    manifestWritten = guardedCall("", [&] {
      std::vector<std::string> texts;
      for (const std::vector<char> &i : *indexes)
        texts.emplace_back(i.begin(), i.end());
      std::string text =
          checkpoint::encodeManifest(plan, head, executor->groups(), texts);
      MUON_RETURN_IF_ERROR(
          writeOutput(dir + "/" + checkpoint::kManifestName, text));
      return syncDirectory(dir);
    });
  if (Status all =
          agree(comm, manifestWritten, localCode, options.timeoutSeconds);
      !all.ok())
    return abandon(all);
  if (rank == 0)
    removeStaleFiles(dir, head.id);
  return okStatus();
}

Status OptimizerState::loadCheckpointFiles(const std::string &dir,
                                           bool withParameters) {
  ioCounters = {};
  // Everything is read, checked and cut into `local` first; only when every
  // rank succeeded does anything change.
  StateDict local;
  const Status mine = guardedCall(
      "", [&] { return readCheckpoint(dir, withParameters, local); });
  // All or nothing.
  // A checkpoint that does not fit is input like any other.
  if (Status all = agree(comm, mine, StatusCode::InvalidArgument,
                         options.timeoutSeconds);
      !all.ok())
    return Status(all.code(), "loading a checkpoint: " + all.message() +
                                  "; nothing was changed");
  applyState(local, withParameters);
  return okStatus();
}

Status OptimizerState::readCheckpoint(const std::string &dir,
                                      bool withParameters, StateDict &local) {
  const Plan &plan = thePlan;
  const int64_t rank = comm.rank();
  if (dir.empty())
    return invalidArgument("no checkpoint directory given (the path is empty)");
  if (withParameters)
    for (const ParamSlot &slot : slots)
      if (slot.elements && !slot.bound)
        return failedPrecondition(
            "parameter '" + slot.name +
            "' is not bound, so its values cannot be loaded");
  MUON_ASSIGN_OR_RETURN(const Manifest manifest,
                        readManifest(dir, plan, ioCounters.manifestBytes));
  const std::string what = "the checkpoint in '" + dir + "'";
  if (withParameters && !manifest.parameters)
    return invalidArgument(what + " holds no parameter values");
  MUON_RETURN_IF_ERROR(
      checkSavedGroups(manifest.groups).withContext(what + ": "));
  // This rank's own file first: a resume on the same layout finds all
  // it needs there and opens nothing else.
  std::vector<Source> sources;
  std::vector<const SavedPiece *> pieceOf;
  for (bool own : {true, false})
    for (const SavedPiece &p : manifest.pieces)
      if ((static_cast<int64_t>(p.file) == rank) == own) {
        Source &s = sources.emplace_back();
        s.param = p.param;
        s.box = p.box;
        s.summand = p.summand;
        s.summands = p.summands;
        s.step = p.step;
        s.has = p.has;
        pieceOf.push_back(&p);
      }
  // The cut on the index alone chooses what to read; the same cut on
  // what was read, in the same order, copies.
  std::vector<int64_t> splits;
  std::vector<std::vector<bool>> used;
  std::vector<Source> readOf;
  StateReader reader(dir, plan, manifest, ioCounters);
  MUON_RETURN_IF_ERROR(checkSplits(plan, sources, what, splits));
  MUON_RETURN_IF_ERROR(
      checkStepCounts(plan, sources, manifest.steps, what));
  MUON_RETURN_IF_ERROR(cut(plan, rank, slots, sources, splits, withParameters,
                           what, nullptr, &used));
  MUON_RETURN_IF_ERROR(
      reader.readPieces(slots, sources, pieceOf, used, readOf));
  std::vector<Source> read;
  for (Source &s : readOf)
    if (s.param >= 0)
      read.push_back(std::move(s));
  // Every value read was checked as it was read; what the cut adds up
  // (momentum onto summand 0 under another number of summands) is
  // checked again: a sum of finite values may overflow.
  auto summed = [&](const StatePiece &piece, const std::string &state) {
    const int64_t i = static_cast<int64_t>(slotOf.at(piece.param));
    const int slot = slotNamed(plan.params[i].algorithm, state);
    return slot >= 0 && slot < valuesSlot() &&
           elementSlots()[slot].perSummand && splits[i] &&
           splits[i] != summandCount(plan, i);
  };
  std::vector<RowStatePiece> savedRows;
  MUON_RETURN_IF_ERROR(cut(plan, rank, slots, read, splits, withParameters,
                           what, &local, nullptr));
  MUON_RETURN_IF_ERROR(checkStateValues(local, what, summed));
  MUON_RETURN_IF_ERROR(reader.readRows(executor->rowSlots(), rank, savedRows));
  MUON_RETURN_IF_ERROR(
      cutRowStates(savedRows, manifest.groups, what, local.rowStates));
  local.steps = manifest.steps;
  local.groups = manifest.groups;
  return okStatus();
}

} // namespace muon::runtime
