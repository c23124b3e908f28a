//===- StateChecks.cpp - Loaded state, checked for sense -----------------===//
#include "StateChecks.h"

#include "muon/Runtime/MatrixStep.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>

namespace muon::runtime::statecut {
namespace {

/// firstImplausible for one rule. A block's values are tested without a
/// branch (their flags or-ed into a word: the loop vectorizes), and only a
/// block with a bad value is searched.
template <bool NonNegative>
int64_t firstImplausibleBy(const float *data, int64_t count) {
  constexpr int64_t kBlock = 1024;
  auto bad = [](uint32_t bits) -> uint32_t {
    uint32_t nonFinite = (bits & 0x7f800000u) == 0x7f800000u;
    // As unsigned: the sign bit set on anything but -0.
    return NonNegative ? nonFinite | (bits > 0x80000000u) : nonFinite;
  };
  for (int64_t start = 0; start < count; start += kBlock) {
    const int64_t end = std::min(count, start + kBlock);
    uint32_t any = 0;
    for (int64_t i = start; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, data + i, 4);
      any |= bad(bits);
    }
    if (!any)
      continue;
    for (int64_t i = start; i < end; ++i) {
      uint32_t bits;
      std::memcpy(&bits, data + i, 4);
      if (bad(bits))
        return i;
    }
  }
  return -1;
}

/// "[2, 3]": element `e` of the row-major `box` by its global index.
std::string elementText(const std::vector<Range> &box, int64_t e) {
  std::vector<int64_t> at(box.size());
  for (size_t d = box.size(); d-- > 0;) {
    at[d] = box[d].begin + e % box[d].size();
    e /= box[d].size();
  }
  std::string text = "[";
  for (size_t d = 0; d < at.size(); ++d)
    text += (d ? ", " : "") + std::to_string(at[d]);
  return text + "]";
}

/// Why `v` is refused: it is not finite, or it is below zero.
std::string problemWith(float v) {
  char number[32];
  std::snprintf(number, sizeof(number), "%g", static_cast<double>(v));
  return std::string(number) + (std::isfinite(v)
                                    ? ", below zero (a second moment never is)"
                                    : " (it must be finite)");
}

/// The slot a state called `state` is divided by the square root of
/// (ElementSlot::dividedBy), or null.
const char *divisorOf(const std::string &state) {
  for (const ElementSlot &slot : elementSlots())
    if (state == slot.name && slot.dividedBy)
      return slot.dividedBy;
  return nullptr;
}

/// The first element of `moment` beyond what its second moment `second`
/// allows (kFirstMomentRatio), or -1.
int64_t firstBeyondItsSecondMoment(const std::vector<float> &moment,
                                   const std::vector<float> &second) {
  // In blocks, as firstImplausibleBy: a branchless pass that vectorizes,
  // and a search only in a block with a bad value.
  constexpr int64_t kBlock = 1024;
  const int64_t count =
      static_cast<int64_t>(std::min(moment.size(), second.size()));
  auto beyond = [&](int64_t i) {
    return std::fabs(moment[i]) >
           static_cast<float>(kFirstMomentRatio) * std::sqrt(second[i]) +
               static_cast<float>(kFirstMomentFloor);
  };
  for (int64_t start = 0; start < count; start += kBlock) {
    const int64_t end = std::min(count, start + kBlock);
    bool any = false;
    for (int64_t i = start; i < end; ++i)
      any |= beyond(i);
    if (!any)
      continue;
    for (int64_t i = start; i < end; ++i)
      if (beyond(i))
        return i;
  }
  return -1;
}

/// A piece's first moments against their second moments (the values are
/// finite and the second moments not negative by then); with `only`, the
/// pairs it accepts both of. InvalidArgument naming the first one beyond.
Status checkFirstMoments(
    const StatePiece &piece, const std::string &what,
    const std::function<bool(const StatePiece &, const std::string &)> &only) {
  for (const auto &[name, data] : piece.states) {
    const char *divisor = divisorOf(name);
    auto second = divisor ? piece.states.find(divisor) : piece.states.end();
    if (second == piece.states.end() ||
        (only && !(only(piece, name) && only(piece, second->first))))
      continue;
    int64_t e = firstBeyondItsSecondMoment(data, second->second);
    if (e < 0)
      continue;
    char text[160];
    std::snprintf(text, sizeof(text),
                  " is %g, beyond what its %s (%g) allows: no run makes "
                  "|%s| above %g sqrt(%s) + %g, and the next update would "
                  "overflow",
                  static_cast<double>(data[e]), divisor,
                  static_cast<double>(second->second[e]), name.c_str(),
                  kFirstMomentRatio, divisor, kFirstMomentFloor);
    return invalidArgument(what + ": the " + name + " state of '" +
                           piece.param + "' at " + elementText(piece.box, e) +
                           text);
  }
  return okStatus();
}

} // namespace

