//===- GroupSettingsTest.cpp - Every group setting through every layer ---===//
//
// Walks the table of group settings (muon/Plan/GroupSettings.h): each
// setting, set to a valid value other than its default, must survive the
// plan's JSON and binary forms and pass the validator; each number out of
// its range must be refused by the validator naming the setting's field.
// A setting added to the table but forgotten by a format fails here.
//
//===----------------------------------------------------------------------===//
#include "GroupSettingValues.h"
#include "PlanModel.h"

#include "muon/Plan/GroupSettings.h"
#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/PlanFile.h"

#include <gtest/gtest.h>

#include <cmath>

using namespace muon;

namespace {

TEST(GroupSettings, EverySettingSurvivesBothPlanFormats) {
  int muonSettings = 0, adamwSettings = 0;
  for (const GroupSetting &s : groupSettings()) {
    (s.muon ? muonSettings : adamwSettings)++;
    Plan plan = planModel();
    const int64_t group = findGroup(plan.groups, s.muon ? "muon" : "adamw");
    ASSERT_GE(group, 0);
    PlanGroup &g = plan.groups[group];
    ASSERT_EQ(g.muon, s.muon);
    if (s.onlyWith)
      setSettingValue(*findGroupSetting(s.muon, s.onlyWith), g, 1.0);
    const std::string before = valueOf(s, g);
    setOtherValidValue(s, g);
    const std::string want = valueOf(s, g);
    ASSERT_NE(want, before) << s.name;
    EXPECT_EQ(checkSetting(s, g), "") << s.name;
    EXPECT_TRUE(validatePlan(plan).empty())
        << s.name << ": " << validatePlan(plan).str();

    Plan fromJson, fromBinary;
    std::string error;
    ASSERT_TRUE(parsePlan(renderPlan(plan), fromJson, error))
        << s.name << ": " << error;
    EXPECT_EQ(valueOf(s, fromJson.groups[group]), want) << s.name << " (JSON)";
    ASSERT_TRUE(parsePlanBinary(renderPlanBinary(plan), fromBinary, error))
        << s.name << ": " << error;
    EXPECT_EQ(valueOf(s, fromBinary.groups[group]), want)
        << s.name << " (binary)";
  }
  // Both algorithms are described (a table that lost one would pass above).
  EXPECT_EQ(muonSettings, 9);
  EXPECT_EQ(adamwSettings, 5);
}

TEST(GroupSettings, TheValidatorRefusesEveryNumberOutOfRange) {
  for (const GroupSetting &s : groupSettings()) {
    if (s.kind != GroupSetting::Kind::Number)
      continue;
    for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
      Plan plan = planModel();
      PlanGroup &g =
          plan.groups[findGroup(plan.groups, s.muon ? "muon" : "adamw")];
      setSettingValue(s, g, bad);
      const std::string why = checkSetting(s, g);
      EXPECT_NE(why, "") << s.name << " = " << bad;
      const std::string error = validatePlan(plan).str();
      EXPECT_NE(error.find(s.errorField), std::string::npos)
          << s.name << ": " << error;
      EXPECT_NE(error.find(why), std::string::npos) << s.name << ": " << error;
    }
  }
  // And the names: an unknown one is refused with the list.
  Plan plan = planModel();
  PlanGroup &g = plan.groups[findGroup(plan.groups, "muon")];
  const GroupSetting *mode = findGroupSetting(true, "weight_decay_mode");
  ASSERT_NE(mode, nullptr);
  setSettingName(*mode, g, "sometimes");
  EXPECT_EQ(checkSetting(*mode, g),
            "unknown value \"sometimes\"; expected \"decoupled\", "
            "\"cautious\" or \"none\"");
}

TEST(GroupSettings, LookUpByAlgorithmAndName) {
  EXPECT_NE(findGroupSetting(true, "momentum"), nullptr);
  EXPECT_EQ(findGroupSetting(false, "momentum"), nullptr);
  EXPECT_NE(findGroupSetting(false, "beta1"), nullptr);
  EXPECT_EQ(findGroupSetting(true, "beta1"), nullptr);
  EXPECT_TRUE(findGroupSetting(true, "normuon")->fixed);
  EXPECT_FALSE(findGroupSetting(true, "normuon_beta2")->fixed);
  EXPECT_STREQ(findGroupSetting(false, "beta2")->errorField, "betas[1]");
}

} // namespace
