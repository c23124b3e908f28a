//===- StepLayout.h - What one rank runs of a plan's step -------*- C++ -*-===//
//
// One rank's side of a plan's step, derived from the plan: per exchange the
// rank's packed view (which boxes go to and come from which peer, where in
// the buffers), its Newton-Schulz batches by round, and where each matrix
// it orthogonalizes sits in its batch's buffer.
//
// A step whose ranks agreed that some parameters have no gradient (torch's
// `grad is None`) runs a layout filtered from the whole one: the matrices
// and AdamW reductions of those parameters are left out, so none of their
// bytes cross and no Newton-Schulz runs on them, while every exchange keeps
// its place in the schedule (one may then move nothing). Filtering costs
// O(this rank's transfers and batches), not a pass over the plan.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_STEPLAYOUT_H
#define MUON_RUNTIME_STEPLAYOUT_H

#include "muon/Plan/Plan.h"

#include <cstdint>
#include <map>
#include <vector>

namespace muon::runtime {

/// Where a gathered matrix lies: its batch, and its position in it (the
/// batch's matrices lie one after another in one buffer, so that a GPU
/// orthogonalizes them in one strided batched call).
struct BatchSlot {
  const NsBatch *batch = nullptr;
  int64_t index = 0;
};

class StepLayout {
public:
  StepLayout() = default;
  // The batch pointers point into `batches`: a copy would point into the
  // original.
  StepLayout(const StepLayout &) = delete;
  StepLayout &operator=(const StepLayout &) = delete;

  /// The whole step of `rank` in `plan`.
  static void derive(const Plan &plan, int64_t rank, StepLayout &out);
  /// `whole` without the parameters marked in `skipped` (one flag per plan
  /// parameter).
  static void filter(const Plan &plan, const StepLayout &whole,
                     const std::vector<bool> &skipped, StepLayout &out);

  /// Per exchange of the plan, this rank's side.
  std::vector<RankExchangeView> views;
  /// Per round, this rank's batches in issue order.
  std::vector<std::vector<const NsBatch *>> batchesByRound;
  /// Every matrix this rank orthogonalizes, by plan index.
  std::map<int64_t, BatchSlot> slotOf;

private:
  void indexBatches(size_t rounds);
  /// The batches `batchesByRound` and `slotOf` point into.
  std::vector<NsBatch> batches;
};

} // namespace muon::runtime

#endif // MUON_RUNTIME_STEPLAYOUT_H
