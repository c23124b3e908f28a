//===- PlanBinary.cpp - The sliced binary plan file (muon-plan-bin/1) -----===//
//
// Layout (docs/plan-format.md has it byte by byte): a 96-byte header, the
// shared section, the global section, the rank index (24 bytes per rank),
// then the rank sections in rank order. Integers inside sections are LEB128
// varints (signed ones zigzag-encoded), doubles 8 bytes little-endian.
//
// Each transfer is stored twice, in its source's and its destination's
// section, so that a rank needs nothing but its own section; each copy
// carries the transfer's index in its exchange, so the whole plan's order
// (which fixes every rank's all-to-all-v layout) is recoverable. A transfer
// whose box is its holder's piece (the source's in a gather, the
// destination's in a scatter: always, in a plan the compiler wrote) does
// not store the box: the reader derives it from the layout, as the
// validator would to check it.
//
//===----------------------------------------------------------------------===//
#include "muon/Plan/PlanBinary.h"

#include "muon/Plan/GroupSettings.h"
#include "muon/Plan/Validate.h"
#include "muon/Support/Escape.h"
#include "muon/Support/Fnv.h"
#include "muon/Support/InputFile.h"
#include "muon/Support/Limits.h"
#include "muon/Support/OutputFile.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <memory>
#include <optional>
#include <sys/stat.h>
#include <unistd.h>

namespace muon {
namespace {

constexpr size_t kHeaderSize = 96;
constexpr size_t kIndexEntrySize = 24;

// Transfer flags.
constexpr uint8_t kToMe = 1;        // this section's rank is the destination
constexpr uint8_t kExplicitBox = 2; // rows and cols follow
constexpr uint8_t kExplicitSummand = 4;
// A parameter's `only` count with this bit: per-head values follow.
constexpr uint64_t kHeadsFlag = uint64_t(1) << 32;
// A group's algorithm byte with this bit: its settings tail follows.
constexpr uint8_t kSettingsTail = 0x80;

/// The group settings (GroupSettings.h) that have a slot of their own in a
/// group's record, as the format had them before the settings tail. Every
/// other setting travels in the tail, by name, so that a setting added to
/// the table needs no change here.
bool hasFixedSlot(const GroupSetting &s) {
  static constexpr std::string_view kMuonSlots[] = {
      "lr",        "weight_decay",      "momentum", "nesterov",
      "adjust_lr", "weight_decay_mode", "normuon",  "normuon_beta2"};
  if (!s.muon)
    return true; // lr, betas, eps, weight_decay
  return std::find(std::begin(kMuonSlots), std::end(kMuonSlots),
                   std::string_view(s.name)) != std::end(kMuonSlots);
}

/// The settings of g's tail: those without a slot that files hold.
std::vector<const GroupSetting *> tailSettings(const PlanGroup &g) {
  std::vector<const GroupSetting *> tail;
  for (const GroupSetting &s : groupSettings())
    if (s.muon == g.muon && !hasFixedSlot(s) && settingWritten(s, g))
      tail.push_back(&s);
  return tail;
}

std::string num(int64_t v) { return std::to_string(v); }

//===----------------------------------------------------------------------===//
// Encoding
//===----------------------------------------------------------------------===//

class Out {
public:
  explicit Out(std::string &s) : s(s) {}
  void u8(uint8_t v) { s.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i)
      u8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void u64(uint64_t v) {
    for (int i = 0; i < 8; ++i)
      u8(static_cast<uint8_t>(v >> (8 * i)));
  }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      u8(static_cast<uint8_t>(v | 0x80));
      v >>= 7;
    }
    u8(static_cast<uint8_t>(v));
  }
  void svarint(int64_t v) {
    varint((static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63));
  }
  void f64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    u64(bits);
  }
  void str(const std::string &v) {
    varint(v.size());
    s.append(v);
  }
  void ints(const std::vector<int64_t> &v) {
    varint(v.size());
    for (int64_t x : v)
      svarint(x);
  }

private:
  std::string &s;
};

