//===- MatrixStep.h - Per-matrix steps and their per-row state --*- C++ -*-===//
//
// The extension point for steps that run on a matrix's owner between
// Newton-Schulz and the scatter (docs/architecture.md, "How a variant is
// added"): each is described once, with the group setting that turns it on
// and its per-row state slot (one f32 per row of the whole matrix, kept
// only on the owner). The executor runs every enabled step on each gathered
// matrix, in registry order, and allocates the slots; state dicts and
// checkpoints carry the slots by their names; the optimizer refuses to
// switch a step on or off after the plan is compiled. NorMuon is the first.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_MATRIXSTEP_H
#define MUON_RUNTIME_MATRIXSTEP_H

#include "muon/Plan/Plan.h"
#include "muon/Runtime/Device.h"

#include <string>
#include <string_view>
#include <vector>

namespace muon::runtime {

struct MatrixStep {
  /// The group setting that turns the step on ("normuon": a fixed flag of
  /// the settings table, muon/Plan/GroupSettings.h) and the variant's name
  /// in messages.
  const char *setting, *title;
  /// The per-row state slot's name in state dicts and checkpoints.
  const char *state;
  /// Runs on one gathered rows x cols f32 matrix (device memory, after
  /// Newton-Schulz) with its rows' state.
  void (*run)(Device &device, float *matrix, int64_t rows, int64_t cols,
              float *state, const MuonSettings &settings);
  /// Whether the per-row state is a second moment (never below zero): a
  /// load refuses a negative value, as it refuses a NaN in any state.
  bool nonNegativeState = false;

  /// Whether a Muon group's settings turn the step on: its setting's flag
  /// (fixed by the plan: it decides which matrices carry the state).
  bool enabled(const MuonSettings &settings) const;
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
