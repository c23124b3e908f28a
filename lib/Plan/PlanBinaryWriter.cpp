//===- PlanBinaryWriter.cpp - Writing the binary plan file ----------------===//
//
// PlanBinaryWriter: the file from a plan's settings and its transfers as
// they stream in (a compiler need not hold them), into memory or straight
// into a file; renderPlanBinary, the same from a whole plan.
//
//===----------------------------------------------------------------------===//
#include "PlanBinaryFormat.h"

#include "muon/Plan/Validate.h"
#include "muon/Support/Fnv.h"
#include "muon/Support/Limits.h"
#include "muon/Support/OutputFile.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <sys/stat.h>
#include <unistd.h>

namespace muon {
using namespace planbin;

namespace {

/// Every matrix's round and place in it, and whether every round lists its
/// matrices ascending with every matrix in exactly one round (what the
/// counting sort of a rank's matrices needs).
struct RoundPlaces {
  std::vector<int64_t> roundOf, posInRound;
  bool ascending = true;
};

/// Each rank's reductions, by exchange, in order: (index in the exchange,
/// whether the rank receives it). Reductions are few.
using RankReductions =
    std::vector<std::vector<std::vector<std::pair<int64_t, bool>>>>;

} // namespace

/// The writer's state: each rank's matrices, and per rank and exchange its
/// encoded transfers so far (sections are exchange-major, transfers come in
/// matrix order, so each (rank, exchange) keeps its own bytes until finish).
struct PlanBinaryWriter::State {
  const Plan *plan = nullptr;
  std::unique_ptr<Geometry> geo;
  struct RankExchange {
    std::string bytes;
    int64_t count = 0, last = -1;
  };
  // What add() touches per rank to encode, in one cache line: at 16,384
  // ranks each transfer lands on two ranks far from the previous one's.
  struct alignas(64) Rank {
    // The last matrix looked up and its local index: an owner is one end
    // of every transfer of its matrix, one after the other.
    int32_t lastMatrix = -1, lastLocal = 0;
    std::vector<int32_t> local;      // whole-plan indices, ascending
    std::vector<RankExchange> items; // per exchange
  };
  std::vector<Rank> ranks;
  TransferCounter traffic;     // each rank's bytes, for figures()
  std::vector<int64_t> counts; // per exchange
  bool failed = false;

  RankExchange &at(Rank &rank, int64_t exchange) {
    std::vector<RankExchange> &v = rank.items;
    if (static_cast<int64_t>(v.size()) <= exchange)
      v.resize(exchange + 1);
    return v[exchange];
  }

  // encode()'s phases (below).
  /// The ranks' sections' bytes, about: what encode reserves in memory.
  uint64_t sectionBytesEstimate(const Plan &plan) const;
  /// Rank r's section into `buffer`: its matrices, its NS batches, and per
  /// exchange its transfers (moved out of the state) and reductions.
  void encodeRank(const Plan &plan, int64_t r, const RoundPlaces &places,
                  const RankReductions &reductions, std::string &buffer);
};

/// Where encode() puts the file: all of it in `buffer` (no descriptor), or
/// a regular file written as it is made, `buffer` holding what is not
/// written yet. The prefix (header, shared and global sections, index) is
/// complete only at the end: a placeholder goes first, the prefix over it.
struct PlanBinaryWriter::FileOutput {
  explicit FileOutput(int fd) : fd(fd) {}
  int fd;
  std::string buffer;
  uint64_t written = 0; // bytes of the file before buffer's first
  std::string error;