void putU64(std::string &s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    s[at + i] = static_cast<char>(v >> (8 * i));
}
uint64_t getU64(const char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
uint32_t getU32(const char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

/// Whether the plan is written as version 4 (kPlanBinaryNsConfigsVersion).
bool severalNsConfigs(const Plan &plan) { return plan.ns.configs.size() > 1; }

/// The format version the writer gives `plan`: the oldest that holds it, so
/// that plans without newer features keep their bytes.
uint32_t planBinaryVersion(const Plan &plan) {
  if (severalNsConfigs(plan))
    return kPlanBinaryNsConfigsVersion;
  return plan.qkClip.empty() ? kPlanBinaryVersion : kPlanBinaryQkClipVersion;
}

/// One Newton-Schulz configuration: steps, the coefficient table, eps.
void encodeNsConfig(Out &o, const NewtonSchulzConfig &c) {
  o.svarint(c.nsSteps);
  o.varint(c.coefficients.size());
  for (const auto &abc : c.coefficients)
    for (double x : abc)
      o.f64(x);
  o.f64(c.eps);
}

/// Settings, mesh, parameters, the exchanges' phases and the schedule: what
/// every rank needs whole.
std::string encodeShared(const Plan &plan, int64_t totalMatrices) {
  std::string s;
  Out o(s);
  o.str(plan.wireDtype);
  o.u8(plan.distributed);
  o.u8(plan.async);
  o.svarint(plan.prefetchCount);
  o.svarint(plan.inflightLimit);
  o.svarint(plan.gatherBudgetBytes);
  o.ints(plan.mesh.shape);
  o.ints(plan.mesh.devices);
  // Version 4: a count, then each configuration; before, the one alone.
  const bool several = severalNsConfigs(plan);
  if (several)
    o.varint(plan.ns.configs.size());
  for (const NewtonSchulzConfig &c : plan.ns.configs)
    encodeNsConfig(o, c);
  o.str(plan.ns.nsDtype);
  o.varint(plan.groups.size());
  for (const PlanGroup &g : plan.groups) {
    o.str(g.name);
    const std::vector<const GroupSetting *> tail = tailSettings(g);
    // The tail's bit: plans without one keep their bytes, and a reader
    // that predates it refuses the algorithm instead of misreading.
    o.u8(static_cast<uint8_t>(g.muon | (tail.empty() ? 0 : kSettingsTail)));
    if (g.muon) {
      const MuonSettings &m = g.muonSettings;
      o.f64(m.lr);
      o.f64(m.weightDecay);
      o.f64(m.momentum);
      // Bit 0 nesterov, bits 1-2 the weight-decay mode (0: decoupled, so
      // plans written before the modes read the same), bit 3 NorMuon (its
      // beta2 follows adjust_lr only then: other plans stay byte-identical,
      // and a reader without NorMuon refuses the flag instead of misreading).
      int mode = std::max(0, weightDecayModeIndex(m.weightDecayMode));
      o.u8(static_cast<uint8_t>((m.nesterov ? 1 : 0) | mode << 1 |
                                (m.normuon ? 8 : 0)));
      o.str(m.adjustLr);
      if (m.normuon)
        o.f64(m.normuonBeta2);
      if (several)
        o.varint(g.nsConfig);
    } else {
      const AdamWSettings &a = g.adamwSettings;
      o.f64(a.lr);
      o.f64(a.beta1);
      o.f64(a.beta2);
      o.f64(a.eps);
      o.f64(a.weightDecay);
    }
    // The tail: a count, then each setting's name and value (a Number an
    // f64, a Flag a byte, a Name a string).
    if (!tail.empty()) {
      o.varint(tail.size());
      for (const GroupSetting *s : tail) {
        o.str(s->name);
        if (s->kind == GroupSetting::Kind::Name)
          o.str(settingName(*s, g));
        else if (s->kind == GroupSetting::Kind::Flag)
          o.u8(settingValue(*s, g) != 0);
        else
          o.f64(settingValue(*s, g));
      }
    }
  }
  o.varint(plan.params.size());
  for (const PlanParam &p : plan.params) {
    o.str(p.name);
    o.str(p.dtype);
    o.varint(p.group);
    o.ints(p.layout.shape);
    o.varint(p.layout.splitAxes.size());
    for (const auto &axes : p.layout.splitAxes)
      o.ints(axes);
    o.ints(p.layout.partialAxes);
    // Per-head Newton-Schulz rides on a flag bit of the `only` count, and
    // its two values follow the pairs only when set: plans without heads
    // keep their bytes, and older readers refuse the bit as a count.
    bool heads = p.layout.numHeads > 1;
    o.varint(p.layout.only.size() | (heads ? kHeadsFlag : 0));
    for (auto [axis, coord] : p.layout.only) {
      o.svarint(axis);
      o.svarint(coord);
    }
    if (heads) {
      o.varint(p.layout.numHeads);
      o.varint(p.layout.headSplitDim);
    }
  }
  // Only in version 3 and 4 files (kPlanBinaryQkClipVersion): plans without
  // QK-clip or NS configurations stay version 2, byte for byte, and older
  // readers refuse the version instead of misreading the section.
  if (planBinaryVersion(plan) != kPlanBinaryVersion) {
    o.varint(plan.qkClip.size());
    for (const QkClipLayer &l : plan.qkClip) {
      o.str(l.name);
      o.str(l.query);
      o.str(l.key);
      o.svarint(l.numHeads);
      o.svarint(l.numKvHeads);
      o.f64(l.threshold);
    }
  }
  o.varint(totalMatrices);
  o.varint(plan.rounds.size());
  o.varint(plan.exchanges.size());
  for (const Exchange &ex : plan.exchanges) {
    o.u8(static_cast<uint8_t>(ex.phase));
    o.svarint(ex.round);
  }
  o.varint(plan.schedule.size());
  for (const ScheduleStep &st : plan.schedule) {
    o.u8(static_cast<uint8_t>(st.kind));
    o.svarint(st.index);
  }
  return s;
}

/// Every rank's mesh coordinates (flat), every parameter's first matrix:
/// what deriving a holder's piece needs. Built from a header that passed
/// validatePlanHeader, so axes and coordinates are in range.
struct Geometry {
  const Plan &plan;
  int64_t dims = 0;
  std::vector<int64_t> coords;      // rank * dims + axis
  std::vector<int64_t> firstMatrix; // per param (+1 at the end)

  explicit Geometry(const Plan &plan) : plan(plan) {
    dims = plan.mesh.rank();
    coords.assign(plan.worldSize * dims, 0);
    for (int64_t linear = 0; linear < plan.worldSize; ++linear) {
      int64_t rank =
          plan.mesh.devices.empty() ? linear : plan.mesh.devices[linear];
      std::vector<int64_t> c = plan.mesh.coordsOfLinear(linear);
      std::copy(c.begin(), c.end(), coords.begin() + rank * dims);
    }
    firstMatrix.push_back(0);
    for (const PlanParam &p : plan.params)
      firstMatrix.push_back(firstMatrix.back() +
                            (p.muon ? p.layout.numMatrices() : 0));
  }
  int64_t totalMatrices() const { return firstMatrix.back(); }
  std::vector<int64_t> coordsOf(int64_t rank) const {
    return {coords.begin() + rank * dims, coords.begin() + (rank + 1) * dims};
  }
  /// (param, slice) of global matrix `id` < totalMatrices(). Transfers come
  /// matrix by matrix, so the last parameter found is tried first.
  std::pair<int64_t, int64_t> locate(int64_t id) const {
    int64_t p = lastLocated;
    if (!(firstMatrix[p] <= id && id < firstMatrix[p + 1])) {
      p = std::upper_bound(firstMatrix.begin(), firstMatrix.end(), id) -
          firstMatrix.begin() - 1;
      lastLocated = p;
    }
    return {p, id - firstMatrix[p]};
  }
  /// The piece of matrix `slice` of `param` that `rank` holds; false when it
  /// holds none. A plan's transfers come matrix by matrix, so each rank's
  /// box of the last parameter asked about is kept: the writer asks about
  /// every transfer (17 million at 16,384 ranks), and recomputing the box
  /// each time was most of the writer's time.
  bool piece(int64_t param, int64_t slice, int64_t rank, Range &rows,
             Range &cols, int64_t &summand) const {
    if (cached.empty())
      cached.resize(plan.worldSize);
    const ParamLayout &layout = plan.params[param].layout;
    Cached &mine = cached[rank];
    std::vector<Range> &box = mine.box;
    if (mine.param != param) {
      std::vector<int64_t> c = coordsOf(rank);
      mine.param = param;
      mine.in = layout.inSubmesh(c);
      if (mine.in)
        box = layout.localBox(plan.mesh, c);
      int64_t s = 0;
      for (int64_t axis : layout.partialAxes)
        s = s * plan.mesh.shape[axis] + c[axis];
      mine.summand = s;
    }
    // ParamLayout::holdsMatrix on the kept box.
    if (!mine.in)
      return false;
    size_t dims = layout.shape.size();
    // In the matrix's coordinates: a head's block of the box.
    Range headRows = layout.headRowsOf(slice),
          headCols = layout.headColsOf(slice);
    rows = {std::max(box[dims - 2].begin, headRows.begin) - headRows.begin,
            std::min(box[dims - 2].end, headRows.end) - headRows.begin};
    cols = {std::max(box[dims - 1].begin, headCols.begin) - headCols.begin,
            std::min(box[dims - 1].end, headCols.end) - headCols.begin};
    if (rows.size() <= 0 || cols.size() <= 0)
      return false;
    int64_t m = layout.batchSliceOf(slice);
    for (size_t d = dims - 2; d-- > 0;) {
      int64_t index = m % layout.shape[d];
      m /= layout.shape[d];
      if (index < box[d].begin || index >= box[d].end)
        return false;
    }
    summand = mine.summand;
    return true;
  }

private:
  mutable int64_t lastLocated = 0;
  // One cache line per rank: the writer comes to each rank thousands of
  // times, each time after many others.
  struct alignas(64) Cached {
    int64_t param = -1, summand = 0;
    bool in = false;
    std::vector<Range> box;
  };
  mutable std::vector<Cached> cached;
};

int64_t localIndex(const std::vector<int64_t> &ids, int64_t id) {
  return std::lower_bound(ids.begin(), ids.end(), id) - ids.begin();
}

} // namespace

bool isPlanBinary(std::string_view prefix) {
  return prefix.substr(0, kPlanBinaryMagic.size()) == kPlanBinaryMagic;
}

bool looksLikePlanBinary(std::string_view prefix) {
  return isPlanBinary(prefix) ||
         prefix.substr(0, kPlanBinaryProbeSize).find('\0') !=
             std::string_view::npos;
}

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
    std::vector<int32_t> local;       // whole-plan indices, ascending
    std::vector<RankExchange> items;  // per exchange
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
    if (!p.muon || p.layout.shape.size() < 2)
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
  bool derived = st.geo->piece(param, slice, gather ? t.src : t.dst, rows,
                               cols, summand);
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
  std::string shared = encodeShared(plan, plan.matrices.size());
  std::string global;
  {
    Out o(global);
    o.varint(plan.matrices.size());
    for (const PlanMatrix &m : plan.matrices)
      o.svarint(m.owner);
    for (const auto &round : plan.rounds) {
      o.varint(round.size());
      for (int64_t k : round)
        o.varint(k);
    }
    for (size_t e = 0; e < plan.exchanges.size(); ++e) {
      o.varint(counts[e]);
      o.varint(plan.exchanges[e].reductions.size());
    }
  }
  std::vector<int64_t> roundOf(plan.matrices.size(), 0),
      posInRound(plan.matrices.size(), 0);
  size_t inRounds = 0;
  bool roundsAscending = true;
  for (size_t r = 0; r < plan.rounds.size(); ++r) {
    inRounds += plan.rounds[r].size();
    roundsAscending = roundsAscending && std::is_sorted(plan.rounds[r].begin(),
                                                        plan.rounds[r].end());
    for (size_t i = 0; i < plan.rounds[r].size(); ++i) {
      roundOf[plan.rounds[r][i]] = static_cast<int64_t>(r);
      posInRound[plan.rounds[r][i]] = static_cast<int64_t>(i);
    }
  }
  // The counting sort below needs every matrix in exactly one round.
  roundsAscending = roundsAscending && !plan.rounds.empty() &&
                    inRounds == plan.matrices.size();
  // Reductions are few: each rank's, by exchange, in order.
  std::vector<std::vector<std::vector<std::pair<int64_t, bool>>>> reductions(
      world);
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

  // Room for the header, the shared and global sections and the index
  // (complete only at the end), then each rank's section as it is made
  // (each rank's transfer bytes freed as they are copied).
  uint64_t sectionsBegin = kHeaderSize + shared.size() + global.size() +
                           world * kIndexEntrySize;
  if (out.inMemory()) {
    // Sized up front (the transfers' bytes, and a generous allowance for
    // the rest of each section): growing a 280 MB string by doubling would
    // touch twice that.
    uint64_t estimate = sectionsBegin;
    for (int64_t r = 0; r < world; ++r) {
      estimate += 64 + 16 * st.ranks[r].local.size() +
                  8 * plan.nsMatrices[r].size() + 8 * plan.exchanges.size();
      for (const State::RankExchange &re : st.ranks[r].items)
        estimate += re.bytes.size();
    }
    for (const Exchange &ex : plan.exchanges)
      estimate += 2 * 16 * ex.reductions.size();
    out.buffer.reserve(estimate);
  }
  out.buffer.append(sectionsBegin, '\0');
  std::vector<std::array<uint64_t, 3>> index(world);
  for (int64_t r = 0; r < world; ++r) {
    uint64_t begin = out.position();
    size_t first = out.buffer.size();
    Out o(out.buffer);
    const std::vector<int32_t> &ids = st.ranks[r].local;
    o.varint(ids.size());
    int64_t prev = -1;
    for (int64_t k : ids) {
      o.varint(k - prev - 1);
      prev = k;
      o.svarint(plan.matrices[k].owner);
    }
    // Local indices by (round, place in the round). Where every round
    // lists its matrices ascending, as `ids` does (compiled plans), a stable
    // counting sort by round gives that order: a comparison sort per rank
    // was a tenth of finish() at 16,384 ranks.
    std::vector<int64_t> order(ids.size());
    if (roundsAscending) {
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
        return std::pair(roundOf[ids[a]], posInRound[ids[a]]) <
               std::pair(roundOf[ids[b]], posInRound[ids[b]]);
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
    std::vector<State::RankExchange> &mine = st.ranks[r].items;
    for (size_t e = 0; e < plan.exchanges.size(); ++e) {
      if (e < mine.size()) {
        o.varint(mine[e].count);
        out.buffer += mine[e].bytes;
        std::string().swap(mine[e].bytes);
      } else {
        o.varint(0);
      }
      const std::vector<std::pair<int64_t, bool>> none;
      const auto &reds = e < reductions[r].size() ? reductions[r][e] : none;
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
    std::vector<State::RankExchange>().swap(mine);
    index[r] = {begin, out.position() - begin,
                fnv1a(out.buffer.data() + first, out.buffer.size() - first)};
    if (!out.spill())
      return false;
  }

  std::string head;
  head.append(kPlanBinaryMagic);
  Out o(head);
  o.u32(planBinaryVersion(plan));
  o.u32(kHeaderSize);
  o.u64(world);
  o.u64(out.position());
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
  return out.finish(prefix);
}

std::string PlanBinaryWriter::finish(const Plan &plan) {
  FileOutput out(-1);
  if (!encode(plan, out))
    return {};
  return std::move(out.buffer);
}

bool PlanBinaryWriter::finishTo(const Plan &plan, int fd, bool seekable,
                                std::string &error) {
  FileOutput out(seekable ? fd : -1);
  if (!encode(plan, out)) {
    error = out.error.empty()
                ? "internal error: the compiled plan could not be written as "
                  "a binary plan (a transfer names a matrix one of its ends "
                  "does not hold)"
                : out.error;
    return false;
  }
  if (seekable)
    return true;
  // In order from the start: what a pipe takes.
  if (writeFully(fd, out.buffer.data(), out.buffer.size()))
    return true;
  error = std::strerror(errno);
  return false;
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

namespace {

//===----------------------------------------------------------------------===//
// Decoding
//===----------------------------------------------------------------------===//

/// Reads one section. Every count is checked against the bytes left before
/// anything is sized by it (each item takes at least one byte), so a hostile
/// count cannot ask for memory the section does not back.
class In {
public:
  In(std::string_view data, uint64_t fileOffset, std::string section)
      : data(data), base(fileOffset), section(std::move(section)) {}

  bool ok() const { return error.empty(); }
  std::string error;
  /// The item being read, for messages ("exchanges[3].transfers[7]").
  std::string item;

  bool fail(const std::string &message) {
    if (error.empty())
      error = section + (item.empty() ? "" : ", " + item) + " (file byte " +
              num(static_cast<int64_t>(base + at)) + "): " + message;
    return false;
  }
  uint8_t u8() {
    if (!ok())
      return 0;
    if (at >= data.size()) {
      fail("the section ends early");
      return 0;
    }
    return static_cast<uint8_t>(data[at++]);
  }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; ok(); shift += 7) {
      uint8_t b = u8();
      if (!ok())
        return 0;
      if (shift == 63 && b > 1) {
        fail("a number does not fit in 64 bits");
        return 0;
      }
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80))
        return v;
      if (shift == 63) {
        fail("a number does not fit in 64 bits");
        return 0;
      }
    }
    return 0;
  }
  int64_t svarint() {
    uint64_t v = varint();
    return static_cast<int64_t>((v >> 1) ^ (~(v & 1) + 1));
  }
  /// A non-negative number that must be below `limit`.
  int64_t below(int64_t limit, const char *what) {
    uint64_t v = varint();
    if (ok() && v >= static_cast<uint64_t>(limit)) {
      fail(std::string(what) + " " + std::to_string(v) + " is out of range [0, " +
           num(limit) + ")");
      return 0;
    }
    return static_cast<int64_t>(v);
  }
  /// A count of items of at least `minBytes` bytes each.
  size_t count(const char *what, size_t minBytes = 1) {
    return counted(varint(), what, minBytes);
  }
  /// count() of an already read value.
  size_t counted(uint64_t v, const char *what, size_t minBytes = 1) {
    if (ok() && v > (data.size() - at) / minBytes) {
      fail(std::string("says ") + std::to_string(v) + " " + what +
           " but only " + num(static_cast<int64_t>(data.size() - at)) +
           " bytes are left in the section");
      return 0;
    }
    return static_cast<size_t>(v);
  }
  double f64() {
    if (!ok())
      return 0;
    if (data.size() - at < 8) {
      fail("the section ends early");
      return 0;
    }
    double d;
    uint64_t bits = getU64(data.data() + at);
    std::memcpy(&d, &bits, 8);
    at += 8;
    return d;
  }
  std::string str(const char *what) {
    size_t n = count(what);
    if (!ok())
      return {};
    std::string s(data.substr(at, n));
    at += n;
    return s;
  }
  std::vector<int64_t> ints(const char *what) {
    size_t n = count(what);
    std::vector<int64_t> v;
    v.reserve(n);
    for (size_t i = 0; i < n && ok(); ++i)
      v.push_back(svarint());
    return v;
  }
  bool end() {
    if (ok() && at != data.size())
      fail(num(static_cast<int64_t>(data.size() - at)) +
           " bytes are left over after the section's last item");
    return ok();
  }

private:
  std::string_view data;
  size_t at = 0;
  uint64_t base;
  std::string section;
};

