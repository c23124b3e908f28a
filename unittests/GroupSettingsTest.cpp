//===- GroupSettingsTest.cpp - Every group setting through every layer ---===//
//
// Walks the table of group settings (muon/Plan/GroupSettings.h): each
// setting, set to a valid value other than its default, must survive the
// plan's JSON and binary forms and pass the validator; each number out of
// its range must be refused by the validator naming the setting's field.
// A setting added to the table but forgotten by a format fails here.
//
//===----------------------------------------------------------------------===//
#include "StatusTesting.h"
#include "GroupSettingValues.h"
#include "PlanModel.h"

#include "PlanRead.h"
#include "muon/Plan/Algorithm.h"
#include "muon/Plan/GroupSettings.h"
#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/PlanFile.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

using namespace muon;

namespace {

/// The index of plan's first group of `algorithm`; one named after the
/// algorithm is added where the plan has none (a group nobody uses is
/// valid).
int64_t groupOf(Plan &plan, AlgorithmId algorithm) {
  for (size_t i = 0; i < plan.groups.size(); ++i)
    if (plan.groups[i].algorithm == algorithm)
      return static_cast<int64_t>(i);
  PlanGroup g(algorithm);
  g.name = algorithmName(algorithm);
  plan.groups.push_back(g);
  return static_cast<int64_t>(plan.groups.size()) - 1;
}

TEST(GroupSettings, EverySettingSurvivesBothPlanFormats) {
  std::vector<int> perAlgorithm(algorithms().size(), 0);
  for (const GroupSetting &s : groupSettings()) {
    perAlgorithm[s.algorithm]++;
    Plan plan = planModel();
    const int64_t group = groupOf(plan, s.algorithm);
    PlanGroup &g = plan.groups[group];
    ASSERT_EQ(g.algorithm, s.algorithm);
    if (s.onlyWith)
      setSettingValue(*findGroupSetting(s.algorithm, s.onlyWith), g, 1.0);
    const std::string before = valueOf(s, g);
    setOtherValidValue(s, g);
    const std::string want = valueOf(s, g);
    ASSERT_NE(want, before) << s.name;
    EXPECT_OK(checkSetting(s, g)) << s.name;
    EXPECT_TRUE(validatePlan(plan).ok())
        << s.name << ": " << json::describe(validatePlan(plan));

    Plan fromJson, fromBinary;
    std::string error;
    ASSERT_TRUE(take(parsePlan(renderPlan(plan)), fromJson, error))
        << s.name << ": " << error;
    EXPECT_EQ(valueOf(s, fromJson.groups[group]), want) << s.name << " (JSON)";
    ASSERT_TRUE(
        take(parsePlanBinary(renderPlanBinary(plan)), fromBinary, error))
        << s.name << ": " << error;
    EXPECT_EQ(valueOf(s, fromBinary.groups[group]), want)
        << s.name << " (binary)";
  }
  // Every algorithm is described (a table that lost one would pass above).
  EXPECT_EQ(perAlgorithm[kMuon], 9);
  EXPECT_EQ(perAlgorithm[kAdamW], 5);
  for (size_t a = 0; a < algorithms().size(); ++a)
    EXPECT_GT(perAlgorithm[a], 0) << algorithms()[a].name;
}

TEST(GroupSettings, TheValidatorRefusesEveryNumberOutOfRange) {
  for (const GroupSetting &s : groupSettings()) {
    if (s.kind != GroupSetting::Kind::Number)
      continue;
    for (double bad : {-1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
      Plan plan = planModel();
      PlanGroup &g = plan.groups[groupOf(plan, s.algorithm)];
      setSettingValue(s, g, bad);
      const std::string why = checkSetting(s, g).message();
      EXPECT_NE(why, "") << s.name << " = " << bad;
      const std::string error = json::describe(validatePlan(plan));
      EXPECT_NE(error.find(s.errorField), std::string::npos)
          << s.name << ": " << error;
      EXPECT_NE(error.find(why), std::string::npos) << s.name << ": " << error;
    }
  }
  // And the names: an unknown one is refused with the list.
  Plan plan = planModel();
  PlanGroup &g = plan.groups[findGroup(plan.groups, "muon")];
  const GroupSetting *mode = findGroupSetting(kMuon, "weight_decay_mode");
  ASSERT_NE(mode, nullptr);
  setSettingName(*mode, g, "sometimes");
  EXPECT_EQ(checkSetting(*mode, g).message(),
            "unknown value \"sometimes\"; expected \"decoupled\", "
            "\"cautious\" or \"none\"");
}

TEST(GroupSettings, LookUpByAlgorithmAndName) {
  EXPECT_NE(findGroupSetting(kMuon, "momentum"), nullptr);
  EXPECT_EQ(findGroupSetting(kAdamW, "momentum"), nullptr);
  EXPECT_NE(findGroupSetting(kAdamW, "beta1"), nullptr);
  EXPECT_EQ(findGroupSetting(kMuon, "beta1"), nullptr);
  EXPECT_EQ(findGroupSetting(-1, "lr"), nullptr);
  EXPECT_TRUE(findGroupSetting(kMuon, "normuon")->fixed);
  EXPECT_FALSE(findGroupSetting(kMuon, "normuon_beta2")->fixed);
  EXPECT_STREQ(findGroupSetting(kAdamW, "beta2")->errorField, "betas[1]");
}

TEST(GroupSettings, AGroupHoldsItsAlgorithmsDefaults) {
  for (size_t a = 0; a < algorithms().size(); ++a) {
    const PlanGroup g(static_cast<AlgorithmId>(a));
    ASSERT_EQ(g.settings.size(), algorithms()[a].settings.size());
    for (const GroupSetting &s : algorithms()[a].settings) {
      EXPECT_TRUE(settingAtDefault(s, g)) << s.name;
      EXPECT_OK(checkSetting(s, g)) << s.name << " (its default)";
    }
  }
  // torch's defaults, by name.
  const PlanGroup muon(kMuon), adamw(kAdamW);
  EXPECT_EQ(muon.number("lr"), 1e-3);
  EXPECT_EQ(muon.number("momentum"), 0.95);
  EXPECT_TRUE(muon.flag("nesterov"));
  EXPECT_EQ(muon.text("adjust_lr"), "original");
  EXPECT_EQ(adamw.number("beta2"), 0.999);
  EXPECT_EQ(adamw.number("weight_decay"), 0.01);
}

TEST(Algorithms, TheRegistryIsConsistent) {
  // Names and binary codes are unique; every algorithm has an lr (a
  // scheduler's setGroupLr) and names an update step; Muon and AdamW sit
  // at their constants with the codes files were written with.
  std::set<std::string> names;
  std::set<int> codes;
  for (size_t a = 0; a < algorithms().size(); ++a) {
    const Algorithm &algorithm = algorithms()[a];
    EXPECT_TRUE(names.insert(algorithm.name).second) << algorithm.name;
    EXPECT_TRUE(codes.insert(algorithm.binaryCode).second) << algorithm.name;
    EXPECT_LT(algorithm.binaryCode, 0x80) << algorithm.name; // the tail bit
    EXPECT_NE(findGroupSetting(static_cast<AlgorithmId>(a), "lr"), nullptr)
        << algorithm.name;
    EXPECT_NE(algorithm.updateStep, nullptr) << algorithm.name;
    EXPECT_EQ(findAlgorithm(algorithm.name), static_cast<AlgorithmId>(a));
    EXPECT_EQ(algorithmWithBinaryCode(algorithm.binaryCode),
              static_cast<AlgorithmId>(a));
    for (const ElementSlot &slot : algorithm.slots) {
      EXPECT_EQ(slot.algorithm, static_cast<AlgorithmId>(a));
      EXPECT_EQ(elementSlotOf(slot.algorithm, slot.name),
                &slot - algorithm.slots.data() +
                    (elementSlotOf(slot.algorithm, algorithm.slots[0].name)))
          << slot.name;
      // A slot turned on by a setting: a flag the plan fixes (it decides
      // what the executor allocates).
      if (slot.enabledBy) {
        const GroupSetting *flag =
            findGroupSetting(slot.algorithm, slot.enabledBy);
        ASSERT_NE(flag, nullptr) << slot.name;
        EXPECT_EQ(flag->kind, GroupSetting::Kind::Flag) << slot.name;
        EXPECT_TRUE(flag->fixed) << slot.name;
      }
    }
  }
  EXPECT_STREQ(algorithms()[kMuon].name, "muon");
  EXPECT_STREQ(algorithms()[kAdamW].name, "adamw");
  EXPECT_EQ(algorithms()[kMuon].binaryCode, 1);
  EXPECT_EQ(algorithms()[kAdamW].binaryCode, 0);
  EXPECT_TRUE(algorithms()[kMuon].orthogonalizes);
  EXPECT_FALSE(algorithms()[kAdamW].orthogonalizes);
  EXPECT_FALSE(findAlgorithm("sgd").has_value());
}

} // namespace