bool mustBeNonNegative(const std::string &state) {
  // Slots of several algorithms may share a name: one that is a second
  // moment anywhere is refused below zero.
  bool slotNamed = false, nonNegative = false;
  for (const ElementSlot &slot : elementSlots())
    if (state == slot.name) {
      slotNamed = true;
      nonNegative |= slot.nonNegative;
    }
  if (slotNamed)
    return nonNegative;
  int step = matrixStepOfState(state);
  return step >= 0 && matrixSteps()[step].nonNegativeState;
}

int64_t firstImplausible(const float *data, int64_t count, bool nonNegative) {
  return nonNegative ? firstImplausibleBy<true>(data, count)
                     : firstImplausibleBy<false>(data, count);
}

std::string implausibleElement(const std::string &state,
                               const std::string &param,
                               const std::vector<Range> &box, int64_t e,
                               float value) {
  return "the " + state + " state of '" + param + "' at " +
         elementText(box, e) + " is " + problemWith(value);
}

std::string implausibleRow(const std::string &state, const std::string &param,
                           int64_t slice, int64_t row, float value) {
  return "the " + state + " state of '" + param + "' (matrix " +
         std::to_string(slice) + ") at row " + std::to_string(row) + " is " +
         problemWith(value);
}

Status checkStepCounts(const Plan &plan, const std::vector<Source> &sources,
                     int64_t steps, const std::string &what) {
  if (steps < 0) {
    return invalidArgument(what + ": the optimizer's step count is " + std::to_string(steps));
  }
  // Per parameter, the first piece that carries AdamW's step.
  std::map<int64_t, const Source *> stepOf;
  for (const Source &s : sources) {
    const std::string &name = plan.params[s.param].name;
    if (s.step < 0 || s.step > steps) {
      return invalidArgument(what + ": the piece " + boxText(s.box) + " of '" + name +
              "' has step " + std::to_string(s.step) + ", outside [0, " +
              std::to_string(steps) + "] (the optimizer's step count)");
    }
    bool carries = false;
    for (int slot = 0; slot < valuesSlot(); ++slot)
      carries |= s.has[slot] && elementSlots()[slot].carriesStep;
    if (!carries)
      continue;
    auto [it, first] = stepOf.emplace(s.param, &s);
    if (!first && it->second->step != s.step) {
      return invalidArgument(what + ": the pieces of '" + name +
          "' disagree on its step count: " + std::to_string(it->second->step) +
          " in " + boxText(it->second->box) + ", " + std::to_string(s.step) +
          " in " + boxText(s.box));
    }
  }
  return okStatus();
}

Status checkStateValues(
    const StateDict &local, const std::string &what,
    const std::function<bool(const StatePiece &, const std::string &)> &only) {
  for (const StatePiece &piece : local.pieces)
    for (const auto &[name, data] : piece.states) {
      if (only && !only(piece, name))
        continue;
      int64_t e =
          firstImplausible(data.data(), static_cast<int64_t>(data.size()),
                           mustBeNonNegative(name));
      if (e < 0)
        continue;
      return invalidArgument(what + ": " +
              implausibleElement(name, piece.param, piece.box, e, data[e]));
    }
  for (const StatePiece &piece : local.pieces)
    if (Status s = checkFirstMoments(piece, what, only); !s.ok())
      return s;
  if (only)
    return okStatus();
  for (const RowStatePiece &row : local.rowStates) {
    int64_t e = firstImplausible(row.values.data(),
                                 static_cast<int64_t>(row.values.size()),
                                 mustBeNonNegative(row.state));
    if (e < 0)
      continue;
    return invalidArgument(what + ": " +
            implausibleRow(row.state, row.param, row.slice, e, row.values[e]));
  }
  return okStatus();
}

} // namespace muon::runtime::statecut
