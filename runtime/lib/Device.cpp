//===- Device.cpp - What the runtime needs from the hardware --------------===//
#include "muon/Runtime/Device.h"

#include <algorithm>
#include <cmath>

namespace muon::runtime {

double adjustedLr(const MuonSettings &s, int64_t rows, int64_t cols) {
  // The plan's reader and setGroupOptions accept only known names.
  return s.lr * adjustLrFactor(s.adjustLr, rows, cols);
}

} // namespace muon::runtime
