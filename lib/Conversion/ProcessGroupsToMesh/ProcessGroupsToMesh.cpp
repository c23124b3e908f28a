//===- ProcessGroupsToMesh.cpp - Process groups to placements on a mesh ---===//
//
// The interpretation of the groups lives in ModelLayout (shared with the
// verifier); this pass only writes the result back as IR.
//
//===----------------------------------------------------------------------===//
#include "muon/Conversion/Passes.h"
#include "muon/Dialect/Muon/IR/ModelLayout.h"
#include "muon/Dialect/Muon/IR/ShardAdapter.h"

#include "mlir/IR/Builders.h"

namespace mlir::muon {
#define GEN_PASS_DEF_CONVERTPROCESSGROUPSTOMESH
#include "muon/Conversion/Passes.h.inc"
} // namespace mlir::muon

using namespace mlir;
using namespace mlir::muon;

namespace {
struct ConvertProcessGroupsToMesh
    : mlir::muon::impl::ConvertProcessGroupsToMeshBase<
          ConvertProcessGroupsToMesh> {
  void runOnOperation() override {
    ModelOp model = getOperation();
    if (!model.usesProcessGroups())
      return;
    FailureOr<ModelLayout> layout = computeModelLayout(model);
    if (failed(layout))
      return signalPassFailure();

    OpBuilder builder(model.getContext());
    MLIRContext *ctx = model.getContext();
    builder.setInsertionPointToStart(&model.getBodyBlock());
    Location loc = model.getBodyBlock().front().getLoc();
    // Pick a grid name no parameter uses.
    std::string gridName = "mesh";
    for (int i = 0; SymbolTable::lookupSymbolIn(model, gridName); ++i)
      gridName = "mesh_" + std::to_string(i);
    Operation *grid =
        shard_adapter::createGrid(builder, loc, gridName, layout->mesh.shape);
    SmallVector<Attribute> names;
    for (const std::string &n : layout->axisNames)
      names.push_back(builder.getStringAttr(n));
    grid->setAttr(MuonDialect::kAxisNamesAttr, builder.getArrayAttr(names));
    if (!layout->mesh.devices.empty())
      grid->setAttr(MuonDialect::kDevicesAttr,
                    builder.getDenseI64ArrayAttr(layout->mesh.devices));

    auto gridRef = FlatSymbolRefAttr::get(ctx, gridName);
    for (auto [param, pl] : llvm::zip(layout->params, layout->layouts)) {
      SmallVector<Attribute> split;
      for (const auto &axes : pl.splitAxes)
        split.push_back(builder.getDenseI64ArrayAttr(axes));
      param.setGridAttr(gridRef);
      param.setSplitAxesAttr(builder.getArrayAttr(split));
      if (!pl.only.empty()) {
        SmallVector<int64_t> pairs;
        for (auto [axis, coord] : pl.only)
          pairs.append({axis, coord});
        param.setOnlyAttr(builder.getDenseI64ArrayAttr(pairs));
      }
      param.removeTpDimAttr();
      param.removeStageAttr();
      param.removeExpertAttr();
    }
    for (GroupOp g :
         llvm::make_early_inc_range(model.getBodyBlock().getOps<GroupOp>()))
      g.erase();
    model.removeWorldSizeAttr();
    model.removeFsdpDimAttr();
    model.removeNumExpertsAttr();
  }
};
} // namespace
