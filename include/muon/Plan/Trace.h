//===- Trace.h - A step's timeline as a Chrome/Perfetto trace ---*- C++ -*-===//
//
// One optimizer step as timed events per rank: the exchanges (from the
// start call to the end of the done call), the Newton-Schulz batches and
// the elementwise steps. Both a real run (the executor records them when
// asked) and the simulator (muon/Simulate) produce these, and both write
// them with renderTrace, so the two timelines can be laid side by side in
// Perfetto or chrome://tracing. Plain C++: the runtime links it.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_TRACE_H
#define MUON_PLAN_TRACE_H

#include "muon/Plan/Plan.h"

#include <cstdint>
#include <string>
#include <vector>

namespace muon {

/// One timed piece of a rank's step. Lane 0 is the rank's compute stream
/// (momentum, packing and unpacking inside the start and done calls, NS
/// batches, updates); lanes 1.. hold the exchanges in flight, one lane per
/// in-flight slot, so that overlapping exchanges never share a lane.
struct TraceEvent {
  enum class Kind { Exchange, NewtonSchulz, Momentum, ApplyUpdate, AdamW };
  Kind kind = Kind::Exchange;
  int64_t rank = 0;
  int64_t lane = 0;
  int64_t index = 0; // exchange for Exchange; round for NS / ApplyUpdate
  double begin = 0, end = 0; // seconds from the step's start on this rank
  // Exchange: this rank's payload; NS: the batch's shape, size and flops.
  int64_t bytesSent = 0, bytesReceived = 0;
  int64_t rows = 0, cols = 0, matrices = 0, flops = 0;
};

/// Picks the lane of each exchange as it starts: the lowest lane no
/// exchange in flight holds. Lanes count from 1 (0 is compute).
class TraceLanes {
public:
  int64_t start(int64_t exchange);
  /// The lane `exchange` held; frees it.
  int64_t done(int64_t exchange);

private:
  std::vector<int64_t> held; // held[l-1] = exchange on lane l, -1 free
};

/// The events as Chrome trace JSON ("traceEvents": one "X" complete event
/// each, pid = rank, tid = lane, ts and dur in microseconds; "M" metadata
/// naming the ranks and lanes). `source` ("measured" or "simulated:
/// PROFILE") goes into "otherData".
std::string renderTrace(const Plan &plan, const std::vector<TraceEvent> &events,
                        const std::string &source);

/// Per-rank events to bytes and back, for gathering them to rank 0.
std::vector<char> encodeTrace(const std::vector<TraceEvent> &events);
bool decodeTrace(const std::vector<char> &bytes,
                 std::vector<TraceEvent> &events);

} // namespace muon

#endif // MUON_PLAN_TRACE_H
