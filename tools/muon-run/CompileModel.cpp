//===- CompileModel.cpp - Spec or IR to plan, for muon-run ----------------===//
#include "muon/InitAll.h"
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
  mlir::muon::registerAllDialects(registry);
  MLIRContext context(registry);
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  std::unique_ptr<ScopedDiagnosticHandler> handler;
  OwningOpRef<ModuleOp> module;
  if (StringRef(path).ends_with(".json") || text.ltrim().starts_with("{")) {
    handler =
        std::make_unique<mlir::muon::SpecDiagnosticHandler>(&context, path);
    module = mlir::muon::importSpec(text, &context);
  } else {
    sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
    handler = std::make_unique<SourceMgrDiagnosticHandler>(sourceMgr, &context);
    module = parseSourceFile<ModuleOp>(sourceMgr, &context);
  }
  if (!module)
    return false;
  mlir::muon::CompileOverrides overrides;
  if (flags.wireDtypeGiven)
    overrides.wireDtype = flags.wireDtype;
  if (flags.gatherBudgetGiven)
    overrides.gatherBudgetBytes = flags.gatherBudgetBytes;
  if (flags.maxRoundsGiven)
    overrides.maxRounds = flags.maxRounds;
  FailureOr<Plan> compiled = mlir::muon::compileModule(*module, overrides);
  if (failed(compiled))
    return false;
  plan = std::move(*compiled);
  return true;
}

} // namespace muon::tool
