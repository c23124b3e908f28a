//===- InitAll.h - Everything the muon tools register -----------*- C++ -*-===//
//
// One place that names the dialects and passes of the project, for every
// tool, library entry point and test that builds a context (as MLIR's own
// InitAllDialects.h / InitAllPasses.h do upstream).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_INITALL_H
#define MUON_INITALL_H

#include "muon/Conversion/Passes.h"
#include "muon/Dialect/Muon/IR/MuonDialect.h"
#include "muon/Dialect/Muon/Transforms/Passes.h"
#include "muon/Dialect/Muon/Transforms/Pipelines.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/DialectRegistry.h"

namespace mlir::muon {

/// The muon dialect and the upstream dialects its IR uses.
inline void registerAllDialects(DialectRegistry &registry) {
  registry.insert<MuonDialect, shard::ShardDialect>();
}

/// Every pass and the `muon-compile` pipeline, for muon-opt's command line.
inline void registerAllPasses() {
  registerMuonConversionPasses();
  registerMuonTransformsPasses();
  registerCompilePipeline();
}

} // namespace mlir::muon

#endif // MUON_INITALL_H
