//===- RootReport.h - Rank 0's end of a real run ----------------*- C++ -*-===//
//
// After the steps rank 0 holds every rank's record (RankRun), timeline and
// owned matrices, and with --verify every rank's parameters. It checks the
// measured figures against the plan, runs the single-device reference,
// simulates the plan when asked, writes the report and the trace, and
// prints the summary.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_TOOLS_MUON_RUN_ROOTREPORT_H
#define MUON_TOOLS_MUON_RUN_ROOTREPORT_H

#include "RunOptions.h"

#include "muon/Plan/Plan.h"
#include "muon/Runtime/DType.h"
#include "muon/Runtime/Testing/Synthetic.h"

#include <cstdint>
#include <string>
#include <vector>

namespace muon::tool {

/// What rank 0 gathered from every rank (one entry per rank, in rank
/// order): their RankRun records, timelines (with a trace), owned matrix
/// labels (one per line) and, with --verify, parameter values.
struct Gathered {
  std::vector<std::vector<char>> runs, traces, owned, pieces;
};

/// What the run was, beyond the plan and the flags.
struct RunFacts {
  std::vector<int64_t> skippedSteps;
  runtime::DType nsDtype = runtime::DType::F32;
  std::string nsDtypeReason; // Optimizer::nsDtypeReason
  std::string mpiProgress;
  std::vector<runtime::NonFiniteInjection> nonFinite;
};

/// Rank 0's end of the run; returns the process's exit code.
int finishAtRoot(const Plan &plan, const RunFlags &flags,
                 const RunFacts &facts, const Gathered &gathered);

/// Exit codes beyond the contract's 0/1/2: a run that failed.
inline constexpr int kRunFailed = 3;

/// "rank R: <error>" as muon-run prints it; a status that is a timeout
/// also names the flag that sets it.
std::string rankError(int64_t rank, const std::string &message);
std::string rankError(int64_t rank, const Status &status);

} // namespace muon::tool

#endif // MUON_TOOLS_MUON_RUN_ROOTREPORT_H
