//===- ElementState.cpp - Per-element optimizer state slots ---------------===//
#include "muon/Plan/ElementState.h"

#include "muon/Plan/Algorithm.h"

namespace muon {

const std::vector<ElementSlot> &elementSlots() {
  static const std::vector<ElementSlot> all = [] {
    std::vector<ElementSlot> slots;
    for (const Algorithm &a : algorithms())
      slots.insert(slots.end(), a.slots.begin(), a.slots.end());
    return slots;
  }();
  return all;
}

int elementSlotOf(AlgorithmId algorithm, std::string_view name) {
  const std::vector<ElementSlot> &slots = elementSlots();
  for (size_t s = 0; s < slots.size(); ++s)
    if (slots[s].algorithm == algorithm && name == slots[s].name)
      return static_cast<int>(s);
  return -1;
}

bool keepsSlot(const PlanGroup &g, const ElementSlot &slot) {
  return slot.algorithm == g.algorithm &&
         (!slot.enabledBy || g.flag(slot.enabledBy));
}

bool countsSteps(const PlanGroup &g) {
  for (const ElementSlot &slot : elementSlots())
    if (slot.carriesStep && keepsSlot(g, slot))
      return true;
  return false;
}

std::string elementSlotNames(AlgorithmId algorithm) {
  std::string names;
  for (const ElementSlot &slot : elementSlots())
    if (slot.algorithm == algorithm)
      names += (names.empty() ? "" : ", ") + std::string(slot.name);
  return names;
}

} // namespace muon
