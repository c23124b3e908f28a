//===- Passes.h - muon dialect passes ---------------------------*- C++ -*-===//
#ifndef MUON_DIALECT_MUON_TRANSFORMS_PASSES_H
#define MUON_DIALECT_MUON_TRANSFORMS_PASSES_H

#include "mlir/Pass/Pass.h"
#include "muon/Dialect/Muon/IR/MuonOps.h"

namespace mlir::muon {

#define GEN_PASS_DECL
#include "muon/Dialect/Muon/Transforms/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "muon/Dialect/Muon/Transforms/Passes.h.inc"

} // namespace mlir::muon

#endif // MUON_DIALECT_MUON_TRANSFORMS_PASSES_H
