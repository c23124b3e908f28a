//===- LayoutTest.cpp - torch.chunk layout math ---------------------------===//
#include "muon/Support/Layout.h"

#include <gtest/gtest.h>

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
