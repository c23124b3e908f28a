//===- StepExecutor.h - One rank's side of a compiled step ------*- C++ -*-===//
//
// Executes a plan (muon-plan/1) on one rank: owns the optimizer state of the
// rank's parameter pieces, and runs the plan's schedule step by step:
// momentum on local pieces, packed all-to-all-v gathers to the owners,
// Newton-Schulz on owned matrices, scatters of the new pieces, weight decay
// and the adjusted-lr update, and AdamW on summed gradients. Exchanges are
// started and waited for exactly where the schedule says, so they overlap
// the Newton-Schulz batches scheduled between them.
//
// The caller binds each local piece's parameter values and gradient (f32,
// row-major over the piece's box) and calls step() once gradients are ready.
// A step whose gradients hold NaN or Inf anywhere on any rank changes
// nothing.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_STEPEXECUTOR_H
#define MUON_RUNTIME_STEPEXECUTOR_H

#include "muon/Plan/Plan.h"
#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/NewtonSchulz.h"

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace muon::runtime {

/// What one step really did on this rank, counted as it happened.
struct StepCounters {
  int64_t bytesSent = 0, bytesReceived = 0; // payload to / from other ranks
  int64_t nsFlops = 0;
};

struct StepResult {
  bool applied = false;
  /// When not applied: the first parameter (plan order) whose gradient has a
  /// NaN or Inf on some rank, and the lowest such rank.
  int64_t nonFiniteParam = -1;
  int64_t nonFiniteRank = -1;
};

struct ExecutorOptions {
  /// Longest wait for any exchange or control collective.
  double timeoutSeconds = 120;
};

class StepExecutor {
public:
  StepExecutor(const Plan &plan, Communicator &comm,
               ExecutorOptions options = {});

  /// Checks that the plan fits the communicator and that every rank holds
  /// the same plan (a hash exchanged at start-up; mismatching ranks are
  /// named), and lays out the local pieces. Collective: every rank calls it.
  bool initialize(std::string &error);

  /// This rank's piece of parameter `param`: its box in the global tensor,
  /// and its element count (0: the rank holds nothing of it).
  const std::vector<Range> &localBox(int64_t param) const;
  int64_t localElements(int64_t param) const;
  /// The partial summand of the gradient this rank holds (0 if none).
  int64_t localSummand(int64_t param) const;

  /// Binds the piece's storage; both outlive the executor's steps.
  void bind(int64_t param, float *values, const float *grad);

  /// One optimizer step. Returns false with `error` on a fatal problem (a
  /// peer that does not answer in time, a transport failure); a skipped
  /// step for non-finite gradients is not an error (see `result`).
  bool step(StepResult &result, std::string &error);

  const StepCounters &counters() const { return lastCounters; }
  const Plan &plan() const { return planRef; }

private:
  struct LocalParam {
    std::vector<Range> box;
    int64_t elements = 0;
    int64_t summand = 0;
    float *values = nullptr;
    const float *grad = nullptr;
    std::vector<float> momentum, update, orthogonalized; // Muon
    std::vector<float> expAvg, expAvgSq, summedGrad;     // AdamW
    int64_t adamwStep = 0;
  };
  struct InFlight {
    std::vector<char> send, recv;
    PendingExchange pending;
  };

  /// Where matrix `k`'s piece sits in its parameter's local buffers: the
  /// element offset of its (row-major, rows x cols) block, and its global
  /// rows and cols. `offset` is -1 when this rank holds none of it.
  struct Piece {
    int64_t offset = -1;
    Range rows, cols;
    int64_t elements() const { return rows.size() * cols.size(); }
  };
  Piece piece(int64_t k) const;
  std::vector<float> &fullMatrix(int64_t k);
  bool startExchange(int64_t index, std::string &error);
  bool finishExchange(int64_t index, std::string &error);
  void runNewtonSchulz(int64_t round);
  void applyRound(int64_t round);
  void runAdamW();
  std::string describeExchange(int64_t index) const;

  const Plan &planRef;
  Communicator &comm;
  ExecutorOptions options;
  int64_t rank = 0;
  std::vector<LocalParam> locals;
  std::vector<RankExchangeView> views; // per exchange, this rank's side
  std::vector<std::vector<const NsBatch *>> batchesByRound;
  std::map<int64_t, std::vector<float>> full; // owned matrices being worked
  std::map<int64_t, InFlight> inFlight;
  NsWorkspace workspace;
  StepCounters lastCounters;
};

/// FNV-1a over a plan's canonical text: equal plans, equal hashes.
uint64_t planHash(const Plan &plan);

} // namespace muon::runtime

#endif // MUON_RUNTIME_STEPEXECUTOR_H
