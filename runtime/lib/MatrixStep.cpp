//===- MatrixStep.cpp - Per-matrix steps and their per-row state ----------===//
#include "muon/Runtime/MatrixStep.h"

#include "muon/Plan/GroupSettings.h"
#include "muon/Runtime/ElementMath.h"

namespace muon::runtime {

const std::vector<MatrixStep> &matrixSteps() {
  static const std::vector<MatrixStep> steps = {
      // NorMuon (arXiv 2510.05491): normuonStep in ElementMath.h.
      {"normuon", "normuon", "NorMuon", "normuon_v",
       [](const PlanGroup &g) { return StepScalars::of(normuonScalars(g)); },
       [](float *matrix, int64_t rows, int64_t cols, float *state,
          const StepScalars &s) {
         normuonStep(matrix, rows, cols, state, s.as<NormuonScalars>());
       },
       /*nonNegativeState=*/true},
  };
  return steps;
}

bool MatrixStep::enabled(const PlanGroup &group) const {
  const GroupSetting *flag = findGroupSetting(group.algorithm, setting);
  if (!flag || flag->kind != GroupSetting::Kind::Flag)
    return false; // MatrixStepTest checks every step names a flag
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
