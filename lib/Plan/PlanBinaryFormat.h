//===- PlanBinaryFormat.h - The binary plan's bytes, inside MuonPlan ------===//
//
// What the codec (PlanBinaryCodec.cpp), the writer (PlanBinaryWriter.cpp),
// the readers (PlanBinaryReader.cpp) and slicing (PlanSlice.cpp) share: the
// layout's constants, the byte writer and the bounds-checked section
// reader, the header, the geometry that derives a holder's piece, and the
// codec's functions. Private to lib/Plan; the public API is
// muon/Plan/PlanBinary.h.
//
// Layout (docs/plan-format.md has it byte by byte): a 96-byte header, the
// shared section, the global section, the rank index (24 bytes per rank),
// then the rank sections in rank order. Integers inside sections are LEB128
// varints (signed ones zigzag-encoded), doubles 8 bytes little-endian.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_LIB_PLAN_PLANBINARYFORMAT_H
#define MUON_LIB_PLAN_PLANBINARYFORMAT_H

#include "muon/Plan/GroupSettings.h"
#include "muon/Plan/Plan.h"
#include "muon/Plan/PlanBinary.h"
#include "muon/Support/Layout.h"
#include "muon/Support/Status.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace muon::planbin {

constexpr size_t kHeaderSize = 96;
constexpr size_t kIndexEntrySize = 24;

// Transfer flags.
constexpr uint8_t kToMe = 1;        // this section's rank is the destination
constexpr uint8_t kExplicitBox = 2; // rows and cols follow
constexpr uint8_t kExplicitSummand = 4;
// A parameter's `only` count with this bit: per-head values follow.
constexpr uint64_t kHeadsFlag = uint64_t(1) << 32;
// A group's algorithm byte (its Algorithm::binaryCode) with this bit: its
// settings tail follows.
constexpr uint8_t kSettingsTail = 0x80;

inline std::string num(int64_t v) { return std::to_string(v); }

//===----------------------------------------------------------------------===//
// Bytes
//===----------------------------------------------------------------------===//

/// Appends a section's items.
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

inline void putU64(std::string &s, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    s[at + i] = static_cast<char>(v >> (8 * i));
}
inline uint64_t getU64(const char *p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}
inline uint32_t getU32(const char *p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i)
    v |= static_cast<uint32_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

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
      fail(std::string(what) + " " + std::to_string(v) +
           " is out of range [0, " + num(limit) + ")");
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

/// One transfer or reduction as a section stores it, before it becomes a
/// Transfer: its index in the exchange and which end this rank is.
struct Item {
  int64_t index = 0;
  bool toMe = false;
};

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
                            (p.orthogonalized() ? p.layout.numMatrices() : 0));
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

inline int64_t localIndex(const std::vector<int64_t> &ids, int64_t id) {
  return std::lower_bound(ids.begin(), ids.end(), id) - ids.begin();
}

//===----------------------------------------------------------------------===//
// The codec (PlanBinaryCodec.cpp)
//===----------------------------------------------------------------------===//

/// Whether the plan is written as version 4 (kPlanBinaryNsConfigsVersion).
bool severalNsConfigs(const Plan &plan);

/// The format version the writer gives `plan`: the oldest that holds it, so
/// that plans without newer features keep their bytes.
uint32_t planBinaryVersion(const Plan &plan);

/// A matrix's owner as the file holds it: a redundant matrix's as
/// -2 - owner (version 5).
int64_t encodedOwner(const PlanMatrix &m);

/// The inverse of encodedOwner (the validator checks what it means).
void decodeOwner(PlanMatrix &m, int64_t value);

/// Settings, mesh, parameters, the exchanges' phases and the schedule: what
/// every rank needs whole.
std::string encodeShared(const Plan &plan, int64_t totalMatrices);

Status readHeader(std::string_view bytes, uint64_t actualSize, Header &h);

/// Decodes the shared section of a file of format `version` into `plan`
/// (settings, mesh, params, the exchanges' phases and rounds, the
/// schedule), sizes rounds and exchanges, and returns the whole plan's
/// matrix count.
bool decodeShared(In &in, Plan &plan, int64_t &totalMatrices, uint32_t version);

/// Decodes rank `rank`'s section into `slice` (which holds the decoded
/// shared section): the slice as Plan.h describes it. `items`, when given,
/// gets each transfer's (or reduction's) index in its exchange. Indices
/// are range-checked here; what they mean is validatePlanSlice's.
bool decodeSection(In &in, const Geometry &geo, int64_t rank, Plan &slice,
                   std::vector<std::vector<Item>> *items);

} // namespace muon::planbin

#endif // MUON_LIB_PLAN_PLANBINARYFORMAT_H
