//===- MatrixStep.cpp - Per-matrix steps and their per-row state ----------===//
#include "muon/Runtime/MatrixStep.h"

#include "muon/Plan/GroupSettings.h"

namespace muon::runtime {

const std::vector<MatrixStep> &matrixSteps() {
  static const std::vector<MatrixStep> steps = {
      // NorMuon (arXiv 2510.05491): normuonStep in ElementMath.h.
      {"normuon", "NorMuon", "normuon_v",
       [](Device &device, float *matrix, int64_t rows, int64_t cols,
          float *state, const MuonSettings &s) {
         device.normuon(matrix, rows, cols, state, s);
       },
       /*nonNegativeState=*/true},
  };
  return steps;
}

bool MatrixStep::enabled(const MuonSettings &settings) const {
  const GroupSetting *flag = findGroupSetting(/*muon=*/true, setting);
  if (!flag || flag->kind != GroupSetting::Kind::Flag)
    return false; // MatrixStepTest checks every step names a flag
  PlanGroup group;
  group.muonSettings = settings;
  return settingValue(*flag, group) != 0;
}

int matrixStepOfState(std::string_view state) {
  const std::vector<MatrixStep> &steps = matrixSteps();
  for (size_t i = 0; i < steps.size(); ++i)
    if (state == steps[i].state)
      return static_cast<int>(i);
  return -1;
}

std::string matrixStateNames() {
  std::string names;
  for (const MatrixStep &s : matrixSteps())
    names += (names.empty() ? "" : ", ") + std::string(s.state);
  return names;
}

} // namespace muon::runtime
