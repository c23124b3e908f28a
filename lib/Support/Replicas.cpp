//===- Replicas.cpp - A matrix's replicas ---------------------------------===//
#include "muon/Support/Replicas.h"

#include <algorithm>

namespace muon {

std::vector<int64_t> replicatedAxes(const Mesh &mesh,
                                    const ParamLayout &layout) {
  std::vector<bool> used(mesh.shape.size(), false);
  auto mark = [&](int64_t a) {
    if (a >= 0 && a < static_cast<int64_t>(used.size()))
      used[a] = true;
  };
  for (const std::vector<int64_t> &axes : layout.splitAxes)
    for (int64_t a : axes)
      mark(a);
  for (int64_t a : layout.partialAxes)
    mark(a);
  for (const auto &[a, coordinate] : layout.only)
    mark(a);
  std::vector<int64_t> axes;
  for (size_t a = 0; a < used.size(); ++a)
    if (!used[a] && mesh.shape[a] > 1)
      axes.push_back(static_cast<int64_t>(a));
  return axes;
}

int64_t replicaCount(const Mesh &mesh, const ParamLayout &layout) {
  int64_t count = 1;
  for (int64_t a : replicatedAxes(mesh, layout))
    count *= mesh.shape[a];
  return count;
}

int64_t replicaOwnerOf(const Mesh &mesh, const ParamLayout &layout,
                       int64_t owner, int64_t rank) {
  std::vector<int64_t> coords = mesh.coordsOfRank(owner);
  std::vector<int64_t> theirs = mesh.coordsOfRank(rank);
  for (int64_t a : replicatedAxes(mesh, layout))
    coords[a] = theirs[a];
  return mesh.rankAt(coords);
}

std::vector<int64_t> replicaOwners(const Mesh &mesh, const ParamLayout &layout,
                                   int64_t owner) {
  std::vector<int64_t> axes = replicatedAxes(mesh, layout);
  std::vector<int64_t> coords = mesh.coordsOfRank(owner);
  for (int64_t a : axes)
    coords[a] = 0;
  std::vector<int64_t> owners;
  // Odometer over the replicated axes.
  while (true) {
    owners.push_back(mesh.rankAt(coords));
    size_t i = axes.size();
    while (i > 0) {
      int64_t a = axes[i - 1];
      if (++coords[a] < mesh.shape[a])
        break;
      coords[a] = 0;
      --i;
    }
    if (i == 0)
      break;
  }
  std::sort(owners.begin(), owners.end());
  return owners;
}

bool inFirstReplica(const Mesh &mesh, const ParamLayout &layout,
                    int64_t owner) {
  std::vector<int64_t> coords = mesh.coordsOfRank(owner);
  for (int64_t a : replicatedAxes(mesh, layout))
    if (coords[a] != 0)
      return false;
  return true;
}

} // namespace muon
