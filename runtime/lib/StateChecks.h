//===- StateChecks.h - Loaded state, checked for sense ----------*- C++ -*-===//
//
// A state that passed every checksum can still be one that no run makes: a
// NaN in a moment, a negative second moment, pieces of one parameter that
// disagree on its step count. Such a state does not fail at once: it turns
// the next steps' updates into NaN, or quietly changes them. Both loads
// check here, before anything changes: Optimizer::loadStateDict what it is
// about to apply; loadCheckpoint every value as it reads it (while the
// bytes are in cache from their hash, readChunks' ValueCheck), and what the
// cut adds up. Internal to the runtime (StateDict.cpp, Checkpoint.cpp,
// CheckpointFormat.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_LIB_STATECHECKS_H
#define MUON_RUNTIME_LIB_STATECHECKS_H

#include "StateCut.h"

#include <functional>
#include <string>
#include <vector>

namespace muon::runtime::statecut {

/// The step counts of the pieces as given: the optimizer's `steps` not
/// negative, each piece's step in [0, steps], and one step on every piece
/// of a parameter that carries AdamW's step (ElementSlot::carriesStep).
/// `what` names the set ("the state dict").
Status checkStepCounts(const Plan &plan, const std::vector<Source> &sources,
                     int64_t steps, const std::string &what);

/// Whether values of the state slot (or per-row state) called `state` must
/// not be below zero: a second moment (ElementSlot::nonNegative,
/// MatrixStep::nonNegativeState). Every state must be finite.
bool mustBeNonNegative(const std::string &state);

/// The index of the first of `count` values at `data` that is not finite
/// or, with `nonNegative`, is below zero (-0 is zero); -1 when there is
/// none. A vectorized pass at memory speed.
int64_t firstImplausible(const float *data, int64_t count, bool nonNegative);

/// "the exp_avg_sq state of 'head' at [0, 1] is -0.25, below zero (a
/// second moment never is)": value `value` of `state` of `param`, element
/// `e` of the row-major `box`.
std::string implausibleElement(const std::string &state,
                               const std::string &param,
                               const std::vector<Range> &box, int64_t e,
                               float value);
/// The same for row `row` of a per-row state of matrix `slice` of `param`.
std::string implausibleRow(const std::string &state, const std::string &param,
                           int64_t slice, int64_t row, float value);

/// The values a load is about to apply (`local`: this rank's pieces as
/// cut, and its row states): finite everywhere, and not below zero where
/// the state is a second moment. With `only`, the piece states it accepts
/// (and no row states). The error names the state, the parameter and the
/// element by its global index, after `what`.
Status checkStateValues(
    const StateDict &local, const std::string &what,
    const std::function<bool(const StatePiece &, const std::string &)> &only =
        nullptr);

} // namespace muon::runtime::statecut

#endif // MUON_RUNTIME_LIB_STATECHECKS_H
