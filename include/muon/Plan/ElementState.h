//===- ElementState.h - Per-element optimizer state slots -------*- C++ -*-===//
//
// The optimizer state kept per element of a rank's piece of a parameter
// (Muon's momentum, AdamW's moments), described once, beside the group
// settings (GroupSettings.h), and registered with its algorithm
// (Algorithms.cpp): each slot says which algorithm keeps it and which of
// the algorithm's settings turns it on. The runtime's executor allocates
// the slots a parameter's group keeps and hands them to the algorithm's
// per-element steps in this order (muon/Runtime/ElementStep.h); state
// dicts and checkpoints carry them by their names; loading under another
// layout re-cuts them by their summand rule; the simulator counts the bytes
// the element steps move through them. The per-row state of whole matrices
// is the runtime's MatrixStep.h.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_ELEMENTSTATE_H
#define MUON_PLAN_ELEMENTSTATE_H

#include "muon/Plan/Plan.h"

#include <string>
#include <string_view>
#include <vector>

namespace muon {

struct ElementSlot {
  /// The slot's name in state dicts and checkpoints (unique among its
  /// algorithm's slots; two algorithms may both have an "exp_avg").
  const char *name;
  /// A fixed flag of its algorithm's settings that makes a group keep the
  /// slot; null: every group of the algorithm keeps it.
  const char *enabledBy = nullptr;
  /// Linear in the gradient (momentum): a parameter whose gradient has
  /// several partial summands keeps one per summand, and the summands'
  /// slots add up to the slot of the summed gradient, so a load onto
  /// another number of summands gives summand 0 their total and the
  /// others zeros. Otherwise the slot is the same on every summand and any
  /// summand's copy loads.
  bool perSummand = false;
  /// Whether the piece's step count (AdamW's bias correction counts the
  /// steps each piece took) is taken from wherever this slot is loaded from.
  bool carriesStep = false;
  /// A second moment (a running mean of squares): a loaded value below
  /// zero is damage, refused like a NaN (every slot must be finite).
  bool nonNegative = false;
  /// A first moment that the step divides by the square root of another
  /// slot of its algorithm, named here (AdamW's exp_avg by exp_avg_sq):
  /// no run makes one beyond kFirstMomentRatio x sqrt(that slot) +
  /// kFirstMomentFloor (StateChecks), and a loaded one that is would make
  /// the next update overflow. Null: none.
  const char *dividedBy = nullptr;

  /// Filled by the registry (algorithms()): the algorithm that keeps it.
  AlgorithmId algorithm = kMuon;
};

/// The bound a first moment keeps against its second (dividedBy). In a run
/// whose beta1 is below sqrt(beta2), each step scales |m| / sqrt(v) by at
/// most beta1 / sqrt(beta2) and adds at most (1 - beta1) / sqrt(1 - beta2),
/// so the ratio stays below (1 - beta1) / sqrt(1 - beta2) / (1 - beta1 /
/// sqrt(beta2)): 32 at torch's betas, 100 at (0.99, 0.9999). The floor
/// covers second moments that underflow to 0 in float32 (gradients below
/// 4e-23), whose first moments stay below it.
inline constexpr double kFirstMomentRatio = 1e4;
inline constexpr double kFirstMomentFloor = 1e-20;

/// Every slot of every algorithm, in registry order: the order state
/// dicts list them, and each algorithm's the order its steps take them.
const std::vector<ElementSlot> &elementSlots();
/// The index in elementSlots() of `algorithm`'s slot called `name`, or -1.
int elementSlotOf(AlgorithmId algorithm, std::string_view name);
/// Whether groups like `g` keep slot `slot`: a slot of g's algorithm, and
/// its flag on.
bool keepsSlot(const PlanGroup &g, const ElementSlot &slot);
/// Whether any slot a group of `g`'s algorithm keeps carries the step
/// count (AdamW's pieces count their steps).
bool countsSteps(const PlanGroup &g);
/// `algorithm`'s slots' names for messages: "exp_avg, exp_avg_sq".
std::string elementSlotNames(AlgorithmId algorithm);

} // namespace muon

#endif // MUON_PLAN_ELEMENTSTATE_H
