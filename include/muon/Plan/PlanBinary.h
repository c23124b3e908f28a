//===- PlanBinary.h - The sliced binary plan file (muon-plan-bin/1) -*- C++ -*-===//
//
// The same plan as the JSON file (PlanFile.h), laid out so that a rank can
// load its own part without reading anyone else's: a fixed header, a shared
// section every rank reads (settings, mesh, parameters, exchanges' phases,
// schedule), a global section only whole-plan readers need (every matrix's
// owner, the rounds), an index of one (offset, size, checksum) entry per
// rank, and one section per rank (the matrices it holds or owns, its
// transfers and reductions, its NS batches). A 16,384-rank plan's JSON is
// read whole by every rank; here one rank reads its header, the shared
// section, one index entry and its own section: a few hundred kilobytes.
// docs/plan-format.md describes every byte.
//
// Both readers check what they read as strictly as the JSON reader: the
// whole-plan reader assembles the plan, runs validatePlan on it and
// requires the file to be exactly what renderPlanBinary writes for that plan
// (so the two copies of each transfer, one in each end's section, agree);
// the slice reader checks bounds, sizes and checksums while decoding and
// then validatePlanSlice on the slice. A damaged or hostile file gives an
// error naming the section, the item and the byte; never a crash.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_PLANBINARY_H
#define MUON_PLAN_PLANBINARY_H

#include "muon/Plan/Plan.h"
#include "muon/Plan/TransferSink.h"
#include "muon/Support/Status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