  bool inMemory() const { return fd < 0; }
  uint64_t position() const { return written + buffer.size(); }
  /// Writes the buffer out once it holds a few megabytes (or now).
  bool spill(bool now = false) {
    constexpr size_t kSpillBytes = size_t(4) << 20;
    if (fd < 0 || buffer.empty() || (!now && buffer.size() < kSpillBytes))
      return true;
    if (!writeAt(buffer.data(), buffer.size(), written))
      return false;
    written += buffer.size();
    buffer.clear();
    return true;
  }
  bool finish(const std::string &prefix) {
    if (fd < 0) {
      buffer.replace(0, prefix.size(), prefix);
      return true;
    }
    return spill(/*now=*/true) && writeAt(prefix.data(), prefix.size(), 0);
  }
  bool writeAt(const char *data, size_t size, uint64_t offset) {
    if (writeFully(fd, data, size, static_cast<int64_t>(offset)))
      return true;
    error = std::strerror(errno);
    return false;
  }
};

PlanBinaryWriter::PlanBinaryWriter() : s(std::make_unique<State>()) {}
PlanBinaryWriter::~PlanBinaryWriter() = default;

bool PlanBinaryWriter::begun() const { return s->plan != nullptr; }

void PlanBinaryWriter::begin(const Plan &plan) {
  s = std::make_unique<State>();
  s->plan = &plan;
  s->geo = std::make_unique<Geometry>(plan);
  int64_t world = plan.worldSize;
  s->ranks.resize(world);
  s->traffic.begin(plan);
  // Each rank's matrices: those it holds a piece of (the owner holds one
  // too), from the layouts: in a valid plan exactly the owners, the NS
  // lists and both ends of every transfer. Parameters in order and slices
  // ascending: each list comes out sorted.
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const PlanParam &p = plan.params[i];
    if (!p.orthogonalized() || p.layout.shape.size() < 2)
      continue;
    int64_t first = s->geo->firstMatrix[i];
    size_t batch = p.layout.shape.size() - 2;
    for (const ParamPiece &piece : paramPieces(plan.mesh, p.layout)) {
      std::vector<int64_t> at(batch);
      for (size_t d = 0; d < batch; ++d)
        at[d] = piece.box[d].begin;
      while (true) {
        int64_t slice = 0;
        for (size_t d = 0; d < batch; ++d)
          slice = slice * p.layout.shape[d] + at[d];
        // The heads whose block meets the piece (all of them without heads).
        const Range &rows = piece.box[batch], &cols = piece.box[batch + 1];
        for (int64_t h = 0; h < p.layout.numHeads; ++h) {
          int64_t m = slice * p.layout.numHeads + h;
          Range hr = p.layout.headRowsOf(m), hc = p.layout.headColsOf(m);
          if (std::max(rows.begin, hr.begin) < std::min(rows.end, hr.end) &&
              std::max(cols.begin, hc.begin) < std::min(cols.end, hc.end))
            s->ranks[piece.rank].local.push_back(
                static_cast<int32_t>(first + m));
        }
        size_t d = batch;
        while (d > 0 && ++at[d - 1] == piece.box[d - 1].end) {
          at[d - 1] = piece.box[d - 1].begin;
          --d;
        }
        if (d == 0)
          break;
      }
    }
  }
}

void PlanBinaryWriter::add(int64_t exchange, bool gather, const Transfer &t) {
  State &st = *s;
  const Plan &plan = *st.plan;
  // Only an invalid plan names a rank, a matrix or an exchange that is not
  // there; finish() then refuses to write.
  if (st.failed || t.src < 0 || t.src >= plan.worldSize || t.dst < 0 ||
      t.dst >= plan.worldSize || t.matrix < 0 ||
      t.matrix >= st.geo->totalMatrices() || exchange < 0 ||
      exchange > 2 * limits::kMaxRounds) {
    st.failed = true;
    return;
  }
  if (static_cast<int64_t>(st.counts.size()) <= exchange)
    st.counts.resize(exchange + 1, 0);
  int64_t index = st.counts[exchange]++;
  st.traffic.add(exchange, gather, t);
  auto [param, slice] = st.geo->locate(t.matrix);
  Range rows, cols;
  int64_t summand = 0;
  bool derived =
      st.geo->piece(param, slice, gather ? t.src : t.dst, rows, cols, summand);
  uint8_t flags = 0;
  if (!derived || !(rows == t.rows) || !(cols == t.cols))
    flags |= kExplicitBox;
  if (t.summand != (gather && derived ? summand : 0))
    flags |= kExplicitSummand;
  for (int side = 0; side < 2; ++side) {
    int64_t me = side ? t.dst : t.src, peer = side ? t.src : t.dst;
    State::Rank &rank = st.ranks[me];
    if (rank.lastMatrix != t.matrix) {
      const std::vector<int32_t> &ids = rank.local;
      // Matrices come in ascending order, so a rank's next one is nearly
      // always just after its last: look there before searching (a binary
      // search per transfer was a third of the writer's time at 16,384
      // ranks, a cache miss per step).
      auto it = ids.begin();
      if (rank.lastMatrix < t.matrix) {
        it += rank.lastLocal;
        for (int probe = 0; probe < 4 && it != ids.end() && *it < t.matrix;
             ++probe)
          ++it;
        if (it != ids.end() && *it < t.matrix)
          it = std::lower_bound(it, ids.end(), t.matrix);
      } else {
        it = std::lower_bound(ids.begin(), ids.end(), t.matrix);
      }
      if (it == ids.end() || *it != t.matrix) {
        // Only an invalid plan has a transfer of a matrix its end does not
        // hold; finish() then refuses to write.
        st.failed = true;
        return;
      }
      rank.lastMatrix = static_cast<int32_t>(t.matrix);
      rank.lastLocal = static_cast<int32_t>(it - ids.begin());
    }
    State::RankExchange &re = st.at(rank, exchange);
    // A rank's bytes of one exchange are about a kilobyte at scale: start
    // there rather than grow from nothing.
    if (re.bytes.capacity() < 256)
      re.bytes.reserve(256);
    Out o(re.bytes);
    o.varint(index - re.last - 1);
    re.last = index;
    ++re.count;
    o.u8(flags | (side ? kToMe : 0));
    o.varint(peer);
    o.varint(rank.lastLocal);
    if (flags & kExplicitBox) {
      o.svarint(t.rows.begin);
      o.svarint(t.rows.end);
      o.svarint(t.cols.begin);
      o.svarint(t.cols.end);
    }
    if (flags & kExplicitSummand)
      o.svarint(t.summand);
  }
}

