//===- Passes.h - muon conversion passes ------------------------*- C++ -*-===//
#ifndef MUON_CONVERSION_PASSES_H
#define MUON_CONVERSION_PASSES_H

#include "mlir/Pass/Pass.h"
#include "muon/Dialect/Muon/IR/MuonOps.h"

namespace mlir::muon {

#define GEN_PASS_DECL
#include "muon/Conversion/Passes.h.inc"

#define GEN_PASS_REGISTRATION
#include "muon/Conversion/Passes.h.inc"

} // namespace mlir::muon

#endif // MUON_CONVERSION_PASSES_H
