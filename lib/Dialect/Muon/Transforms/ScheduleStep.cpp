//===- ScheduleStep.cpp - Start/done split and list scheduling ------------===//
#include "muon/Dialect/Muon/Analysis/ExchangePlan.h"
#include "muon/Dialect/Muon/Analysis/Figures.h"
#include "muon/Dialect/Muon/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

namespace mlir::muon {
#define GEN_PASS_DEF_SCHEDULESTEP
#include "muon/Dialect/Muon/Transforms/Passes.h.inc"
} // namespace mlir::muon

using namespace mlir;
using namespace mlir::muon;

namespace {
struct ScheduleStep : mlir::muon::impl::ScheduleStepBase<ScheduleStep> {
  void runOnOperation() override {
    ModelOp model = getOperation();
    for (ScheduleOp old : llvm::make_early_inc_range(
             model.getBodyBlock().getOps<ScheduleOp>()))
      old.erase();
    FailureOr<ModelLayout> layout = computeModelLayout(model);
    if (failed(layout))
      return signalPassFailure();
    // Rounds come from muon-pack-rounds; a model without Muon matrices has
    // none and needs none.
    if (model.getBodyBlock().getOps<RoundOp>().empty() &&
        !collectMuonMatrices(model, *layout).empty()) {
      model.emitError() << "the step has no rounds; run muon-pack-rounds "
                           "first";
      return signalPassFailure();
    }
    // An empty schedule marks the model as packed (it may have no rounds).
    OpBuilder marker = OpBuilder::atBlockEnd(&model.getBodyBlock());
    auto schedule = ScheduleOp::create(marker, model.getLoc());
    FailureOr<::muon::Plan> plan = planFromModel(model, *layout, "f32",
                                                 /*withTransfers=*/false);
    if (failed(plan))
      return signalPassFailure();
    ::muon::sequenceSchedule(*plan);

    OpBuilder builder(model.getContext());
    builder.setInsertionPointToStart(&schedule.getBodyBlock());
    std::vector<Value> tokens(plan->exchanges.size());
    for (const ::muon::ScheduleStep &step : plan->schedule) {
      switch (step.kind) {
      case ::muon::ScheduleStep::Kind::Start: {
        const ::muon::Exchange &ex = plan->exchanges[step.index];
        // The IR's phases are the plan's, by name.
        ExchangePhase phase =
            *symbolizeExchangePhase(::muon::phaseName(ex.phase));
        tokens[step.index] = ExchangeStartOp::create(
            builder, model.getLoc(), TokenType::get(builder.getContext()),
            phase, ex.round);
        break;
      }
      case ::muon::ScheduleStep::Kind::Momentum:
        MomentumOp::create(builder, model.getLoc());
        break;
      case ::muon::ScheduleStep::Kind::ApplyUpdate:
        ApplyUpdateOp::create(builder, model.getLoc(), step.index);
        break;
      case ::muon::ScheduleStep::Kind::AdamW:
        AdamWUpdateOp::create(builder, model.getLoc());
        break;
      case ::muon::ScheduleStep::Kind::Done:
        ExchangeDoneOp::create(builder, model.getLoc(), tokens[step.index]);
        break;
      case ::muon::ScheduleStep::Kind::NewtonSchulz:
        NewtonSchulzOp::create(builder, model.getLoc(), step.index);
        break;
      }
    }
  }
};
} // namespace