/// The file's header, checked: every section inside the file, in order.
struct Header {
  uint32_t version = 0;
  uint64_t world = 0, fileSize = 0;
  uint64_t sharedOffset = 0, sharedSize = 0, globalOffset = 0, globalSize = 0;
  uint64_t indexOffset = 0, sharedSum = 0, globalSum = 0, headerSum = 0;
  uint64_t sectionsBegin() const {
    return indexOffset + world * kIndexEntrySize;
  }
};

bool readHeader(std::string_view bytes, uint64_t actualSize, Header &h,
                std::string &error) {
  if (bytes.size() < kHeaderSize) {
    error = "not a binary plan file (" + num(static_cast<int64_t>(bytes.size())) +
            " bytes, shorter than its " +
            num(static_cast<int64_t>(kHeaderSize)) + "-byte header)";
    return false;
  }
  if (!isPlanBinary(bytes)) {
    // Escaped: the bytes are the file's, not text to echo.
    std::string found =
        escapeBytes(bytes.substr(0, kPlanBinaryMagic.size()), "\"\\");
    error = "header: bytes 0-7 are \"" + found +
            "\", not the magic \"MUONPLAN\" (the file is damaged or not a "
            "binary plan)";
    return false;
  }
  const char *p = bytes.data();
  uint32_t version = getU32(p + 8), headerSize = getU32(p + 12);
  if (version != kPlanBinaryVersion && version != kPlanBinaryQkClipVersion &&
      version != kPlanBinaryNsConfigsVersion) {
    error = "header: format version " + std::to_string(version) +
            " is not supported (this reader reads muon-plan-bin/" +
            std::to_string(kPlanBinaryVersion) + " to " +
            std::to_string(kPlanBinaryNsConfigsVersion) +
            (version == 1 ? "; version 1 predates parameter groups: write "
                            "the plan again from its model or JSON plan)"
                          : ")");
    return false;
  }
  h.version = version;
  h.world = getU64(p + 16);
  h.fileSize = getU64(p + 24);
  h.sharedOffset = getU64(p + 32);
  h.sharedSize = getU64(p + 40);
  h.globalOffset = getU64(p + 48);
  h.globalSize = getU64(p + 56);
  h.indexOffset = getU64(p + 64);
  h.sharedSum = getU64(p + 72);
  h.globalSum = getU64(p + 80);
  h.headerSum = getU64(p + 88);
  if (fnv1a(p, 88) != h.headerSum) {
    error = "header: checksum mismatch (the file is damaged)";
    return false;
  }
  auto bad = [&](const std::string &what) {
    error = "header: " + what;
    return false;
  };
  if (headerSize != kHeaderSize)
    return bad("header size " + std::to_string(headerSize) + ", expected " +
               num(kHeaderSize));
  if (h.world < 1 || h.world > static_cast<uint64_t>(limits::kMaxWorldSize))
    return bad("world size " + std::to_string(h.world) + " is outside [1, " +
               limits::describe(limits::kMaxWorldSize) + "]");
  if (h.fileSize != actualSize)
    return bad("says the file has " + std::to_string(h.fileSize) +
               " bytes but it has " + std::to_string(actualSize) +
               " (truncated or appended to)");
  // Sections follow each other; each size is checked against what is left
  // after the previous section, so that no sum overflows and no difference
  // wraps around.
  if (h.sharedOffset != kHeaderSize || h.sharedOffset > h.fileSize ||
      h.sharedSize > h.fileSize - h.sharedOffset ||
      h.globalOffset != h.sharedOffset + h.sharedSize ||
      h.globalSize > h.fileSize - h.globalOffset ||
      h.indexOffset != h.globalOffset + h.globalSize ||
      h.world * kIndexEntrySize > h.fileSize - h.indexOffset)
    return bad("section offsets and sizes do not lie in order inside the "
               "file");
  return true;
}

