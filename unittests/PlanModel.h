//===- PlanModel.h - A small valid plan for the plan tests ------*- C++ -*-===//
#ifndef MUON_UNITTESTS_PLANMODEL_H
#define MUON_UNITTESTS_PLANMODEL_H

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
  plan.params.push_back({"w", "f32", true, 0, {{8, 4}, {{0}, {}}, {}, {}}});
  plan.params.push_back({"v", "f32", true, 0, {{8, 4}, {{0}, {}}, {}, {}}});
  plan.params.push_back({"b", "f32", false, 1, {{4}, {{}}, {}, {}}});
  plan.ns.coefficients.assign(5, {3.4445, -4.775, 2.0315});
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
  EXPECT_TRUE(schedulePlan(plan, options, error)) << error;
  EXPECT_TRUE(validatePlan(plan).empty()) << validatePlan(plan).str();
  return plan;
}

} // namespace muon

#endif // MUON_UNITTESTS_PLANMODEL_H
