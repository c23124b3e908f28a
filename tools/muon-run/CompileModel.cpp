//===- CompileModel.cpp - Spec or IR to plan, for muon-run ----------------===//
#include "CompileModel.h"
#include "Console.h"

#include "muon/Dialect/Muon/Analysis/ExchangePlan.h"
#include "muon/Dialect/Muon/IR/MuonDialect.h"
#include "muon/Dialect/Muon/Transforms/Pipelines.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Target/Spec/SpecImport.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace muon::tool {

bool loadPlan(const std::string &path, const CompileFlags &flags, Plan &plan,
              bool &isPlanFile) {
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> buffer = openInputFile(path, &error);
  if (!buffer) {
    printError(error);
    return false;
  }
  StringRef text = buffer->getBuffer();
  // A plan file names its format first; a spec is another JSON object; IR
  // never starts with '{'.
  isPlanFile = text.ltrim().starts_with("{") &&
               text.take_front(256).contains("\"muon-plan/");
  if (isPlanFile) {
    if (flags.wireDtypeGiven || flags.gatherBudgetGiven || flags.maxRoundsGiven) {
      printError(path + ": a plan file is already compiled; --wire-dtype, "
                        "--gather-budget-bytes and --max-rounds apply to "
                        "specs and IR only");
      return false;
    }
    if (!parsePlan(text.str(), plan, error)) {
      printError(path + ": " + error);
      return false;
    }
    return true;
  }

  DialectRegistry registry;
  registry.insert<mlir::muon::MuonDialect, shard::ShardDialect>();
  MLIRContext context(registry);
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  std::unique_ptr<ScopedDiagnosticHandler> handler;
  OwningOpRef<ModuleOp> module;
  if (StringRef(path).ends_with(".json") || text.ltrim().starts_with("{")) {
    handler =
        std::make_unique<mlir::muon::SpecDiagnosticHandler>(&context, path);
    module = mlir::muon::importSpec(text, &context, path);
  } else {
    sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
    handler = std::make_unique<SourceMgrDiagnosticHandler>(sourceMgr, &context);
    module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  }
  if (!module)
    return false;
  auto models = llvm::to_vector(module->getOps<mlir::muon::ModelOp>());
  if (models.size() != 1) {
    printError("expected one muon.model in '" + path + "', found " +
               std::to_string(models.size()));
    return false;
  }
  mlir::muon::ModelOp model = models.front();
  for (mlir::muon::DistributedOp d :
       model.getBodyBlock().getOps<mlir::muon::DistributedOp>()) {
    Builder b(&context);
    if (flags.wireDtypeGiven)
      d.setWireDtypeAttr(b.getStringAttr(flags.wireDtype));
    if (flags.gatherBudgetGiven)
      d.setGatherBudgetBytesAttr(b.getI64IntegerAttr(flags.gatherBudgetBytes));
    if (flags.maxRoundsGiven)
      d.setMaxRoundsAttr(b.getI64IntegerAttr(flags.maxRounds));
  }
  // The compiler proper: every decision is written into the IR and checked.
  PassManager pm(&context, ModuleOp::getOperationName());
  mlir::muon::buildCompilePipeline(pm.nest<mlir::muon::ModelOp>());
  // The input was verified when it was read; verifying the whole model after
  // each pass costs seconds at scale, so the result is verified once.
  pm.enableVerifier(false);
  if (failed(pm.run(*module)) || failed(verify(*module)))
    return false;
  FailureOr<mlir::muon::ModelLayout> layout =
      mlir::muon::computeModelLayout(model);
  if (failed(layout))
    return false;
  FailureOr<Plan> compiled =
      mlir::muon::planFromModel(model, *layout, flags.wireDtype);
  if (failed(compiled))
    return false;
  plan = std::move(*compiled);
  return true;
}

} // namespace muon::tool
