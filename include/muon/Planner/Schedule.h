//===- Schedule.h - Rounds and the overlapped step schedule -----*- C++ -*-===//
//
// Splits a plan's matrices into rounds and orders the step as one sequence of
// exchange starts, exchange dones and Newton-Schulz batches that every rank
// issues identically (collectives must be issued in the same order
// everywhere):
//
//  * Rounds: each owner spreads its matrices over R rounds, balancing its
//    NS work per round (largest first, to the round with least work on that
//    owner, ties to the earliest round). R is the largest number of matrices
//    any rank owns, capped by `maxRounds`, and raised when needed so that
//    the gathered matrices of the rounds in flight fit `gatherBudgetBytes`.
//    Round r gathers in exchange 2r and scatters in exchange 2r+1.
//  * Schedule: starts as early as the limits allow, dones as late as
//    possible (XLA's latency-hiding pattern): at most `prefetchCount + 1`
//    exchanges in flight, the gathered buffers of started-but-unscattered
//    rounds within the budget, gather r done before NS r, scatter r started
//    after NS r.
//  * async = false is the debug order of the seeds: one round per owning
//    rank, in rank order, each exchange done before anything else starts.
//
// These are the compiler's algorithms (plain C++, run by the passes); the
// runtime needs only the rules they keep (Plan/ScheduleVerifier.h).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLANNER_SCHEDULE_H
#define MUON_PLANNER_SCHEDULE_H

#include "muon/Plan/Plan.h"
#include "muon/Plan/ScheduleVerifier.h"
#include "muon/Support/Status.h"

#include <string>

namespace muon {

struct ScheduleOptions {
  int64_t prefetchCount = 1;
  bool async = true;
  int64_t maxRounds = 8;
  /// Bytes of gathered (full) matrices one rank may hold at once; 0: no limit.
  int64_t gatherBudgetBytes = 0;
};

/// Records the options (async, prefetch, in-flight limit, budget) in the plan
/// and splits it into rounds (see above). InvalidArgument when the budget
/// cannot be met (one matrix alone exceeds it) or the rounds exceed the
/// limits.
Status packRounds(Plan &plan, const ScheduleOptions &options);

/// Records the options as packRounds does and uses the given rounds (the
/// IR's) instead of packing its own; InvalidArgument when they are more
/// than the limits allow.
Status useRounds(Plan &plan, const ScheduleOptions &options,
                 std::vector<std::vector<int64_t>> rounds);

/// Uses the given rounds (each matrix in exactly one): re-buckets the
/// transfers into exchanges 2r / 2r+1 and forms each rank's NS batches
/// (per round, same-shape matrices of one Newton-Schulz configuration).
void setRounds(Plan &plan, std::vector<std::vector<int64_t>> rounds);

/// Builds the sequence of starts, dones and NS batches for the plan's rounds
/// under the limits recorded in the plan.
void sequenceSchedule(Plan &plan);

/// packRounds, then sequenceSchedule.
Status schedulePlan(Plan &plan, const ScheduleOptions &options);

} // namespace muon

#endif // MUON_PLANNER_SCHEDULE_H
