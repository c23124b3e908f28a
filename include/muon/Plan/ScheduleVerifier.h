//===- ScheduleVerifier.h - The rules every schedule keeps ------*- C++ -*-===//
//
// Part of the plan contract: the compiler checks the schedules it builds
// with it, and the plan reader checks the schedules it reads.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_SCHEDULEVERIFIER_H
#define MUON_PLAN_SCHEDULEVERIFIER_H

#include "muon/Plan/Plan.h"
#include "muon/Support/Status.h"

#include <string>

namespace muon {

/// Checks a schedule independently of how it was built: every exchange is
/// started once and done once after its start; NS of round r runs after
/// gather r is done and before scatter r starts; in-flight and memory limits
/// hold at every point. InvalidArgument with the first violation.
Status verifySchedule(const Plan &plan);

} // namespace muon

#endif // MUON_PLAN_SCHEDULEVERIFIER_H
