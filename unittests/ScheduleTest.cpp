//===- ScheduleTest.cpp - The schedule and its verifier -------------------===//
#include "StatusTesting.h"
#include "PlanModel.h"

#include "muon/Planner/Schedule.h"

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
    PlanParam param;
    param.name = "w" + std::to_string(m);
    param.layout.shape = {4, 4};
    plan.params.push_back(param);
    PlanMatrix pm;
    pm.param = param.name;
    pm.paramIndex = m;
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
  ASSERT_OK(
      schedulePlan(plan, {/*prefetch*/ 1, /*async*/ true, 8, 0}));
  EXPECT_OK(verifySchedule(plan));
  ASSERT_EQ(plan.rounds.size(), 2u);
  // Two slots: gather 1 is in flight during NS 0, scatter 0 during NS 1;
  // momentum first, each round's update right after its scatter, AdamW
  // last (no reduction needed).
  std::vector<std::pair<Kind, int64_t>> expected = {
      {Kind::Momentum, 0},    {Kind::Start, 0},        {Kind::Start, 2},
      {Kind::Done, 0},        {Kind::NewtonSchulz, 0}, {Kind::Start, 1},
      {Kind::Done, 2},        {Kind::NewtonSchulz, 1}, {Kind::Start, 3},
      {Kind::Done, 1},        {Kind::ApplyUpdate, 0},  {Kind::Done, 3},
      {Kind::ApplyUpdate, 1}, {Kind::AdamW, 0}};
  ASSERT_EQ(plan.schedule.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(plan.schedule[i].kind, expected[i].first) << i;
    EXPECT_EQ(plan.schedule[i].index, expected[i].second) << i;
  }
}

TEST(Schedule, DebugOrderIsSequentialByOwner) {
  Plan plan = smallPlan();
  std::string error;
  ASSERT_OK(schedulePlan(plan, {1, /*async*/ false, 8, 0}));
  EXPECT_OK(verifySchedule(plan));
  ASSERT_EQ(plan.rounds.size(), 2u);
  EXPECT_EQ(plan.rounds[0], (std::vector<int64_t>{0, 2})); // rank 0's
  EXPECT_EQ(plan.rounds[1], (std::vector<int64_t>{1, 3})); // rank 1's
  EXPECT_EQ(plan.inflightLimit, 1);
}

TEST(Schedule, BudgetTooSmallForOneMatrix) {
  Plan plan = smallPlan();
  const std::string error = failureText(schedulePlan(plan, {1, true, 8, /*budget*/ 32}));
  EXPECT_NE(error.find("matrix 'w0' alone needs 64"), std::string::npos)
      << error;
}

TEST(Schedule, SameShapeMatricesFormOneBatch) {
  Plan plan = smallPlan();
  std::string error;
  ASSERT_OK(schedulePlan(plan, {0, true, /*rounds*/ 1, 0}));
  ASSERT_EQ(plan.nsBatches[0].size(), 1u);
  EXPECT_EQ(plan.nsBatches[0][0].matrices, (std::vector<int64_t>{0, 2}));
}

