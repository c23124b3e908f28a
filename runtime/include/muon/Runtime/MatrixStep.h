//===- MatrixStep.h - Per-matrix steps and their per-row state --*- C++ -*-===//
//
// The extension point for steps that run on a matrix's owner between
// Newton-Schulz and the scatter (docs/architecture.md, "How a variant is
// added"): each is described once, with the group setting that turns it on,
// its per-row state slot (one f32 per row of the whole matrix, kept only on
// the owner), the scalars it derives from its group's settings and one host
// loop over its arithmetic (ElementMath.h), every device's default
// (Device::runMatrixStep; a backend may add kernels for a step by its name,
// as the CUDA backend does for NorMuon's). The
// executor runs every enabled step on each gathered matrix, in registry
// order, and allocates the slots; state dicts and checkpoints carry the
// slots by their names; the optimizer refuses to switch a step on or off
// after the plan is compiled. NorMuon is the first.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_MATRIXSTEP_H
#define MUON_RUNTIME_MATRIXSTEP_H

#include "muon/Plan/Plan.h"
#include "muon/Runtime/ElementStep.h"

#include <string>
#include <string_view>
#include <vector>

namespace muon::runtime {

struct MatrixStep {
  /// Its name: backends find their kernels for it by this name.
  const char *name;
  /// The group setting that turns the step on ("normuon": a fixed flag of
  /// the settings table, muon/Plan/GroupSettings.h) and the variant's name
  /// in messages.
  const char *setting, *title;
  /// The per-row state slot's name in state dicts and checkpoints.
  const char *state;
  /// The scalars of one call, from the matrix's group.
  StepScalars (*scalars)(const PlanGroup &group);
  /// The step on one rows x cols f32 matrix (after Newton-Schulz) with its
  /// rows' state, in host memory.
  void (*hostRun)(float *matrix, int64_t rows, int64_t cols, float *state,
                  const StepScalars &scalars);
  /// Whether the per-row state is a second moment (never below zero): a
  /// load refuses a negative value, as it refuses a NaN in any state.
  bool nonNegativeState = false;

  /// Whether a group's settings turn the step on: its setting's flag
  /// (fixed by the plan: it decides which matrices carry the state).
  bool enabled(const PlanGroup &group) const;
};

/// Every per-matrix step, in the order they run on a matrix.
const std::vector<MatrixStep> &matrixSteps();
/// The index in matrixSteps() of the step whose state slot is `state`, or
/// -1.
int matrixStepOfState(std::string_view state);
/// The state slots' names, for messages: `normuon_v`, ...
std::string matrixStateNames();

} // namespace muon::runtime

#endif // MUON_RUNTIME_MATRIXSTEP_H
