//===- GroupSettings.cpp - Every group setting, described once -----------===//
#include "muon/Plan/GroupSettings.h"

#include "muon/Support/Format.h"

#include <cmath>

namespace muon {

const std::vector<GroupSetting> &groupSettings() {
  using M = MuonSettings;
  using A = AdamWSettings;
  using K = GroupSetting::Kind;
  using R = GroupSetting::Range;
  auto muonNumber = [](const char *name, double M::*field, R range) {
    GroupSetting s{name, name, name, true, K::Number};
    s.muonNumber = field;
    s.range = range;
    return s;
  };
  auto muonFlag = [](const char *name, bool M::*field) {
    GroupSetting s{name, name, name, true, K::Flag};
    s.muonFlag = field;
    return s;
  };
  auto muonName = [](const char *name, std::string M::*field,
                     const std::string_view *names, size_t count) {
    GroupSetting s{name, name, name, true, K::Name};
    s.muonName = field;
    s.names = names;
    s.nameCount = count;
    return s;
  };
  auto adamwNumber = [](const char *name, const char *jsonKey,
                        const char *errorField, double A::*field, R range) {
    GroupSetting s{name, jsonKey, errorField, false, K::Number};
    s.adamwNumber = field;
    s.range = range;
    return s;
  };
  // A row's extras, written where the row is.
  auto omittedAtDefault = [](GroupSetting s) {
    s.omitDefault = true;
    return s;
  };
  auto fixedByPlan = [](GroupSetting s) {
    s.fixed = true;
    return s;
  };
  auto onlyWith = [](GroupSetting s, const char *flag, const char *note) {
    s.onlyWith = flag;
    s.onlyWithNote = note;
    return s;
  };
  static const std::vector<GroupSetting> table = {
      muonNumber("lr", &M::lr, R::NonNegative),
      muonNumber("weight_decay", &M::weightDecay, R::NonNegative),
      muonNumber("momentum", &M::momentum, R::NonNegativeBelowOne),
      muonFlag("nesterov", &M::nesterov),
      muonName("adjust_lr", &M::adjustLr, kAdjustLrNames.data(),
               kAdjustLrNames.size()),
      omittedAtDefault(muonName("weight_decay_mode", &M::weightDecayMode,
                                kWeightDecayModes.data(),
                                kWeightDecayModes.size())),
      // NorMuon decides which matrices carry per-row state.
      fixedByPlan(omittedAtDefault(muonFlag("normuon", &M::normuon))),
      onlyWith(muonNumber("normuon_beta2", &M::normuonBeta2, R::UnitInterval),
               "normuon", "NorMuon's setting"),
      omittedAtDefault(muonNumber("extra_scale_factor", &M::extraScaleFactor,
                                  R::NonNegative)),
      adamwNumber("lr", "lr", "lr", &A::lr, R::NonNegative),
      adamwNumber("beta1", "betas", "betas[0]", &A::beta1, R::UnitInterval),
      adamwNumber("beta2", "betas", "betas[1]", &A::beta2, R::UnitInterval),
      adamwNumber("eps", "eps", "eps", &A::eps, R::NonNegative),
      adamwNumber("weight_decay", "weight_decay", "weight_decay",
                  &A::weightDecay, R::NonNegative),
  };
  return table;
}

const GroupSetting *findGroupSetting(bool muon, std::string_view name) {
  for (const GroupSetting &s : groupSettings())
    if (s.muon == muon && name == s.name)
      return &s;
  return nullptr;
}

double settingValue(const GroupSetting &s, const PlanGroup &g) {
  if (s.muonNumber)
    return g.muonSettings.*s.muonNumber;
  if (s.muonFlag)
    return g.muonSettings.*s.muonFlag ? 1.0 : 0.0;
  if (s.adamwNumber)
    return g.adamwSettings.*s.adamwNumber;
  return 0;
}

void setSettingValue(const GroupSetting &s, PlanGroup &g, double value) {
  if (s.muonNumber)
    g.muonSettings.*s.muonNumber = value;
  else if (s.muonFlag)
    g.muonSettings.*s.muonFlag = value != 0;
  else if (s.adamwNumber)
    g.adamwSettings.*s.adamwNumber = value;
}

const std::string &settingName(const GroupSetting &s, const PlanGroup &g) {
  static const std::string none;
  return s.muonName ? g.muonSettings.*s.muonName : none;
}

void setSettingName(const GroupSetting &s, PlanGroup &g,
                    const std::string &value) {
  if (s.muonName)
    g.muonSettings.*s.muonName = value;
}

bool settingWritten(const GroupSetting &s, const PlanGroup &g) {
  if (s.onlyWith && settingValue(*findGroupSetting(s.muon, s.onlyWith), g) == 0)
    return false;
  if (!s.omitDefault)
    return true;
  PlanGroup defaults;
  defaults.muon = g.muon;
  return s.kind == GroupSetting::Kind::Name
             ? settingName(s, g) != settingName(s, defaults)
             : settingValue(s, g) != settingValue(s, defaults);
}

std::vector<SettingEntry> settingEntries(const PlanGroup &g, bool fixedOnly) {
  std::vector<SettingEntry> entries;
  const std::vector<GroupSetting> &settings = groupSettings();
  for (size_t i = 0; i < settings.size(); ++i) {
    const GroupSetting &s = settings[i];
    if (s.muon != g.muon || (fixedOnly && !s.fixed) || !settingWritten(s, g))
      continue;
    if (i > 0 && std::string_view(settings[i - 1].jsonKey) == s.jsonKey &&
        settings[i - 1].muon == s.muon) {
      entries.back().numbers.push_back(settingValue(s, g)); // "betas"
      continue;
    }
    SettingEntry e{&s, {}, {}};
    if (s.kind == GroupSetting::Kind::Name)
      e.name = settingName(s, g);
    else
      e.numbers.push_back(settingValue(s, g));
    entries.push_back(std::move(e));
  }
  return entries;
}

std::string checkSetting(const GroupSetting &s, const PlanGroup &g) {
  if (s.kind == GroupSetting::Kind::Name) {
    const std::string &v = settingName(s, g);
    for (size_t i = 0; i < s.nameCount; ++i)
      if (v == s.names[i])
        return "";
    return "unknown value \"" + v + "\"; expected " +
           nameList(s.names, s.nameCount);
  }
  if (s.kind != GroupSetting::Kind::Number)
    return "";
  const double v = settingValue(s, g);
  const std::string got = format("%g", v);
  switch (s.range) {
  case GroupSetting::Range::NonNegative:
  case GroupSetting::Range::NonNegativeBelowOne:
    if (!std::isfinite(v) || v < 0)
      return "expected a finite number >= 0, got " + got;
    if (s.range == GroupSetting::Range::NonNegativeBelowOne && v >= 1)
      return "expected a number in [0, 1), got " + got;
    return "";
  case GroupSetting::Range::UnitInterval:
    return v >= 0 && v < 1 ? "" : "expected a number in [0, 1), got " + got;
  }
  return "";
}

} // namespace muon