TEST(Schedule, BatchesNeverMixNewtonSchulzConfigurations) {
  // Rank 0 orthogonalizes three 8x4 matrices in one round: "w" and "u" of
  // configuration 0 batch together, "v" of configuration 1 alone.
  Plan plan = nsGroupsPlanModel();
  ASSERT_EQ(plan.rounds.size(), 1u);
  const std::vector<NsBatch> &batches = plan.nsBatches[0];
  ASSERT_EQ(batches.size(), 2u);
  EXPECT_EQ(batches[0].config, 0);
  EXPECT_EQ(batches[0].matrices, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(batches[1].config, 1);
  EXPECT_EQ(batches[1].matrices, (std::vector<int64_t>{1}));
  for (const NsBatch &b : batches)
    for (int64_t k : b.matrices)
      EXPECT_EQ(nsConfigOf(plan, plan.matrices[k].paramIndex), b.config)
          << plan.matrices[k].label();
  // The split is the configurations': with one, the three are one batch.
  Plan shared = nsGroupsPlanModel();
  shared.ns.configs.pop_back();
  shared.groups[1].nsConfig = 0;
  setRounds(shared, shared.rounds);
  ASSERT_EQ(shared.nsBatches[0].size(), 1u);
  EXPECT_EQ(shared.nsBatches[0][0].matrices, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(shared.nsBatches[0][0].config, 0);
}

// The verifier on hand-broken schedules: each rule can fail.
TEST(ScheduleVerifier, CatchesEveryKindOfViolation) {
  Plan good = smallPlan();
  std::string error;
  ASSERT_OK(schedulePlan(good, {0, true, 1, 0}));
  ASSERT_OK(verifySchedule(good));
  // good.schedule: momentum, start 0, done 0, ns 0, start 1, done 1,
  // apply 0, adamw. Broken schedules start with momentum unless they test
  // it (`raw`).
  auto raw = [&](std::vector<ScheduleStep> s) {
    Plan p = good;
    p.schedule = std::move(s);
    return verifySchedule(p).message();
  };
  auto broken = [&](std::vector<ScheduleStep> s, int64_t limit = 1,
                    int64_t budget = 0) {
    Plan p = good;
    s.insert(s.begin(), {Kind::Momentum, 0});
    p.schedule = std::move(s);
    p.inflightLimit = limit;
    p.gatherBudgetBytes = budget;
    return verifySchedule(p).message();
  };
  EXPECT_NE(broken({{Kind::Done, 0}}).find("the gather of round 0 is done before it starts"),
            std::string::npos);
  EXPECT_NE(broken({{Kind::Start, 0}, {Kind::NewtonSchulz, 0}})
                .find("before its gather is done"),
            std::string::npos);
  EXPECT_NE(broken({{Kind::Start, 0}, {Kind::Done, 0}, {Kind::Start, 1}})
                .find("starts before its NS"),
            std::string::npos);
  EXPECT_NE(broken({{Kind::Start, 0}, {Kind::Start, 0}}).find("the gather of round 0 starts twice"),
            std::string::npos);
  EXPECT_NE(broken({{Kind::Start, 0},
                    {Kind::Done, 0},
                    {Kind::NewtonSchulz, 0},
                    {Kind::Start, 1}})
                .find("the scatter of round 0 is never done"),
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
  // The elementwise steps.
  EXPECT_NE(raw({{Kind::Start, 0}}).find("starts before momentum"),
            std::string::npos);
  EXPECT_NE(raw({{Kind::Momentum, 0}, {Kind::Start, 0}, {Kind::Momentum, 0}})
                .find("momentum runs twice"),
            std::string::npos);
  EXPECT_NE(broken({{Kind::Start, 0}, {Kind::Done, 0}, {Kind::NewtonSchulz, 0},
                    {Kind::Start, 1}, {Kind::ApplyUpdate, 0}})
                .find("update of round 0 before its scatter is done"),
            std::string::npos);
  EXPECT_NE(broken({{Kind::Start, 0}, {Kind::Done, 0}, {Kind::NewtonSchulz, 0},
                    {Kind::Start, 1}, {Kind::Done, 1}, {Kind::AdamW, 0}})
                .find("the update of round 0 is never applied"),
            std::string::npos);
  EXPECT_NE(broken({{Kind::Start, 0}, {Kind::Done, 0}, {Kind::NewtonSchulz, 0},
                    {Kind::Start, 1}, {Kind::Done, 1},
                    {Kind::ApplyUpdate, 0}})
                .find("AdamW never runs"),
            std::string::npos);
  // Rank 0 gathers two 4x4 f32 matrices (128 bytes) with a budget of 100.
  EXPECT_NE(
      broken({{Kind::Start, 0}}, 1, /*budget*/ 100)
          .find("rank 0 holds 128 bytes of gathered matrices, budget 100"),
      std::string::npos);
}

// AdamW parameters with partial gradients: the reduce exchange goes first,
// AdamW runs right after it is done, and not before.
TEST(Schedule, AdamWRunsAfterItsReduction) {
  Plan plan = smallPlan();
  Exchange reduce{Exchange::Phase::Reduce, 0, {}, {{0, 1, 0, 1, 8}}};
  plan.exchanges.push_back(reduce);
  std::string error;
  ASSERT_OK(schedulePlan(plan, {0, true, 1, 0}));
  EXPECT_OK(verifySchedule(plan));
  // Reduce is exchange 2 (after round 0's gather and scatter).
  ASSERT_EQ(plan.exchanges.size(), 3u);
  EXPECT_EQ(plan.exchanges[2].phase, Exchange::Phase::Reduce);
  size_t doneReduce = 0, adamw = 0;
  for (size_t i = 0; i < plan.schedule.size(); ++i) {
    if (plan.schedule[i].kind == Kind::Done && plan.schedule[i].index == 2)
      doneReduce = i;
    if (plan.schedule[i].kind == Kind::AdamW)
      adamw = i;
  }
  EXPECT_EQ(adamw, doneReduce + 1);
  // Moving AdamW before the reduction's done breaks the rules.
  std::swap(plan.schedule[adamw], plan.schedule[doneReduce]);
  EXPECT_NE(verifySchedule(plan).message().find("AdamW before its gradients are reduced"),
            std::string::npos);
}
