//===- Figures.cpp - Work and traffic figures of a model ------------------===//
#include "muon/Dialect/Muon/Analysis/Figures.h"

#include "llvm/ADT/DenseMap.h"

#include <map>

using namespace mlir;
using namespace mlir::muon;

static int64_t nsStepsOf(ModelOp model) {
  for (OptimizerOp opt : model.getBodyBlock().getOps<OptimizerOp>())
    return opt.getNsSteps();
  return 5; // torch.optim.Muon's default
}

std::vector<MuonMatrix>
mlir::muon::collectMuonMatrices(ModelOp model, const ModelLayout &layout) {
  int64_t steps = nsStepsOf(model);
  std::vector<MuonMatrix> matrices;
  for (size_t i = 0; i < layout.params.size(); ++i) {
    ParamOp param = layout.params[i];
    if (!param.isMuon())
      continue;
    const ParamLayout &pl = layout.layouts[i];
    int64_t rows = pl.matrixRows(), cols = pl.matrixCols();
    int64_t count = pl.numMatrices();
    bool batched = pl.slicedMatrices();
    for (int64_t m = 0; m < count; ++m) {
      std::string label = param.getSymName().str();
      if (batched)
        label += "[" + std::to_string(m) + "]";
      matrices.push_back(
          {i, m, rows, cols, nsFlops(rows, cols, steps), std::move(label)});
    }
  }
  return matrices;
}

LowerBounds
mlir::muon::computeLowerBounds(const ModelLayout &layout,
                               const std::vector<MuonMatrix> &matrices,
                               int64_t wireBytes) {
  std::vector<::muon::BoundMatrix> bound;
  bound.reserve(matrices.size());
  for (const MuonMatrix &mm : matrices)
    bound.push_back({static_cast<int64_t>(mm.param), mm.matrix, mm.rows,
                     mm.cols, mm.nsFlops});
  return ::muon::computeLowerBounds(layout.mesh, layout.layouts, bound,
                                    wireBytes);
}

std::vector<int64_t>
mlir::muon::ownersFromAssignments(ModelOp model, const ModelLayout &layout,
                                  const std::vector<MuonMatrix> &matrices) {
  llvm::DenseMap<StringAttr, size_t> indexOf;
  for (size_t i = 0; i < layout.params.size(); ++i)
    indexOf[ParamOp(layout.params[i]).getSymNameAttr()] = i;
  std::map<std::pair<size_t, int64_t>, int64_t> owner;
  for (AssignOp assign : model.getBodyBlock().getOps<AssignOp>())
    for (auto [ref, slice] :
         llvm::zip(assign.getParams(), assign.getSlices())) {
      auto it = indexOf.find(cast<FlatSymbolRefAttr>(ref).getAttr());
      if (it == indexOf.end())
        continue;
      int64_t count = layout.layouts[it->second].numMatrices();
      for (int64_t m = slice < 0 ? 0 : slice;
           m < (slice < 0 ? count : slice + 1); ++m)
        owner[{it->second, m}] = assign.getRank();
    }
  std::vector<int64_t> result;
  for (const MuonMatrix &mm : matrices) {
    auto it = owner.find({mm.param, mm.matrix});
    result.push_back(it == owner.end() ? -1 : it->second);
  }
  return result;
}
