//===- Report.h - The run report (muon-report/1) ----------------*- C++ -*-===//
//
// The output of the spec contract (spec-format.md, section 2): for dry runs
// the plan's own figures, for real runs the figures the runtime counted.
// Written with Support/OutputFile (atomically, never over an input).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_REPORT_H
#define MUON_PLAN_REPORT_H

#include "muon/Plan/Plan.h"

#include <optional>
#include <string>
#include <vector>

namespace muon {

struct SecondsStats {
  double median = 0, min = 0, max = 0;
};

/// The simulator's prediction for the plan (muon-run --simulate PROFILE;
/// muon/Simulate), set against the bound max(compute, communication).
struct SimulationFigures {
  std::string profile;     // its name
  std::string profileFile; // the file it came from
  std::string nsDtype;     // what NS was timed in ("auto" resolved)
  int64_t ranksPerNode = 8, nodes = 1;
  double nsFlopsPerSecond = 0;
  double stepSeconds = 0;
  double computeBoundSeconds = 0, commBoundSeconds = 0, boundSeconds = 0;
  struct Rank {
    double finishSeconds = 0, nsSeconds = 0, elementwiseSeconds = 0,
           waitSeconds = 0;
  };
  std::vector<Rank> perRank;
};

/// Where Newton-Schulz runs (Placement.h): matrices orthogonalized once and
/// once per replica, and, on a machine, the predicted seconds the Muon
/// matrices add to a rank's step with every replicated matrix once, every
/// one redundant, and as the plan chose.
struct PlacementFigures {
  int64_t matricesOnce = 0, matricesRedundant = 0;
  /// Matrices that have more than one replica (the ones a policy decides).
  int64_t matricesReplicated = 0;
  std::string profile; // empty: no machine, no predictions
  double onceSeconds = 0, redundantSeconds = 0, chosenSeconds = 0;
};

struct Report {
  int64_t worldSize = 1;
  std::string wireDtype = "f32";
  int64_t steps = 0;
  std::optional<bool> verified;     // null for a dry run
  std::optional<double> maxAbsDiff; // null for a dry run
  std::vector<RankFigures> perRank;
  std::vector<std::optional<double>> rankMedianSeconds; // null: not measured
  /// Real runs: each rank's most optimizer working memory over its steps
  /// (state, exchange and Newton-Schulz buffers) and the plan's bound on it.
  std::vector<int64_t> rankPeakWorkingBytes, rankWorkingBytesBound;
  int64_t lowerBoundBytesReceived = 0;
  int64_t lowerBoundMakespanFlops = 0;
  std::optional<SecondsStats> stepSeconds; // null for a dry run
  // Additions to the contract (it may only grow), for real runs:
  /// Steps skipped because a gradient held NaN or Inf (0-based).
  std::vector<int64_t> skippedSteps;
  /// Micro-batches accumulated before each step.
  int64_t microBatches = 1;
  /// The element type Newton-Schulz runs in: the plan's setting ("auto"
  /// in a dry run of a model that leaves it to the device), or what the
  /// ranks of a real run used.
  std::string nsDtype = "auto";
  /// A real run: why Newton-Schulz ran in nsDtype ("bf16: its products run
  /// at 2.14x f32's here (...)", "f32: the plan's ns_dtype"); empty, and
  /// absent from the JSON, in a dry run.
  std::string nsDtypeReason;
  /// Where a real run's ranks computed ("cpu" or "cuda"); empty in a dry
  /// run.
  std::string backend;
  /// Who advanced MPI exchanges in flight while rank 0 computed ("thread"
  /// or "calls", muon-run --mpi-progress); empty in a dry run and where no
  /// MPI exchange ran (one rank, or NCCL).
  std::string mpiProgress;
  /// With --simulate: the prediction ("simulation", and "simulated" in
  /// each per_rank entry); absent otherwise.
  std::optional<SimulationFigures> simulation;
  /// Written where the plan has redundant matrices or a placement was
  /// asked for (muon-run --placement, --placement-profile); absent
  /// otherwise, so that other reports keep their text.
  std::optional<PlacementFigures> placement;
};

/// A plan's own figures as a report (what a dry run writes): per-rank NS
/// flops, bytes and owned matrices from the plan. The lower bounds are the
/// compiler's to fill in (Planner/Bounds.h). A real run starts from it and
/// replaces the figures with measured ones.
Report planReport(const Plan &plan);

/// The report as pretty-printed JSON text.
std::string renderReport(const Report &report);

} // namespace muon

#endif // MUON_PLAN_REPORT_H
