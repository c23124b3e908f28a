//===- PlanRead.h - The plan readers' results as the tests check them -----===//
#ifndef MUON_UNITTESTS_PLANREAD_H
#define MUON_UNITTESTS_PLANREAD_H

#include "muon/Plan/Plan.h"
#include "muon/Support/Status.h"

#include <string>
#include <utility>

namespace muon {

/// A reader's result (parsePlan, parsePlanBinary, parsePlanSlice,
/// loadPlanSlice): true with the plan in `out`, or false with the status's
/// text in `error` (and its code in `code`, when asked).
inline bool take(StatusOr<Plan> result, Plan &out, std::string &error,
                 StatusCode *code = nullptr) {
  error = result.status().text();
  if (code)
    *code = result.status().code();
  if (!result.ok())
    return false;
  out = std::move(result).value();
  return true;
}

} // namespace muon

#endif // MUON_UNITTESTS_PLANREAD_H
