//===- PlanFile.h - The plan file (muon-plan/1) -----------------*- C++ -*-===//
//
// A compiled step on disk: what a trainer that links only the runtime loads
// instead of running the compiler. JSON, versioned by its "format" key;
// docs/plan-format.md describes every key. The writer also records each
// rank's all-to-all-v counts and offsets (redundant with the transfers, for
// readers that want them ready-made); the reader checks them against the
// transfers.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_PLANFILE_H
#define MUON_PLAN_PLANFILE_H

#include "muon/Plan/Plan.h"
#include "muon/Support/Status.h"

#include <string>

namespace muon {

/// The plan file's text. Without `withGroupSettings`, the groups keep
/// their names and algorithms but not their hyper-parameters: what planHash
/// covers (ranks must agree on the exchanges, not on the learning rate).
std::string renderPlan(const Plan &plan, bool withGroupSettings = true);

/// Parses and checks a plan file: InvalidArgument with the JSON path of the
/// first problem as its location.
StatusOr<Plan> parsePlan(const std::string &text);

} // namespace muon

#endif // MUON_PLAN_PLANFILE_H