/// Decodes a group's settings tail (encodeShared) into g: each name a
/// setting of g's algorithm without a slot of its own, at most once.
bool decodeSettingsTail(In &in, PlanGroup &g) {
  const size_t n = in.count("tail settings", 2);
  std::vector<const GroupSetting *> seen;
  for (size_t i = 0; i < n && in.ok(); ++i) {
    const std::string name = in.str("bytes of a setting's name");
    if (!in.ok())
      return false;
    const GroupSetting *s = findGroupSetting(g.muon, name);
    if (!s || hasFixedSlot(*s))
      return in.fail("setting '" + name + "' in the tail is not a " +
                     (g.muon ? "Muon" : "AdamW") +
                     " group's setting without a slot of its own (a plan "
                     "from a newer muonc?)");
    if (std::find(seen.begin(), seen.end(), s) != seen.end())
      return in.fail("setting '" + name + "' appears twice in the tail");
    seen.push_back(s);
    if (s->kind == GroupSetting::Kind::Name) {
      setSettingName(*s, g, in.str("bytes of a setting's value"));
    } else if (s->kind == GroupSetting::Kind::Flag) {
      const uint8_t flag = in.u8();
      if (in.ok() && flag > 1)
        return in.fail("setting '" + name + "' is " + num(flag) +
                       "; a flag is 0 or 1");
      setSettingValue(*s, g, flag);
    } else {
      setSettingValue(*s, g, in.f64());
    }
  }
  if (in.ok() && n == 0)
    return in.fail("an empty settings tail (the algorithm's tail bit is set "
                   "only when settings follow)");
  return in.ok();
}

/// encodeNsConfig's inverse; the validator checks the values.
NewtonSchulzConfig decodeNsConfig(In &in) {
  NewtonSchulzConfig c;
  c.nsSteps = in.svarint();
  size_t coefficients = in.count("NS coefficient triples", 24);
  for (size_t i = 0; i < coefficients && in.ok(); ++i)
    c.coefficients.push_back({in.f64(), in.f64(), in.f64()});
  c.eps = in.f64();
  return c;
}

