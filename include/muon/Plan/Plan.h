//===- Plan.h - A compiled Muon step, as the runtime sees it ----*- C++ -*-===//
//
// The plan of one optimizer step for every rank: which rank owns (runs
// Newton-Schulz on) each Muon matrix, and the exchanges that gather each
// matrix to its owner and hand every holder its new piece. Plain C++ (no
// MLIR): the compiler fills it, the runtime executes it, and both count
// traffic from it the same way.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_PLAN_H
#define MUON_PLAN_PLAN_H

#include "muon/Support/Layout.h"

#include <cstdint>
#include <string>
#include <vector>

namespace muon {

/// One Muon matrix: a 2-D parameter or one slice of a batched one.
struct PlanMatrix {
  std::string param;
  int64_t slice = -1; // -1 for a 2-D parameter
  int64_t rows = 0, cols = 0;
  int64_t owner = -1; // -1: no distributed config, every holder runs NS
  int64_t nsFlops = 0;
  /// "param" or "param[slice]".
  std::string label() const;
};

/// A box of one matrix moving between two ranks. In a gather it is one
/// partial summand of a piece, bound for the owner; in a scatter it is a
/// holder's new piece, sent by the owner.
struct Transfer {
  int64_t src = 0, dst = 0;
  int64_t matrix = 0; // index into Plan::matrices
  Range rows, cols;
  int64_t summand = 0;
  int64_t elements() const { return rows.size() * cols.size(); }
};

/// One packed exchange: everything that moves in one round of one phase
/// goes in a single all-to-all-v over the world communicator.
struct Exchange {
  enum class Phase { Gather, Scatter };
  Phase phase = Phase::Gather;
  int64_t round = 0;
  std::vector<Transfer> transfers;
};

/// One entry of the step's sequence, identical on every rank.
struct ScheduleStep {
  enum class Kind { Start, Done, NewtonSchulz };
  Kind kind = Kind::Start;
  int64_t index = 0; // exchange index for Start/Done, round for NewtonSchulz
};

/// Same-shape matrices a rank orthogonalizes together in one round.
struct NsBatch {
  int64_t round = 0;
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> matrices;
};

struct Plan {
  static constexpr int kVersion = 1;
  int64_t worldSize = 1;
  std::string wireDtype = "f32";
  int64_t wireBytes = 4;
  /// False when the model has no distributed config: nothing moves and
  /// every holder orthogonalizes what it holds.
  bool distributed = false;
  std::vector<PlanMatrix> matrices;
  std::vector<Exchange> exchanges;
  /// Matrices each rank orthogonalizes; with no distributed config, every
  /// holder of a matrix (redundant, as the single-device algorithm does).
  std::vector<std::vector<int64_t>> nsMatrices;

  // Filled by schedulePlan (Schedule.h).
  /// Matrices of each round (all owners).
  std::vector<std::vector<int64_t>> rounds;
  /// Per rank, its NS batches in issue order.
  std::vector<std::vector<NsBatch>> nsBatches;
  std::vector<ScheduleStep> schedule;
  int64_t prefetchCount = 0;
  int64_t inflightLimit = 1;
  int64_t gatherBudgetBytes = 0;
  bool async = true;
};

/// Per-rank figures of the run report, counted from the plan's transfers.
struct RankFigures {
  int64_t nsFlops = 0;
  int64_t bytesSent = 0;
  int64_t bytesReceived = 0;
  std::vector<std::string> owned;
};
std::vector<RankFigures> computeRankFigures(const Plan &plan);

/// Bytes per element of a wire dtype ("f32" 4, "bf16" 2); 0 if unknown.
int64_t wireDtypeBytes(const std::string &dtype);

} // namespace muon

#endif // MUON_PLAN_PLAN_H
