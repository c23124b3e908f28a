//===- Pipelines.h - The muon compiler as one pipeline ----------*- C++ -*-===//
#ifndef MUON_DIALECT_MUON_TRANSFORMS_PIPELINES_H
#define MUON_DIALECT_MUON_TRANSFORMS_PIPELINES_H

#include "mlir/Pass/PassManager.h"

namespace mlir::muon {

/// Adds, on a pass manager nested on muon.model, the whole compiler:
/// process groups to mesh, owner assignment, round packing, scheduling and
/// schedule verification.
void buildCompilePipeline(OpPassManager &modelPm);

/// Registers `muon-compile` (the pipeline above, on every muon.model).
void registerCompilePipeline();

} // namespace mlir::muon

#endif // MUON_DIALECT_MUON_TRANSFORMS_PIPELINES_H
