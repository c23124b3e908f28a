//===- ProcessGroupsTest.cpp - Process groups to a grid -------------------===//
#include "muon/Support/ProcessGroups.h"
#include "StatusTesting.h"

#include <gtest/gtest.h>

using namespace muon;

TEST(ProcessGroups, FsdpTimesTpIsAGrid) {
  std::string error;
  auto grid = buildGroupGrid(8,
                             {{"fsdp", {{0, 1}, {2, 3}, {4, 5}, {6, 7}}},
                              {"tp", {{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
                              {"ddp", {{0, 4}, {1, 5}, {2, 6}, {3, 7}}}});
  ASSERT_OK(grid);
  // Ranks are row-major for the order ddp, tp, fsdp.
  EXPECT_TRUE(grid->mesh.devices.empty());
  EXPECT_EQ(grid->mesh.shape, (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(grid->axisKind, (std::vector<size_t>{2, 1, 0}));
}

TEST(ProcessGroups, NonRowMajorGetsADeviceTable) {
  std::string error;
  // Positions: rank 0 (0,0), 3 (1,0), 1 (0,1), 2 (1,1) for (fsdp, tp).
  auto grid = buildGroupGrid(
      4, {{"fsdp", {{0, 3}, {1, 2}}}, {"tp", {{0, 1}, {3, 2}}}});
  ASSERT_OK(grid);
  ASSERT_FALSE(grid->mesh.devices.empty());
  for (int64_t r = 0; r < 4; ++r)
    EXPECT_EQ(grid->mesh.rankAt(grid->mesh.coordsOfRank(r)), r);
}

TEST(ProcessGroups, OverlappingGroupsAreNotAPartition) {
  const std::string error = failureText(buildGroupGrid(4, {{"fsdp", {{0, 1}, {1, 2}}}}));
  EXPECT_NE(error.find("rank 1 is in group 0 and group 1"), std::string::npos)
      << error;
}

TEST(ProcessGroups, MissingRank) {
  const std::string error = failureText(buildGroupGrid(6, {{"fsdp", {{0, 1}, {2, 3}}}}));
  EXPECT_NE(error.find("rank 4 is in no group"), std::string::npos) << error;
}

TEST(ProcessGroups, RankTwiceInOneGroup) {
  const std::string error = failureText(buildGroupGrid(4, {{"fsdp", {{0, 1}, {2, 2}}}}));
  EXPECT_NE(error.find("group 1 lists rank 2 twice"), std::string::npos)
      << error;
}

TEST(ProcessGroups, UnequalGroups) {
  const std::string error = failureText(buildGroupGrid(4, {{"tp", {{0, 1, 2}, {3}}}}));
  EXPECT_NE(error.find("equal size"), std::string::npos) << error;
}

TEST(ProcessGroups, NotOrthogonalNamesBothKinds) {
  std::string error;
  // tp groups cut across fsdp positions.
  error = failureText(buildGroupGrid(4, {{"fsdp", {{0, 1}, {2, 3}}}, {"tp", {{0, 3}, {1, 2}}}}));
  // fsdp lines are consistent; the tp group {0, 3} crosses fsdp positions.
  EXPECT_NE(error.find("'tp' and 'fsdp' are not orthogonal: tp group 0 [0, 3]"),
            std::string::npos)
      << error;
}

TEST(ProcessGroups, SameGroupingTwiceIsNotAGrid) {
  const std::string error = failureText(buildGroupGrid(4, {{"fsdp", {{0, 1}, {2, 3}}}, {"ddp", {{0, 1}, {2, 3}}}}));
  EXPECT_NE(error.find("'fsdp' and 'ddp' are not orthogonal: both put ranks 0 "
                       "and 1 in one group"),
            std::string::npos)
      << error;
}

TEST(ProcessGroups, RankOutOfRange) {
  const std::string error = failureText(buildGroupGrid(2, {{"ddp", {{0, 5}}}}));
  EXPECT_NE(error.find("outside the world of 2 ranks"), std::string::npos)
      << error;
}
