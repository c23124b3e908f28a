//===- PackRounds.cpp - Split the step's exchanges into rounds ------------===//
#include "muon/Dialect/Muon/Analysis/ExchangePlan.h"
#include "muon/Dialect/Muon/Transforms/Passes.h"

#include "mlir/IR/Builders.h"

#include <map>
#include <set>

namespace mlir::muon {
#define GEN_PASS_DEF_PACKROUNDS
#include "muon/Dialect/Muon/Transforms/Passes.h.inc"
} // namespace mlir::muon

using namespace mlir;
using namespace mlir::muon;

namespace {
struct PackRounds : mlir::muon::impl::PackRoundsBase<PackRounds> {
  void runOnOperation() override {
    ModelOp model = getOperation();
    for (Operation &op :
         llvm::make_early_inc_range(model.getBodyBlock().getOperations()))
      if (isa<RoundOp, ScheduleOp>(op))
        op.erase();
    FailureOr<::muon::Plan> plan = ownersPlanOf(model);
    if (failed(plan))
      return signalPassFailure();
    if (::muon::Status packed =
            ::muon::packRounds(*plan, scheduleOptionsOf(model));
        !packed.ok()) {
      model.emitError() << packed.message();
      return signalPassFailure();
    }
    // A parameter all of whose matrices share a round is named whole.
    std::map<int64_t, std::set<size_t>> roundsOfParam;
    for (size_t r = 0; r < plan->rounds.size(); ++r)
      for (int64_t m : plan->rounds[r])
        roundsOfParam[plan->matrices[m].paramIndex].insert(r);
    OpBuilder builder = OpBuilder::atBlockEnd(&model.getBodyBlock());
    for (size_t r = 0; r < plan->rounds.size(); ++r) {
      SmallVector<Attribute> refs;
      SmallVector<int64_t> slices;
      for (int64_t m : plan->rounds[r]) {
        const ::muon::PlanMatrix &pm = plan->matrices[m];
        bool whole = roundsOfParam[pm.paramIndex].size() == 1;
        if (whole && pm.slice > 0)
          continue;
        refs.push_back(FlatSymbolRefAttr::get(builder.getContext(), pm.param));
        slices.push_back(whole ? -1 : pm.slice);
      }
      RoundOp::create(builder, model.getLoc(), r, builder.getArrayAttr(refs),
                      builder.getDenseI64ArrayAttr(slices));
    }
  }
};
} // namespace
