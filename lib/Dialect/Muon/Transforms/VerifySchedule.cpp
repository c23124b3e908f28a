//===- VerifySchedule.cpp - Check the step's schedule ---------------------===//
#include "muon/Dialect/Muon/Analysis/ExchangePlan.h"
#include "muon/Dialect/Muon/Transforms/Passes.h"

namespace mlir::muon {
#define GEN_PASS_DEF_VERIFYSCHEDULE
#include "muon/Dialect/Muon/Transforms/Passes.h.inc"
} // namespace mlir::muon

using namespace mlir;
using namespace mlir::muon;

namespace {
struct VerifySchedule : mlir::muon::impl::VerifyScheduleBase<VerifySchedule> {
  void runOnOperation() override {
    ModelOp model = getOperation();
    auto schedules = model.getBodyBlock().getOps<ScheduleOp>();
    if (schedules.empty()) {
      model.emitError() << "the step has no schedule; run muon-schedule-step "
                           "first";
      return signalPassFailure();
    }
    ScheduleOp schedule = *schedules.begin();
    FailureOr<::muon::Plan> plan = ownersPlanOf(model);
    if (failed(plan))
      return signalPassFailure();
    std::string error = ::muon::verifySchedule(*plan);
    if (error.empty())
      return markAllAnalysesPreserved();
    // "schedule step N: ..." names the N-th op of the region.
    Operation *at = schedule;
    StringRef rest = error;
    if (rest.consume_front("schedule step ")) {
      size_t step;
      if (!rest.consumeInteger(10, step) && rest.consume_front(": ")) {
        auto &ops = schedule.getBodyBlock().getOperations();
        if (step < ops.size())
          at = &*std::next(ops.begin(), step);
        error = rest.str();
      }
    }
    at->emitError() << error;
    signalPassFailure();
  }
};
} // namespace
