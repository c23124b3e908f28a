//===- FuzzModel.cpp - Compile a fuzzed model -----------------------------===//
#include "muon/InitAll.h"
#include "FuzzModel.h"
#include "FuzzChecks.h"

#include "muon/Dialect/Muon/IR/ModelLayout.h"
#include "muon/Dialect/Muon/IR/MuonDialect.h"
#include "muon/Dialect/Muon/Transforms/Pipelines.h"
#include "muon/Support/ModelLimits.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"

namespace muon::fuzz {

std::unique_ptr<mlir::MLIRContext> makeContext() {
  mlir::DialectRegistry registry;
  mlir::muon::registerAllDialects(registry);
  auto context = std::make_unique<mlir::MLIRContext>(
      registry, mlir::MLIRContext::Threading::DISABLED);
  context->loadAllAvailableDialects();
  context->printOpOnDiagnostic(false);
  context->getDiagEngine().registerHandler(
      [](mlir::Diagnostic &) { return mlir::success(); });
  return context;
}

void compileAndCheck(mlir::ModuleOp module) {
  if (mlir::failed(mlir::verify(module)))
    return;
  auto models = llvm::to_vector(module.getOps<mlir::muon::ModelOp>());
  if (models.size() != 1)
    return;
  mlir::FailureOr<mlir::muon::ModelLayout> layout =
      mlir::muon::computeModelLayout(models.front());
  if (mlir::failed(layout))
    return;
  int64_t pieces = 0;
  for (size_t i = 0; i < layout->params.size(); ++i)
    if (mlir::muon::ParamOp(layout->params[i]).isOrthogonalized())
      pieces += numMatrices(layout->layouts[i].shape) *
                piecesPerMatrix(layout->mesh, layout->layouts[i]);
  if (!smallEnoughToCompile(layout->mesh.numDevices(), pieces))
    return;
  mlir::FailureOr<Plan> plan = mlir::muon::compileModule(module);
  if (mlir::succeeded(plan))
    checkCompiledPlan(*plan);
}

} // namespace muon::fuzz
