//===- GroupSettings.h - Every group setting, described once -----*- C++ -*-===//
//
// The hyper-parameters of each algorithm's parameter groups, one row each:
// the name every API and format uses, the kind of value, its default, which
// values are valid, and whether the plan fixes it. The rows are registered
// with their algorithm (Algorithms.cpp, muon/Plan/Algorithm.h), and a
// group stores one value per row of its algorithm (PlanGroup::settings).
// The validator (checkGroupSettings), both plan formats, checkpoints, the
// dialect, the spec importer, the C API's by-name settings and the Python
// extension's group dicts read this table; GroupSettingsTest walks every
// row through both plan formats, the state dict and the validator, so that
// a new setting a layer forgets fails there. A new setting is a row of its
// algorithm, then whatever its step computes from it.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_GROUPSETTINGS_H
#define MUON_PLAN_GROUPSETTINGS_H

#include "muon/Plan/Plan.h"
#include "muon/Support/Status.h"

#include <array>
#include <string>
#include <string_view>
#include <vector>

namespace muon {

struct GroupSetting {
  enum class Kind { Number, Flag, Name };
  /// The values a Number takes: finite and >= 0; that and below 1 (a
  /// momentum); in [0, 1) (a decay rate, NaN refused); finite and > 0 (a
  /// divisor's floor, AdamW's eps: 0 would divide a zero gradient's zero
  /// moment by zero).
  enum class Range { NonNegative, NonNegativeBelowOne, UnitInterval,
                     Positive };

  /// The setting's name in the C API, Python, the dialect and the
  /// checkpoints' JSON; the plan's and the spec's JSON use `jsonKey`.
  const char *name;
  /// The JSON key (settings that share one, AdamW's beta1 and beta2 as
  /// "betas", are an array in the table's order) and the field an error
  /// names ("betas[0]").
  const char *jsonKey, *errorField;
  Kind kind;
  /// Its default: a Number's, or a Flag's as 0 or 1; a Name's.
  double defaultNumber = 0;
  const char *defaultText = "";
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

  // Filled by the registry (algorithms()).
  /// The algorithm whose setting it is.
  AlgorithmId algorithm = kMuon;
  /// Its place among its algorithm's settings: PlanGroup::settings[index].
  int index = 0;
};

/// The rows' constructors, for the registry (Algorithms.cpp): each row
/// reads as its setting's whole description.
namespace setting {
using Kind = GroupSetting::Kind;
inline constexpr GroupSetting::Range NonNegative =
    GroupSetting::Range::NonNegative;
inline constexpr GroupSetting::Range NonNegativeBelowOne =
    GroupSetting::Range::NonNegativeBelowOne;
inline constexpr GroupSetting::Range UnitInterval =
    GroupSetting::Range::UnitInterval;
inline constexpr GroupSetting::Range Positive = GroupSetting::Range::Positive;
GroupSetting number(const char *name, double defaultValue,
                    GroupSetting::Range range);
GroupSetting flag(const char *name, bool defaultValue);
template <size_t N>
GroupSetting name(const char *name, const char *defaultValue,
                  const std::array<std::string_view, N> &names) {
  GroupSetting s{name, name, name, Kind::Name};
  s.defaultText = defaultValue;
  s.names = names.data();
  s.nameCount = N;
  return s;
}
/// A Number that shares its JSON key with its neighbours ("betas"),
/// named `errorField` in errors ("betas[0]").
GroupSetting numberIn(const char *name, const char *jsonKey,
                      const char *errorField, double defaultValue,
                      GroupSetting::Range range);
// A row's extras, written where the row is.
GroupSetting omittedAtDefault(GroupSetting s);
GroupSetting fixedByPlan(GroupSetting s);
GroupSetting onlyWith(GroupSetting s, const char *flag, const char *note);
} // namespace setting

/// Every setting of every algorithm, in registry order (Muon's first),
/// each algorithm's in the order the validator checks them.
const std::vector<GroupSetting> &groupSettings();

/// The setting `name` of `algorithm`'s groups, or null.
const GroupSetting *findGroupSetting(AlgorithmId algorithm,
                                     std::string_view name);

/// A Number's value, or a Flag's as 0 or 1 (`s` must be a setting of g's
/// algorithm).
double settingValue(const GroupSetting &s, const PlanGroup &g);
/// Sets a Number, or a Flag from 0 or 1.
void setSettingValue(const GroupSetting &s, PlanGroup &g, double value);
/// A Name's value.
const std::string &settingName(const GroupSetting &s, const PlanGroup &g);
void setSettingName(const GroupSetting &s, PlanGroup &g,
                    const std::string &value);
/// Whether g's value of `s` is its default.
bool settingAtDefault(const GroupSetting &s, const PlanGroup &g);

/// Whether files (the plan's JSON, checkpoints) hold g's value of `s`:
/// not where its flag (onlyWith) is off or where it is omitted at its
/// default.
bool settingWritten(const GroupSetting &s, const PlanGroup &g);
/// Whether a file may lack `s` (then it keeps its default).
inline bool settingOptional(const GroupSetting &s) {
  return s.omitDefault || s.onlyWith;
}

/// The JSON keys of `algorithm`'s settings, each once, in the table's
/// order.
std::vector<std::string_view> settingKeys(AlgorithmId algorithm);

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

/// The settings of a table that share the JSON key of `settings[i]` (AdamW's
/// "betas": beta1, beta2), which files hold as one array read and written
/// with the first of them: whether `settings[i]` is that first one, how many
/// share the key from `i` on, and their names for messages ("beta1,
/// beta2"). A setting with a key of its own is a group of one.
struct SharedJsonKey {
  bool first = true;
  size_t count = 1;
  std::string names;
};
SharedJsonKey sharedJsonKey(const std::vector<GroupSetting> &settings,
                            size_t i);

/// Whether g's value of `s` is in its range or names; InvalidArgument
/// saying what is wrong: "expected a finite number >= 0, got -1", "unknown
/// value \"x\"; expected \"a\" or \"b\"".
Status checkSetting(const GroupSetting &s, const PlanGroup &g);

} // namespace muon

#endif // MUON_PLAN_GROUPSETTINGS_H
