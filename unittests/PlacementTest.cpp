//===- PlacementTest.cpp - Newton-Schulz placed by cost -------------------===//
//
// The cost model of muon/Plan/Placement.h on constructed cases: tiny
// matrices are cheaper to orthogonalize on every holder, large ones once; a
// slow link flips a matrix that is once on a fast one; HSDP replicas and
// their owners.
//
//===----------------------------------------------------------------------===//
#include "muon/Plan/Placement.h"
#include "muon/Support/Replicas.h"

#include <gtest/gtest.h>

using namespace muon;

namespace {
/// The h100 profile's numbers (share/muon/profiles.json): bf16 at 70% of
/// 989.4 TFLOP/s, NVLink 450 GB/s and 5 us, InfiniBand 50 GB/s and 10 us.
PlacementMachine h100() {
  PlacementMachine m;
  m.nsFlopsPerSecond = 989.4e12 * 0.7;
  m.latencySeconds = 5e-6;
  m.bytesPerSecond = 450e9;
  m.interLatencySeconds = 10e-6;
  m.interBytesPerSecond = 50e9;
  m.ranksPerNode = 8;
  return m;
}

/// A replicated (DDP) 2-D parameter on a 1-D mesh of `ranks`.
ParamLayout replicated(int64_t rows, int64_t cols) {
  ParamLayout l;
  l.shape = {rows, cols};
  l.splitAxes = {{}, {}};
  return l;
}

PlacementMatrix ddp(int64_t ranks, int64_t n, int64_t wireBytes = 2) {
  Mesh mesh{{ranks}, {}};
  ParamLayout l = replicated(n, n);
  return placementMatrix(mesh, l, 0, nsFlops(n, n, 5), wireBytes, 8);
}
} // namespace

TEST(Replicas, DdpEveryRankIsAReplica) {
  Mesh mesh{{4}, {}};
  ParamLayout l = replicated(8, 8);
  EXPECT_EQ(replicatedAxes(mesh, l), (std::vector<int64_t>{0}));
  EXPECT_EQ(replicaCount(mesh, l), 4);
  EXPECT_EQ(replicaOwners(mesh, l, 0), (std::vector<int64_t>{0, 1, 2, 3}));
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(replicaOwnerOf(mesh, l, 0, r), r);
}

TEST(Replicas, HsdpOwnersMirrorAcrossTheReplicateAxis) {
  // (replicate 2, shard 4): rows split over the shard axis.
  Mesh mesh{{2, 4}, {}};
  ParamLayout l;
  l.shape = {8, 8};
  l.splitAxes = {{1}, {}};
  EXPECT_EQ(replicatedAxes(mesh, l), (std::vector<int64_t>{0}));
  EXPECT_EQ(replicaCount(mesh, l), 2);
  // Rank 2 (replicate 0, shard 2) owns replica 0; rank 6 is its mirror.
  EXPECT_EQ(replicaOwners(mesh, l, 2), (std::vector<int64_t>{2, 6}));
  EXPECT_EQ(replicaOwnerOf(mesh, l, 2, 5), 6);
  EXPECT_EQ(replicaOwnerOf(mesh, l, 2, 3), 2);
  EXPECT_TRUE(inFirstReplica(mesh, l, 3));
  EXPECT_FALSE(inFirstReplica(mesh, l, 4));
  // Neither split, partial nor `only` axes are replicated.
  ParamLayout fsdp = l;
  fsdp.splitAxes = {{0, 1}, {}};
  EXPECT_EQ(replicaCount(mesh, fsdp), 1);
  ParamLayout partial = replicated(8, 8);
  partial.partialAxes = {0};
  partial.splitAxes = {{1}, {}};
  EXPECT_EQ(replicaCount(mesh, partial), 1);
}

TEST(Placement, DdpFiguresMoveNothingRedundantly) {
  PlacementMatrix m = ddp(8, 64);
  EXPECT_EQ(m.holders, 8);
  EXPECT_EQ(m.replicas, 8);
  EXPECT_EQ(m.bytes, 64 * 64 * 2);
  // Once: the owner has the whole gradient (nothing to gather) and sends
  // the update to the 7 other holders.
  EXPECT_DOUBLE_EQ(m.onceBytes, 7.0 * 64 * 64 * 2);
  EXPECT_DOUBLE_EQ(m.onceMessages, 7);
  EXPECT_DOUBLE_EQ(m.replicaBytes, 0);
  EXPECT_DOUBLE_EQ(m.replicaMessages, 0);
}

