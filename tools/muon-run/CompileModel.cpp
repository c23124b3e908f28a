//===- CompileModel.cpp - Spec or IR to plan, for muon-run ----------------===//
#include "PlanInput.h"
#include "Console.h"

#include "muon/InitAll.h"

#include "muon/Dialect/Muon/Analysis/ExchangePlan.h"
#include "muon/Dialect/Muon/IR/MuonDialect.h"
#include "muon/Dialect/Muon/IR/MuonOps.h"
#include "muon/Dialect/Muon/Transforms/Pipelines.h"
#include "muon/Target/Spec/SpecImport.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace mlir;

namespace muon::tool {

bool haveCompiler() { return true; }

/// The element type Newton-Schulz runs in, as the run resolves it: the
/// flag, else the model's ns_dtype, with "auto" as the run's device means
/// it.
static std::string nsDtypeOf(ModuleOp module, const CompileFlags &flags) {
  std::string ns = flags.nsDtypeFlag;
  for (mlir::muon::ModelOp model : module.getOps<mlir::muon::ModelOp>())
    // Every Muon group shares ns_dtype (the verifier checks).
    for (mlir::muon::OptimizerOp o :
         model.getBodyBlock().getOps<mlir::muon::OptimizerOp>())
      if (ns.empty())
        ns = mlir::muon::stringifyNsDtype(o.getNsDtype()).str();
  if (ns.empty() || ns == "auto")
    ns = flags.autoNsDtype;
  return ns;
}

bool compileModel(const std::string &path, const std::string &text,
                  const CompileFlags &flags, Plan &plan) {
  std::unique_ptr<llvm::MemoryBuffer> buffer =
      llvm::MemoryBuffer::getMemBufferCopy(text, path);
  DialectRegistry registry;
  mlir::muon::registerAllDialects(registry);
  MLIRContext context(registry);
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  std::unique_ptr<ScopedDiagnosticHandler> handler;
  OwningOpRef<ModuleOp> module;
  const bool spec = StringRef(path).ends_with(".json") ||
                    StringRef(text).ltrim().starts_with("{");
  if (spec) {
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
  else if (spec && !flags.autoNsDtype.empty() &&
           nsDtypeOf(*module, flags) == "bf16")
    // A spec has no wire setting (it is a compiler setting): it follows
    // Newton-Schulz. IR says its own (muon.distributed's wire_dtype).
    overrides.wireDtype = "bf16";
  if (flags.gatherBudgetGiven)
    overrides.gatherBudgetBytes = flags.gatherBudgetBytes;
  if (flags.maxRoundsGiven)
    overrides.maxRounds = flags.maxRounds;
  overrides.placement = flags.placement;
  overrides.redundantBelow = flags.redundantBelow;
  overrides.machine = flags.machine;
  overrides.stream = flags.stream;
  FailureOr<Plan> compiled = mlir::muon::compileModule(*module, overrides);
  if (failed(compiled))
    return false;
  plan = std::move(*compiled);
  return true;
}

} // namespace muon::tool
