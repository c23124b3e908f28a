//===- ProcessGroups.cpp - Process groups to a device grid ----------------===//
#include "muon/Support/ProcessGroups.h"

#include <algorithm>
#include <numeric>
#include <sstream>

namespace muon {
namespace {

/// Checks one kind is a partition of the world into equal groups; fills the
/// group index and position of every rank.
Status checkPartition(int64_t worldSize, const GroupKind &kind,
                      std::vector<int64_t> &groupOf,
                      std::vector<int64_t> &position) {
  std::ostringstream os;
  if (kind.groups.empty()) {
    os << "'" << kind.name << "' has no groups";
    return invalidArgument(os.str());
  }
  groupOf.assign(worldSize, -1);
  position.assign(worldSize, -1);
  size_t size = kind.groups[0].size();
  for (size_t g = 0; g < kind.groups.size(); ++g) {
    const auto &group = kind.groups[g];
    if (group.size() != size) {
      os << "'" << kind.name << "' group " << g << " " << formatRanks(group)
         << " has " << group.size() << (group.size() == 1 ? " rank" : " ranks")
         << " but group 0 has " << size
         << "; the groups of a kind must have equal size";
      return invalidArgument(os.str());
    }
    for (size_t p = 0; p < group.size(); ++p) {
      int64_t r = group[p];
      if (r < 0 || r >= worldSize) {
        os << "'" << kind.name << "' group " << g << " names rank " << r
           << ", outside the world of " << worldSize << " ranks";
        return invalidArgument(os.str());
      }
      if (groupOf[r] == static_cast<int64_t>(g)) {
        os << "'" << kind.name << "' group " << g << " lists rank " << r
           << " twice";
        return invalidArgument(os.str());
      }
      if (groupOf[r] >= 0) {
        os << "'" << kind.name << "' groups are not a partition of the world: "
           << "rank " << r << " is in group " << groupOf[r] << " and group "
           << g;
        return invalidArgument(os.str());
      }
      groupOf[r] = g;
      position[r] = p;
    }
  }
  for (int64_t r = 0; r < worldSize; ++r)
    if (groupOf[r] < 0) {
      os << "'" << kind.name << "' groups are not a partition of the world: "
         << "rank " << r << " is in no group";
      return invalidArgument(os.str());
    }
  return okStatus();
}

} // namespace

StatusOr<GroupGrid> buildGroupGrid(int64_t worldSize,
                                   const std::vector<GroupKind> &kinds) {
  std::ostringstream os;
  if (worldSize < 1)
    return invalidArgument("world_size must be at least 1");
  size_t n = kinds.size();
  std::vector<std::vector<int64_t>> groupOf(n), position(n);
  for (size_t k = 0; k < n; ++k)
    MUON_RETURN_IF_ERROR(
        checkPartition(worldSize, kinds[k], groupOf[k], position[k]));

  // Grid lines: all members of one group of kind k sit at the same position
  // on every other kind k2; otherwise the two kinds are not orthogonal.
  for (size_t k = 0; k < n; ++k)
    for (size_t g = 0; g < kinds[k].groups.size(); ++g) {
      const auto &group = kinds[k].groups[g];
      for (size_t k2 = 0; k2 < n; ++k2) {
        if (k2 == k)
          continue;
        for (int64_t r : group) {
          int64_t r0 = group[0];
          if (position[k2][r] == position[k2][r0])
            continue;
          if (groupOf[k2][r] == groupOf[k2][r0]) {
            os << "process groups '" << kinds[k].name << "' and '"
               << kinds[k2].name << "' are not orthogonal: both put ranks "
               << r0 << " and " << r << " in one group";
            return invalidArgument(os.str());
          }
          os << "process groups '" << kinds[k].name << "' and '"
             << kinds[k2].name << "' are not orthogonal: " << kinds[k].name
             << " group " << g << " " << formatRanks(group) << " holds ranks "
             << r0 << " and " << r << ", which sit at different positions ("
             << position[k2][r0] << " and " << position[k2][r] << ") of "
             << kinds[k2].name << " groups "
             << formatRanks(kinds[k2].groups[groupOf[k2][r0]]) << " and "
             << formatRanks(kinds[k2].groups[groupOf[k2][r]]);
          return invalidArgument(os.str());
        }
      }
    }

  int64_t product = 1;
  for (const auto &kind : kinds)
    product *= static_cast<int64_t>(kind.groups[0].size());
  if (product != worldSize) {
    os << "process groups do not factor the world into a grid: group sizes";
    for (const auto &kind : kinds)
      os << " " << kind.name << "=" << kind.groups[0].size();
    os << " multiply to " << product << ", not world_size " << worldSize;
    if (n >= 2)
      os << " (two kinds group the same ranks together)";
    return invalidArgument(os.str());
  }
  // With lines consistent and the sizes multiplying to the world, every
  // combination of positions exists, unless two ranks share all positions.
  {
    std::vector<int64_t> seen(worldSize, -1);
    for (int64_t r = 0; r < worldSize; ++r) {
      int64_t linear = 0;
      for (size_t k = 0; k < n; ++k)
        linear = linear * kinds[k].groups[0].size() + position[k][r];
      if (seen[linear] >= 0) {
        os << "process groups do not tell ranks " << seen[linear] << " and "
           << r << " apart: they sit at the same position in every group kind";
        return invalidArgument(os.str());
      }
      seen[linear] = r;
    }
  }

  // Prefer an axis order in which ranks are row-major (no device table).
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto isRowMajor = [&](const std::vector<size_t> &ord) {
    for (int64_t r = 0; r < worldSize; ++r) {
      int64_t linear = 0;
      for (size_t k : ord)
        linear = linear * kinds[k].groups[0].size() + position[k][r];
      if (linear != r)
        return false;
    }
    return true;
  };
  std::vector<size_t> chosen = order;
  bool rowMajor = false;
  do {
    if (isRowMajor(order)) {
      chosen = order;
      rowMajor = true;
      break;
    }
  } while (n <= 8 && std::next_permutation(order.begin(), order.end()));

  GroupGrid grid;
  grid.axisKind = chosen;
  for (size_t k : chosen)
    grid.mesh.shape.push_back(static_cast<int64_t>(kinds[k].groups[0].size()));
  if (!rowMajor) {
    grid.mesh.devices.assign(worldSize, -1);
    for (int64_t r = 0; r < worldSize; ++r) {
      std::vector<int64_t> coords;
      for (size_t k : chosen)
        coords.push_back(position[k][r]);
      grid.mesh.devices[grid.mesh.linearIndex(coords)] = r;
    }
  }
  return grid;
}

} // namespace muon
