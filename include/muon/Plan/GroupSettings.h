//===- GroupSettings.h - Every group setting, described once -----*- C++ -*-===//
//
// The hyper-parameters of each algorithm's parameter groups (Muon's and
// AdamW's), one row each: the name every API and format uses, the kind of
// value, where it lives in a PlanGroup, which values are valid, and whether
// the plan fixes it. The validator (checkGroupSettings), the C API's
// by-name settings, the Python extension's group dicts and the plan
// reader's key lists read this table; GroupSettingsTest walks every row
// through both plan formats, the state dict and the validator, so that a
// new setting a layer forgets fails there. A new setting is a field in
// MuonSettings or AdamWSettings and a row here, then whatever its step
// computes.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_GROUPSETTINGS_H
#define MUON_PLAN_GROUPSETTINGS_H

#include "muon/Plan/Plan.h"

#include <string>
#include <string_view>
#include <vector>

namespace muon {

struct GroupSetting {
  enum class Kind { Number, Flag, Name };
  /// The values a Number takes: finite and >= 0; that and below 1 (a
  /// momentum); in [0, 1) (a decay rate, NaN refused).
  enum class Range { NonNegative, NonNegativeBelowOne, UnitInterval };

  /// The setting's name in the C API, Python and the plan's JSON, except
  /// AdamW's beta1 and beta2, which the JSON formats keep as "betas".
  const char *name;
  /// The JSON key ("betas" for beta1 and beta2) and the field an error
  /// names ("betas[0]").
  const char *jsonKey, *errorField;
  bool muon; // a Muon group's setting, else an AdamW group's
  Kind kind;
  // Where the value lives: one of these, by kind and algorithm.
  double MuonSettings::*muonNumber = nullptr;
  bool MuonSettings::*muonFlag = nullptr;
  std::string MuonSettings::*muonName = nullptr;
  double AdamWSettings::*adamwNumber = nullptr;
  /// Number: its range.
  Range range = Range::NonNegative;
  /// Name: the values it takes.
  const std::string_view *names = nullptr;
  size_t nameCount = 0;
  /// Fixed by the plan (it decides which matrices carry state, so every
  /// rank must agree on it at start-up): no step may change it.
  bool fixed = false;
  /// A flag of the same group this setting belongs to (normuon_beta2:
  /// normuon); files hold the setting only where the flag is on.
  const char *onlyWith = nullptr;
  /// What the flag is, for errors: "NorMuon's setting".
  const char *onlyWithNote = nullptr;
  /// Files leave the setting out at its default (settings added after the
  /// formats were fixed: older files keep their bytes and still load).
  bool omitDefault = false;
};

/// Every setting, Muon's first, each algorithm's in the order the
/// validator checks them.
const std::vector<GroupSetting> &groupSettings();

/// The setting `name` of a Muon (`muon`) or AdamW group, or null.
const GroupSetting *findGroupSetting(bool muon, std::string_view name);

/// A Number's value, or a Flag's as 0 or 1.
double settingValue(const GroupSetting &s, const PlanGroup &g);
/// Sets a Number, or a Flag from 0 or 1.
void setSettingValue(const GroupSetting &s, PlanGroup &g, double value);
/// A Name's value.
const std::string &settingName(const GroupSetting &s, const PlanGroup &g);
void setSettingName(const GroupSetting &s, PlanGroup &g,
                    const std::string &value);

/// Whether files (the plan's JSON, checkpoints) hold g's value of `s`:
/// not where its flag (onlyWith) is off or where it is omitted at its
/// default.
bool settingWritten(const GroupSetting &s, const PlanGroup &g);
/// Whether a file may lack `s` (then it keeps its default).
inline bool settingOptional(const GroupSetting &s) {
  return s.omitDefault || s.onlyWith;
}

/// One key of a group's JSON object (the plan's, the spec's): the first
/// setting under it, and its value: `numbers` for a Number or Flag (one),
/// or for settings sharing the key ("betas": each), else `name`.
struct SettingEntry {
  const GroupSetting *setting;
  std::vector<double> numbers;
  std::string name;
};
/// g's settings as files hold them (settingWritten), each JSON key once,
/// in the table's order; with `fixedOnly`, only the plan-fixed ones.
std::vector<SettingEntry> settingEntries(const PlanGroup &g,
                                         bool fixedOnly = false);

/// "" or what is wrong with g's value of `s`: "expected a finite number
/// >= 0, got -1", "unknown value \"x\"; expected \"a\" or \"b\"".
std::string checkSetting(const GroupSetting &s, const PlanGroup &g);

} // namespace muon

#endif // MUON_PLAN_GROUPSETTINGS_H
