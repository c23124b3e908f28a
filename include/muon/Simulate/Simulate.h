//===- Simulate.h - Predicted step time of a plan ---------------*- C++ -*-===//
//
// Walks a plan's schedule as every rank's executor does (runtime/lib/
// StepExecutor.cpp: the same steps in the same order, each rank with its own
// clock) on a machine described by a Profile, and predicts when each rank
// finishes the step. Plain C++ over muon::Plan (no MLIR): muon-run runs it
// on a compiled spec or on a plan file, in a runtime-only build too.
//
// The model (docs/performance.md has it in full):
//  - compute on a rank is sequential: momentum and updates at the memory
//    bandwidth, an exchange's packing inside its start and unpacking inside
//    its done, each NS batch at flops / matmul rate;
//  - an exchange is one all-to-all-v. Rank r's share of it can move once r
//    and every peer it sends to or receives from have started it; it then
//    occupies each of r's link directions (send and receive, on the
//    intra-node and the inter-node class separately) for latency + bytes /
//    bandwidth, after any earlier exchange's use of that direction (links
//    serve exchanges in start order). r's done returns when r's own
//    directions and the send directions of every peer sending to r are
//    through. With the profile's "background" progress, transfers move
//    while ranks compute (NCCL, a GPU's copy engines); with "in-calls"
//    (OpenMPI without a progress thread), a rank's share can move only from
//    the first time after posting that the rank is inside the transport
//    again: another start call, the poll after each NS matrix, or the done.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SIMULATE_SIMULATE_H
#define MUON_SIMULATE_SIMULATE_H

#include "muon/Plan/Plan.h"
#include "muon/Plan/Trace.h"
#include "muon/Simulate/Profile.h"

#include <vector>

namespace muon::sim {

struct RankTimes {
  double finishSeconds = 0;  // the rank's step ends
  double nsSeconds = 0;      // Newton-Schulz
  double elementwiseSeconds = 0; // momentum, updates, AdamW, pack, unpack
  double waitSeconds = 0;    // blocked in a done on an exchange
};

struct Result {
  /// The step ends when its slowest rank does.
  double stepSeconds = 0;
  std::vector<RankTimes> ranks;
  int64_t nodes = 1;
  /// The bound: max(compute, communication), each a lower bound on its own.
  double computeBoundSeconds = 0; // makespan flops / matmul rate
  double commBoundSeconds = 0;    // bytes / (ranks x per-rank bandwidth)
  double boundSeconds() const {
    return computeBoundSeconds > commBoundSeconds ? computeBoundSeconds
                                                  : commBoundSeconds;
  }
  std::vector<TraceEvent> events; // with `withEvents`
};

/// The lower bounds the simulation is set against (Planner/Bounds.h).
struct Bounds {
  int64_t makespanFlops = 0;
  int64_t bytesReceived = 0;
};

/// The NS rate the profile gives a plan (its ns_dtype, "auto" resolved to
/// the profile's default), before compute-slot sharing.
double nsFlopsPerSecond(const Plan &plan, const Profile &profile);

Result simulate(const Plan &plan, const Profile &profile,
                const Bounds &bounds, bool withEvents);

} // namespace muon::sim

#endif // MUON_SIMULATE_SIMULATE_H
