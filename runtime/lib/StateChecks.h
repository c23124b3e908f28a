//===- StateChecks.h - Loaded state, checked for sense ----------*- C++ -*-===//
//
// A state that passed every checksum can still be one that no run makes: a
// NaN in a moment, a negative second moment, pieces of one parameter that
// disagree on its step count. Such a state does not fail at once: it turns
// the next steps' updates into NaN, or quietly changes them. Both loads
// (Optimizer::loadStateDict, on pieces in memory, and loadCheckpoint, on
// what it read) check here what they are about to apply, before anything
// changes. Internal to the runtime (StateDict.cpp, Checkpoint.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_LIB_STATECHECKS_H
#define MUON_RUNTIME_LIB_STATECHECKS_H

#include "StateCut.h"

#include <string>
#include <vector>

namespace muon::runtime::statecut {

/// The step counts of the pieces as given: the optimizer's `steps` not
/// negative, each piece's step in [0, steps], and one step on every piece
/// of a parameter that carries AdamW's step (ElementSlot::carriesStep).
/// `what` names the set ("the state dict").
bool checkStepCounts(const Plan &plan, const std::vector<Source> &sources,
                     int64_t steps, const std::string &what,
                     std::string &error);

/// The values a load is about to apply (`local`: this rank's pieces as
/// cut, and its row states): finite everywhere, and not below zero where
/// the state is a second moment (ElementSlot::nonNegative,
/// MatrixStep::nonNegativeState). The error names the state, the
/// parameter and the element by its global index.
bool checkStateValues(const StateDict &local, const std::string &what,
                      std::string &error);

} // namespace muon::runtime::statecut

#endif // MUON_RUNTIME_LIB_STATECHECKS_H
