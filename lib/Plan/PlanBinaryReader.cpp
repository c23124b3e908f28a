//===- PlanBinaryReader.cpp - Reading the binary plan file ----------------===//
//
// The whole plan (parsePlanBinary: every section, placed and checked, and
// the file required to be the plan's own encoding) and one rank's part
// (loadPlanSlice, parsePlanSlice: the header, its index entry, the shared
// section and its own section, nothing else).
//
//===----------------------------------------------------------------------===//
#include "PlanBinaryFormat.h"

#include "muon/Plan/Validate.h"
#include "muon/Support/Fnv.h"
#include "muon/Support/InputFile.h"

#include <algorithm>
#include <unistd.h>

namespace muon {
using namespace planbin;

namespace {

/// Reads byte ranges of a plan file (or of one in memory) and counts them.
class Source {
public:
  virtual ~Source() = default;
  virtual Status read(uint64_t offset, uint64_t size, std::string &out) = 0;
  uint64_t size = 0;
  int64_t bytesRead = 0;
};

class MemorySource : public Source {
public:
  explicit MemorySource(std::string_view bytes) : bytes(bytes) {
    size = bytes.size();
  }
  Status read(uint64_t offset, uint64_t n, std::string &out) override {
    out.assign(bytes.substr(offset, n));
    bytesRead += static_cast<int64_t>(n);
    return okStatus();
  }

private:
  std::string_view bytes;
};

/// A plan file opened as InputFile opens inputs: a FIFO, a directory or a
/// device is refused, not waited on or read forever.
class FileSource : public Source {
public:
  Status open(const std::string &path) {
    MUON_RETURN_IF_ERROR(file.open(path, "the plan file"));
    size = static_cast<uint64_t>(file.size());
    return okStatus();
  }
  Status read(uint64_t offset, uint64_t n, std::string &out) override {
    out.resize(n);
    MUON_RETURN_IF_ERROR(file
                             .readAt(out.data(), static_cast<int64_t>(n),
                                     static_cast<int64_t>(offset))
                             .withContext("read failed: "));
    bytesRead += static_cast<int64_t>(n);
    return okStatus();
  }

private:
  InputFile file;
};

Status loadSlice(Source &src, int64_t rank, Plan &slice, int64_t readLimit) {
  slice = Plan();
  std::string head;
  if (src.size < kHeaderSize) {
    return invalidArgument(
        "not a binary plan file (" + std::to_string(src.size) +
        " bytes, shorter than its " + num(kHeaderSize) + "-byte header)");
  }
  MUON_RETURN_IF_ERROR(src.read(0, kHeaderSize, head));
  Header h;
  MUON_RETURN_IF_ERROR(readHeader(head, src.size, h));
  if (rank < 0 || static_cast<uint64_t>(rank) >= h.world) {
    return invalidArgument("rank " + num(rank) +
                           " is not in the plan's world of " +
                           std::to_string(h.world) + " ranks");
  }
  std::string entry;
  MUON_RETURN_IF_ERROR(
      src.read(h.indexOffset + rank * kIndexEntrySize, kIndexEntrySize, entry));
  uint64_t offset = getU64(entry.data()), size = getU64(entry.data() + 8),
           sum = getU64(entry.data() + 16);
  std::string where = "rank " + num(rank) + "'s index entry";
  if (offset < h.sectionsBegin() || offset > h.fileSize ||
      size > h.fileSize - offset) {
    return invalidArgument(where + ": its section [" + std::to_string(offset) +
                           ", +" + std::to_string(size) +
                           ") is not inside the rank sections [" +
                           std::to_string(h.sectionsBegin()) + ", " +
                           std::to_string(h.fileSize) + ")");
  }
  // What this rank reads, all told, before it reads the large parts.
  uint64_t need = kHeaderSize + kIndexEntrySize + h.sharedSize + size;
  if (need > static_cast<uint64_t>(readLimit)) {
    return invalidArgument(
        "rank " + num(rank) + "'s part of the plan is " + std::to_string(need) +
        " bytes (shared section " + std::to_string(h.sharedSize) +
        ", own section " + std::to_string(size) +
        "), above the read limit of " + num(readLimit) + " bytes");
  }
  std::string shared;
  MUON_RETURN_IF_ERROR(src.read(h.sharedOffset, h.sharedSize, shared));
  if (fnv1a(shared.data(), shared.size()) != h.sharedSum) {
    return dataLoss("shared section: checksum mismatch (the file is damaged)");
  }
  slice.worldSize = static_cast<int64_t>(h.world);
  int64_t totalMatrices = 0;
  {
    In in(shared, h.sharedOffset, "shared section");
    if (!decodeShared(in, slice, totalMatrices, h.version)) {
      return invalidArgument(in.error);
    }
  }
  std::string().swap(shared);
  if (Status bad = validatePlanHeader(slice); !bad.ok()) {
    return invalidArgument("shared section: " + json::describe(bad));
  }
  std::string section;
  MUON_RETURN_IF_ERROR(src.read(offset, size, section));
  if (fnv1a(section.data(), section.size()) != sum) {
    return dataLoss("rank " + num(rank) +
                    "'s section: checksum mismatch (the file "
                    "is damaged)");
  }
  Geometry geo(slice);
  if (geo.totalMatrices() != totalMatrices) {
    return invalidArgument("shared section: says " + num(totalMatrices) +
                           " matrices but the Muon parameters have " +
                           num(geo.totalMatrices()));
  }
  slice.sliceRank = rank;
  slice.totalMatrices = totalMatrices;
  slice.fileId = h.headerSum;
  In in(section, offset, "rank " + num(rank) + "'s section");
  if (!decodeSection(in, geo, rank, slice, nullptr)) {
    return invalidArgument(in.error);
  }
  if (Status bad = validatePlanSlice(slice); !bad.ok()) {
    return invalidArgument("rank " + num(rank) +
                           "'s section: " + json::describe(bad));
  }
  return okStatus();
}

/// The global section: every matrix's owner, the rounds, and each
/// exchange's sizes (checked against what the rank sections can hold).
Status decodeGlobal(std::string_view global, const Header &h,
                    int64_t totalMatrices, Plan &plan) {
  In in(global, h.globalOffset, "global section");
  in.item = "matrices";
  if (in.varint() != static_cast<uint64_t>(totalMatrices) && in.ok())
    in.fail("expected " + num(totalMatrices) + " owners");
  for (PlanMatrix &m : plan.matrices)
    decodeOwner(m, in.svarint());
  for (size_t r = 0; r < plan.rounds.size() && in.ok(); ++r) {
    in.item = json::index("rounds", r);
    size_t n = in.count("matrices");
    for (size_t i = 0; i < n && in.ok(); ++i)
      plan.rounds[r].push_back(in.below(totalMatrices, "matrix"));
  }
  for (size_t e = 0; e < plan.exchanges.size() && in.ok(); ++e) {
    in.item = json::index("exchanges", e);
    // Each transfer has two copies of at least 4 bytes in the sections.
    uint64_t transfers = in.varint(), reductions = in.varint();
    uint64_t room = (h.fileSize - h.sectionsBegin()) / 8;
    if (in.ok() && (transfers > room || reductions > room))
      in.fail("more transfers or reductions than the rank sections can "
              "hold");
    if (!in.ok())
      break; // nothing is sized by a number that failed its check
    plan.exchanges[e].transfers.resize(transfers);
    plan.exchanges[e].reductions.resize(reductions);
  }
  in.item.clear();
  if (!in.end()) {
    return invalidArgument(in.error);
  }
  return okStatus();
}

/// Rank r's section (checked against its index entry and checksum): its
/// transfers and reductions placed into the whole plan's exchanges (from
/// the source's copy; the destination's copy is checked by the canonical
/// comparison; `placed` counts each item's sources), its NS batches in
/// whole-plan indices.
Status placeRankSection(std::string_view bytes, const Header &h,
                        const Geometry &geo, int64_t r, Plan &plan,
                        std::vector<std::vector<char>> &placed) {
  const char *e = bytes.data() + h.indexOffset + r * kIndexEntrySize;
  uint64_t offset = getU64(e), size = getU64(e + 8), sum = getU64(e + 16);
  if (offset < h.sectionsBegin() || offset > h.fileSize ||
      size > h.fileSize - offset) {
    return invalidArgument("rank " + num(r) +
                           "'s index entry: its section is not inside "
                           "the rank sections");
  }
  std::string_view section = bytes.substr(offset, size);
  if (fnv1a(section.data(), section.size()) != sum) {
    return dataLoss("rank " + num(r) +
                    "'s section: checksum mismatch (the file is "
                    "damaged)");
  }
  Plan slice;
  slice.worldSize = plan.worldSize;
  slice.rounds.assign(plan.rounds.size(), {});
  slice.exchanges.resize(plan.exchanges.size());
  for (size_t x = 0; x < plan.exchanges.size(); ++x)
    slice.exchanges[x].phase = plan.exchanges[x].phase;
  std::vector<std::vector<Item>> items;
  In in(section, offset, "rank " + num(r) + "'s section");
  if (!decodeSection(in, geo, r, slice, &items)) {
    return invalidArgument(in.error);
  }
  const std::vector<int64_t> &ids = slice.matrixIds;
  for (size_t x = 0; x < slice.exchanges.size(); ++x) {
    Exchange &whole = plan.exchanges[x];
    const Exchange &part = slice.exchanges[x];
    std::string path =
        "rank " + num(r) + "'s section, " + json::index("exchanges", x);
    size_t nt = part.transfers.size();
    for (size_t i = 0; i < items[x].size(); ++i) {
      const Item &it = items[x][i];
      bool transfer = i < nt;
      size_t limit =
          transfer ? whole.transfers.size() : whole.reductions.size();
      if (static_cast<size_t>(it.index) >= limit) {
        return invalidArgument(
            path + ": " + (transfer ? "transfer" : "reduction") + " index " +
            num(it.index) + " is out of range [0, " +
            num(static_cast<int64_t>(limit)) + ")");
      }
      if (it.toMe)
        continue;
      size_t slot = transfer ? it.index : whole.transfers.size() + it.index;
      if (placed[x][slot]++) {
        return invalidArgument(path + ": " +
                               (transfer ? "transfer " : "reduction ") +
                               num(it.index) + " has two sources");
      }
      if (transfer) {
        Transfer t = part.transfers[i];
        t.matrix = ids[t.matrix];
        whole.transfers[it.index] = t;
      } else {
        whole.reductions[it.index] = part.reductions[i - nt];
      }
    }
  }
  for (NsBatch &b : slice.nsBatches[r]) {
    for (int64_t &k : b.matrices)
      k = ids[k];
    plan.nsMatrices[r].insert(plan.nsMatrices[r].end(), b.matrices.begin(),
                              b.matrices.end());
    plan.nsBatches[r].push_back(std::move(b));
  }
  return okStatus();
}

/// Every transfer and reduction of the plan came from some rank's section.
Status checkEveryItemPlaced(const Plan &plan,
                            const std::vector<std::vector<char>> &placed) {
  for (size_t x = 0; x < placed.size(); ++x)
    for (size_t i = 0; i < placed[x].size(); ++i)
      if (!placed[x][i]) {
        size_t nt = plan.exchanges[x].transfers.size();
        return invalidArgument(
            json::index("exchanges", x) + ": " +
            (i < nt ? "transfer " + num(i) : "reduction " + num(i - nt)) +
            " is in no rank's section");
      }
  return okStatus();
}

/// A valid plan has one encoding: anything else (a transfer's two copies
/// that disagree, a section listing matrices its rank has nothing to do
/// with, rounds in another order) is a damaged or forged file.
Status checkCanonical(std::string_view bytes, const Header &h,
                      const Plan &plan) {
  std::string canonical = renderPlanBinary(plan);
  if (canonical != bytes) {
    size_t at = std::mismatch(canonical.begin(), canonical.end(), bytes.begin(),
                              bytes.end())
                    .first -
                canonical.begin();
    std::string where = "the header";
    if (at >= h.sectionsBegin())
      where = "a rank's section";
    else if (at >= h.indexOffset)
      where = "the rank index";
    else if (at >= h.globalOffset)
      where = "the global section";
    else if (at >= h.sharedOffset)
      where = "the shared section";
    return dataLoss(
        "the file is not the encoding of the plan it describes: " + where +
        " differs from it at byte " + num(static_cast<int64_t>(at)) +
        " (two copies of a transfer disagree, or a section holds what its "
        "rank does not need)");
  }
  return okStatus();
}

/// parsePlanBinary's work, into `plan`.
Status decodePlanBinary(std::string_view bytes, Plan &plan) {
  Header h;
  MUON_RETURN_IF_ERROR(readHeader(bytes, bytes.size(), h));
  std::string_view shared = bytes.substr(h.sharedOffset, h.sharedSize);
  std::string_view global = bytes.substr(h.globalOffset, h.globalSize);
  if (fnv1a(shared.data(), shared.size()) != h.sharedSum) {
    return dataLoss("shared section: checksum mismatch (the file is damaged)");
  }
  if (fnv1a(global.data(), global.size()) != h.globalSum) {
    return dataLoss("global section: checksum mismatch (the file is damaged)");
  }
  plan.worldSize = static_cast<int64_t>(h.world);
  int64_t totalMatrices = 0;
  {
    In in(shared, h.sharedOffset, "shared section");
    if (!decodeShared(in, plan, totalMatrices, h.version)) {
      return invalidArgument(in.error);
    }
  }
  if (Status bad = validatePlanHeader(plan); !bad.ok()) {
    return invalidArgument("shared section: " + json::describe(bad));
  }
  Geometry geo(plan);
  if (geo.totalMatrices() != totalMatrices) {
    return invalidArgument("shared section: says " + num(totalMatrices) +
                           " matrices but the Muon parameters have " +
                           num(geo.totalMatrices()));
  }
  // The global section: owners, rounds, each exchange's sizes.
  plan.matrices = muonMatrices(plan.params, plan.groups, plan.ns);
  MUON_RETURN_IF_ERROR(decodeGlobal(global, h, totalMatrices, plan));
  plan.nsMatrices.assign(plan.worldSize, {});
  plan.nsBatches.assign(plan.worldSize, {});
  std::vector<std::vector<char>> placed(plan.exchanges.size());
  for (size_t e = 0; e < plan.exchanges.size(); ++e)
    placed[e].assign(plan.exchanges[e].transfers.size() +
                         plan.exchanges[e].reductions.size(),
                     0);
  // Each rank's section, one at a time.
  for (int64_t r = 0; r < plan.worldSize; ++r)
    MUON_RETURN_IF_ERROR(placeRankSection(bytes, h, geo, r, plan, placed));
  MUON_RETURN_IF_ERROR(checkEveryItemPlaced(plan, placed));
  if (Status bad = validatePlan(plan); !bad.ok()) {
    return invalidArgument(json::describe(bad));
  }
  return checkCanonical(bytes, h, plan);
}

} // namespace

StatusOr<Plan> parsePlanSlice(std::string_view bytes, int64_t rank,
                              SliceLoadStats *stats, int64_t readLimit) {
  MemorySource src(bytes);
  Plan slice;
  Status status = loadSlice(src, rank, slice, readLimit);
  if (stats) {
    stats->bytesRead = src.bytesRead;
    stats->heldBytes = planHeldBytes(slice);
  }
  if (!status.ok())
    return status;
  return slice;
}

StatusOr<Plan> loadPlanSlice(const std::string &path, int64_t rank,
                             SliceLoadStats *stats, int64_t readLimit) {
  FileSource src;
  Plan slice;
  Status status = src.open(path);
  if (status.ok())
    status = loadSlice(src, rank, slice, readLimit);
  if (stats) {
    stats->bytesRead = src.bytesRead;
    stats->heldBytes = planHeldBytes(slice);
  }
  if (!status.ok())
    // The file's own errors name it already ("cannot read the plan file
    // '...'"); the decoder's name a section.
    return status.message().rfind("cannot ", 0) == 0
               ? status
               : status.withContext(path + ": ");
  return slice;
}

StatusOr<Plan> parsePlanBinary(std::string_view bytes) {
  Plan plan;
  MUON_RETURN_IF_ERROR(decodePlanBinary(bytes, plan));
  return plan;
}

} // namespace muon
