//===- muon-opt.cpp - The muon optimizer driver ---------------------------===//
//
// mlir-opt with only the muon dialect, `shard` and our passes registered.
// Exit codes follow the tools' contract: 0 success, 2 invalid input.
//
//===----------------------------------------------------------------------===//
#include "muon/Conversion/Passes.h"
#include "muon/Dialect/Muon/IR/MuonDialect.h"
#include "muon/Dialect/Muon/Transforms/Passes.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  registry.insert<mlir::muon::MuonDialect, mlir::shard::ShardDialect>();
  mlir::muon::registerMuonConversionPasses();
  mlir::muon::registerMuonTransformsPasses();
  return mlir::failed(mlir::MlirOptMain(argc, argv, "muon optimizer driver\n",
                                        registry))
             ? 2
             : 0;
}
