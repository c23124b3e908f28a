//===- Disagreement.h - What differs between the ranks' plans, settings ---===//
//
// The start-up agreement compares a hash of each rank's plan, a step's
// agreement a hash of each rank's group settings. Every rank compares the
// same gathered words, so where some rank differs every rank knows it, and
// all of them can afford one more collective to say what differs: each
// rank's outline of the plan or the settings, item by item ("parameter
// 'w'" -> "shape [4, 4], dtype f32, ..."), gathered, and the first item
// where a rank differs from rank 0 named with both values.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_LIB_DISAGREEMENT_H
#define MUON_RUNTIME_LIB_DISAGREEMENT_H

#include "muon/Plan/Plan.h"
#include "muon/Runtime/Communicator.h"

#include <string>
#include <utility>
#include <vector>

namespace muon::runtime {

/// (what, its value) items, in the order the plan or the groups hold them.
using Outline = std::vector<std::pair<std::string, std::string>>;

/// What a user decides of a plan: the world and mesh, the exchanges' and
/// Newton-Schulz's precisions and configurations, each group's algorithm
/// and plan-fixed settings, each parameter's shape, dtype, group and
/// layout, the QK-clip layers.
Outline planOutline(const Plan &plan);

/// Each group's algorithm and every setting of its algorithm.
Outline settingsOutline(const std::vector<PlanGroup> &groups);

/// One more collective: every rank's outline gathered; returns where the
/// first of `ranks` differs from rank 0 ("parameter 'w': shape [30, 16]
/// on rank 1, [32, 16] on rank 0"), or "" where the outlines agree.
StatusOr<std::string> describeDisagreement(Communicator &comm,
                                           const Outline &mine,
                                           const std::vector<int64_t> &ranks,
                                           double timeoutSeconds);

} // namespace muon::runtime

#endif // MUON_RUNTIME_LIB_DISAGREEMENT_H
