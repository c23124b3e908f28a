//===- ElementState.cpp - Per-element optimizer state slots ---------------===//
#include "muon/Plan/ElementState.h"

namespace muon {

int elementSlotNamed(std::string_view name) {
  for (int s = 0; s < kElementSlotCount; ++s)
    if (name == kElementSlots[s].name)
      return s;
  return -1;
}

std::string elementSlotNames() {
  std::string names;
  for (const ElementSlot &slot : kElementSlots)
    names += (names.empty() ? "" : ", ") + std::string(slot.name);
  return names;
}

} // namespace muon
