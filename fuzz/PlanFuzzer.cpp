//===- PlanFuzzer.cpp - Fuzz the plan reader, validator and executor ------===//
//
// Input: a plan file. Read and validate it; an accepted plan must render
// back to the same text, and when small it runs one step on every rank (as
// threads, under AddressSanitizer): nothing a plan file says may make a rank
// read or write out of bounds.
//
//===----------------------------------------------------------------------===//
#include "FuzzChecks.h"

#include "muon/Plan/PlanFile.h"

#include <cstdio>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  muon::StatusOr<muon::Plan> parsed = muon::parsePlan(text);
  if (!parsed.ok())
    return 0;
  const muon::Plan &plan = *parsed;
  muon::fuzz::checkCompiledPlan(plan);
  if (muon::fuzz::smallEnoughToRun(plan))
    muon::fuzz::runEveryRank(plan);
  return 0;
}
