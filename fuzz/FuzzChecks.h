//===- FuzzChecks.h - What every fuzz target asserts ------------*- C++ -*-===//
//
// A fuzz input may be rejected; what it may never do is crash, hang, or get
// the compiler to produce a plan that its own reader refuses. These checks
// trap (a crash for libFuzzer) when a produced plan is not sound.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_FUZZ_FUZZCHECKS_H
#define MUON_FUZZ_FUZZCHECKS_H

#include "muon/Plan/Plan.h"

#include <cstdint>

namespace muon::fuzz {

/// A compiled plan must validate, and its file must read back to the same
/// text.
void checkCompiledPlan(const Plan &plan);

/// Small enough to compile or run within a fuzz iteration: ranks, pieces
/// across ranks and Newton-Schulz work.
bool smallEnoughToCompile(int64_t worldSize, int64_t pieces);

/// Reports `what` as a fuzz check failure and stops (libFuzzer keeps the
/// input).
[[noreturn]] void trap(const std::string &what);
bool smallEnoughToRun(const Plan &plan);

/// Runs one step of `plan` on every rank, each a thread, with synthetic
/// gradients (AddressSanitizer watches every access). Traps if a rank
/// reports an error: a validated plan must run.
void runEveryRank(const Plan &plan);
/// The same with each rank running its own part of one plan (`parts[r]` is
/// rank r's, as loadPlanSlice gives it).
void runEveryRank(const std::vector<Plan> &parts);

} // namespace muon::fuzz

#endif // MUON_FUZZ_FUZZCHECKS_H
