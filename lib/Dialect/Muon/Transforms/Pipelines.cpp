//===- Pipelines.cpp - The muon compiler as one pipeline ------------------===//
#include "muon/Dialect/Muon/Transforms/Pipelines.h"
#include "muon/Conversion/Passes.h"
#include "muon/Dialect/Muon/Analysis/ExchangePlan.h"
#include "muon/Dialect/Muon/Transforms/Passes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Verifier.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void mlir::muon::buildCompilePipeline(
    OpPassManager &modelPm, const ::muon::PlacementMachine &machine) {
  modelPm.addPass(createConvertProcessGroupsToMesh());
  AssignOwnersOptions owners;
  owners.nsFlopsPerSecond = machine.nsFlopsPerSecond;
  owners.linkLatency = machine.latencySeconds;
  owners.linkBytesPerSecond = machine.bytesPerSecond;
  owners.interLatency = machine.interLatencySeconds;
  owners.interBytesPerSecond = machine.interBytesPerSecond;
  owners.ranksPerNode = machine.ranksPerNode;
  modelPm.addPass(createAssignOwners(owners));
  modelPm.addPass(createPackRounds());
  modelPm.addPass(createScheduleStep());
  modelPm.addPass(createVerifySchedule());
}

void mlir::muon::registerCompilePipeline() {
  PassPipelineRegistration<>(
      "muon-compile",
      "The whole compiler on every muon.model: process groups to mesh, "
      "owners, rounds, schedule, schedule verification",
      [](OpPassManager &pm) {
        buildCompilePipeline(pm.nest<muon::ModelOp>());
      });
}

FailureOr<::muon::Plan>
mlir::muon::compileModule(ModuleOp module, const CompileOverrides &overrides) {
  auto models = llvm::to_vector(module.getOps<ModelOp>());
  if (models.size() != 1)
    return module.emitError()
           << "expected one muon.model, found " << models.size();
  ModelOp model = models.front();
  Builder b(module.getContext());
  for (DistributedOp d : model.getBodyBlock().getOps<DistributedOp>()) {
    if (!overrides.wireDtype && !overrides.gatherBudgetBytes &&
        !overrides.maxRounds && !overrides.placement)
      break;
    if (overrides.placement) {
      d.setPlacementAttr(b.getStringAttr(*overrides.placement));
      if (overrides.redundantBelow)
        d.setRedundantBelowAttr(b.getI64IntegerAttr(*overrides.redundantBelow));
      else
        d.removeRedundantBelowAttr();
    }
    if (overrides.wireDtype) {
      std::optional<WireDtype> wire = symbolizeWireDtype(*overrides.wireDtype);
      if (!wire)
        return d.emitError() << "unknown wire dtype '" << *overrides.wireDtype
                             << "'; expected f32 or bf16";
      d.setWireDtype(*wire);
    }
    if (overrides.gatherBudgetBytes)
      d.setGatherBudgetBytesAttr(
          b.getI64IntegerAttr(*overrides.gatherBudgetBytes));
    if (overrides.maxRounds)
      d.setMaxRoundsAttr(b.getI64IntegerAttr(*overrides.maxRounds));
    // The overrides must keep the model's rules (limits, wire dtypes).
    if (failed(verify(d)))
      return failure();
  }
  // Every decision is written into the IR and checked.
  PassManager pm(module.getContext(), ModuleOp::getOperationName());
  buildCompilePipeline(pm.nest<ModelOp>(), overrides.machine);
  // The input was verified when it was read; verifying the whole model after
  // each pass costs seconds at scale, so the result is verified once.
  pm.enableVerifier(false);
  if (failed(pm.run(module)) || failed(verify(module)))
    return failure();
  FailureOr<ModelLayout> layout = computeModelLayout(model);
  if (failed(layout))
    return failure();
  return planFromModel(model, *layout,
                       overrides.wireDtype.value_or(std::string("f32")),
                       /*withTransfers=*/true, overrides.stream);
}