/// Decodes the shared section of a file of format `version` into `plan`
/// (settings, mesh, params, the exchanges' phases and rounds, the
/// schedule), sizes rounds and exchanges, and returns the whole plan's
/// matrix count.
bool decodeShared(In &in, Plan &plan, int64_t &totalMatrices,
                  uint32_t version) {
  const bool several = version == kPlanBinaryNsConfigsVersion;
  in.item = "settings";
  plan.wireDtype = in.str("bytes of wire dtype");
  plan.wireBytes = wireDtypeBytes(plan.wireDtype);
  plan.distributed = in.u8() != 0;
  plan.async = in.u8() != 0;
  plan.prefetchCount = in.svarint();
  plan.inflightLimit = in.svarint();
  plan.gatherBudgetBytes = in.svarint();
  in.item = "mesh";
  plan.mesh.shape = in.ints("mesh axes");
  plan.mesh.devices = in.ints("devices");
  in.item = "newton_schulz";
  NewtonSchulzSettings &ns = plan.ns;
  ns.configs.clear();
  // Each configuration takes at least 10 bytes (steps, count, eps).
  size_t configs = several ? in.count("NS configurations", 10) : 1;
  if (in.ok() && several && configs < 2)
    return in.fail(num(configs) + " NS configuration(s) in a version " +
                   num(kPlanBinaryNsConfigsVersion) +
                   " file, which is written only with two or more");
  for (size_t c = 0; c < configs && in.ok(); ++c)
    ns.configs.push_back(decodeNsConfig(in));
  ns.nsDtype = in.str("bytes of ns_dtype");
  in.item = "groups";
  size_t groups = in.count("groups", 3);
  plan.groups.clear();
  for (size_t i = 0; i < groups && in.ok(); ++i) {
    in.item = json::index("groups", i);
    PlanGroup g;
    g.name = in.str("bytes of name");
    const uint8_t algorithmByte = in.u8();
    const uint8_t algorithm = algorithmByte & ~kSettingsTail;
    if (in.ok() && algorithm > 1)
      return in.fail("algorithm " + num(algorithm) +
                     " is neither 0 (adamw) nor 1 (muon)");
    g.muon = algorithm == 1;
    if (g.muon) {
      MuonSettings &m = g.muonSettings;
      m.lr = in.f64();
      m.weightDecay = in.f64();
      m.momentum = in.f64();
      uint8_t flags = in.u8();
      if (in.ok() && (flags >> 4) != 0)
        return in.fail("Muon flags " + num(flags) +
                       ": bits above 3 are not defined (bit 0 nesterov, "
                       "bits 1-2 the weight-decay mode, bit 3 NorMuon)");
      if (in.ok() && ((flags >> 1) & 3) >= kWeightDecayModes.size())
        return in.fail("Muon flags " + num(flags) +
                       ": weight-decay mode " + num((flags >> 1) & 3) +
                       " is not 0 (decoupled), 1 (cautious) or 2 (none)");
      m.nesterov = flags & 1;
      m.weightDecayMode =
          std::string(kWeightDecayModes[((flags >> 1) & 3) % 3]);
      m.normuon = (flags & 8) != 0;
      m.adjustLr = in.str("bytes of adjust_lr");
      if (m.normuon)
        m.normuonBeta2 = in.f64();
      // Checked against the configurations by the validator.
      if (several)
        g.nsConfig = in.below(static_cast<int64_t>(ns.configs.size()),
                              "NS configuration");
    } else {
      AdamWSettings &a = g.adamwSettings;
      a.lr = in.f64();
      a.beta1 = in.f64();
      a.beta2 = in.f64();
      a.eps = in.f64();
      a.weightDecay = in.f64();
    }
    if ((algorithmByte & kSettingsTail) && !decodeSettingsTail(in, g))
      return false;
    plan.groups.push_back(std::move(g));
  }
  in.item = "params";
  size_t params = in.count("parameters", 6);
  if (in.ok() && static_cast<int64_t>(params) > limits::kMaxParams)
    return in.fail(num(params) + " parameters, above the limit of " +
                   limits::describe(limits::kMaxParams));
  plan.params.reserve(params);
  for (size_t i = 0; i < params && in.ok(); ++i) {
    in.item = json::index("params", i);
    PlanParam p;
    p.name = in.str("bytes of name");
    p.dtype = in.str("bytes of dtype");
    uint64_t group = in.varint();
    if (in.ok() && group >= plan.groups.size())
      return in.fail("group " + num(static_cast<int64_t>(group)) +
                     " is out of range (" + num(plan.groups.size()) +
                     " groups)");
    p.group = static_cast<int64_t>(group);
    p.muon = in.ok() && plan.groups[p.group].muon;
    p.layout.shape = in.ints("dims");
    size_t dims = in.count("split entries");
    for (size_t d = 0; d < dims && in.ok(); ++d)
      p.layout.splitAxes.push_back(in.ints("split axes"));
    p.layout.partialAxes = in.ints("partial axes");
    uint64_t onlyWord = in.varint();
    bool heads = onlyWord & kHeadsFlag;
    size_t only = in.counted(onlyWord & ~kHeadsFlag, "only pairs", 2);
    for (size_t k = 0; k < only && in.ok(); ++k) {
      int64_t axis = in.svarint();
      p.layout.only.push_back({axis, in.svarint()});
    }
    if (heads) {
      // Checked against the shape by the validator (Validate.cpp).
      p.layout.numHeads = in.below(limits::kMaxMatrices + 1, "num_heads");
      p.layout.headSplitDim = in.below(2, "head_split_dim");
    }
    plan.params.push_back(std::move(p));
  }
  if (version != kPlanBinaryVersion) {
    in.item = "qk_clip";
    size_t layers = in.count("qk_clip layers", 5);
    if (in.ok() && static_cast<int64_t>(layers) > limits::kMaxParams)
      return in.fail(num(layers) + " QK-clip layers, above the limit of " +
                     limits::describe(limits::kMaxParams));
    for (size_t i = 0; i < layers && in.ok(); ++i) {
      in.item = json::index("qk_clip", i);
      QkClipLayer l;
      l.name = in.str("bytes of name");
      l.query = in.str("bytes of query");
      l.key = in.str("bytes of key");
      l.numHeads = in.svarint();
      l.numKvHeads = in.svarint();
      l.threshold = in.f64();
      plan.qkClip.push_back(std::move(l));
    }
  }
  in.item = "counts";
  uint64_t matrices = in.varint();
  if (in.ok() && matrices > static_cast<uint64_t>(limits::kMaxMatrices))
    return in.fail(std::to_string(matrices) + " matrices, above the limit of " +
                   limits::describe(limits::kMaxMatrices));
  totalMatrices = static_cast<int64_t>(matrices);
  uint64_t rounds = in.varint();
  if (in.ok() && rounds > static_cast<uint64_t>(limits::kMaxRounds))
    return in.fail(std::to_string(rounds) + " rounds, above the limit of " +
                   limits::describe(limits::kMaxRounds));
  plan.rounds.assign(rounds, {});
  in.item = "exchanges";
  size_t exchanges = in.count("exchanges", 2);
  for (size_t e = 0; e < exchanges && in.ok(); ++e) {
    Exchange ex;
    uint8_t phase = in.u8();
    if (in.ok() && phase > static_cast<uint8_t>(Exchange::Phase::Reduce))
      return in.fail(json::index("exchanges", e) + ": unknown phase " +
                     num(phase));
    ex.phase = static_cast<Exchange::Phase>(phase);
    ex.round = in.svarint();
    plan.exchanges.push_back(std::move(ex));
  }
  in.item = "schedule";
  size_t steps = in.count("schedule steps", 2);
  for (size_t i = 0; i < steps && in.ok(); ++i) {
    uint8_t kind = in.u8();
    if (in.ok() && kind > static_cast<uint8_t>(ScheduleStep::Kind::AdamW))
      return in.fail(json::index("schedule", i) + ": unknown step " +
                     num(kind));
    plan.schedule.push_back(
        {static_cast<ScheduleStep::Kind>(kind), in.svarint()});
  }
  in.item.clear();
  return in.end();
}

/// One transfer or reduction as a section stores it, before it becomes a
/// Transfer: its index in the exchange and which end this rank is.
struct Item {
  int64_t index = 0;
  bool toMe = false;
};

