//===- RunOptions.cpp - Fault specifications ------------------------------===//
#include "RunOptions.h"

#include "muon/Planner/Bounds.h"
#include "muon/Support/Limits.h"

#include <optional>

namespace muon::tool {

static bool parseIndex(const std::string &text, int64_t &value) {
  std::optional<int64_t> v = parseDecimal(text);
  if (!v)
    return false;
  value = *v;
  return true;
}

StatusOr<Fault> parseFault(const std::string &text) {
  Fault fault;
  std::vector<std::string> parts;
  size_t begin = 0;
  while (true) {
    size_t colon = text.find(':', begin);
    parts.push_back(text.substr(begin, colon - begin));
    if (colon == std::string::npos)
      break;
    begin = colon + 1;
  }
  const std::string &kind = parts[0];
  bool ok = false;
  if (kind == "nan" && parts.size() == 3) {
    fault.kind = Fault::Kind::NonFinite;
    fault.param = parts[1];
    ok = !fault.param.empty() && parseIndex(parts[2], fault.step);
  } else if ((kind == "die" || kind == "stall" || kind == "corrupt") &&
             parts.size() == 3) {
    fault.kind = kind == "die"     ? Fault::Kind::Die
                 : kind == "stall" ? Fault::Kind::Stall
                                   : Fault::Kind::Corrupt;
    ok = parseIndex(parts[1], fault.rank) && parseIndex(parts[2], fault.step);
  } else if ((kind == "plan-mismatch" || kind == "die-at-end") &&
             parts.size() == 2) {
    fault.kind = kind == "plan-mismatch" ? Fault::Kind::PlanMismatch
                                         : Fault::Kind::DieAtEnd;
    ok = parseIndex(parts[1], fault.rank);
  }
  if (!ok)
    return invalidArgument(
        "bad --inject '" + text +
        "': expected nan:PARAM:STEP, die:RANK:STEP, stall:RANK:STEP, "
        "corrupt:RANK:STEP, plan-mismatch:RANK or die-at-end:RANK (steps "
        "count from 0)");
  return fault;
}

Report reportOf(const Plan &plan) {
  Report report = planReport(plan);
  LowerBounds bounds = planLowerBounds(plan);
  report.lowerBoundBytesReceived = bounds.bytesReceived;
  report.lowerBoundMakespanFlops = bounds.makespanFlops;
  return report;
}

} // namespace muon::tool
