//===- Figures.h - Work and traffic figures of a model ----------*- C++ -*-===//
//
// The numbers of the run report that follow from the layout and the owners:
// per-rank Newton-Schulz flops and owned matrices, and the two lower bounds
// (docs/spec-format.md, section 2).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_DIALECT_MUON_ANALYSIS_FIGURES_H
#define MUON_DIALECT_MUON_ANALYSIS_FIGURES_H

#include "muon/Dialect/Muon/IR/ModelLayout.h"
#include "muon/Planner/Bounds.h"

#include <string>
#include <vector>

namespace mlir::muon {

/// One Muon matrix: parameter index in the layout, slice, trailing shape.
struct MuonMatrix {
  size_t param;
  int64_t matrix;
  int64_t rows, cols;
  int64_t nsFlops;
  /// "name" for 2-D parameters, "name[i]" for slices of batched ones.
  std::string label;
};

/// Every Muon matrix of the model in parameter order.
std::vector<MuonMatrix> collectMuonMatrices(ModelOp model,
                                            const ModelLayout &layout);

using ::muon::LowerBounds;

/// The least bytes any zero-redundancy scheme must receive and the least NS
/// work of the busiest rank, for `wireBytes` bytes per element on the wire.
LowerBounds computeLowerBounds(const ModelLayout &layout,
                               const std::vector<MuonMatrix> &matrices,
                               int64_t wireBytes);

/// The owner of every matrix of `matrices`, from the model's `muon.assign`
/// ops; -1 where none is assigned. With `redundant`, also whether each is
/// assigned `redundant` (once per replica).
std::vector<int64_t>
ownersFromAssignments(ModelOp model, const ModelLayout &layout,
                      const std::vector<MuonMatrix> &matrices,
                      std::vector<bool> *redundant = nullptr);

} // namespace mlir::muon

#endif // MUON_DIALECT_MUON_ANALYSIS_FIGURES_H
