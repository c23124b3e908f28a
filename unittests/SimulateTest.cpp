//===- SimulateTest.cpp - The step simulator on hand-made plans -----------===//
#include "StatusTesting.h"
#include "muon/Simulate/Simulate.h"

#include <gtest/gtest.h>

using namespace muon;

namespace {

/// Two ranks, one 4x8 matrix split by rows; rank 0 owns it. Rank 1 sends
/// its half (16 f32 = 64 bytes) to rank 0 and gets its new half back.
Plan tinyPlan() {
  Plan plan;
  plan.worldSize = 2;
  plan.distributed = true;
  plan.mesh.shape = {2};
  PlanParam w;
  w.name = "w";
  w.layout.shape = {4, 8};
  w.layout.splitAxes = {{0}, {}};
  plan.params = {w};
  PlanMatrix m;
  m.param = "w";
  m.rows = 4;
  m.cols = 8;
  m.owner = 0;
  m.nsFlops = 1000;
  plan.matrices = {m};
  Transfer gather{1, 0, 0, {2, 4}, {0, 8}, 0};
  Transfer scatter{0, 1, 0, {2, 4}, {0, 8}, 0};
  plan.exchanges = {{Exchange::Phase::Gather, 0, {gather}, {}},
                    {Exchange::Phase::Scatter, 0, {scatter}, {}}};
  plan.rounds = {{0}};
  plan.nsBatches = {{{0, 4, 8, {0}}}, {}};
  using K = ScheduleStep::Kind;
  plan.schedule = {{K::Momentum, 0},    {K::Start, 0},       {K::Done, 0},
                   {K::NewtonSchulz, 0}, {K::Start, 1},       {K::Done, 1},
                   {K::ApplyUpdate, 0},  {K::AdamW, 0}};
  plan.ns.nsDtype = "f32";
  return plan;
}

/// One rank per node (so the two ranks talk over the inter-node link),
/// round numbers, and no elementwise cost.
sim::Profile tinyProfile() {
  sim::Profile p;
  p.name = "tiny";
  p.ranksPerNode = 1;
  p.intraNode = {1e-3, 1000};
  p.interNode = {1e-3, 1000};
  p.f32FlopsPerSecond = 1000;
  p.bf16FlopsPerSecond = 2000;
  p.memoryBytesPerSecond = 0;
  return p;
}

} // namespace

// By hand: the gather moves 64 bytes at 1000 B/s after 1 ms of latency, so
// both ranks are through at 0.065 s; rank 0 runs NS (1000 flops at 1000
// flop/s) until 1.065 s; the scatter can move only once rank 0 has started
// it (1.065 s) and takes another 0.065 s: the step ends at 1.130 s on both
// ranks, rank 1 having waited for all of it.
TEST(Simulate, TinyPlanByHand) {
  Plan plan = tinyPlan();
  sim::Result r = sim::simulate(plan, tinyProfile(), {1000, 64}, true);
  EXPECT_NEAR(r.stepSeconds, 1.130, 1e-12);
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_NEAR(r.ranks[0].finishSeconds, 1.130, 1e-12);
  EXPECT_NEAR(r.ranks[1].finishSeconds, 1.130, 1e-12);
  EXPECT_NEAR(r.ranks[0].nsSeconds, 1.0, 1e-12);
  EXPECT_NEAR(r.ranks[0].waitSeconds, 0.130, 1e-12);
  EXPECT_NEAR(r.ranks[1].waitSeconds, 1.130, 1e-12);
  EXPECT_EQ(r.nodes, 2);
  // Bounds: 1000 flops at 1000 flop/s; 64 bytes over 2 ranks receiving at
  // 1000 + 1000 B/s each.
  EXPECT_NEAR(r.computeBoundSeconds, 1.0, 1e-12);
  EXPECT_NEAR(r.commBoundSeconds, 0.016, 1e-12);
  EXPECT_NEAR(r.boundSeconds(), 1.0, 1e-12);
  // Two exchanges per rank, one NS batch on rank 0, three elementwise
  // steps per rank.
  int exchanges = 0, ns = 0, elementwise = 0;
  for (const TraceEvent &e : r.events) {
    if (e.kind == TraceEvent::Kind::Exchange) {
      ++exchanges;
      EXPECT_EQ(e.lane, 1);
    } else if (e.kind == TraceEvent::Kind::NewtonSchulz) {
      ++ns;
      EXPECT_EQ(e.rank, 0);
      EXPECT_NEAR(e.begin, 0.065, 1e-12);
      EXPECT_NEAR(e.end, 1.065, 1e-12);
    } else {
      ++elementwise;
    }
  }
  EXPECT_EQ(exchanges, 4);
  EXPECT_EQ(ns, 1);
  EXPECT_EQ(elementwise, 6);
}

// The same plan on one node uses the intra-node link; bf16 NS at twice the
// rate halves the NS time.
TEST(Simulate, IntraNodeLinkAndNsDtype) {
  Plan plan = tinyPlan();
  plan.ns.nsDtype = "bf16";
  sim::Profile p = tinyProfile();
  p.ranksPerNode = 8;
  p.intraNode = {0, 6400};  // 64 bytes in 0.01 s
  p.interNode = {1, 1};     // would be far slower
  sim::Result r = sim::simulate(plan, p, {1000, 64}, false);
  EXPECT_EQ(r.nodes, 1);
  EXPECT_NEAR(r.stepSeconds, 0.01 + 0.5 + 0.01, 1e-12);
  EXPECT_TRUE(r.events.empty());
}