/// Decodes rank `rank`'s section into `slice` (which holds the decoded
/// shared section): the slice as Plan.h describes it. `items`, when given,
/// gets each transfer's (or reduction's) index in its exchange. Indices
/// are range-checked here; what they mean is validatePlanSlice's.
bool decodeSection(In &in, const Geometry &geo, int64_t rank, Plan &slice,
                   std::vector<std::vector<Item>> *items) {
  // Parameters and settings come from the shared section (geo.plan); the
  // slice gets only what this section holds.
  const Plan &plan = geo.plan;
  int64_t world = plan.worldSize;
  int64_t total = geo.totalMatrices();
  in.item = "matrices";
  size_t n = in.count("matrices", 2);
  slice.matrixIds.reserve(n);
  slice.matrices.reserve(n);
  int64_t prev = -1;
  for (size_t i = 0; i < n && in.ok(); ++i) {
    in.item = json::index("matrices", i);
    uint64_t gap = in.varint();
    if (in.ok() && gap >= static_cast<uint64_t>(total - prev - 1))
      return in.fail("matrix index " + std::to_string(prev + 1 + gap) +
                     " is out of range [" + num(prev + 1) + ", " + num(total) +
                     ")");
    int64_t id = prev + 1 + static_cast<int64_t>(gap);
    prev = id;
    auto [param, s] = geo.locate(id);
    const PlanParam &p = plan.params[param];
    PlanMatrix m;
    m.param = p.name;
    m.paramIndex = param;
    m.slice = p.layout.slicedMatrices() ? s : -1;
    m.rows = p.layout.matrixRows();
    m.cols = p.layout.matrixCols();
    m.nsFlops = nsFlops(m.rows, m.cols,
                        plan.ns.configs[nsConfigOf(plan, param)].nsSteps);
    m.owner = in.svarint();
    slice.matrixIds.push_back(id);
    slice.matrices.push_back(std::move(m));
  }
  int64_t local = static_cast<int64_t>(slice.matrices.size());
  for (size_t r = 0; r < slice.rounds.size() && in.ok(); ++r) {
    in.item = json::index("rounds", r);
    size_t count = in.count("matrices");
    for (size_t i = 0; i < count && in.ok(); ++i)
      slice.rounds[r].push_back(in.below(local, "local matrix"));
  }
  slice.nsMatrices.assign(world, {});
  slice.nsBatches.assign(world, {});
  in.item = "ns_batches";
  size_t batches = in.count("batches", 4);
  for (size_t b = 0; b < batches && in.ok(); ++b) {
    in.item = json::index("ns_batches", b);
    NsBatch batch;
    batch.round = in.svarint();
    batch.rows = in.svarint();
    batch.cols = in.svarint();
    if (severalNsConfigs(plan))
      batch.config = in.below(static_cast<int64_t>(plan.ns.configs.size()),
                              "NS configuration");
    size_t count = in.count("matrices");
    for (size_t i = 0; i < count && in.ok(); ++i)
      batch.matrices.push_back(in.below(local, "local matrix"));
    slice.nsMatrices[rank].insert(slice.nsMatrices[rank].end(),
                                  batch.matrices.begin(),
                                  batch.matrices.end());
    slice.nsBatches[rank].push_back(std::move(batch));
  }
  if (items)
    items->assign(slice.exchanges.size(), {});
  for (size_t e = 0; e < slice.exchanges.size() && in.ok(); ++e) {
    Exchange &ex = slice.exchanges[e];
    bool gather = ex.phase == Exchange::Phase::Gather;
    std::string path = json::index("exchanges", e);
    in.item = path;
    size_t count = in.count("transfers", 4);
    ex.transfers.reserve(count);
    int64_t last = -1;
    for (size_t i = 0; i < count && in.ok(); ++i) {
      in.item = json::index(json::key(path, "transfers"), i);
      int64_t index = last + 1 + in.below(int64_t(1) << 40, "index gap");
      last = index;
      uint8_t flags = in.u8();
      if (in.ok() && flags > 7)
        return in.fail("unknown transfer flags " + num(flags));
      int64_t peer = in.below(world, "peer rank");
      int64_t k = in.below(local, "local matrix");
      if (!in.ok())
        return false;
      Transfer t;
      bool toMe = flags & kToMe;
      t.src = toMe ? peer : rank;
      t.dst = toMe ? rank : peer;
      t.matrix = k;
      const PlanMatrix &m = slice.matrices[k];
      Range rows, cols;
      int64_t summand = 0;
      bool derived = false;
      if (!(flags & kExplicitBox) || !(flags & kExplicitSummand))
        derived =
            geo.piece(m.paramIndex, std::max<int64_t>(m.slice, 0),
                      gather ? t.src : t.dst, rows, cols, summand);
      if (flags & kExplicitBox) {
        t.rows.begin = in.svarint();
        t.rows.end = in.svarint();
        t.cols.begin = in.svarint();
        t.cols.end = in.svarint();
      } else if (!derived) {
        return in.fail("the box is the holder's piece, but rank " +
                       num(gather ? t.src : t.dst) + " holds no piece of " +
                       m.label());
      } else {
        t.rows = rows;
        t.cols = cols;
      }
      t.summand = (flags & kExplicitSummand) ? in.svarint()
                                             : (gather && derived ? summand : 0);
      // Boxes must be non-empty and ordered before anything sizes them.
      if (in.ok() && (t.rows.begin >= t.rows.end || t.cols.begin >= t.cols.end))
        return in.fail("expected a non-empty box");
      ex.transfers.push_back(t);
      if (items)
        (*items)[e].push_back({index, toMe});
    }
    in.item = path;
    count = in.count("reductions", 6);
    ex.reductions.reserve(count);
    last = -1;
    for (size_t i = 0; i < count && in.ok(); ++i) {
      in.item = json::index(json::key(path, "reductions"), i);
      int64_t index = last + 1 + in.below(int64_t(1) << 40, "index gap");
      last = index;
      uint8_t flags = in.u8();
      if (in.ok() && flags > 1)
        return in.fail("unknown reduction flags " + num(flags));
      int64_t peer = in.below(world, "peer rank");
      Reduction red;
      bool toMe = flags & kToMe;
      red.src = toMe ? peer : rank;
      red.dst = toMe ? rank : peer;
      red.param = in.below(static_cast<int64_t>(plan.params.size()),
                           "parameter");
      red.summand = in.svarint();
      red.elements = in.svarint();
      ex.reductions.push_back(red);
      if (items)
        (*items)[e].push_back({index, toMe});
    }
  }
  in.item.clear();
  return in.end();
}

/// Reads byte ranges of a plan file (or of one in memory) and counts them.
class Source {
public:
  virtual ~Source() = default;
  virtual bool read(uint64_t offset, uint64_t size, std::string &out,
                    std::string &error) = 0;
  uint64_t size = 0;
  int64_t bytesRead = 0;
};

class MemorySource : public Source {
public:
  explicit MemorySource(std::string_view bytes) : bytes(bytes) {
    size = bytes.size();
  }
  bool read(uint64_t offset, uint64_t n, std::string &out,
            std::string &) override {
    out.assign(bytes.substr(offset, n));
    bytesRead += static_cast<int64_t>(n);
    return true;
  }

private:
  std::string_view bytes;
};

/// A plan file opened as InputFile opens inputs: a FIFO, a directory or a
/// device is refused, not waited on or read forever.
class FileSource : public Source {
public:
  bool open(const std::string &path, std::string &error) {
    if (!file.open(path, error, "the plan file"))
      return false;
    size = static_cast<uint64_t>(file.size());
    return true;
  }
  bool read(uint64_t offset, uint64_t n, std::string &out,
            std::string &error) override {
    out.resize(n);
    std::string why;
    if (!file.readAt(out.data(), static_cast<int64_t>(n),
                     static_cast<int64_t>(offset), why)) {
      error = "read failed: " + why;
      return false;
    }
    bytesRead += static_cast<int64_t>(n);
    return true;
  }

private:
  InputFile file;
};

