//===- Bounds.cpp - Lower bounds of the run report ------------------------===//
#include "muon/Planner/Bounds.h"
#include "muon/Support/ModelLimits.h"

#include <algorithm>
#include <map>

namespace muon {

LowerBounds computeLowerBounds(const Mesh &mesh,
                               const std::vector<ParamLayout> &layouts,
                               const std::vector<BoundMatrix> &matrices,
                               int64_t wireBytes) {
  LowerBounds bounds;
  // Holder set -> NS flops of the matrices held exactly by it.
  std::map<std::vector<int64_t>, int64_t> flopsBySet;
  MatrixPieceCache pieceCache(mesh);
  uint64_t setVersion = 0;
  int64_t largest = 0;
  int64_t *setFlops = nullptr;
  for (const BoundMatrix &mm : matrices) {
    const ParamLayout &pl = layouts[mm.param];
    const std::vector<MatrixPiece> &pieces = pieceCache.pieces(pl, mm.matrix);
    // Largest piece and holder set: the same for every matrix sharing the
    // cached list (the map lookup compares thousands of ranks at scale).
    if (setVersion != pieceCache.version()) {
      largest = 0;
      std::vector<int64_t> holders;
      for (const MatrixPiece &piece : pieces) {
        largest = std::max(largest, piece.elements());
        holders.push_back(piece.rank);
      }
      setFlops = &flopsBySet[holders];
      setVersion = pieceCache.version();
    }
    // p: partial summands; c: copies of the whole matrix over the holders
    // (product of the replicated and partial axes outside `only`).
    int64_t p = 1, c = copiesOf(mesh, pl);
    for (int64_t axis : pl.partialAxes)
      p *= mesh.shape[axis];
    int64_t full = mm.rows * mm.cols * wireBytes;
    bounds.bytesReceived += (p + c) * full - 2 * largest * wireBytes;
    bounds.makespanFlops = std::max(bounds.makespanFlops, mm.nsFlops);
    *setFlops += mm.nsFlops;
  }
  // For each holder set H: all work that must land inside H, spread evenly.
  for (const auto &[set, unused] : flopsBySet) {
    int64_t inside = 0;
    for (const auto &[other, flops] : flopsBySet)
      if (std::includes(set.begin(), set.end(), other.begin(), other.end()))
        inside += flops;
    int64_t size = static_cast<int64_t>(set.size());
    bounds.makespanFlops =
        std::max(bounds.makespanFlops, (inside + size - 1) / size);
  }
  return bounds;
}

LowerBounds planLowerBounds(const Plan &plan) {
  std::vector<ParamLayout> layouts;
  for (const PlanParam &p : plan.params)
    layouts.push_back(p.layout);
  std::vector<BoundMatrix> matrices;
  // A rank's part of a plan lists only its matrices; the bounds need all.
  std::vector<PlanMatrix> all;
  if (plan.isSlice())
    all = muonMatrices(plan.params, plan.groups, plan.ns);
  for (const PlanMatrix &m : plan.isSlice() ? all : plan.matrices)
    matrices.push_back({m.paramIndex, std::max<int64_t>(m.slice, 0), m.rows,
                        m.cols, m.nsFlops});
  return computeLowerBounds(plan.mesh, layouts, matrices, plan.wireBytes);
}

} // namespace muon
