//===- ModelLayout.h - A model's mesh and parameter layouts -----*- C++ -*-===//
//
// The canonical view of a `muon.model` that every analysis works on: the
// mesh (with axis names and the device order) and, for every parameter, its
// layout in the split-axes model. Computed from either configuration style,
// so process groups are interpreted in exactly one place.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_DIALECT_MUON_IR_MODELLAYOUT_H
#define MUON_DIALECT_MUON_IR_MODELLAYOUT_H

#include "muon/Dialect/Muon/IR/MuonOps.h"
#include "muon/Support/Layout.h"

#include "llvm/ADT/SmallVector.h"

#include <string>

namespace mlir::muon {

// The layout math is plain C++ in ::muon (shared with the runtime).
using ::muon::chunkRange;
using ::muon::Mesh;
using ::muon::nsFlops;
using ::muon::numMatrices;
using ::muon::ParamLayout;
using ::muon::Range;

struct ModelLayout {
  Mesh mesh;
  std::vector<std::string> axisNames;
  llvm::SmallVector<ParamOp> params;
  std::vector<ParamLayout> layouts; // parallel to `params`
};

/// Builds the canonical view. Emits an error on the offending op and fails
/// when the description is inconsistent (bad groups, ids out of range, ...).
FailureOr<ModelLayout> computeModelLayout(ModelOp model);

using ::muon::MatrixPiece;

/// The pieces of matrix `matrix` (row-major over the batch dims) of parameter
/// `i`, one per rank holding a non-empty piece, in rank order. Replicas and
/// partial summands each count as a piece of their own.
std::vector<MatrixPiece> matrixPieces(const ModelLayout &layout, size_t i,
                                      int64_t matrix);

/// Ranks that hold a non-empty piece of matrix `matrix` of parameter `i`.
std::vector<int64_t> matrixHolders(const ModelLayout &layout, size_t i,
                                   int64_t matrix);

/// A readable name for mesh axis `axis` ("tp", or "axis 1" when unnamed).
std::string axisLabel(const ModelLayout &layout, int64_t axis);

} // namespace mlir::muon

#endif // MUON_DIALECT_MUON_IR_MODELLAYOUT_H