bool loadSlice(Source &src, int64_t rank, Plan &slice, std::string &error,
               int64_t readLimit) {
  slice = Plan();
  std::string head;
  if (src.size < kHeaderSize) {
    error = "not a binary plan file (" + std::to_string(src.size) +
            " bytes, shorter than its " + num(kHeaderSize) + "-byte header)";
    return false;
  }
  if (!src.read(0, kHeaderSize, head, error))
    return false;
  Header h;
  if (!readHeader(head, src.size, h, error))
    return false;
  if (rank < 0 || static_cast<uint64_t>(rank) >= h.world) {
    error = "rank " + num(rank) + " is not in the plan's world of " +
            std::to_string(h.world) + " ranks";
    return false;
  }
  std::string entry;
  if (!src.read(h.indexOffset + rank * kIndexEntrySize, kIndexEntrySize, entry,
                error))
    return false;
  uint64_t offset = getU64(entry.data()), size = getU64(entry.data() + 8),
           sum = getU64(entry.data() + 16);
  std::string where = "rank " + num(rank) + "'s index entry";
  if (offset < h.sectionsBegin() || offset > h.fileSize ||
      size > h.fileSize - offset) {
    error = where + ": its section [" + std::to_string(offset) + ", +" +
            std::to_string(size) + ") is not inside the rank sections [" +
            std::to_string(h.sectionsBegin()) + ", " +
            std::to_string(h.fileSize) + ")";
    return false;
  }
  // What this rank reads, all told, before it reads the large parts.
  uint64_t need = kHeaderSize + kIndexEntrySize + h.sharedSize + size;
  if (need > static_cast<uint64_t>(readLimit)) {
    error = "rank " + num(rank) + "'s part of the plan is " +
            std::to_string(need) + " bytes (shared section " +
            std::to_string(h.sharedSize) + ", own section " +
            std::to_string(size) + "), above the read limit of " +
            num(readLimit) + " bytes";
    return false;
  }
  std::string shared;
  if (!src.read(h.sharedOffset, h.sharedSize, shared, error))
    return false;
  if (fnv1a(shared.data(), shared.size()) != h.sharedSum) {
    error = "shared section: checksum mismatch (the file is damaged)";
    return false;
  }
  slice.worldSize = static_cast<int64_t>(h.world);
  int64_t totalMatrices = 0;
  {
    In in(shared, h.sharedOffset, "shared section");
    if (!decodeShared(in, slice, totalMatrices, h.version)) {
      error = in.error;
      return false;
    }
  }
  std::string().swap(shared);
  if (json::Error bad = validatePlanHeader(slice); !bad.empty()) {
    error = "shared section: " + bad.str();
    return false;
  }
  std::string section;
  if (!src.read(offset, size, section, error))
    return false;
  if (fnv1a(section.data(), section.size()) != sum) {
    error = "rank " + num(rank) + "'s section: checksum mismatch (the file "
            "is damaged)";
    return false;
  }
  Geometry geo(slice);
  if (geo.totalMatrices() != totalMatrices) {
    error = "shared section: says " + num(totalMatrices) +
            " matrices but the Muon parameters have " +
            num(geo.totalMatrices());
    return false;
  }
  slice.sliceRank = rank;
  slice.totalMatrices = totalMatrices;
  slice.fileId = h.headerSum;
  In in(section, offset, "rank " + num(rank) + "'s section");
  if (!decodeSection(in, geo, rank, slice, nullptr)) {
    error = in.error;
    return false;
  }
  if (json::Error bad = validatePlanSlice(slice); !bad.empty()) {
    error = "rank " + num(rank) + "'s section: " + bad.str();
    return false;
  }
  return true;
}

template <typename T> int64_t vectorBytes(const std::vector<T> &v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}
int64_t stringBytes(const std::string &s) {
  // Short strings live inside the object (libstdc++ keeps 15 chars).
  return s.capacity() > 15 ? static_cast<int64_t>(s.capacity() + 1) : 0;
}

} // namespace

bool parsePlanSlice(std::string_view bytes, int64_t rank, Plan &slice,
                    std::string &error, SliceLoadStats *stats,
                    int64_t readLimit) {
  MemorySource src(bytes);
  bool ok = loadSlice(src, rank, slice, error, readLimit);
  if (stats) {
    stats->bytesRead = src.bytesRead;
    stats->heldBytes = planHeldBytes(slice);
  }
  return ok;
}

bool loadPlanSlice(const std::string &path, int64_t rank, Plan &slice,
                   std::string &error, SliceLoadStats *stats,
                   int64_t readLimit) {
  FileSource src;
  bool ok = src.open(path, error) &&
            loadSlice(src, rank, slice, error, readLimit);
  if (!ok && error.rfind("cannot ", 0) != 0)
    error = path + ": " + error;
  if (stats) {
    stats->bytesRead = src.bytesRead;
    stats->heldBytes = planHeldBytes(slice);
  }
  return ok;
}

