//===- Disagreement.cpp - What differs between the ranks' plans, settings -===//
#include "Disagreement.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Plan/GroupSettings.h"
#include "muon/Support/Format.h"

#include <array>
#include <cstdio>
#include <map>

namespace muon::runtime {

namespace {
std::string number(double x) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", x);
  return text;
}

std::string layoutText(const ParamLayout &l) {
  std::string split = "[";
  for (size_t d = 0; d < l.splitAxes.size(); ++d)
    split += (d ? ", " : "") + formatList(l.splitAxes[d]);
  split += "]";
  std::string only;
  for (auto [axis, coord] : l.only)
    only += " only axis " + std::to_string(axis) + " at " +
            std::to_string(coord);
  std::string heads;
  if (l.numHeads > 1)
    heads = ", " + std::to_string(l.numHeads) + " heads along dim " +
            std::to_string(l.headSplitDim);
  return "split over mesh axes " + split + ", partial over " +
         formatList(l.partialAxes) + only + heads;
}

std::string table(const std::vector<std::array<double, 3>> &coefficients) {
  std::string text = "[";
  for (size_t i = 0; i < coefficients.size(); ++i) {
    text += i ? ", [" : "[";
    for (size_t j = 0; j < 3; ++j)
      text += (j ? ", " : "") + number(coefficients[i][j]);
    text += "]";
  }
  return text + "]";
}

std::string settingText(const GroupSetting &s, const PlanGroup &g) {
  if (s.kind == GroupSetting::Kind::Name)
    return settingName(s, g);
  const double v = settingValue(s, g);
  if (s.kind == GroupSetting::Kind::Flag)
    return v != 0 ? "true" : "false";
  return number(v);
}

std::vector<char> encode(const Outline &items) {
  std::vector<char> bytes;
  for (const auto &[what, value] : items) {
    bytes.insert(bytes.end(), what.begin(), what.end());
    bytes.push_back('\0');
    bytes.insert(bytes.end(), value.begin(), value.end());
    bytes.push_back('\0');
  }
  return bytes;
}

Outline decode(const std::vector<char> &bytes) {
  Outline items;
  std::string field[2];
  int at = 0;
  for (char c : bytes) {
    if (c != '\0') {
      field[at] += c;
      continue;
    }
    if (at == 1) {
      items.emplace_back(std::move(field[0]), std::move(field[1]));
      field[0].clear();
      field[1].clear();
    }
    at ^= 1;
  }
  return items;
}

/// Where `theirs` (rank `rank`'s) first differs from `first` (rank 0's).
std::string firstDifference(const Outline &first, const Outline &theirs,
                            int64_t rank) {
  const std::string there = " on rank " + std::to_string(rank);
  std::map<std::string, const std::string *> byWhat;
  for (const auto &[what, value] : theirs)
    byWhat[what] = &value;
  for (const auto &[what, value] : first) {
    auto it = byWhat.find(what);
    if (it == byWhat.end())
      return what + ": " + value + " on rank 0, none" + there;
    if (*it->second != value)
      return what + ": " + *it->second + there + ", " + value +
             " on rank 0";
  }
  std::map<std::string, bool> onZero;
  for (const auto &[what, value] : first)
    onZero[what] = true;
  for (const auto &[what, value] : theirs)
    if (!onZero.count(what))
      return what + ": " + value + there + ", none on rank 0";
  return {};
}
} // namespace

Outline planOutline(const Plan &plan) {
  Outline items;
  items.emplace_back("world", std::to_string(plan.worldSize) + " ranks");
  items.emplace_back("mesh", formatList(plan.mesh.shape));
  items.emplace_back("wire_dtype", plan.wireDtype);
  items.emplace_back("ns_dtype", plan.ns.nsDtype);
  for (size_t c = 0; c < plan.ns.configs.size(); ++c) {
    const NewtonSchulzConfig &config = plan.ns.configs[c];
    const std::string what =
        "Newton-Schulz configuration " + std::to_string(c) + " ";
    items.emplace_back(what + "ns_steps", std::to_string(config.nsSteps));
    items.emplace_back(what + "ns_coefficients", table(config.coefficients));
    items.emplace_back(what + "eps", number(config.eps));
  }
  for (const PlanGroup &g : plan.groups) {
    const std::string what = "group '" + g.name + "' ";
    items.emplace_back(what + "algorithm", algorithmName(g.algorithm));
    for (const SettingEntry &e : settingEntries(g, /*fixedOnly=*/true))
      items.emplace_back(what + e.setting->name, settingText(*e.setting, g));
  }
  for (const PlanParam &p : plan.params) {
    const std::string what = "parameter '" + p.name + "' ";
    items.emplace_back(what + "shape", formatList(p.layout.shape));
    items.emplace_back(what + "dtype", p.dtype);
    items.emplace_back(what + "group", "'" + plan.groups[p.group].name + "'");
    items.emplace_back(what + "layout", layoutText(p.layout));
  }
  for (const QkClipLayer &l : plan.qkClip)
    items.emplace_back("QK-clip layer '" + l.name + "'",
                       "query '" + l.query + "', key '" + l.key + "', " +
                           std::to_string(l.numHeads) + " heads, " +
                           std::to_string(l.numKvHeads) +
                           " key heads, threshold " + number(l.threshold));
  return items;
}

Outline settingsOutline(const std::vector<PlanGroup> &groups) {
  Outline items;
  for (const PlanGroup &g : groups) {
    items.emplace_back("group '" + g.name + "' algorithm",
                       algorithmName(g.algorithm));
    for (const GroupSetting &s : algorithmOf(g.algorithm).settings)
      items.emplace_back("group '" + g.name + "' " + s.name,
                         settingText(s, g));
  }
  return items;
}

StatusOr<std::string> describeDisagreement(Communicator &comm,
                                           const Outline &mine,
                                           const std::vector<int64_t> &ranks,
                                           double timeoutSeconds) {
  MUON_ASSIGN_OR_RETURN(std::vector<std::vector<char>> every,
                        comm.allGatherBytes(encode(mine), timeoutSeconds));
  if (every.empty())
    return std::string();
  const Outline first = decode(every[0]);
  for (int64_t r : ranks)
    if (r >= 0 && r < static_cast<int64_t>(every.size()))
      if (std::string d = firstDifference(first, decode(every[r]), r);
          !d.empty())
        return d;
  return std::string();
}

} // namespace muon::runtime
