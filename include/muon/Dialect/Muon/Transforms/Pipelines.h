//===- Pipelines.h - The muon compiler as one pipeline ----------*- C++ -*-===//
#ifndef MUON_DIALECT_MUON_TRANSFORMS_PIPELINES_H
#define MUON_DIALECT_MUON_TRANSFORMS_PIPELINES_H

#include "muon/Plan/Placement.h"
#include "muon/Plan/Plan.h"

#include "muon/Plan/TransferSink.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassManager.h"

#include <optional>
#include <string>

namespace mlir::muon {

/// Adds, on a pass manager nested on muon.model, the whole compiler:
/// process groups to mesh, owner assignment, round packing, scheduling and
/// schedule verification.
/// `machine`, when valid, is what muon-assign-owners' placement "auto"
/// decides on.
void buildCompilePipeline(OpPassManager &modelPm,
                          const ::muon::PlacementMachine &machine = {});

/// Registers `muon-compile` (the pipeline above, on every muon.model).
void registerCompilePipeline();

/// Settings that replace the model's own `muon.distributed` ones (tool
/// flags such as muon-run --wire-dtype).
struct CompileOverrides {
  std::optional<std::string> wireDtype;
  std::optional<int64_t> gatherBudgetBytes;
  std::optional<int64_t> maxRounds;
  /// Newton-Schulz placement ("auto", "once", "redundant_below" with
  /// `redundantBelow`), replacing muon.distributed's.
  std::optional<std::string> placement;
  std::optional<int64_t> redundantBelow;
  /// The machine placement "auto" decides on (a profile's numbers); not
  /// valid: none, and "auto" keeps one owner per matrix.
  ::muon::PlacementMachine machine;
  /// When set, the transfers go to this sink as they are made instead of
  /// into the plan (planFromModel): what a dry run at scale needs.
  ::muon::TransferSink *stream = nullptr;
};

/// The compiler as one call: runs the compile pipeline on the module's only
/// `muon.model` (after applying `overrides`), verifies the result once, and
/// returns the plan the IR now describes. Errors are emitted as
/// diagnostics; a module with no or several models is an error too.
FailureOr<::muon::Plan> compileModule(ModuleOp module,
                                      const CompileOverrides &overrides = {});

} // namespace mlir::muon

#endif // MUON_DIALECT_MUON_TRANSFORMS_PIPELINES_H