bool parsePlanBinary(std::string_view bytes, Plan &plan, std::string &error) {
  plan = Plan();
  Header h;
  if (!readHeader(bytes, bytes.size(), h, error))
    return false;
  std::string_view shared = bytes.substr(h.sharedOffset, h.sharedSize);
  std::string_view global = bytes.substr(h.globalOffset, h.globalSize);
  if (fnv1a(shared.data(), shared.size()) != h.sharedSum) {
    error = "shared section: checksum mismatch (the file is damaged)";
    return false;
  }
  if (fnv1a(global.data(), global.size()) != h.globalSum) {
    error = "global section: checksum mismatch (the file is damaged)";
    return false;
  }
  plan.worldSize = static_cast<int64_t>(h.world);
  int64_t totalMatrices = 0;
  {
    In in(shared, h.sharedOffset, "shared section");
    if (!decodeShared(in, plan, totalMatrices, h.version)) {
      error = in.error;
      return false;
    }
  }
  if (json::Error bad = validatePlanHeader(plan); !bad.empty()) {
    error = "shared section: " + bad.str();
    return false;
  }
  Geometry geo(plan);
  if (geo.totalMatrices() != totalMatrices) {
    error = "shared section: says " + num(totalMatrices) +
            " matrices but the Muon parameters have " +
            num(geo.totalMatrices());
    return false;
  }
  // The global section: owners, rounds, each exchange's sizes.
  plan.matrices = muonMatrices(plan.params, plan.groups, plan.ns);
  {
    In in(global, h.globalOffset, "global section");
    in.item = "matrices";
    if (in.varint() != static_cast<uint64_t>(totalMatrices) && in.ok())
      in.fail("expected " + num(totalMatrices) + " owners");
    for (PlanMatrix &m : plan.matrices)
      m.owner = in.svarint();
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
      error = in.error;
      return false;
    }
  }
  plan.nsMatrices.assign(plan.worldSize, {});
  plan.nsBatches.assign(plan.worldSize, {});
  std::vector<std::vector<char>> placed(plan.exchanges.size());
  for (size_t e = 0; e < plan.exchanges.size(); ++e)
    placed[e].assign(plan.exchanges[e].transfers.size() +
                         plan.exchanges[e].reductions.size(),
                     0);
  // Each rank's section, one at a time: its transfers placed (from the
  // source's copy; the destination's copy is checked by the canonical
  // comparison below), its NS batches in whole-plan indices.
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    const char *e = bytes.data() + h.indexOffset + r * kIndexEntrySize;
    uint64_t offset = getU64(e), size = getU64(e + 8), sum = getU64(e + 16);
    if (offset < h.sectionsBegin() || offset > h.fileSize ||
        size > h.fileSize - offset) {
      error = "rank " + num(r) + "'s index entry: its section is not inside "
              "the rank sections";
      return false;
    }
    std::string_view section = bytes.substr(offset, size);
    if (fnv1a(section.data(), section.size()) != sum) {
      error = "rank " + num(r) + "'s section: checksum mismatch (the file is "
              "damaged)";
      return false;
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
      error = in.error;
      return false;
    }
    const std::vector<int64_t> &ids = slice.matrixIds;
    for (size_t x = 0; x < slice.exchanges.size(); ++x) {
      Exchange &whole = plan.exchanges[x];
      const Exchange &part = slice.exchanges[x];
      std::string path = "rank " + num(r) + "'s section, " +
                         json::index("exchanges", x);
      size_t nt = part.transfers.size();
      for (size_t i = 0; i < items[x].size(); ++i) {
        const Item &it = items[x][i];
        bool transfer = i < nt;
        size_t limit = transfer ? whole.transfers.size()
                                : whole.reductions.size();
        if (static_cast<size_t>(it.index) >= limit) {
          error = path + ": " + (transfer ? "transfer" : "reduction") +
                  " index " + num(it.index) + " is out of range [0, " +
                  num(static_cast<int64_t>(limit)) + ")";
          return false;
        }
        if (it.toMe)
          continue;
        size_t slot = transfer ? it.index : whole.transfers.size() + it.index;
        if (placed[x][slot]++) {
          error = path + ": " + (transfer ? "transfer " : "reduction ") +
                  num(it.index) + " has two sources";
          return false;
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
  }
  for (size_t x = 0; x < placed.size(); ++x)
    for (size_t i = 0; i < placed[x].size(); ++i)
      if (!placed[x][i]) {
        size_t nt = plan.exchanges[x].transfers.size();
        error = json::index("exchanges", x) + ": " +
                (i < nt ? "transfer " + num(i) : "reduction " + num(i - nt)) +
                " is in no rank's section";
        return false;
      }
  if (json::Error bad = validatePlan(plan); !bad.empty()) {
    error = bad.str();
    return false;
  }
  // A valid plan has one encoding: anything else (a transfer's two copies
  // that disagree, a section listing matrices its rank has nothing to do
  // with, rounds in another order) is a damaged or forged file.
  std::string canonical = renderPlanBinary(plan);
  if (canonical != bytes) {
    size_t at = std::mismatch(canonical.begin(), canonical.end(),
                              bytes.begin(), bytes.end())
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
    error = "the file is not the encoding of the plan it describes: " + where +
            " differs from it at byte " + num(static_cast<int64_t>(at)) +
            " (two copies of a transfer disagree, or a section holds what its "
            "rank does not need)";
    return false;
  }
  return true;
}

void resealPlanBinary(std::string &bytes) {
  if (bytes.size() < kHeaderSize || !isPlanBinary(bytes))
    return;
  uint64_t size = bytes.size();
  auto sumOf = [&](uint64_t offset, uint64_t n) -> std::optional<uint64_t> {
    if (offset > size || n > size - offset)
      return std::nullopt;
    return fnv1a(bytes.data() + offset, n);
  };
  if (auto s = sumOf(getU64(&bytes[32]), getU64(&bytes[40])))
    putU64(bytes, 72, *s);
  if (auto s = sumOf(getU64(&bytes[48]), getU64(&bytes[56])))
    putU64(bytes, 80, *s);
  uint64_t index = getU64(&bytes[64]), world = getU64(&bytes[16]);
  for (uint64_t r = 0; r < world && index <= size &&
                       (size - index) / kIndexEntrySize > r;
       ++r) {
    size_t at = index + r * kIndexEntrySize;
    if (auto s = sumOf(getU64(&bytes[at]), getU64(&bytes[at + 8])))
      putU64(bytes, at + 16, *s);
  }
  putU64(bytes, 88, fnv1a(bytes.data(), 88));
}

uint64_t planSliceIdentity(const Plan &slice) {
  std::string shared = encodeShared(slice, slice.totalMatrices);
  char id[8];
  for (int i = 0; i < 8; ++i)
    id[i] = static_cast<char>(slice.fileId >> (8 * i));
  return fnv1a(shared.data(), shared.size(), fnv1a(id, 8));
}

Plan slicePlan(const Plan &plan, int64_t rank) {
  Plan slice;
  slice.worldSize = plan.worldSize;
  slice.wireDtype = plan.wireDtype;
  slice.wireBytes = plan.wireBytes;
  slice.distributed = plan.distributed;
  slice.mesh = plan.mesh;
  slice.params = plan.params;
  slice.ns = plan.ns;
  slice.groups = plan.groups;
  slice.qkClip = plan.qkClip;
  slice.schedule = plan.schedule;
  slice.prefetchCount = plan.prefetchCount;
  slice.inflightLimit = plan.inflightLimit;
  slice.gatherBudgetBytes = plan.gatherBudgetBytes;
  slice.async = plan.async;
  slice.sliceRank = rank;
  slice.totalMatrices = static_cast<int64_t>(plan.matrices.size());
  // The same local set as the writer's.
  std::vector<int64_t> &ids = slice.matrixIds;
  for (size_t k = 0; k < plan.matrices.size(); ++k)
    if (plan.matrices[k].owner == rank)
      ids.push_back(static_cast<int64_t>(k));
  ids.insert(ids.end(), plan.nsMatrices[rank].begin(),
             plan.nsMatrices[rank].end());
  for (const Exchange &ex : plan.exchanges)
    for (const Transfer &t : ex.transfers)
      if (t.src == rank || t.dst == rank)
        ids.push_back(t.matrix);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (int64_t k : ids)
    slice.matrices.push_back(plan.matrices[k]);
  auto local = [&](int64_t k) { return localIndex(ids, k); };
  auto has = [&](int64_t k) {
    return std::binary_search(ids.begin(), ids.end(), k);
  };
  for (const auto &round : plan.rounds) {
    slice.rounds.emplace_back();
    for (int64_t k : round)
      if (has(k))
        slice.rounds.back().push_back(local(k));
  }
  slice.nsMatrices.assign(plan.worldSize, {});
  slice.nsBatches.assign(plan.worldSize, {});
  for (NsBatch b : plan.nsBatches[rank]) {
    for (int64_t &k : b.matrices)
      k = local(k);
    slice.nsMatrices[rank].insert(slice.nsMatrices[rank].end(),
                                  b.matrices.begin(), b.matrices.end());
    slice.nsBatches[rank].push_back(std::move(b));
  }
  for (const Exchange &ex : plan.exchanges) {
    Exchange part;
    part.phase = ex.phase;
    part.round = ex.round;
    for (Transfer t : ex.transfers)
      if (t.src == rank || t.dst == rank) {
        t.matrix = local(t.matrix);
        part.transfers.push_back(t);
      }
    for (const Reduction &r : ex.reductions)
      if (r.src == rank || r.dst == rank)
        part.reductions.push_back(r);
    slice.exchanges.push_back(std::move(part));
  }
  return slice;
}

int64_t planHeldBytes(const Plan &plan) {
  int64_t bytes = sizeof(Plan) + stringBytes(plan.wireDtype) +
                  vectorBytes(plan.mesh.shape) + vectorBytes(plan.mesh.devices);
  bytes += vectorBytes(plan.ns.configs) + stringBytes(plan.ns.nsDtype);
  for (const NewtonSchulzConfig &c : plan.ns.configs)
    bytes += vectorBytes(c.coefficients);
  bytes += vectorBytes(plan.groups);
  for (const PlanGroup &g : plan.groups)
    bytes += stringBytes(g.name) + stringBytes(g.muonSettings.adjustLr);
  bytes += vectorBytes(plan.params);
  for (const PlanParam &p : plan.params) {
    bytes += stringBytes(p.name) + stringBytes(p.dtype) +
             vectorBytes(p.layout.shape) + vectorBytes(p.layout.splitAxes) +
             vectorBytes(p.layout.partialAxes) + vectorBytes(p.layout.only);
    for (const auto &axes : p.layout.splitAxes)
      bytes += vectorBytes(axes);
  }
  bytes += vectorBytes(plan.matrices) + vectorBytes(plan.matrixIds);
  for (const PlanMatrix &m : plan.matrices)
    bytes += stringBytes(m.param);
  bytes += vectorBytes(plan.exchanges);
  for (const Exchange &ex : plan.exchanges)
    bytes += vectorBytes(ex.transfers) + vectorBytes(ex.reductions);
  bytes += vectorBytes(plan.nsMatrices) + vectorBytes(plan.rounds) +
           vectorBytes(plan.nsBatches) + vectorBytes(plan.schedule);
  for (const auto &v : plan.nsMatrices)
    bytes += vectorBytes(v);
  for (const auto &v : plan.rounds)
    bytes += vectorBytes(v);
  for (const auto &batches : plan.nsBatches) {
    bytes += vectorBytes(batches);
    for (const NsBatch &b : batches)
      bytes += vectorBytes(b.matrices);
  }
  return bytes;
}

} // namespace muon