std::vector<RankFigures> PlanBinaryWriter::figures(const Plan &plan) const {
  return s->traffic.figures(plan);
}

namespace {

/// The global section: every matrix's owner, the rounds, and per exchange
/// its transfer and reduction counts (`counts`: the transfers).
std::string encodeGlobal(const Plan &plan, const std::vector<int64_t> &counts) {
  std::string global;
  Out o(global);
  o.varint(plan.matrices.size());
  for (const PlanMatrix &m : plan.matrices)
    o.svarint(encodedOwner(m));
  for (const auto &round : plan.rounds) {
    o.varint(round.size());
    for (int64_t k : round)
      o.varint(k);
  }
  for (size_t e = 0; e < plan.exchanges.size(); ++e) {
    o.varint(counts[e]);
    o.varint(plan.exchanges[e].reductions.size());
  }
  return global;
}

RoundPlaces roundPlaces(const Plan &plan) {
  RoundPlaces places;
  places.roundOf.assign(plan.matrices.size(), 0);
  places.posInRound.assign(plan.matrices.size(), 0);
  size_t inRounds = 0;
  for (size_t r = 0; r < plan.rounds.size(); ++r) {
    inRounds += plan.rounds[r].size();
    places.ascending = places.ascending &&
                       std::is_sorted(plan.rounds[r].begin(),
                                      plan.rounds[r].end());
    for (size_t i = 0; i < plan.rounds[r].size(); ++i) {
      places.roundOf[plan.rounds[r][i]] = static_cast<int64_t>(r);
      places.posInRound[plan.rounds[r][i]] = static_cast<int64_t>(i);
    }
  }
  places.ascending = places.ascending && !plan.rounds.empty() &&
                     inRounds == plan.matrices.size();
  return places;
}

RankReductions reductionsByRank(const Plan &plan) {
  RankReductions reductions(plan.worldSize);
  for (size_t e = 0; e < plan.exchanges.size(); ++e)
    for (size_t i = 0; i < plan.exchanges[e].reductions.size(); ++i) {
      const Reduction &red = plan.exchanges[e].reductions[i];
      for (int side = 0; side < 2; ++side) {
        auto &list = reductions[side ? red.dst : red.src];
        if (list.size() <= e)
          list.resize(e + 1);
        list[e].push_back({static_cast<int64_t>(i), side == 1});
      }
    }
  return reductions;
}

/// A rank's matrices (`ids`, ascending), each with its owner, then its
/// local indices by (round, place in the round). Where every round lists
/// its matrices ascending, as `ids` does (compiled plans), a stable counting
/// sort by round gives that order: a comparison sort per rank was a tenth of
/// finish() at 16,384 ranks.
void writeRankMatrices(Out &o, const Plan &plan,
                       const std::vector<int32_t> &ids,
                       const RoundPlaces &places) {
  o.varint(ids.size());
  int64_t prev = -1;
  for (int64_t k : ids) {
    o.varint(k - prev - 1);
    prev = k;
    o.svarint(encodedOwner(plan.matrices[k]));
  }
  const std::vector<int64_t> &roundOf = places.roundOf;
  std::vector<int64_t> order(ids.size());
  if (places.ascending) {
    std::vector<size_t> start(plan.rounds.size() + 1, 0);
    for (int64_t k : ids)
      ++start[roundOf[k] + 1];
    for (size_t round = 0; round < plan.rounds.size(); ++round)
      start[round + 1] += start[round];
    for (size_t i = 0; i < ids.size(); ++i)
      order[start[roundOf[ids[i]]]++] = static_cast<int64_t>(i);
  } else {
    for (size_t i = 0; i < ids.size(); ++i)
      order[i] = static_cast<int64_t>(i);
    std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return std::pair(roundOf[ids[a]], places.posInRound[ids[a]]) <
             std::pair(roundOf[ids[b]], places.posInRound[ids[b]]);
    });
  }
  size_t at = 0;
  for (size_t round = 0; round < plan.rounds.size(); ++round) {
    size_t end = at;
    while (end < order.size() &&
           roundOf[ids[order[end]]] == static_cast<int64_t>(round))
      ++end;
    o.varint(end - at);
    for (; at < end; ++at)
      o.varint(order[at]);
  }
}

