//===- GroupSettings.cpp - Every group setting, described once -----------===//
#include "muon/Plan/GroupSettings.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Support/Format.h"

#include <cassert>
#include <cmath>

namespace muon {

namespace setting {

GroupSetting number(const char *name, double defaultValue,
                    GroupSetting::Range range) {
  GroupSetting s{name, name, name, Kind::Number};
  s.defaultNumber = defaultValue;
  s.range = range;
  return s;
}

GroupSetting flag(const char *name, bool defaultValue) {
  GroupSetting s{name, name, name, Kind::Flag};
  s.defaultNumber = defaultValue ? 1.0 : 0.0;
  return s;
}

GroupSetting numberIn(const char *name, const char *jsonKey,
                      const char *errorField, double defaultValue,
                      GroupSetting::Range range) {
  GroupSetting s = number(name, defaultValue, range);
  s.jsonKey = jsonKey;
  s.errorField = errorField;
  return s;
}

GroupSetting omittedAtDefault(GroupSetting s) {
  s.omitDefault = true;
  return s;
}

GroupSetting fixedByPlan(GroupSetting s) {
  s.fixed = true;
  return s;
}

GroupSetting onlyWith(GroupSetting s, const char *flag, const char *note) {
  s.onlyWith = flag;
  s.onlyWithNote = note;
  return s;
}

} // namespace setting

const std::vector<GroupSetting> &groupSettings() {
  static const std::vector<GroupSetting> all = [] {
    std::vector<GroupSetting> rows;
    for (const Algorithm &a : algorithms())
      rows.insert(rows.end(), a.settings.begin(), a.settings.end());
    return rows;
  }();
  return all;
}

const GroupSetting *findGroupSetting(AlgorithmId algorithm,
                                     std::string_view name) {
  if (algorithm < 0 || static_cast<size_t>(algorithm) >= algorithms().size())
    return nullptr;
  for (const GroupSetting &s : algorithmOf(algorithm).settings)
    if (name == s.name)
      return &s;
  return nullptr;
}

PlanGroup::PlanGroup() : PlanGroup(kMuon) {}

PlanGroup::PlanGroup(AlgorithmId algorithm) : algorithm(algorithm) {
  for (const GroupSetting &s : algorithmOf(algorithm).settings)
    settings.push_back({s.defaultNumber, s.defaultText});
}

/// The index in g.settings of the setting called `name` (asserted to be a
/// setting of g's algorithm), or -1.
static int indexNamed(const PlanGroup &g, std::string_view name) {
  const GroupSetting *s = findGroupSetting(g.algorithm, name);
  assert(s && "not a setting of the group's algorithm");
  return s && static_cast<size_t>(s->index) < g.settings.size() ? s->index
                                                                : -1;
}

double PlanGroup::number(std::string_view setting) const {
  const int i = indexNamed(*this, setting);
  return i < 0 ? 0 : settings[i].number;
}

const std::string &PlanGroup::text(std::string_view setting) const {
  static const std::string none;
  const int i = indexNamed(*this, setting);
  return i < 0 ? none : settings[i].text;
}

void PlanGroup::setNumber(std::string_view setting, double value) {
  if (const int i = indexNamed(*this, setting); i >= 0)
    settings[i].number = value;
}

void PlanGroup::setText(std::string_view setting, std::string value) {
  if (const int i = indexNamed(*this, setting); i >= 0)
    settings[i].text = std::move(value);
}

bool PlanGroup::orthogonalizes() const {
  return algorithmOf(algorithm).orthogonalizes;
}

/// Whether `s` is a setting of g's algorithm that g holds.
[[maybe_unused]] static bool holds(const PlanGroup &g, const GroupSetting &s) {
  return s.algorithm == g.algorithm &&
         static_cast<size_t>(s.index) < g.settings.size();
}

double settingValue(const GroupSetting &s, const PlanGroup &g) {
  assert(holds(g, s));
  return g.settings[s.index].number;
}

void setSettingValue(const GroupSetting &s, PlanGroup &g, double value) {
  assert(holds(g, s));
  g.settings[s.index].number =
      s.kind == GroupSetting::Kind::Flag ? (value != 0 ? 1.0 : 0.0) : value;
}

const std::string &settingName(const GroupSetting &s, const PlanGroup &g) {
  assert(holds(g, s));
  return g.settings[s.index].text;
}

void setSettingName(const GroupSetting &s, PlanGroup &g,
                    const std::string &value) {
  assert(holds(g, s));
  g.settings[s.index].text = value;
}

bool settingAtDefault(const GroupSetting &s, const PlanGroup &g) {
  return s.kind == GroupSetting::Kind::Name
             ? settingName(s, g) == s.defaultText
             : settingValue(s, g) == s.defaultNumber;
}

bool settingWritten(const GroupSetting &s, const PlanGroup &g) {
  if (s.onlyWith &&
      settingValue(*findGroupSetting(s.algorithm, s.onlyWith), g) == 0)
    return false;
  return !s.omitDefault || !settingAtDefault(s, g);
}

std::vector<std::string_view> settingKeys(AlgorithmId algorithm) {
  std::vector<std::string_view> keys;
  for (const GroupSetting &s : algorithmOf(algorithm).settings)
    if (keys.empty() || keys.back() != s.jsonKey)
      keys.push_back(s.jsonKey);
  return keys;
}

SharedJsonKey sharedJsonKey(const std::vector<GroupSetting> &settings,
                            size_t i) {
  const std::string_view key = settings[i].jsonKey;
  SharedJsonKey shared;
  shared.first = i == 0 || std::string_view(settings[i - 1].jsonKey) != key;
  shared.count = 0;
  for (; i + shared.count < settings.size() &&
         std::string_view(settings[i + shared.count].jsonKey) == key;
       ++shared.count)
    shared.names += (shared.count ? ", " : "") +
                    std::string(settings[i + shared.count].name);
  return shared;
}

std::vector<SettingEntry> settingEntries(const PlanGroup &g, bool fixedOnly) {
  std::vector<SettingEntry> entries;
  const std::vector<GroupSetting> &settings = algorithmOf(g.algorithm).settings;
  for (size_t i = 0; i < settings.size(); ++i) {
    const GroupSetting &s = settings[i];
    if ((fixedOnly && !s.fixed) || !settingWritten(s, g))
      continue;
    if (i > 0 && std::string_view(settings[i - 1].jsonKey) == s.jsonKey) {
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

Status checkSetting(const GroupSetting &s, const PlanGroup &g) {
  if (s.kind == GroupSetting::Kind::Name) {
    const std::string &v = settingName(s, g);
    for (size_t i = 0; i < s.nameCount; ++i)
      if (v == s.names[i])
        return okStatus();
    return invalidArgument("unknown value \"" + v + "\"; expected " +
           nameList(s.names, s.nameCount));
  }
  if (s.kind != GroupSetting::Kind::Number)
    return okStatus();
  const double v = settingValue(s, g);
  const std::string got = format("%g", v);
  switch (s.range) {
  case GroupSetting::Range::NonNegative:
  case GroupSetting::Range::NonNegativeBelowOne:
    if (!std::isfinite(v) || v < 0)
      return invalidArgument("expected a finite number >= 0, got " + got);
    if (s.range == GroupSetting::Range::NonNegativeBelowOne && v >= 1)
      return invalidArgument("expected a number in [0, 1), got " + got);
    return okStatus();
  case GroupSetting::Range::UnitInterval:
    if (v >= 0 && v < 1)
      return okStatus();
    return invalidArgument("expected a number in [0, 1), got " + got);
  case GroupSetting::Range::Positive:
    if (std::isfinite(v) && v > 0)
      return okStatus();
    return invalidArgument("expected a finite number > 0, got " + got);
  }
  return okStatus();
}

} // namespace muon
