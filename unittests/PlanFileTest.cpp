//===- PlanFileTest.cpp - Reading and validating plan files ---------------===//
#include "StatusTesting.h"
#include "PlanModel.h"

#include "PlanRead.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Validate.h"
#include "muon/Planner/Schedule.h"

#include <gtest/gtest.h>

using namespace muon;

namespace {
/// One 8x4 matrix FSDP-split over four ranks (two rows each), owned by
/// rank 0, and a 1-D AdamW parameter replicated everywhere.
Plan goodPlanModel() {
  Plan plan;
  plan.worldSize = 4;
  plan.distributed = true;
  plan.mesh.shape = {4};
  plan.params.push_back({"w", "f32", kMuon, 0, {{8, 4}, {{0}, {}}, {}, {}}});
  plan.params.push_back({"b", "f32", kAdamW, 1, {{4}, {{}}, {}, {}}});
  plan.ns.configs[0].coefficients.assign(5, {3.4445, -4.775, 2.0315});
  plan.matrices.push_back({"w", 0, -1, 8, 4, 0, nsFlops(8, 4, 5)});
  plan.nsMatrices = {{0}, {}, {}, {}};
  Exchange gather{Exchange::Phase::Gather, 0, {}, {}};
  Exchange scatter{Exchange::Phase::Scatter, 0, {}, {}};
  for (int64_t r = 1; r < 4; ++r) {
    gather.transfers.push_back({r, 0, 0, {2 * r, 2 * r + 2}, {0, 4}, 0});
    scatter.transfers.push_back({0, r, 0, {2 * r, 2 * r + 2}, {0, 4}, 0});
  }
  plan.exchanges = {gather, scatter};
  std::string error;
  EXPECT_OK(schedulePlan(plan, {}));
  return plan;
}

std::string goodPlan() { return renderPlan(goodPlanModel()); }

std::string readError(const std::string &text) {
  Plan plan;
  std::string error;
  EXPECT_FALSE(take(parsePlan(text), plan, error)) << text;
  return error;
}

std::string replace(std::string text, const std::string &from,
                    const std::string &to) {
  size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

#define EXPECT_CONTAINS(haystack, needle)                                      \
  EXPECT_NE((haystack).find(needle), std::string::npos)                        \
      << "'" << (haystack) << "' lacks '" << (needle) << "'"
} // namespace

TEST(PlanFile, ErrorsCarryTheirJsonPathAsTheLocation) {
  const std::string text = goodPlan();
  StatusOr<Plan> bad =
      parsePlan(replace(text, "\"send\":[[0,8,0]]", "\"send\":[[0,9,0]]"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::InvalidArgument);
  EXPECT_EQ(bad.status().location(), "ranks[1].exchanges[0].send");
  EXPECT_EQ(bad.status().message(),
            "counts and offsets do not match the transfers");
  StatusOr<Plan> world =
      parsePlan(replace(text, "\"world_size\":4", "\"world_size\":0"));
  ASSERT_FALSE(world.ok());
  EXPECT_EQ(world.status().location(), "world_size");
  StatusOr<Plan> notJson = parsePlan("{\"format\": ");
  ASSERT_FALSE(notJson.ok());
  EXPECT_EQ(notJson.status().code(), StatusCode::InvalidArgument);
}

TEST(PlanFile, RoundTrip) {
  std::string text = goodPlan();
  Plan plan;
  std::string error;
  ASSERT_TRUE(take(parsePlan(text), plan, error)) << error;
  EXPECT_EQ(renderPlan(plan), text);
  // Rank 1 sends its two rows (8 elements) to rank 0 in the gather.
  RankExchangeView view = rankExchangeView(plan.exchanges[0], 1);
  ASSERT_EQ(view.send.size(), 1u);
  EXPECT_EQ(view.send[0].peer, 0);
  EXPECT_EQ(view.send[0].elements, 8);
}

TEST(PlanFile, ErrorsNameThePath) {
  std::string text = goodPlan();
  EXPECT_CONTAINS(readError("{"), "<root>: invalid JSON");
  EXPECT_CONTAINS(readError("[1]"), "<root>: expected an object");
  EXPECT_CONTAINS(readError(replace(text, "muon-plan/1", "muon-plan/9")),
                  "format: expected \"muon-plan/1\"");
  // Ready-made counts that disagree with the transfers.
  EXPECT_CONTAINS(
      readError(replace(text, "\"send\":[[0,8,0]]", "\"send\":[[0,9,0]]")),
      "ranks[1].exchanges[0].send: counts and offsets do not match the "
      "transfers");
  // A schedule that breaks its rules is refused.
  EXPECT_CONTAINS(readError(replace(text, "[\"done\",0]", "[\"done\",1]")),
                  "schedule: ");
  EXPECT_CONTAINS(readError(replace(text, "\"world_size\":4", "\"world_size\":0")),
                  "world_size: expected an integer >= 1, got 0");
}

TEST(PlanFile, StrictJson) {
  std::string text = goodPlan();
  EXPECT_CONTAINS(readError(replace(text, "\"world_size\":4",
                                    "\"world_size\":4,\"world_size\":4")),
                  "<root>: key 'world_size' is given twice");
  EXPECT_CONTAINS(readError(replace(text, "\"world_size\":4",
                                    "\"world_size\":4,\"extra\":1")),
                  "extra: unknown key 'extra'");
  EXPECT_CONTAINS(readError(replace(text, "\"world_size\":4",
                                    "\"world_size\":4.0")),
                  "world_size: expected an integer, got a fraction");
  EXPECT_CONTAINS(readError(replace(text, "\"world_size\":4",
                                    "\"world_size\":+4")),
                  "invalid JSON");
  EXPECT_CONTAINS(readError(replace(text, "\"world_size\":4",
                                    "\"world_size\":9007199254740992")),
                  "world_size: 9007199254740992 is above the limit of 2^16 "
                  "(65536) ranks");
  EXPECT_CONTAINS(readError(std::string(100000, '[')),
                  "nest deeper than the limit of 64 levels");
}

TEST(PlanFile, EnumsAreClosedSets) {
  std::string text = goodPlan();
  EXPECT_CONTAINS(
      readError(replace(text, "\"group\":\"adamw\"", "\"group\":\"sgd\"")),
      "params[1].group: no group named \"sgd\"");
  EXPECT_CONTAINS(readError(replace(text, "\"dtype\":\"f32\"",
                                    "\"dtype\":\"f64\"")),
                  "params[0].dtype: unknown value \"f64\"");
  EXPECT_CONTAINS(readError(replace(text, "\"phase\":\"gather\"",
                                    "\"phase\":\"gatherr\"")),
                  "exchanges[0].phase: unknown value \"gatherr\"");
  EXPECT_CONTAINS(readError(replace(text, "[\"momentum\",0]",
                                    "[\"momentun\",0]")),
                  "schedule[0][0]: unknown value \"momentun\"");
}

// Each of these made ranks read or write out of bounds before the plan was
// checked against itself.
TEST(PlanFile, ThePlanMustAgreeWithItself) {
  std::string text = goodPlan();
  // A parameter's rows.
  EXPECT_CONTAINS(readError(replace(text, "\"shape\":[8,4]",
                                    "\"shape\":[9,4]")),
                  "matrices[0]: expected matrix 0 of parameter 0 ('w'): "
                  "slice -1, 9 x 4");
  EXPECT_CONTAINS(readError(replace(text, "\"rows\":8,\"cols\":4,\"owner\"",
                                    "\"rows\":80,\"cols\":4,\"owner\"")),
                  "matrices[0]: expected matrix 0 of parameter 0 ('w')");
  // A box bound.
  EXPECT_CONTAINS(readError(replace(text, "[2,0,0,4,6,0,4,0]",
                                    "[2,0,0,4,7,0,4,0]")),
                  "exchanges[0].transfers[1]: rank 2 does not hold rows [4, "
                  "7) cols [0, 4) summand 0 of 'w'");
  // A split axis listed twice.
  EXPECT_CONTAINS(readError(replace(text, "\"split\":[[0],[]]",
                                    "\"split\":[[0],[0]]")),
                  "params[0].split[1][0]: mesh axis 0 is used twice (split of "
                  "dim 0 and split of dim 1)");
  // A moved transfer source.
  EXPECT_CONTAINS(readError(replace(text, "[2,0,0,4,6,0,4,0]",
                                    "[3,0,0,4,6,0,4,0]")),
                  "exchanges[0].transfers[1]: rank 3 does not hold rows [4, "
                  "6)");
  // A deleted NS batch entry.
  EXPECT_CONTAINS(readError(replace(text, "\"matrices\":[0]}",
                                    "\"matrices\":[]}")),
                  "ranks[0].ns_batches: matrix 'w' is missing: rank 0 owns "
                  "it");
  // An owner that holds nothing of the matrix cannot be one.
  EXPECT_CONTAINS(readError(replace(text, "\"owner\":0", "\"owner\":7")),
                  "matrices[0].owner: expected a rank in [0, 3]");
  // A scatter to a rank twice, and a holder left without its piece.
  EXPECT_CONTAINS(readError(replace(text, "[0,3,0,6,8,0,4,0]",
                                    "[0,2,0,4,6,0,4,0]")),
                  "exchanges[1].transfers[2]: scatters 'w' to rank 2 twice");
  // A gather of a piece the owner has.
  EXPECT_CONTAINS(readError(replace(text, "[1,0,0,2,4,0,4,0]",
                                    "[1,0,0,0,2,0,4,0]")),
                  "rank 1 does not hold rows [0, 2)");
  // A device table that is not a permutation.
  EXPECT_CONTAINS(readError(replace(text, "\"devices\":[]",
                                    "\"devices\":[0,1,1,3]")),
                  "mesh: the device table names rank 1 twice");
  // Optimizer settings.
  EXPECT_CONTAINS(
      readError(replace(text, "\"ns_steps\":5", "\"ns_steps\":6")),
      "newton_schulz.ns_coefficients: expected one [a, b, c] per NS "
      "step (6)");
  EXPECT_CONTAINS(readError(replace(text, "\"inflight_limit\":2",
                                    "\"inflight_limit\":9223372036854775807")),
                  "inflight_limit: expected prefetch_count + 1 = 2");
}

TEST(PlanFile, ValidatorAcceptsWhatTheSchedulerBuilds) {
  Plan plan = goodPlanModel();
  for (int mode = 0; mode < 4; ++mode) {
    ScheduleOptions options;
    options.async = mode != 3;
    options.prefetchCount = mode == 3 ? 0 : mode;
    std::string error;
    ASSERT_OK(schedulePlan(plan, options));
    EXPECT_TRUE(validatePlan(plan).ok()) << json::describe(validatePlan(plan));
  }
}

TEST(PlanFile, OneNewtonSchulzConfigurationIsWrittenAsBefore) {
  // The flat form every plan had before configurations: no "configs", no
  // group or batch index.
  const std::string text = goodPlan();
  EXPECT_CONTAINS(text, "\"newton_schulz\":{\"ns_steps\":5,"
                        "\"ns_coefficients\":[[3.4445,-4.775,2.0315],");
  EXPECT_CONTAINS(text, "\"eps\":1e-07,\"ns_dtype\":\"auto\"}");
  for (const char *key : {"\"configs\"", "\"ns_config\"", "\"config\""})
    EXPECT_EQ(text.find(key), std::string::npos) << key;
}

TEST(PlanFile, SeveralNewtonSchulzConfigurationsRoundTrip) {
  const Plan plan = nsGroupsPlanModel();
  const std::string text = renderPlan(plan);
  EXPECT_CONTAINS(text, "\"newton_schulz\":{\"configs\":[{\"ns_steps\":5,");
  EXPECT_CONTAINS(text, "\"name\":\"a\",\"algorithm\":\"muon\","
                        "\"ns_config\":0,");
  EXPECT_CONTAINS(text, "\"name\":\"b\",\"algorithm\":\"muon\","
                        "\"ns_config\":1,");
  EXPECT_CONTAINS(text, "{\"round\":0,\"config\":1,\"rows\":8,\"cols\":4,"
                        "\"matrices\":[1]}");
  Plan back;
  std::string error;
  ASSERT_TRUE(take(parsePlan(text), back, error)) << error;
  ASSERT_EQ(back.ns.configs.size(), 2u);
  EXPECT_EQ(back.ns.configs[0], plan.ns.configs[0]);
  EXPECT_EQ(back.ns.configs[1], otherNsConfig());
  EXPECT_EQ(back.groups[1].nsConfig, 1);
  EXPECT_EQ(back.nsBatches[0][1].config, 1);
  EXPECT_EQ(renderPlan(back), text);
  // The NS flops follow each matrix's group: "v" runs 3 steps, "w" 5.
  EXPECT_EQ(back.matrices[1].nsFlops, nsFlops(8, 4, 3));
  EXPECT_EQ(back.matrices[0].nsFlops, nsFlops(8, 4, 5));
}

TEST(PlanFile, NewtonSchulzConfigurationIndicesAreChecked) {
  const std::string text = renderPlan(nsGroupsPlanModel());
  EXPECT_CONTAINS(
      readError(replace(text, "\"ns_config\":1", "\"ns_config\":2")),
      "groups[1].ns_config: Newton-Schulz configuration 2 is out "
      "of range (2 configurations)");
  EXPECT_CONTAINS(
      readError(replace(text, "\"ns_config\":1", "\"ns_config\":-1")),
      "groups[1].ns_config: expected an integer >= 0, got -1");
  EXPECT_CONTAINS(readError(replace(text, "\"config\":1", "\"config\":7")),
                  "ranks[0].ns_batches[1].config: no Newton-Schulz "
                  "configuration 7 (2 configurations)");
  // A batch that would run 'v' with the other group's coefficients.
  EXPECT_CONTAINS(readError(replace(text, "\"config\":1", "\"config\":0")),
                  "ranks[0].ns_batches[1].matrices[0]: matrix 'v' runs "
                  "Newton-Schulz configuration 1 (group 'b'), not the batch's "
                  "0");
  // Moving a group to the other configuration changes its matrices' flops.
  EXPECT_CONTAINS(
      readError(replace(text, "\"ns_config\":1", "\"ns_config\":0")),
      "matrices[1]: expected matrix 0 of parameter 1 ('v'): "
      "slice -1, 8 x 4, " +
          std::to_string(nsFlops(8, 4, 5)) + " NS flops");
  EXPECT_CONTAINS(
      readError(replace(text, "\"name\":\"adamw\",\"algorithm\":\"adamw\"",
                        "\"name\":\"adamw\",\"algorithm\":"
                        "\"adamw\",\"ns_config\":0")),
      "groups[2].ns_config: only Muon groups run Newton-Schulz");
  // One form or the other, and each configuration checked where it is.
  EXPECT_CONTAINS(
      readError(replace(text, "{\"configs\":", "{\"eps\":0.1,\"configs\":")),
      "newton_schulz.eps: not allowed with \"configs\"");
  EXPECT_CONTAINS(
      readError(replace(text, "{\"ns_steps\":3,", "{\"ns_steps\":4,")),
      "newton_schulz.configs[1].ns_coefficients: expected one "
      "[a, b, c] per NS step (4)");
  EXPECT_CONTAINS(
      readError(replace(text, "{\"ns_steps\":3,", "{\"ns_steps\":3,\"lr\":1,")),
      "newton_schulz.configs[1].lr: unknown key 'lr'");
}