// Ranks sharing fewer compute slots than they are compute at slots/ranks
// of the rate; elementwise work costs bytes / memory bandwidth.
TEST(Simulate, ComputeSlotsAndMemory) {
  Plan plan = tinyPlan();
  sim::Profile p = tinyProfile();
  p.ranksPerNode = 8;
  p.intraNode = {0, 1e12};
  p.computeSlotsPerNode = 1; // two ranks on one slot: half the rate
  sim::Result r = sim::simulate(plan, p, {1000, 64}, false);
  EXPECT_NEAR(r.ranks[0].nsSeconds, 2.0, 1e-12);
  EXPECT_NEAR(r.computeBoundSeconds, 2.0, 1e-12);
  // Momentum on rank 1's 16 elements: 16 x 16 bytes at 256 B/s, times the
  // slot sharing.
  p.memoryBytesPerSecond = 256;
  sim::Result m = sim::simulate(plan, p, {1000, 64}, true);
  for (const TraceEvent &e : m.events)
    if (e.kind == TraceEvent::Kind::Momentum && e.rank == 1)
      EXPECT_NEAR(e.end - e.begin, 2.0, 1e-12);
}

TEST(Simulate, ProfileFileErrorsNameThePath) {
  std::string text = R"({"format": "muon-profiles/1", "profiles": {"a": {
    "ranks_per_node": 8,
    "intra_node": {"latency_seconds": 0, "bytes_per_second": 1},
    "inter_node": {"latency_seconds": -1, "bytes_per_second": 1},
    "matmul_flops_per_second": {"f32": 1, "bf16": 1}}}})";
  sim::Profile p;
  EXPECT_EQ(sim::parseProfile(text, "p.json", "a", p).message(),
            "p.json: profiles.a.inter_node.latency_seconds: must be >= 0");
  std::string good = text;
  good.replace(good.find("-1"), 2, "2e-6");
  ASSERT_OK(sim::parseProfile(good, "p.json", "a", p));
  EXPECT_EQ(p.ranksPerNode, 8);
  EXPECT_DOUBLE_EQ(p.interNode.latencySeconds, 2e-6);
  EXPECT_EQ(p.defaultNsDtype, "bf16");
  EXPECT_EQ(failureText(sim::parseProfile(good, "p.json", "b", p)),
            "p.json: profiles: no profile 'b'; the file has a");
}

namespace {
/// Two matrices in two rounds, each rank owning one: rank 0 runs 1 s of
/// NS in round 0, rank 1 3 s in round 1, with prefetch 1 (round 1's gather
/// in flight during round 0's NS).
Plan twoRoundPlan() {
  Plan plan = tinyPlan();
  PlanParam v = plan.params[0];
  v.name = "v";
  plan.params.push_back(v);
  PlanMatrix m1 = plan.matrices[0];
  m1.param = "v";
  m1.paramIndex = 1;
  m1.owner = 1;
  m1.nsFlops = 3000;
  plan.matrices.push_back(m1);
  Transfer g0{1, 0, 0, {2, 4}, {0, 8}, 0}, s0{0, 1, 0, {2, 4}, {0, 8}, 0};
  Transfer g1{0, 1, 1, {0, 2}, {0, 8}, 0}, s1{1, 0, 1, {0, 2}, {0, 8}, 0};
  using P = Exchange::Phase;
  plan.exchanges = {{P::Gather, 0, {g0}, {}},
                    {P::Scatter, 0, {s0}, {}},
                    {P::Gather, 1, {g1}, {}},
                    {P::Scatter, 1, {s1}, {}}};
  plan.rounds = {{0}, {1}};
  plan.nsBatches = {{{0, 4, 8, {0}}}, {{1, 4, 8, {1}}}};
  using K = ScheduleStep::Kind;
  plan.schedule = {{K::Momentum, 0}, {K::Start, 0},    {K::Start, 2},
                   {K::Done, 0},     {K::NewtonSchulz, 0}, {K::Start, 1},
                   {K::Done, 2},     {K::NewtonSchulz, 1}, {K::Start, 3},
                   {K::Done, 1},     {K::ApplyUpdate, 0}, {K::Done, 3},
                   {K::ApplyUpdate, 1}, {K::AdamW, 0}};
  plan.prefetchCount = 1;
  plan.inflightLimit = 2;
  return plan;
}
} // namespace

// By hand, with transfers in the background: both gathers are through at
// 0.065 s; rank 0's NS ends at 1.065, rank 1's at 0.065 + 3 = 3.065;
// round 1's scatter moves from 3.065 (rank 1 posts it then): 3.130 s.
// With in-calls progress, round 1's gather (posted at 0) moves only when
// rank 0 is next in the transport, after its NS (1.065): rank 1 waits for
// it until 1.130 and its NS ends at 4.130; round 0's scatter (posted by
// rank 1 at 0.065) then moves only after rank 1's NS: 4.130 to 4.195; round
// 1's scatter, posted at 4.130, moves when both are in their done: 4.195
// to 4.260.
TEST(Simulate, InCallsProgressDelaysPrefetchedExchanges) {
  Plan plan = twoRoundPlan();
  sim::Profile p = tinyProfile();
  sim::Result background = sim::simulate(plan, p, {3000, 128}, false);
  EXPECT_NEAR(background.stepSeconds, 3.130, 1e-12);
  p.backgroundProgress = false;
  sim::Result inCalls = sim::simulate(plan, p, {3000, 128}, true);
  EXPECT_NEAR(inCalls.stepSeconds, 4.260, 1e-12);
  EXPECT_NEAR(inCalls.ranks[1].nsSeconds, 3.0, 1e-12);
  for (const TraceEvent &e : inCalls.events)
    if (e.kind == TraceEvent::Kind::NewtonSchulz && e.rank == 1)
      EXPECT_NEAR(e.begin, 1.130, 1e-12);
}