/// Rank r's NS batches, their matrices by local index.
void writeRankBatches(Out &o, const Plan &plan, int64_t r,
                      const std::vector<int32_t> &ids) {
  auto local = [&](int64_t k) {
    return std::lower_bound(ids.begin(), ids.end(), k) - ids.begin();
  };
  o.varint(plan.nsBatches[r].size());
  for (const NsBatch &b : plan.nsBatches[r]) {
    o.svarint(b.round);
    o.svarint(b.rows);
    o.svarint(b.cols);
    if (severalNsConfigs(plan))
      o.varint(b.config);
    o.varint(b.matrices.size());
    for (int64_t k : b.matrices)
      o.varint(local(k));
  }
}

/// The reductions a rank takes part in of exchange `e` (`reds`).
void writeRankReductions(Out &o, const Plan &plan, size_t e,
                         const std::vector<std::pair<int64_t, bool>> &reds) {
  o.varint(reds.size());
  int64_t last = -1;
  for (auto [i, toMe] : reds) {
    const Reduction &red = plan.exchanges[e].reductions[i];
    o.varint(i - last - 1);
    last = i;
    o.u8(toMe ? kToMe : 0);
    o.varint(toMe ? red.src : red.dst);
    o.varint(red.param);
    o.svarint(red.summand);
    o.svarint(red.elements);
  }
}

/// The file's prefix: the header, the shared and global sections and the
/// index of the ranks' sections (offset, size, checksum), for a file of
/// `fileBytes`.
std::string
encodePrefix(const Plan &plan, uint64_t fileBytes, const std::string &shared,
             const std::string &global,
             const std::vector<std::array<uint64_t, 3>> &index) {
  std::string head;
  head.append(kPlanBinaryMagic);
  Out o(head);
  o.u32(planBinaryVersion(plan));
  o.u32(kHeaderSize);
  o.u64(plan.worldSize);
  o.u64(fileBytes);
  o.u64(kHeaderSize);
  o.u64(shared.size());
  o.u64(kHeaderSize + shared.size());
  o.u64(global.size());
  o.u64(kHeaderSize + shared.size() + global.size());
  o.u64(fnv1a(shared.data(), shared.size()));
  o.u64(fnv1a(global.data(), global.size()));
  o.u64(fnv1a(head.data(), head.size()));
  std::string prefix = head;
  prefix += shared;
  prefix += global;
  for (const auto &[offset, size, sum] : index) {
    size_t at = prefix.size();
    prefix.append(kIndexEntrySize, '\0');
    putU64(prefix, at, offset);
    putU64(prefix, at + 8, size);
    putU64(prefix, at + 16, sum);
  }
  return prefix;
}

} // namespace

uint64_t PlanBinaryWriter::State::sectionBytesEstimate(const Plan &plan) const {
  // The transfers' bytes, and a generous allowance for the rest of each
  // section.
  uint64_t estimate = 0;
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    estimate += 64 + 16 * ranks[r].local.size() +
                8 * plan.nsMatrices[r].size() + 8 * plan.exchanges.size();
    for (const RankExchange &re : ranks[r].items)
      estimate += re.bytes.size();
  }
  for (const Exchange &ex : plan.exchanges)
    estimate += 2 * 16 * ex.reductions.size();
  return estimate;
}

