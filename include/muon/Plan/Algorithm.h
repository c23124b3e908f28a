//===- Algorithm.h - The optimizer algorithms, registered once ---*- C++ -*-===//
//
// Every algorithm a parameter group can run, described once: its name in
// every API and format, whether it orthogonalizes matrices (Muon: the
// plan's matrices are its parameters', gathered to an owner for
// Newton-Schulz and scattered back) or updates each element of a piece on
// the summed gradient (AdamW, Lion), its settings (GroupSettings.h), its
// per-element state (ElementState.h), and the runtime's per-element steps
// that run it, by name (muon/Runtime/ElementStep.h). The registry
// (lib/Plan/Algorithms.cpp) is the one place an algorithm is added: the
// plan formats, checkpoints, the dialect, the spec importer, the compiler
// API, the C API and Python read it and change nothing for a new one;
// docs/architecture.md ("How a variant is added") walks through one.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_ALGORITHM_H
#define MUON_PLAN_ALGORITHM_H

#include "muon/Plan/ElementState.h"
#include "muon/Plan/GroupSettings.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace muon {

struct Algorithm {
  /// The name in the spec (`param_groups[i].algorithm`,
  /// `params[i].optimizer`), the plan's and the checkpoints' JSON, the C
  /// API and Python: "muon", "adamw", ...
  const char *name;
  /// The name in messages: "Muon", "AdamW".
  const char *title;
  /// Orthogonalizes its parameters' matrices (2 or more dims; Muon). Else
  /// every holder of a piece updates it element by element, after the
  /// reduction that a partial gradient needs (Exchange::Phase::Reduce).
  bool orthogonalizes;
  /// Its byte in binary plans (muon-plan-bin/*): never reused, so that a
  /// reader refuses an algorithm it does not know.
  uint8_t binaryCode;
  /// Its tag in a checkpoint's model hash (what makes two plans the same
  /// model): the name, except for the first two, whose checkpoints were
  /// written with "m" and "a".
  const char *modelTag;
  /// The runtime's per-element steps (ElementStep.h) that run it: `prepare`
  /// on every holder's own gradient summand before any exchange (Muon's
  /// momentum, whose result the gathers carry; null for others), and
  /// `update`, which writes the parameter's values (after the scatter, or
  /// on the summed gradient).
  const char *prepareStep;
  const char *updateStep;
  /// Its settings and its per-element slots, in their order.
  std::vector<GroupSetting> settings;
  std::vector<ElementSlot> slots;
};

/// Every algorithm; an AlgorithmId indexes it. Muon and AdamW are kMuon
/// and kAdamW.
const std::vector<Algorithm> &algorithms();
/// Whether `algorithm` is an id of the registry.
bool validAlgorithm(AlgorithmId algorithm);
/// The algorithm with id `algorithm` (which must be valid).
const Algorithm &algorithmOf(AlgorithmId algorithm);
/// The algorithm called `name`, or nullopt.
std::optional<AlgorithmId> findAlgorithm(std::string_view name);
/// The algorithm whose binary code is `code`, or nullopt.
std::optional<AlgorithmId> algorithmWithBinaryCode(uint8_t code);
/// The algorithms' names for messages: `"muon", "adamw" or "lion"`.
std::string algorithmNames(char quote = '"');

} // namespace muon

#endif // MUON_PLAN_ALGORITHM_H
