//===- PlanModel.h - A small valid plan for the plan tests ------*- C++ -*-===//
#ifndef MUON_UNITTESTS_PLANMODEL_H
#define MUON_UNITTESTS_PLANMODEL_H

#include "StatusTesting.h"
#include "muon/Plan/Plan.h"
#include "muon/Plan/Validate.h"
#include "muon/Planner/Schedule.h"

#include <gtest/gtest.h>

namespace muon {

/// Two 8x4 matrices FSDP-split over four ranks (two rows each), owned by
/// ranks 0 and 2, and a 1-D AdamW parameter replicated everywhere.
inline Plan planModel(int64_t maxRounds = 2) {
  Plan plan;
  plan.worldSize = 4;
  plan.distributed = true;
  plan.mesh.shape = {4};
  plan.params.push_back({"w", "f32", kMuon, 0, {{8, 4}, {{0}, {}}, {}, {}}});
  plan.params.push_back({"v", "f32", kMuon, 0, {{8, 4}, {{0}, {}}, {}, {}}});
  plan.params.push_back({"b", "f32", kAdamW, 1, {{4}, {{}}, {}, {}}});
  plan.ns.configs[0].coefficients.assign(5, {3.4445, -4.775, 2.0315});
  plan.matrices.push_back({"w", 0, -1, 8, 4, 0, nsFlops(8, 4, 5)});
  plan.matrices.push_back({"v", 1, -1, 8, 4, 2, nsFlops(8, 4, 5)});
  plan.nsMatrices = {{0}, {}, {1}, {}};
  Exchange gather{Exchange::Phase::Gather, 0, {}, {}};
  Exchange scatter{Exchange::Phase::Scatter, 0, {}, {}};
  for (int64_t k = 0; k < 2; ++k) {
    int64_t owner = 2 * k;
    for (int64_t r = 0; r < 4; ++r)
      if (r != owner) {
        gather.transfers.push_back({r, owner, k, {2 * r, 2 * r + 2}, {0, 4}, 0});
        scatter.transfers.push_back(
            {owner, r, k, {2 * r, 2 * r + 2}, {0, 4}, 0});
      }
  }
  plan.exchanges = {gather, scatter};
  std::string error;
  ScheduleOptions options;
  options.maxRounds = maxRounds;
  EXPECT_OK(schedulePlan(plan, options));
  EXPECT_TRUE(validatePlan(plan).ok()) << json::describe(validatePlan(plan));
  return plan;
}

/// A Newton-Schulz configuration unlike the default one in every field:
/// fewer steps, a table of its own, a larger eps.
inline NewtonSchulzConfig otherNsConfig() {
  return {3, {{4.0, -3.0, 0.6}, {3.5, -2.5, 0.5}, {3.0, -2.0, 0.4}}, 1e-6};
}

/// Two Muon groups with different Newton-Schulz configurations: "a"
/// (configuration 0, the default) with 8x4 matrices "w" and "u", "b"
/// (configuration 1, otherNsConfig) with the 8x4 matrix "v", all three
/// FSDP-split over four ranks and owned by rank 0, and a replicated 1-D
/// AdamW parameter. With one round, rank 0 has same-shape matrices of both
/// configurations to orthogonalize together.
inline Plan nsGroupsPlanModel(int64_t maxRounds = 1) {
  Plan plan;
  plan.worldSize = 4;
  plan.distributed = true;
  plan.mesh.shape = {4};
  plan.ns.configs[0].coefficients.assign(5, {3.4445, -4.775, 2.0315});
  plan.ns.configs.push_back(otherNsConfig());
  plan.groups = defaultGroups();
  PlanGroup b = plan.groups[0];
  b.name = "b";
  b.nsConfig = 1;
  plan.groups[0].name = "a";
  plan.groups.insert(plan.groups.begin() + 1, b);
  for (auto [name, group] :
       {std::pair<const char *, int64_t>{"w", 0}, {"v", 1}, {"u", 0}}) {
    const int64_t k = static_cast<int64_t>(plan.params.size());
    plan.params.push_back(
        {name, "f32", kMuon, group, {{8, 4}, {{0}, {}}, {}, {}}});
    const int64_t steps = plan.ns.configs[plan.groups[group].nsConfig].nsSteps;
    plan.matrices.push_back({name, k, -1, 8, 4, 0, nsFlops(8, 4, steps)});
  }
  plan.params.push_back({"bias", "f32", kAdamW, 2, {{4}, {{}}, {}, {}}});
  plan.nsMatrices = {{0, 1, 2}, {}, {}, {}};
  Exchange gather{Exchange::Phase::Gather, 0, {}, {}};
  Exchange scatter{Exchange::Phase::Scatter, 0, {}, {}};
  for (int64_t k = 0; k < 3; ++k)
    for (int64_t r = 1; r < 4; ++r) {
      gather.transfers.push_back({r, 0, k, {2 * r, 2 * r + 2}, {0, 4}, 0});
      scatter.transfers.push_back({0, r, k, {2 * r, 2 * r + 2}, {0, 4}, 0});
    }
  plan.exchanges = {gather, scatter};
  std::string error;
  ScheduleOptions options;
  options.maxRounds = maxRounds;
  EXPECT_OK(schedulePlan(plan, options));
  EXPECT_TRUE(validatePlan(plan).ok()) << json::describe(validatePlan(plan));
  return plan;
}

} // namespace muon

#endif // MUON_UNITTESTS_PLANMODEL_H
