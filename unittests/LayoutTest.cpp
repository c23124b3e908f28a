//===- LayoutTest.cpp - torch.chunk layout math ---------------------------===//
#include "muon/Support/Layout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

using namespace muon;

TEST(ChunkRange, EvenSplit) {
  EXPECT_EQ(chunkRange(8, 4, 0), (Range{0, 2}));
  EXPECT_EQ(chunkRange(8, 4, 3), (Range{6, 8}));
}

TEST(ChunkRange, UnevenTrailingChunksShrinkOrVanish) {
  // torch.chunk(torch.arange(5), 4): chunk size 2 -> [0,2) [2,4) [4,5) and
  // an empty fourth chunk.
  EXPECT_EQ(chunkRange(5, 4, 0), (Range{0, 2}));
  EXPECT_EQ(chunkRange(5, 4, 2), (Range{4, 5}));
  EXPECT_EQ(chunkRange(5, 4, 3).size(), 0);
  // Fewer elements than parts.
  EXPECT_EQ(chunkRange(2, 4, 1), (Range{1, 2}));
  EXPECT_EQ(chunkRange(2, 4, 2).size(), 0);
}

TEST(Mesh, RowMajorAndDeviceTable) {
  Mesh mesh{{2, 3}, {}};
  EXPECT_EQ(mesh.rankAt({1, 2}), 5);
  EXPECT_EQ(mesh.coordsOfRank(4), (std::vector<int64_t>{1, 1}));
  Mesh permuted{{2}, {1, 0}};
  EXPECT_EQ(permuted.rankAt({0}), 1);
  EXPECT_EQ(permuted.coordsOfRank(0), (std::vector<int64_t>{1}));
}

TEST(ParamLayout, MajorToMinorSplitOfOneDim) {
  // 8 rows split by tp (axis 1, size 2) first, then dp (axis 0, size 2):
  // tp chunk 1 is rows [4, 8); dp chunk 0 of that is [4, 6).
  Mesh mesh{{2, 2}, {}};
  ParamLayout strided{{8, 4}, {{1, 0}, {}}, {}, {}};
  auto box = strided.localBox(mesh, {0, 1});
  EXPECT_EQ(box[0], (Range{4, 6}));
  EXPECT_EQ(box[1], (Range{0, 4}));
  // The DTensor order (dp major) puts the same rank on rows [2, 4).
  ParamLayout dtensor{{8, 4}, {{0, 1}, {}}, {}, {}};
  EXPECT_EQ(dtensor.localBox(mesh, {0, 1})[0], (Range{2, 4}));
}

TEST(ParamLayout, OnlySubmesh) {
  ParamLayout layout{{4, 4}, {{}, {}}, {}, {{0, 2}}};
  EXPECT_TRUE(layout.inSubmesh({2, 0}));
  EXPECT_FALSE(layout.inSubmesh({1, 0}));
}

TEST(Cost, NsFlopsUsesTheShortSide) {
  // m <= n: ns_steps * (4 m^2 n + 2 m^3)
  EXPECT_EQ(nsFlops(2, 3, 5), 5 * (4 * 4 * 3 + 2 * 8));
  EXPECT_EQ(nsFlops(3, 2, 5), nsFlops(2, 3, 5));
  EXPECT_EQ(numMatrices({64, 8, 4}), 64);
  EXPECT_EQ(numMatrices({8, 4}), 1);
}

namespace {
/// Brute force: every mesh position, its local box, kept when non-empty.
std::vector<MatrixPiece>
piecesByScan(const Mesh &mesh, const ParamLayout &layout, int64_t matrix) {
  size_t rank = layout.shape.size();
  std::vector<int64_t> batch(rank - 2);
  for (size_t d = batch.size(); d-- > 0;) {
    batch[d] = matrix % layout.shape[d];
    matrix /= layout.shape[d];
  }
  std::vector<MatrixPiece> pieces;
  for (int64_t linear = 0; linear < mesh.numDevices(); ++linear) {
    std::vector<int64_t> coords = mesh.coordsOfLinear(linear);
    if (!layout.inSubmesh(coords))
      continue;
    std::vector<Range> box = layout.localBox(mesh, coords);
    bool holds = box[rank - 2].size() > 0 && box[rank - 1].size() > 0;
    for (size_t d = 0; d < batch.size(); ++d)
      holds &= box[d].begin <= batch[d] && batch[d] < box[d].end;
    if (holds)
      pieces.push_back({mesh.rankAt(coords), box[rank - 2], box[rank - 1]});
  }
  std::sort(pieces.begin(), pieces.end(),
            [](auto &a, auto &b) { return a.rank < b.rank; });
  return pieces;
}
} // namespace

