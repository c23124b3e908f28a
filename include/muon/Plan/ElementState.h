//===- ElementState.h - Per-element optimizer state slots -------*- C++ -*-===//
//
// The optimizer state kept per element of a rank's piece of a parameter
// (Muon's momentum, AdamW's moments), described once, beside the group
// settings (GroupSettings.h): the runtime's executor allocates each slot of
// a parameter's algorithm, state dicts and checkpoints carry the slots by
// their names, loading under another layout re-cuts them by their summand
// rule, and the simulator counts the bytes the elementwise steps move
// through them. A new per-element slot is a row here and the device
// arithmetic that reads it (muon/Runtime/ElementMath.h); the per-row state
// of whole matrices is the runtime's MatrixStep.h.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_ELEMENTSTATE_H
#define MUON_PLAN_ELEMENTSTATE_H

#include <iterator>
#include <string>
#include <string_view>

namespace muon {

struct ElementSlot {
  /// The slot's name in state dicts and checkpoints.
  const char *name;
  /// Which parameters keep it: Muon's, or AdamW's.
  bool muon;
  /// Linear in the gradient (momentum): a parameter whose gradient has
  /// several partial summands keeps one per summand, and the summands'
  /// slots add up to the slot of the summed gradient, so a load onto
  /// another number of summands gives summand 0 their total and the
  /// others zeros. Otherwise the slot is the same on every summand and any
  /// summand's copy loads.
  bool perSummand;
  /// Whether the piece's step count (AdamW's bias correction counts the
  /// steps each piece took) is taken from wherever this slot is loaded from.
  bool carriesStep;
  /// A second moment (a running mean of squares): a loaded value below
  /// zero is damage, refused like a NaN (every slot must be finite).
  bool nonNegative;
};

/// Every per-element slot, of both algorithms, in the order state dicts
/// list them.
inline constexpr ElementSlot kElementSlots[] = {
    {"momentum", /*muon=*/true, /*perSummand=*/true, /*carriesStep=*/false,
     /*nonNegative=*/false},
    {"exp_avg", /*muon=*/false, /*perSummand=*/false, /*carriesStep=*/true,
     /*nonNegative=*/false},
    {"exp_avg_sq", /*muon=*/false, /*perSummand=*/false,
     /*carriesStep=*/false, /*nonNegative=*/true},
};
inline constexpr int kElementSlotCount =
    static_cast<int>(std::size(kElementSlots));

/// The slots the executor hands to the devices' arithmetic, by index.
enum ElementSlotIndex : int { kMomentumSlot = 0, kExpAvgSlot, kExpAvgSqSlot };
static_assert(std::string_view(kElementSlots[kMomentumSlot].name) ==
                  "momentum" &&
              std::string_view(kElementSlots[kExpAvgSlot].name) == "exp_avg" &&
              std::string_view(kElementSlots[kExpAvgSqSlot].name) ==
                  "exp_avg_sq");

/// The index of the slot called `name`, or -1.
int elementSlotNamed(std::string_view name);
/// The slots' names for messages: "momentum, exp_avg, exp_avg_sq".
std::string elementSlotNames();

} // namespace muon

#endif // MUON_PLAN_ELEMENTSTATE_H
