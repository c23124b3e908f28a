//===- Figures.cpp - Work and traffic figures of a model ------------------===//
#include "muon/Dialect/Muon/Analysis/Figures.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <map>

using namespace mlir;
using namespace mlir::muon;

/// The Newton-Schulz steps of each Muon group by name; "" is the group of a
/// parameter that names none (the first Muon group).
static llvm::StringMap<int64_t> nsStepsByGroup(ModelOp model) {
  llvm::StringMap<int64_t> steps;
  steps[""] = 5; // torch.optim.Muon's default, without any Muon group
  bool first = true;
  for (OptimizerOp opt : model.getBodyBlock().getOps<OptimizerOp>()) {
    int64_t n = static_cast<int64_t>(opt.getNsSteps());
    steps[opt.groupName()] = n;
    if (first)
      steps[""] = n;
    first = false;
  }
  return steps;
}

/// The NS steps of the group `param` is in (the model verified the name).
static int64_t nsStepsOf(ParamOp param,
                         const llvm::StringMap<int64_t> &byGroup) {
  std::optional<StringRef> group = param.getParamGroup();
  auto it = byGroup.find(group ? *group : StringRef());
  return it != byGroup.end() ? it->second : byGroup.lookup("");
}

std::vector<MuonMatrix>
mlir::muon::collectMuonMatrices(ModelOp model, const ModelLayout &layout) {
  const llvm::StringMap<int64_t> byGroup = nsStepsByGroup(model);
  std::vector<MuonMatrix> matrices;
  for (size_t i = 0; i < layout.params.size(); ++i) {
    ParamOp param = layout.params[i];
    if (!param.isOrthogonalized())
      continue;
    const int64_t steps = nsStepsOf(param, byGroup);
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
                                  const std::vector<MuonMatrix> &matrices,
                                  std::vector<bool> *redundant) {
  llvm::DenseMap<StringAttr, size_t> indexOf;
  for (size_t i = 0; i < layout.params.size(); ++i)
    indexOf[ParamOp(layout.params[i]).getSymNameAttr()] = i;
  std::map<std::pair<size_t, int64_t>, std::pair<int64_t, bool>> owner;
  for (AssignOp assign : model.getBodyBlock().getOps<AssignOp>())
    for (auto [ref, slice] :
         llvm::zip(assign.getParams(), assign.getSlices())) {
      auto it = indexOf.find(cast<FlatSymbolRefAttr>(ref).getAttr());
      if (it == indexOf.end())
        continue;
      int64_t count = layout.layouts[it->second].numMatrices();
      for (int64_t m = slice < 0 ? 0 : slice;
           m < (slice < 0 ? count : slice + 1); ++m)
        owner[{it->second, m}] = {static_cast<int64_t>(assign.getRank()),
                                  assign.getRedundant()};
    }
  std::vector<int64_t> result;
  if (redundant)
    redundant->assign(matrices.size(), false);
  for (size_t k = 0; k < matrices.size(); ++k) {
    const MuonMatrix &mm = matrices[k];
    auto it = owner.find({mm.param, mm.matrix});
    result.push_back(it == owner.end() ? -1 : it->second.first);
    if (redundant && it != owner.end())
      (*redundant)[k] = it->second.second;
  }
  return result;
}
