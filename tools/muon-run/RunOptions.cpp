//===- RunOptions.cpp - Fault specifications ------------------------------===//
#include "RunOptions.h"

#include <cstdlib>

namespace muon::tool {

static bool parseIndex(const std::string &text, int64_t &value) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
    return false;
  value = std::strtoll(text.c_str(), nullptr, 10);
  return true;
}

bool parseFault(const std::string &text, Fault &fault, std::string &error) {
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
  } else if (kind == "plan-mismatch" && parts.size() == 2) {
    fault.kind = Fault::Kind::PlanMismatch;
    ok = parseIndex(parts[1], fault.rank);
  }
  if (!ok)
    error = "bad --inject '" + text +
            "': expected nan:PARAM:STEP, die:RANK:STEP, stall:RANK:STEP, "
            "corrupt:RANK:STEP or plan-mismatch:RANK (steps count from 0)";
  return ok;
}

} // namespace muon::tool
