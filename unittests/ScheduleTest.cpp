//===- ScheduleTest.cpp - The schedule and its verifier -------------------===//
#include "muon/Plan/Schedule.h"

#include <gtest/gtest.h>

using namespace muon;
using Kind = ScheduleStep::Kind;

namespace {
/// Two ranks, four 4x4 matrices, each rank owning two; one transfer each way
/// per matrix, all in a single gather/scatter pair as buildPlan makes them.
Plan smallPlan() {
  Plan plan;
  plan.worldSize = 2;
  plan.distributed = true;
  plan.nsMatrices.resize(2);
  Exchange gather{Exchange::Phase::Gather, 0, {}};
  Exchange scatter{Exchange::Phase::Scatter, 0, {}};
  for (int64_t m = 0; m < 4; ++m) {
    int64_t owner = m % 2;
    PlanMatrix pm;
    pm.param = "w" + std::to_string(m);
    pm.rows = pm.cols = 4;
    pm.owner = owner;
    pm.nsFlops = 10;
    plan.matrices.push_back(pm);
    plan.nsMatrices[owner].push_back(m);
    gather.transfers.push_back({1 - owner, owner, m, {2, 4}, {0, 4}, 0});
    scatter.transfers.push_back({owner, 1 - owner, m, {2, 4}, {0, 4}, 0});
  }
  plan.exchanges = {gather, scatter};
  return plan;
}
} // namespace

TEST(Schedule, PrefetchOneOverlapsTheNextGather) {
  Plan plan = smallPlan();
  std::string error;
  ASSERT_TRUE(
      schedulePlan(plan, {/*prefetch*/ 1, /*async*/ true, 8, 0}, error));
  EXPECT_EQ(verifySchedule(plan), "");
  ASSERT_EQ(plan.rounds.size(), 2u);
  // Two slots: gather 1 is in flight during NS 0, scatter 0 during NS 1.
  std::vector<std::pair<Kind, int64_t>> expected = {
      {Kind::Start, 0},        {Kind::Start, 2}, {Kind::Done, 0},
      {Kind::NewtonSchulz, 0}, {Kind::Start, 1}, {Kind::Done, 2},
      {Kind::NewtonSchulz, 1}, {Kind::Start, 3}, {Kind::Done, 1},
      {Kind::Done, 3}};
  ASSERT_EQ(plan.schedule.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(plan.schedule[i].kind, expected[i].first) << i;
    EXPECT_EQ(plan.schedule[i].index, expected[i].second) << i;
  }
}

TEST(Schedule, DebugOrderIsSequentialByOwner) {
  Plan plan = smallPlan();
  std::string error;
  ASSERT_TRUE(schedulePlan(plan, {1, /*async*/ false, 8, 0}, error));
  EXPECT_EQ(verifySchedule(plan), "");
  ASSERT_EQ(plan.rounds.size(), 2u);
  EXPECT_EQ(plan.rounds[0], (std::vector<int64_t>{0, 2})); // rank 0's
  EXPECT_EQ(plan.rounds[1], (std::vector<int64_t>{1, 3})); // rank 1's
  EXPECT_EQ(plan.inflightLimit, 1);
}

TEST(Schedule, BudgetTooSmallForOneMatrix) {
  Plan plan = smallPlan();
  std::string error;
  EXPECT_FALSE(schedulePlan(plan, {1, true, 8, /*budget*/ 32}, error));
  EXPECT_NE(error.find("matrix 'w0' alone needs 64"), std::string::npos)
      << error;
}

TEST(Schedule, SameShapeMatricesFormOneBatch) {
  Plan plan = smallPlan();
  std::string error;
  ASSERT_TRUE(schedulePlan(plan, {0, true, /*rounds*/ 1, 0}, error));
  ASSERT_EQ(plan.nsBatches[0].size(), 1u);
  EXPECT_EQ(plan.nsBatches[0][0].matrices, (std::vector<int64_t>{0, 2}));
}

// The verifier on hand-broken schedules: each rule can fail.
TEST(ScheduleVerifier, CatchesEveryKindOfViolation) {
  Plan good = smallPlan();
  std::string error;
  ASSERT_TRUE(schedulePlan(good, {0, true, 1, 0}, error));
  ASSERT_EQ(verifySchedule(good), "");
  // good.schedule: start 0, done 0, ns 0, start 1, done 1
  auto broken = [&](std::vector<ScheduleStep> s, int64_t limit = 1,
                    int64_t budget = 0) {
    Plan p = good;
    p.schedule = std::move(s);
    p.inflightLimit = limit;
    p.gatherBudgetBytes = budget;
    return verifySchedule(p);
  };
  EXPECT_NE(broken({{Kind::Done, 0}}).find("done before it starts"),
            std::string::npos);
  EXPECT_NE(broken({{Kind::Start, 0}, {Kind::NewtonSchulz, 0}})
                .find("before its gather is done"),
            std::string::npos);
  EXPECT_NE(broken({{Kind::Start, 0}, {Kind::Done, 0}, {Kind::Start, 1}})
                .find("starts before its NS"),
            std::string::npos);
  EXPECT_NE(broken({{Kind::Start, 0}, {Kind::Start, 0}}).find("started twice"),
            std::string::npos);
  EXPECT_NE(broken({{Kind::Start, 0},
                    {Kind::Done, 0},
                    {Kind::NewtonSchulz, 0},
                    {Kind::Start, 1}})
                .find("exchange 1 is never done"),
            std::string::npos);
  EXPECT_NE(broken({{Kind::Start, 0},
                    {Kind::Done, 0},
                    {Kind::NewtonSchulz, 0},
                    {Kind::NewtonSchulz, 0}})
                .find("runs twice"),
            std::string::npos);
  // Two exchanges in flight with a limit of one.
  EXPECT_NE(broken({{Kind::Start, 0},
                    {Kind::Done, 0},
                    {Kind::NewtonSchulz, 0},
                    {Kind::Start, 1}},
                   /*limit*/ 0)
                .find("in flight, limit 0"),
            std::string::npos);
  // Rank 0 gathers two 4x4 f32 matrices (128 bytes) with a budget of 100.
  EXPECT_NE(
      broken({{Kind::Start, 0}}, 1, /*budget*/ 100)
          .find("rank 0 holds 128 bytes of gathered matrices, budget 100"),
      std::string::npos);
}
