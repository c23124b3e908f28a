//===- Groups.cpp - Plan groups as Python dicts -----------------------------===//
//
// A group as a dict of its settings by name (muon/Plan/GroupSettings.h):
// what Optimizer.groups() and state dicts give, and what set_group,
// compile_model's groups and loaded state dicts take.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "muon/Plan/Algorithm.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <optional>
#include <string_view>

namespace muonc {

namespace {

/// The registered algorithm called `name` (muon/Plan/Algorithm.h).
muon::AlgorithmId algorithmOf(const std::string &name) {
  if (std::optional<muon::AlgorithmId> a = muon::findAlgorithm(name))
    return *a;
  throw StatusError(muon::StatusCode::InvalidArgument,
                    "a group's algorithm is " + muon::algorithmNames() +
                        ", not \"" + name + "\"");
}

} // namespace

void applyGroupDict(nb::dict d, muon::PlanGroup &g, bool strict) {
  using muon::GroupSetting;
  if (strict)
    for (auto [k, v] : d) {
      const std::string key = nb::cast<std::string>(k);
      bool known = key == "name" || key == "algorithm";
      for (const GroupSetting &s : muon::algorithmOf(g.algorithm).settings)
        known = known || key == s.jsonKey;
      if (!known)
        throw StatusError(muon::StatusCode::InvalidArgument,
                          "'" + key + "' is not a " +
                              muon::algorithmOf(g.algorithm).title +
                              " group setting");
    }
  std::map<std::string, size_t> position; // within a shared JSON key
  for (const GroupSetting &s : muon::algorithmOf(g.algorithm).settings) {
    if (std::string_view(s.jsonKey) != s.name) {
      const size_t i = position[s.jsonKey]++;
      if (d.contains(s.jsonKey) && !d[s.jsonKey].is_none()) {
        auto values = nb::cast<std::vector<double>>(d[s.jsonKey]);
        if (i >= values.size())
          throw StatusError(muon::StatusCode::InvalidArgument,
                            "'" + std::string(s.jsonKey) +
                                "' has too few values");
        muon::setSettingValue(s, g, values[i]);
      }
    } else if (!d.contains(s.name) || d[s.name].is_none()) {
      continue;
    } else if (s.kind == GroupSetting::Kind::Name) {
      muon::setSettingName(s, g, nb::cast<std::string>(d[s.name]));
    } else if (s.kind == GroupSetting::Kind::Flag) {
      muon::setSettingValue(s, g, nb::cast<bool>(d[s.name]) ? 1.0 : 0.0);
    } else {
      muon::setSettingValue(s, g, nb::cast<double>(d[s.name]));
    }
  }
}

muon::PlanGroup planGroupOf(nb::dict d) {
  muon::PlanGroup g(algorithmOf(get<std::string>(d, "algorithm", "muon")));
  g.name = nb::cast<std::string>(d["name"]);
  applyGroupDict(d, g, /*strict=*/false);
  return g;
}

nb::dict groupDict(const muon::PlanGroup &g) {
  using muon::GroupSetting;
  nb::dict d;
  d["name"] = g.name;
  d["algorithm"] = muon::algorithmName(g.algorithm);
  std::map<std::string, std::vector<double>> tuples;
  for (const GroupSetting &s : muon::algorithmOf(g.algorithm).settings) {
    if (std::string_view(s.jsonKey) != s.name)
      tuples[s.jsonKey].push_back(muon::settingValue(s, g));
    else if (s.kind == GroupSetting::Kind::Name)
      d[s.name] = muon::settingName(s, g);
    else if (s.kind == GroupSetting::Kind::Flag)
      d[s.name] = muon::settingValue(s, g) != 0;
    else
      d[s.name] = muon::settingValue(s, g);
  }
  for (const auto &[key, values] : tuples)
    d[key.c_str()] =
        nb::steal<nb::tuple>(PySequence_Tuple(nb::cast(values).ptr()));
  return d;
}

} // namespace muonc