void PlanBinaryWriter::State::encodeRank(const Plan &plan, int64_t r,
                                         const RoundPlaces &places,
                                         const RankReductions &reductions,
                                         std::string &buffer) {
  Out o(buffer);
  const std::vector<int32_t> &ids = ranks[r].local;
  writeRankMatrices(o, plan, ids, places);
  writeRankBatches(o, plan, r, ids);
  // Each exchange's transfers (each rank's bytes freed as they are
  // copied), then its reductions.
  std::vector<RankExchange> &mine = ranks[r].items;
  const std::vector<std::pair<int64_t, bool>> none;
  for (size_t e = 0; e < plan.exchanges.size(); ++e) {
    if (e < mine.size()) {
      o.varint(mine[e].count);
      buffer += mine[e].bytes;
      std::string().swap(mine[e].bytes);
    } else {
      o.varint(0);
    }
    writeRankReductions(o, plan, e,
                        e < reductions[r].size() ? reductions[r][e] : none);
  }
  std::vector<RankExchange>().swap(mine);
}

bool PlanBinaryWriter::encode(const Plan &plan, FileOutput &out) {
  State &st = *s;
  int64_t world = plan.worldSize;
  // `plan` is the finished plan, not necessarily the object begin() saw
  // (buildPlan returns a copy); what the writer kept must fit it.
  if (st.failed || static_cast<int64_t>(st.ranks.size()) != world)
    return false;
  std::vector<int64_t> counts(plan.exchanges.size(), 0);
  for (size_t e = 0; e < plan.exchanges.size() && e < st.counts.size(); ++e)
    counts[e] = st.counts[e];
  if (st.counts.size() > plan.exchanges.size())
    return false;
  const std::string shared = encodeShared(plan, plan.matrices.size());
  const std::string global = encodeGlobal(plan, counts);
  const RoundPlaces places = roundPlaces(plan);
  const RankReductions reductions = reductionsByRank(plan);

  // Room for the header, the shared and global sections and the index
  // (complete only at the end), then each rank's section as it is made.
  uint64_t sectionsBegin =
      kHeaderSize + shared.size() + global.size() + world * kIndexEntrySize;
  // Sized up front in memory: growing a 280 MB string by doubling would
  // touch twice that.
  if (out.inMemory())
    out.buffer.reserve(sectionsBegin + st.sectionBytesEstimate(plan));
  out.buffer.append(sectionsBegin, '\0');
  std::vector<std::array<uint64_t, 3>> index(world);
  for (int64_t r = 0; r < world; ++r) {
    uint64_t begin = out.position();
    size_t first = out.buffer.size();
    st.encodeRank(plan, r, places, reductions, out.buffer);
    index[r] = {begin, out.position() - begin,
                fnv1a(out.buffer.data() + first, out.buffer.size() - first)};
    if (!out.spill())
      return false;
  }
  return out.finish(encodePrefix(plan, out.position(), shared, global, index));
}

std::string PlanBinaryWriter::finish(const Plan &plan) {
  FileOutput out(-1);
  if (!encode(plan, out))
    return {};
  return std::move(out.buffer);
}

Status PlanBinaryWriter::finishTo(const Plan &plan, int fd, bool seekable) {
  FileOutput out(seekable ? fd : -1);
  if (!encode(plan, out))
    return out.error.empty()
               ? internalError("internal error: the compiled plan could not "
                               "be written as a binary plan (a transfer "
                               "names a matrix one of its ends does not "
                               "hold)")
               : unavailable(out.error);
  if (seekable)
    return okStatus();
  // In order from the start: what a pipe takes.
  if (writeFully(fd, out.buffer.data(), out.buffer.size()))
    return okStatus();
  return unavailable(std::strerror(errno));
}

std::string renderPlanBinary(const Plan &plan) {
  PlanBinaryWriter writer;
  writer.begin(plan);
  for (size_t e = 0; e < plan.exchanges.size(); ++e)
    for (const Transfer &t : plan.exchanges[e].transfers)
      writer.add(static_cast<int64_t>(e),
                 plan.exchanges[e].phase == Exchange::Phase::Gather, t);
  return writer.finish(plan);
}

} // namespace muon
