//===- VerifySchedule.cpp - Check the step's schedule ---------------------===//
#include "muon/Dialect/Muon/Analysis/ExchangePlan.h"
#include "muon/Dialect/Muon/Transforms/Passes.h"
#include "muon/Support/Replicas.h"

#include "llvm/ADT/DenseMap.h"

namespace mlir::muon {
#define GEN_PASS_DEF_VERIFYSCHEDULE
#include "muon/Dialect/Muon/Transforms/Passes.h.inc"
} // namespace mlir::muon

using namespace mlir;
using namespace mlir::muon;

namespace {
/// A redundant matrix runs Newton-Schulz on one rank per replica, each
/// with the replica's whole gradient. A parameter that is not replicated
/// has one replica, whose ranks do not each have the whole gradient: name
/// the first such rank and what it holds.
LogicalResult verifyRedundant(ModelOp model) {
  bool any = false;
  for (AssignOp a : model.getBodyBlock().getOps<AssignOp>())
    any |= a.getRedundant();
  if (!any)
    return success();
  FailureOr<ModelLayout> layout = computeModelLayout(model);
  if (failed(layout))
    return failure();
  llvm::DenseMap<StringAttr, size_t> indexOf;
  for (size_t i = 0; i < layout->params.size(); ++i)
    indexOf[ParamOp(layout->params[i]).getSymNameAttr()] = i;
  for (AssignOp a : model.getBodyBlock().getOps<AssignOp>()) {
    if (!a.getRedundant())
      continue;
    for (auto [ref, slice] : llvm::zip(a.getParams(), a.getSlices())) {
      auto it = indexOf.find(cast<FlatSymbolRefAttr>(ref).getAttr());
      if (it == indexOf.end())
        continue;
      const ::muon::ParamLayout &pl = layout->layouts[it->second];
      if (::muon::replicaCount(layout->mesh, pl) > 1)
        continue;
      int64_t m = slice < 0 ? 0 : slice;
      std::string name = cast<FlatSymbolRefAttr>(ref).getValue().str();
      if (pl.slicedMatrices())
        name += "[" + std::to_string(m) + "]";
      int64_t rows = pl.matrixRows(), cols = pl.matrixCols();
      for (const ::muon::MatrixPiece &p :
           ::muon::matrixPieces(layout->mesh, pl, m)) {
        std::string lacks;
        if (p.rows.size() != rows || p.cols.size() != cols)
          lacks = "it holds rows [" + std::to_string(p.rows.begin) + ", " +
                  std::to_string(p.rows.end) + ") and columns [" +
                  std::to_string(p.cols.begin) + ", " +
                  std::to_string(p.cols.end) + ") of " +
                  std::to_string(rows) + " x " + std::to_string(cols);
        else if (pl.isPartial())
          lacks = "it holds partial summand " + std::to_string(p.summand) +
                  " of the gradient";
        if (lacks.empty())
          continue;
        return a.emitError()
               << "redundant matrix @" << name << ": rank " << p.rank
               << " lacks its whole gradient (" << lacks
               << "), and the parameter is not replicated on any mesh axis, "
                  "so there is no replica that has it whole; assign it "
                  "without 'redundant'";
      }
      return a.emitError()
             << "redundant matrix @" << name
             << " has a single holder: there is nothing to orthogonalize "
                "redundantly; assign it without 'redundant'";
    }
  }
  return success();
}

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
    if (failed(verifyRedundant(model)))
      return signalPassFailure();
    FailureOr<::muon::Plan> plan = ownersPlanOf(model);
    if (failed(plan))
      return signalPassFailure();
    const ::muon::Status verified = ::muon::verifySchedule(*plan);
    if (verified.ok())
      return markAllAnalysesPreserved();
    std::string error = verified.message();
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