TEST(Placement, TinyMatricesRedundantLargeOnesOnce) {
  PlacementMachine machine = h100();
  PlacementSetting autoSetting;
  // 64 x 64: 7.9 MFLOP, 11 ns of Newton-Schulz against 5 us per message.
  PlacementMatrix tiny = ddp(8, 64);
  PlacementCost t = placementCost(machine, tiny);
  EXPECT_LT(t.redundant, t.once);
  EXPECT_TRUE(chooseRedundant(autoSetting, &machine, tiny, 64 * 64));
  // 4096 x 4096: 3 ms of Newton-Schulz, 75 us to receive it.
  PlacementMatrix large = ddp(8, 4096);
  PlacementCost l = placementCost(machine, large);
  EXPECT_LT(l.once, l.redundant);
  EXPECT_FALSE(chooseRedundant(autoSetting, &machine, large, 4096 * 4096));
  // Under DDP the rule is T < S / beta + alpha.
  double ns = static_cast<double>(large.nsFlops) / machine.nsFlopsPerSecond;
  EXPECT_NEAR(l.redundant, ns, 1e-12);
  EXPECT_NEAR(l.once,
              (ns + 7 * (machine.latencySeconds +
                         large.bytes / machine.bytesPerSecond)) /
                  8,
              1e-12);
}

TEST(Placement, ASlowLinkFlipsTheChoice) {
  PlacementSetting autoSetting;
  PlacementMatrix m = ddp(8, 1024);
  PlacementMachine fast = h100();
  EXPECT_FALSE(chooseRedundant(autoSetting, &fast, m, 1024 * 1024));
  PlacementMachine slow = fast;
  slow.bytesPerSecond = 1e9; // 1 GB/s: 2 ms to receive 2 MB
  EXPECT_TRUE(chooseRedundant(autoSetting, &slow, m, 1024 * 1024));
  // A faster Newton-Schulz rate flips it the same way.
  PlacementMachine quick = fast;
  quick.nsFlopsPerSecond *= 100;
  EXPECT_TRUE(chooseRedundant(autoSetting, &quick, m, 1024 * 1024));
}

TEST(Placement, PoliciesAndWhatTheyNeverDo) {
  PlacementMachine machine = h100();
  PlacementMatrix tiny = ddp(8, 64), large = ddp(8, 4096);
  PlacementSetting once{PlacementPolicy::Once, 0};
  EXPECT_FALSE(chooseRedundant(once, &machine, tiny, 64 * 64));
  PlacementSetting below{PlacementPolicy::RedundantBelow, 4096 * 4096};
  EXPECT_TRUE(chooseRedundant(below, nullptr, tiny, 64 * 64));
  EXPECT_FALSE(chooseRedundant(below, nullptr, large, 4096 * 4096));
  // auto without a machine keeps one owner.
  PlacementSetting autoSetting;
  EXPECT_FALSE(chooseRedundant(autoSetting, nullptr, tiny, 64 * 64));
  // A matrix with a single replica is never redundant.
  Mesh mesh{{8}, {}};
  ParamLayout fsdp;
  fsdp.shape = {64, 64};
  fsdp.splitAxes = {{0}, {}};
  PlacementMatrix sharded =
      placementMatrix(mesh, fsdp, 0, nsFlops(64, 64, 5), 2, 8);
  EXPECT_EQ(sharded.replicas, 1);
  EXPECT_FALSE(chooseRedundant(below, &machine, sharded, 64 * 64));
  EXPECT_FALSE(chooseRedundant(autoSetting, &machine, sharded, 64 * 64));
  EXPECT_EQ(parsePlacement("redundant_below"), PlacementPolicy::RedundantBelow);
  EXPECT_FALSE(parsePlacement("sometimes"));
}

TEST(Placement, HsdpPerReplicaGathersInsideItsNode) {
  // 2 nodes x 8: replicate across nodes, shard within one. Once per
  // replica keeps every byte on NVLink; once sends half the scatter over
  // InfiniBand.
  Mesh mesh{{2, 8}, {}};
  ParamLayout l;
  l.shape = {4096, 4096};
  l.splitAxes = {{1}, {}};
  PlacementMatrix m =
      placementMatrix(mesh, l, 0, nsFlops(4096, 4096, 5), 2, 8);
  EXPECT_EQ(m.holders, 16);
  EXPECT_EQ(m.replicas, 2);
  EXPECT_DOUBLE_EQ(m.replicaRemoteShare, 0);
  EXPECT_GT(m.onceRemoteShare, 0.3);
  const double piece = 512.0 * 4096 * 2;
  EXPECT_DOUBLE_EQ(m.replicaBytes, 2 * 7 * piece); // gather 7, scatter 7
  EXPECT_DOUBLE_EQ(m.onceBytes, 7 * piece + 15 * piece);
  PlacementMachine machine = h100();
  PlacementCost c = placementCost(machine, m);
  EXPECT_GT(c.once, 0);
  EXPECT_GT(c.redundant, 0);
  // Slow inter-node links flip a large matrix to once per replica.
  PlacementMachine slowIb = machine;
  slowIb.interBytesPerSecond = 1e9;
  PlacementSetting autoSetting;
  EXPECT_TRUE(chooseRedundant(autoSetting, &slowIb, m, 4096 * 4096));
}
