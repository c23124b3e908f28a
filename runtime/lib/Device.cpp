//===- Device.cpp - What the runtime needs from the hardware --------------===//
#include "muon/Runtime/Device.h"

#include <algorithm>
#include <cmath>

namespace muon::runtime {

double adjustedLr(const MuonSettings &s, int64_t rows, int64_t cols) {
  if (s.adjustLr == "match_rms_adamw")
    return s.lr * 0.2 * std::sqrt(static_cast<double>(std::max(rows, cols)));
  return s.lr * std::sqrt(std::max(1.0, static_cast<double>(rows) / cols));
}

} // namespace muon::runtime
