//===- Bounds.h - Lower bounds of the run report ----------------*- C++ -*-===//
//
// The least traffic and the least Newton-Schulz work of the busiest rank that
// any zero-redundancy scheme needs (spec contract, section 2). Plain C++, so
// that the compiler, a dry run and a real run from a plan file all compute
// them from the same code.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLANNER_BOUNDS_H
#define MUON_PLANNER_BOUNDS_H

#include "muon/Plan/Plan.h"
#include "muon/Support/Layout.h"

#include <cstdint>
#include <vector>

namespace muon {

struct LowerBounds {
  int64_t bytesReceived = 0;
  int64_t makespanFlops = 0;
};

/// One Muon matrix as the bounds see it: its parameter (index into
/// `layouts`), its slice (row-major over the batch dims), its shape and NS
/// work.
struct BoundMatrix {
  int64_t param = 0;
  int64_t matrix = 0;
  int64_t rows = 0, cols = 0;
  int64_t nsFlops = 0;
};

/// The bounds for `wireBytes` bytes per element on the wire.
LowerBounds computeLowerBounds(const Mesh &mesh,
                               const std::vector<ParamLayout> &layouts,
                               const std::vector<BoundMatrix> &matrices,
                               int64_t wireBytes);

/// The bounds of a plan's model, in the plan's wire dtype.
LowerBounds planLowerBounds(const Plan &plan);

} // namespace muon

#endif // MUON_PLANNER_BOUNDS_H
