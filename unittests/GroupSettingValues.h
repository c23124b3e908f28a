//===- GroupSettingValues.h - Values for walking the settings table -*- C++ -*-===//
//
// Helpers of the tests that walk every row of muon/Plan/GroupSettings.h
// through a layer (the plan formats, the compiler): a valid value other
// than the current one, and a value as text to compare.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_UNITTESTS_GROUPSETTINGVALUES_H
#define MUON_UNITTESTS_GROUPSETTINGVALUES_H

#include "muon/Plan/GroupSettings.h"

#include <gtest/gtest.h>

#include <string>

namespace muon {

/// A valid value of `s` that is not `g`'s current one.
inline void setOtherValidValue(const GroupSetting &s, PlanGroup &g) {
  switch (s.kind) {
  case GroupSetting::Kind::Flag:
    setSettingValue(s, g, settingValue(s, g) != 0 ? 0.0 : 1.0);
    return;
  case GroupSetting::Kind::Name:
    ASSERT_GE(s.nameCount, 2u) << s.name;
    setSettingName(s, g,
                   std::string(settingName(s, g) == s.names[0] ? s.names[1]
                                                               : s.names[0]));
    return;
  case GroupSetting::Kind::Number: {
    const double now = settingValue(s, g);
    setSettingValue(s, g, now == 0.375 ? 0.625 : 0.375);
    return;
  }
  }
}

/// g's value of `s`, as text, for comparisons.
inline std::string valueOf(const GroupSetting &s, const PlanGroup &g) {
  return s.kind == GroupSetting::Kind::Name
             ? settingName(s, g)
             : std::to_string(settingValue(s, g));
}

} // namespace muon

#endif // MUON_UNITTESTS_GROUPSETTINGVALUES_H