namespace muon {

/// The first 8 bytes of a binary plan file.
inline constexpr std::string_view kPlanBinaryMagic = "MUONPLAN";
inline constexpr uint32_t kPlanBinaryVersion = 2;
/// The version of a plan with QK-clip layers (Plan::qkClip): version 2 plus
/// the layers after the parameters in the shared section. Plans without
/// layers are still written as version 2.
inline constexpr uint32_t kPlanBinaryQkClipVersion = 3;
/// The version of a plan with several Newton-Schulz configurations
/// (Plan::ns.configs): version 3 (its QK-clip count always present) plus the
/// configurations, each Muon group's index and each NS batch's. Plans with
/// one configuration are still written as version 2 or 3.
inline constexpr uint32_t kPlanBinaryNsConfigsVersion = 4;
/// The version of a plan with redundant matrices (PlanMatrix::redundant,
/// orthogonalized once per replica): version 4's layout (the configuration
/// count and each Muon group's index always present, even with one
/// configuration) with a redundant matrix's owner written as -2 - owner.
/// Plans without redundant matrices are written as version 2 to 4.
inline constexpr uint32_t kPlanBinaryRedundantVersion = 5;

/// Whether `prefix` (the first bytes of a file) starts a binary plan.
bool isPlanBinary(std::string_view prefix);

/// How many first bytes of a file `looksLikePlanBinary` wants.
inline constexpr size_t kPlanBinaryProbeSize = 16;

/// Whether a file whose first bytes are `prefix` should be read as a binary
/// plan: it starts with the magic bytes, or it holds a NUL byte among its
/// first `kPlanBinaryProbeSize` (the header's version and size fields have
/// some; the text formats, JSON and MLIR, never do). A binary plan with
/// damaged magic bytes then gets the binary reader's error, not a JSON or
/// MLIR parser's.
bool looksLikePlanBinary(std::string_view prefix);

/// The whole plan (not a slice) as a binary plan file. Deterministic: the
/// same plan always gives the same bytes.
std::string renderPlanBinary(const Plan &plan);

/// Writes a binary plan while the transfers are being made, so that the
/// whole plan's transfer list never exists: at 16,384 ranks it is 19 million
/// transfers (1.2 GB), while their encoding in the rank sections is 280 MB.
/// begin() with the plan's parameters, mesh and world size set; add() each
/// transfer in its exchange's order (exchanges may interleave); finish()
/// with the finished plan (owners, rounds, NS batches, schedule, the
/// exchanges' phases and reductions; its transfer lists are not read).
/// renderPlanBinary is this writer fed from a whole plan, so both give the
/// same bytes. The plan must be valid: finish() returns "" when a transfer
/// names a matrix one of its ends does not hold.
class PlanBinaryWriter final : public TransferSink {
public:
  PlanBinaryWriter();
  ~PlanBinaryWriter() override;
  void begin(const Plan &plan) override;
  bool begun() const override;
  void add(int64_t exchange, bool gather, const Transfer &transfer) override;
  std::string finish(const Plan &plan);
  /// finish() into `fd`, an empty file open for writing. `seekable` (a
  /// regular file, written with pwrite): each rank's section goes out as it
  /// is made, so the file is never whole in memory (280 MB at 16,384
  /// ranks); otherwise (a pipe) it is made in memory, then written in
  /// order. Internal when the plan cannot be written (as finish()
  /// returning ""), Unavailable when a write fails. The shape of
  /// StreamedOutput::write.
  Status finishTo(const Plan &plan, int fd, bool seekable);
  std::vector<RankFigures> figures(const Plan &plan) const override;

private:
  struct FileOutput;
  bool encode(const Plan &plan, FileOutput &out);
  struct State;
  std::unique_ptr<State> s;
};

/// Reads and checks a whole binary plan: on success `plan` is what
/// parsePlan gives for the same plan's JSON form.
/// InvalidArgument for what is not a valid plan, DataLoss for a damaged
/// file (a checksum that does not match, a file shorter or longer than its
/// header says, an encoding that is not the plan's own).
StatusOr<Plan> parsePlanBinary(std::string_view bytes);

/// What loading one rank's part cost.
struct SliceLoadStats {
  int64_t bytesRead = 0;  // bytes read from the file
  int64_t heldBytes = 0;  // bytes the slice's Plan holds (estimate: its
                          // containers' capacities and strings)
};

/// The most bytes of a plan file a rank reads for its part by default
/// (header, shared section, index entry, its section): far above what a
/// 16,384-rank Kimi-K2 plan needs (under 1 MB), far below what a damaged
/// size field could ask for.
inline constexpr int64_t kDefaultSliceReadLimit = int64_t(256) << 20;

/// Loads rank `rank`'s part of the binary plan file at `path`, reading only
/// the bytes it needs (pread), and checks it (validatePlanSlice). Refuses to
/// read more than `readLimit` bytes. The status names the file, the section
/// and the problem (NotFound for a file that is not there; codes otherwise
/// as parsePlanBinary's).
StatusOr<Plan> loadPlanSlice(const std::string &path, int64_t rank,
                             SliceLoadStats *stats = nullptr,
                             int64_t readLimit = kDefaultSliceReadLimit);

/// The same from a file already in memory (tests, the fuzzer); reads, and
/// counts in `stats`, only the bytes loadPlanSlice would.
StatusOr<Plan> parsePlanSlice(std::string_view bytes, int64_t rank,
                              SliceLoadStats *stats = nullptr,
                              int64_t readLimit = kDefaultSliceReadLimit);

/// Rank `rank`'s part of a whole plan, as loadPlanSlice builds it from the
/// plan's binary file (fileId aside, which only a file has).
Plan slicePlan(const Plan &plan, int64_t rank);

/// Recomputes the checksums of a binary plan (each one whose section lies
/// inside the file), as a forger would: for tests and fuzzers, so that the
/// damage they make reaches the decoders and the checks behind the
/// checksums instead of stopping at the first checksum.
void resealPlanBinary(std::string &bytes);

/// What every rank's part of one plan file has in common: the file's
/// identity and its shared section as this rank holds it (settings included,
/// so a rank whose settings changed after loading stands out).
uint64_t planSliceIdentity(const Plan &slice);

/// Bytes a slice's Plan holds (what SliceLoadStats::heldBytes reports).
int64_t planHeldBytes(const Plan &plan);

} // namespace muon

#endif // MUON_PLAN_PLANBINARY_H
