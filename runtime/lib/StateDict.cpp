//===- StateDict.cpp - The optimizer state in memory, by global box -------===//
//
// OptimizerState::stateDict copies this rank's state to the host, one piece per
// parameter it holds; OptimizerState::loadStateDict cuts pieces of any layout
// to this rank's (StateCut.h), checks what it would apply (StateChecks.h) and
// writes it back. Checkpoints are built on both (Checkpoint.cpp).
//
//===----------------------------------------------------------------------===//
#include "OptimizerState.h"

#include "ApiBoundary.h"
#include "StateChecks.h"
#include "StateCut.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Plan/Validate.h"
#include "muon/Runtime/MatrixStep.h"
#include "muon/Support/Escape.h"

#include <algorithm>
#include <map>
#include <tuple>
#include <unordered_map>

namespace muon::runtime {

using namespace statecut;

Status OptimizerState::stateDict(bool withParameters, StateDict &dict) const {
  return guardedCall("taking a state dict",
                     [&] { return stateDictImpl(withParameters, dict); });
}

Status OptimizerState::loadStateDict(const StateDict &dict,
                                     bool withParameters) {
  return guardedCall("loading a state dict", [&] {
    const Status loaded = loadStateDictImpl(dict, withParameters);
    if (!loaded.ok())
      return invalidArgument(escapeBytes(loaded.message()));
    return okStatus();
  });
}

Status
OptimizerState::checkSavedGroups(const std::vector<PlanGroup> &saved) const {
  for (const PlanGroup &g : saved) {
    const PlanGroup *mine = group(g.name);
    if (!mine)
      return invalidArgument("group '" + g.name +
                             "' is not a group of this model");
    if (mine->algorithm != g.algorithm)
      return invalidArgument(
          "group '" + g.name + "' is " +
          (validAlgorithm(g.algorithm) ? algorithmName(g.algorithm)
                                       : "an unknown algorithm") +
          " there but " + algorithmName(mine->algorithm) + " here");
    if (Status bad = checkGroupSettings(g); !bad.ok())
      return invalidArgument("group '" + g.name + "': " + bad.location() +
                             ": " + bad.message());
  }
  return okStatus();
}

void OptimizerState::applySavedGroups(const std::vector<PlanGroup> &saved) {
  for (const PlanGroup &g : saved)
    executor->setGroup(findGroup(executor->groups(), g.name), g);
}

Status OptimizerState::stateDictImpl(bool withParameters, StateDict &dict) const {
  StateDict out;
  out.steps = steps;
  out.groups = executor->groups();
  for (size_t i = 0; i < slots.size(); ++i) {
    const ParamSlot &slot = slots[i];
    if (!slot.elements)
      continue;
    if (withParameters && !slot.bound) {
      return failedPrecondition("parameter '" + slot.name +
                                "' is not bound, so its values cannot be read");
    }
    StatePiece &piece = out.pieces.emplace_back();
    piece.param = slot.name;
    piece.box = slot.box;
    piece.summand = slot.summand;
    piece.summands = summandCount(thePlan, i);
    const PlanGroup &group = thePlan.groups[slot.group];
    for (int s = 0; s < valuesSlot(); ++s)
      if (keepsSlot(group, elementSlots()[s])) {
        std::vector<float> &to = piece.states[slotName(s)];
        to.resize(slot.elements);
        device.copyToHost(to.data(), executor->elementState(i, s),
                          slot.elements * 4);
      }
    piece.step = executor->stepCount(i);
    if (withParameters) {
      std::vector<char> typed(slot.elements * dtypeBytes(slot.dtype));
      device.copyToHost(typed.data(), values[i], typed.size());
      std::vector<float> &to = piece.states[slotName(valuesSlot())];
      to.resize(slot.elements);
      for (int64_t e = 0; e < slot.elements; ++e)
        to[e] = loadAs(typed.data(), slot.dtype, e);
    }
  }
  for (const StepExecutor::RowSlot &slot : executor->rowSlots()) {
    const PlanMatrix &m = thePlan.matrices[slot.matrix];
    RowStatePiece &row = out.rowStates.emplace_back();
    row.param = m.param;
    row.slice = std::max<int64_t>(m.slice, 0);
    row.state = matrixSteps()[slot.step].state;
    row.values.resize(m.rows);
    device.copyToHost(row.values.data(),
                      executor->rowState(slot.matrix, slot.step), m.rows * 4);
  }
  dict = std::move(out);
  return okStatus();
}

Status OptimizerState::cutRowStates(const std::vector<RowStatePiece> &saved,
                                  const std::vector<PlanGroup> &savedGroups,
                                  const std::string &what,
                                  std::vector<RowStatePiece> &out) const {
  const Plan &plan = thePlan;
  // Every saved row state names a matrix of this model, by parameter and
  // slice, and has its rows.
  std::map<std::tuple<std::string, int64_t, std::string>,
           const RowStatePiece *>
      bySlice;
  for (size_t r = 0; r < saved.size(); ++r) {
    const RowStatePiece &row = saved[r];
    std::string where = what + ": row state " + std::to_string(r) + " ('" +
                        row.param + "' slice " + std::to_string(row.slice) +
                        ")";
    if (matrixStepOfState(row.state) < 0) {
      return invalidArgument(where + ": unknown state '" + row.state + "' (expected " +
              matrixStateNames() + ")");
    }
    auto it = slotOf.find(row.param);
    if (it == slotOf.end()) {
      return invalidArgument(where + ": no parameter '" + row.param + "' in this model");
    }
    const PlanParam &p = plan.params[it->second];
    const std::vector<int64_t> &shape = p.layout.shape;
    if (!p.orthogonalized() || shape.size() < 2) {
      return invalidArgument(where + ": '" + row.param + "' is not a Muon matrix");
    }
    // Matrices by index: batch slices times heads (ParamLayout::numMatrices).
    int64_t slices = p.layout.numMatrices();
    if (row.slice < 0 || row.slice >= slices) {
      return invalidArgument(where + ": slice out of range; '" + row.param + "' has " +
              std::to_string(slices) + " matrices");
    }
    int64_t rows = p.layout.matrixRows();
    if (static_cast<int64_t>(row.values.size()) != rows) {
      return invalidArgument(where + ": " + std::to_string(row.values.size()) +
              " values; the matrix has " + std::to_string(rows) + " rows");
    }
    bySlice.emplace(std::make_tuple(row.param, row.slice, row.state), &row);
  }
  out.clear();
  for (const StepExecutor::RowSlot &slot : executor->rowSlots()) {
    const PlanMatrix &m = plan.matrices[slot.matrix];
    const MatrixStep &step = matrixSteps()[slot.step];
    RowStatePiece &row = out.emplace_back();
    row.param = m.param;
    row.slice = std::max<int64_t>(m.slice, 0);
    row.state = step.state;
    auto it = bySlice.find({row.param, row.slice, row.state});
    if (it != bySlice.end()) {
      row.values = it->second->values;
      continue;
    }
    const std::string &group = plan.groups[plan.params[m.paramIndex].group].name;
    for (const PlanGroup &g : savedGroups)
      if (g.name == group && step.enabled(g)) {
        return invalidArgument(what + ": no " + step.state + " state for matrix " +
                m.label() + ", though its group '" + group + "' was " +
                step.title + " when saved");
      }
    row.values.assign(m.rows, 0.0f); // the step starts here
  }
  return okStatus();
}

Status OptimizerState::loadStateDictImpl(const StateDict &dict,
                                         bool withParameters) {
  const Plan &plan = thePlan;
  // Everything is checked and cut into a staging dict first; the state
  // changes only when all of it fits.
  std::vector<Source> sources;
  sources.reserve(dict.pieces.size());
  std::unordered_map<std::string, int64_t> paramIndex;
  for (size_t i = 0; i < plan.params.size(); ++i)
    paramIndex[plan.params[i].name] = static_cast<int64_t>(i);
  auto fail = [&](const std::string &reason) {
    return invalidArgument("loading a state dict: " + reason +
                           "; nothing was changed");
  };
  for (size_t k = 0; k < dict.pieces.size(); ++k) {
    const StatePiece &piece = dict.pieces[k];
    std::string where = "piece " + std::to_string(k) + " ('" + piece.param +
                        "' " + boxText(piece.box) + ")";
    auto it = paramIndex.find(piece.param);
    if (it == paramIndex.end())
      return fail(where + ": no parameter '" + piece.param + "' in this model");
    Source &s = sources.emplace_back();
    s.param = it->second;
    s.box = piece.box;
    s.summand = piece.summand;
    s.summands = piece.summands;
    s.step = piece.step;
    const AlgorithmId algorithm = plan.params[s.param].algorithm;
    for (const auto &[name, data] : piece.states) {
      int slot = slotNamed(algorithm, name);
      if (slot < 0)
        return fail(where + ": unknown state '" + name + "' (expected " +
                    slotNames(algorithm) + ")");
      s.has[slot] = true;
      s.data[slot] = data.data();
    }
    if (Status bad = checkSource(plan, s, where); !bad.ok())
      return fail(bad.message());
    int64_t elements = 1;
    for (const Range &r : piece.box)
      elements *= r.size();
    for (const auto &[name, data] : piece.states)
      if (static_cast<int64_t>(data.size()) != elements)
        return fail(where + ": its " + name + " has " +
                    std::to_string(data.size()) + " values, its box " +
                    std::to_string(elements));
  }
  if (withParameters)
    for (const ParamSlot &slot : slots)
      if (slot.elements && !slot.bound)
        return fail("parameter '" + slot.name +
                    "' is not bound, so its values cannot be loaded");
  if (Status bad = checkSavedGroups(dict.groups); !bad.ok())
    return fail(bad.message());
  std::vector<int64_t> splits;
  StateDict local;
  const std::string what = "the state dict";
  if (Status bad = checkCutState(sources, dict, what, withParameters, splits,
                                 local);
      !bad.ok())
    return fail(bad.message());
  local.steps = dict.steps;
  local.groups = dict.groups;
  applyState(local, withParameters);
  return okStatus();
}

Status OptimizerState::checkCutState(const std::vector<Source> &sources,
                                     const StateDict &dict,
                                     const std::string &what,
                                     bool withParameters,
                                     std::vector<int64_t> &splits,
                                     StateDict &local) const {
  const Plan &plan = thePlan;
  MUON_RETURN_IF_ERROR(checkSplits(plan, sources, what, splits));
  MUON_RETURN_IF_ERROR(checkStepCounts(plan, sources, dict.steps, what));
  MUON_RETURN_IF_ERROR(cut(plan, comm.rank(), slots, sources, splits,
                           withParameters, what, &local, nullptr));
  MUON_RETURN_IF_ERROR(
      cutRowStates(dict.rowStates, dict.groups, what, local.rowStates));
  return checkStateValues(local, what);
}

void OptimizerState::applyState(const StateDict &local, bool withParameters) {
  size_t next = 0;
  for (size_t i = 0; i < slots.size(); ++i) {
    const ParamSlot &slot = slots[i];
    if (!slot.elements)
      continue;
    const StatePiece &piece = local.pieces[next++];
    const PlanGroup &group = thePlan.groups[slot.group];
    for (int s = 0; s < valuesSlot(); ++s)
      if (keepsSlot(group, elementSlots()[s]))
        device.copyToDevice(executor->elementState(i, s),
                            piece.states.at(slotName(s)).data(),
                            slot.elements * 4);
    executor->stepCount(i) = piece.step;
    if (withParameters) {
      const std::vector<float> &from =
          piece.states.at(slotName(valuesSlot()));
      std::vector<char> typed(slot.elements * dtypeBytes(slot.dtype));
      for (int64_t e = 0; e < slot.elements; ++e)
        storeAs(typed.data(), slot.dtype, e, from[e]);
      device.copyToDevice(values[i], typed.data(), typed.size());
    }
  }
  // The per-row states, as cutRowStates lined them up.
  std::vector<StepExecutor::RowSlot> rows = executor->rowSlots();
  for (size_t r = 0; r < rows.size() && r < local.rowStates.size(); ++r)
    device.copyToDevice(executor->rowState(rows[r].matrix, rows[r].step),
                        local.rowStates[r].values.data(),
                        local.rowStates[r].values.size() * 4);
  steps = local.steps;
  applySavedGroups(local.groups);
}

} // namespace muon::runtime
