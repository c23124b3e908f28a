//===- FuzzModel.h - Compile a fuzzed model ---------------------*- C++ -*-===//
#ifndef MUON_FUZZ_FUZZMODEL_H
#define MUON_FUZZ_FUZZMODEL_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/MLIRContext.h"

#include <memory>

namespace muon::fuzz {

/// A context with the muon and shard dialects, one thread, and
/// diagnostics swallowed (rejecting input is the common case).
std::unique_ptr<mlir::MLIRContext> makeContext();

/// If the module verifies and its model is small enough, compiles it and
/// checks the plan; a compile error on a verified model is fine (budgets),
/// a crash or an unsound plan is not.
void compileAndCheck(mlir::ModuleOp module);

} // namespace muon::fuzz

#endif // MUON_FUZZ_FUZZMODEL_H
