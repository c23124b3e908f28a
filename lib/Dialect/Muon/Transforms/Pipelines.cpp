//===- Pipelines.cpp - The muon compiler as one pipeline ------------------===//
#include "muon/Dialect/Muon/Transforms/Pipelines.h"
#include "muon/Conversion/Passes.h"
#include "muon/Dialect/Muon/Transforms/Passes.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void mlir::muon::buildCompilePipeline(OpPassManager &modelPm) {
  modelPm.addPass(createConvertProcessGroupsToMesh());
  modelPm.addPass(createAssignOwners());
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