// Property: the output-sensitive enumeration finds exactly the pieces a scan
// of every rank finds, on random meshes (up to 3-D, with a device table),
// random splits (several axes per dim, uneven and empty chunks), partial
// axes, `only` and batch dims.
TEST(MatrixPieces, MatchesAScanOfEveryRank) {
  std::mt19937 rng(1234);
  auto pick = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 400; ++trial) {
    Mesh mesh;
    int64_t meshRank = pick(1, 3);
    for (int64_t a = 0; a < meshRank; ++a)
      mesh.shape.push_back(pick(1, 4));
    if (pick(0, 1)) {
      mesh.devices.resize(mesh.numDevices());
      std::iota(mesh.devices.begin(), mesh.devices.end(), 0);
      std::shuffle(mesh.devices.begin(), mesh.devices.end(), rng);
    }
    ParamLayout layout;
    int64_t rank = pick(2, 4);
    for (int64_t d = 0; d < rank; ++d)
      layout.shape.push_back(pick(1, 9));
    layout.splitAxes.resize(rank);
    for (int64_t a = 0; a < meshRank; ++a) {
      switch (pick(0, 3)) {
      case 0: // split some dim; appending makes random major/minor orders
        layout.splitAxes[pick(0, rank - 1)].push_back(a);
        break;
      case 1:
        layout.partialAxes.push_back(a);
        break;
      case 2:
        layout.only.push_back({a, pick(0, mesh.shape[a] - 1)});
        break;
      default: // replicated
        break;
      }
    }
    MatrixPieceCache cache(mesh);
    // In order, as the compiler walks them, then in a random order.
    std::vector<int64_t> order(numMatrices(layout.shape));
    std::iota(order.begin(), order.end(), 0);
    std::vector<int64_t> shuffled = order;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    order.insert(order.end(), shuffled.begin(), shuffled.end());
    for (int64_t m : order) {
      const std::vector<MatrixPiece> &cached = cache.pieces(layout, m);
      auto slow = piecesByScan(mesh, layout, m);
      ASSERT_EQ(cached.size(), slow.size()) << "trial " << trial;
      for (size_t i = 0; i < cached.size(); ++i) {
        EXPECT_EQ(cached[i].rank, slow[i].rank) << "trial " << trial;
        EXPECT_EQ(cached[i].rows, slow[i].rows) << "trial " << trial;
        EXPECT_EQ(cached[i].cols, slow[i].cols) << "trial " << trial;
        EXPECT_EQ(cached[i].summand, matrixPieces(mesh, layout, m)[i].summand);
      }
    }
    for (int64_t m = 0; m < numMatrices(layout.shape); ++m) {
      auto fast = matrixPieces(mesh, layout, m);
      auto slow = piecesByScan(mesh, layout, m);
      ASSERT_EQ(fast.size(), slow.size()) << "trial " << trial;
      for (size_t i = 0; i < fast.size(); ++i) {
        EXPECT_EQ(fast[i].rank, slow[i].rank);
        EXPECT_EQ(fast[i].rows, slow[i].rows);
        EXPECT_EQ(fast[i].cols, slow[i].cols);
      }
      // holdsMatrix agrees with the enumeration for every rank.
      for (int64_t r = 0; r < mesh.numDevices(); ++r) {
        bool listed = std::any_of(fast.begin(), fast.end(),
                                  [&](auto &p) { return p.rank == r; });
        EXPECT_EQ(layout.holdsMatrix(mesh, mesh.coordsOfRank(r), m), listed)
            << "trial " << trial << " rank " << r;
      }
    }
  }
}

// The cache computes one list per chunk of the batch dims, not one per
// matrix: 8 experts split over 2 x 2 ranks (major axis first) are 4 chunks
// of 2, walked in order.
TEST(MatrixPieceCache, ComputesOncePerChunk) {
  Mesh mesh;
  mesh.shape = {2, 2, 3};
  ParamLayout experts;
  experts.shape = {8, 6, 4};
  experts.splitAxes = {{0, 1}, {2}, {}};
  ParamLayout dense;
  dense.shape = {6, 4};
  dense.splitAxes = {{2}, {}};
  MatrixPieceCache cache(mesh);
  std::vector<uint64_t> versions;
  for (int64_t m = 0; m < 8; ++m) {
    EXPECT_EQ(cache.pieces(experts, m).size(), 3u) << "expert " << m;
    versions.push_back(cache.version());
  }
  EXPECT_EQ(versions, (std::vector<uint64_t>{1, 1, 2, 2, 3, 3, 4, 4}));
  // Another layout is another list, even for the same matrix index.
  EXPECT_EQ(cache.pieces(dense, 0).size(), 12u);
  EXPECT_EQ(cache.version(), 5u);
  // Back to the experts: recomputed, the same as matrixPieces.
  const std::vector<MatrixPiece> &again = cache.pieces(experts, 5);
  EXPECT_EQ(cache.version(), 6u);
  std::vector<MatrixPiece> direct = matrixPieces(mesh, experts, 5);
  ASSERT_EQ(again.size(), direct.size());
  for (size_t i = 0; i < again.size(); ++i) {
    EXPECT_EQ(again[i].rank, direct[i].rank);
    EXPECT_EQ(again[i].rows, direct[i].rows);
  }
}
