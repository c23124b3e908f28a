//===- ProcessGroups.h - Process groups to a device grid (no MLIR) -*- C++
//-*-===//
//
// The process-group configuration style names, for each parallelism kind, a
// partition of the world into equal groups. When the kinds are orthogonal they
// factor the world into a grid whose axis `k` coordinate of a rank is its
// position inside its group of kind `k`. This file finds that grid or says
// precisely why there is none.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_PROCESSGROUPS_H
#define MUON_SUPPORT_PROCESSGROUPS_H

#include "muon/Support/Layout.h"
#include "muon/Support/Status.h"

#include <optional>
#include <string>
#include <vector>

namespace muon {

struct GroupKind {
  std::string name;
  std::vector<std::vector<int64_t>> groups;
};

/// The grid the groups factor the world into. Axis `i` of `mesh` is
/// `kinds[axisKind[i]]`. Axes are ordered so that ranks are row-major when
/// some order allows it; otherwise `mesh.devices` lists the rank at each
/// position.
struct GroupGrid {
  Mesh mesh;
  std::vector<size_t> axisKind;
};

/// Checks that every kind partitions 0..worldSize-1 into equal groups and that
/// the kinds are orthogonal; returns the grid, or InvalidArgument naming the
/// offending groups.
StatusOr<GroupGrid> buildGroupGrid(int64_t worldSize,
                                   const std::vector<GroupKind> &kinds);

} // namespace muon

#endif // MUON_SUPPORT_PROCESSGROUPS_H
