//===- PlanBinaryFuzzer.cpp - Fuzz the binary plan readers ----------------===//
//
// Input: a binary plan file (muon-plan-bin/1). Every rank's part is loaded
// on its own (what a rank of a run does) and the whole file is read (what
// the launching side does). Whatever the bytes:
//  - an accepted whole plan validates, re-encodes to the same bytes, and
//    every rank's part then loads and equals that rank's part of the whole;
//  - an accepted part passes the slice checks;
//  - with a small accepted plan, every rank runs one step from its own part
//    (as threads, under AddressSanitizer): no part a reader accepts may make
//    a rank read or write out of bounds.
//
//===----------------------------------------------------------------------===//
#include "FuzzChecks.h"

#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Validate.h"

#include <string>
#include <string_view>

static void check(std::string_view bytes);

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string input(reinterpret_cast<const char *>(data), size);
  check(input);
  // Again with every checksum made to match, as a forger would: otherwise
  // nearly every mutation stops at a checksum and the decoders and checks
  // behind it see little.
  std::string resealed = input;
  muon::resealPlanBinary(resealed);
  if (resealed != input)
    check(resealed);
  return 0;
}

static void check(std::string_view bytes) {
  muon::StatusOr<muon::Plan> parsed = muon::parsePlanBinary(bytes);
  const bool wholeOk = parsed.ok();
  muon::Plan whole = wholeOk ? std::move(parsed).value() : muon::Plan();
  if (wholeOk) {
    if (!muon::validatePlan(whole).ok())
      muon::fuzz::trap("an accepted binary plan fails validatePlan");
    if (muon::renderPlanBinary(whole) != bytes)
      muon::fuzz::trap("an accepted binary plan does not re-encode to itself");
  }
  // Ranks beyond a small world are not worth the time: the reader is the
  // same for each.
  int64_t world = wholeOk ? whole.worldSize : 8;
  std::vector<muon::Plan> parts;
  for (int64_t r = 0; r < world && r < 16; ++r) {
    muon::StatusOr<muon::Plan> slice = muon::parsePlanSlice(bytes, r);
    const bool ok = slice.ok();
    const std::string error = slice.status().text();
    muon::Plan part = ok ? std::move(slice).value() : muon::Plan();
    if (ok && !muon::validatePlanSlice(part).ok())
      muon::fuzz::trap("an accepted part fails validatePlanSlice");
    if (wholeOk) {
      if (!ok)
        muon::fuzz::trap("rank " + std::to_string(r) +
                         "'s part of an accepted plan is refused: " + error);
      muon::Plan want = muon::slicePlan(whole, r);
      if (part.matrixIds != want.matrixIds ||
          muon::renderPlan(part) != muon::renderPlan(want))
        muon::fuzz::trap("rank " + std::to_string(r) +
                         "'s part differs from the whole plan's");
      parts.push_back(std::move(part));
    }
  }
  if (wholeOk && muon::fuzz::smallEnoughToRun(whole) &&
      static_cast<int64_t>(parts.size()) == whole.worldSize)
    muon::fuzz::runEveryRank(parts);
}
