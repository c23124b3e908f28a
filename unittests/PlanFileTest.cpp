//===- PlanFileTest.cpp - Reading a corrupted plan file -------------------===//
#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Schedule.h"

#include <gtest/gtest.h>

using namespace muon;

namespace {
/// One 4x4 matrix FSDP-split over two ranks, owned by rank 0.
std::string goodPlan() {
  Plan plan;
  plan.worldSize = 2;
  plan.distributed = true;
  plan.mesh.shape = {2};
  plan.params.push_back({"w", "f32", true, {{4, 4}, {{0}, {}}, {}, {}}});
  plan.muon.coefficients.assign(5, {3.4445, -4.775, 2.0315});
  plan.matrices.push_back({"w", 0, -1, 4, 4, 0, 100});
  plan.nsMatrices = {{0}, {}};
  plan.exchanges = {{Exchange::Phase::Gather, 0, {{1, 0, 0, {2, 4}, {0, 4}, 0}}},
                    {Exchange::Phase::Scatter, 0, {{0, 1, 0, {2, 4}, {0, 4}, 0}}}};
  std::string error;
  EXPECT_TRUE(schedulePlan(plan, {}, error)) << error;
  return renderPlan(plan);
}

std::string readError(const std::string &text) {
  Plan plan;
  std::string error;
  EXPECT_FALSE(parsePlan(text, plan, error));
  return error;
}

std::string replace(std::string text, const std::string &from,
                    const std::string &to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}
} // namespace

TEST(PlanFile, RoundTrip) {
  std::string text = goodPlan();
  Plan plan;
  std::string error;
  ASSERT_TRUE(parsePlan(text, plan, error)) << error;
  EXPECT_EQ(renderPlan(plan), text);
  // Rank 1 sends its two rows (8 elements) to rank 0 in the gather.
  RankExchangeView view = rankExchangeView(plan.exchanges[0], 1);
  ASSERT_EQ(view.send.size(), 1u);
  EXPECT_EQ(view.send[0].peer, 0);
  EXPECT_EQ(view.send[0].elements, 8);
}

TEST(PlanFile, ErrorsNameThePath) {
  std::string text = goodPlan();
  EXPECT_NE(readError("{").find("invalid JSON"), std::string::npos);
  EXPECT_NE(readError("[1]").find("<root>: expected an object"),
            std::string::npos);
  EXPECT_NE(readError(replace(text, "muon-plan/1", "muon-plan/9"))
                .find("format: expected \"muon-plan/1\""),
            std::string::npos);
  // A transfer whose box leaves the 4x4 matrix.
  EXPECT_NE(readError(replace(text, "[1,0,0,2,4,0,4,0]", "[1,0,0,2,5,0,4,0]"))
                .find("exchanges[0].transfers[0]: ranks, matrix or box out of "
                      "range"),
            std::string::npos);
  // Ready-made counts that disagree with the transfers.
  EXPECT_NE(readError(replace(text, "\"send\":[[0,8,0]]", "\"send\":[[0,9,0]]"))
                .find("ranks[1].exchanges[0].send: counts and offsets do not "
                      "match the transfers"),
            std::string::npos);
  // A schedule that breaks its rules is refused.
  EXPECT_NE(readError(replace(text, "[\"done\",0]", "[\"done\",1]"))
                .find("schedule: "),
            std::string::npos);
  EXPECT_NE(readError(replace(text, "\"world_size\":2", "\"world_size\":0"))
                .find("world_size: value 0 out of range"),
            std::string::npos);
}
