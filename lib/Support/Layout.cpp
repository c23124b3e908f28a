//===- Layout.cpp - Sharded-tensor layout math ----------------------------===//
#include "muon/Support/Layout.h"

#include <algorithm>
#include <cassert>

namespace muon {

Range chunkRange(int64_t size, int64_t parts, int64_t index) {
  assert(parts > 0 && index >= 0 && index < parts);
  int64_t chunk = (size + parts - 1) / parts;
  int64_t begin = std::min(size, index * chunk);
  int64_t end = std::min(size, begin + chunk);
  return {begin, end};
}

int64_t Mesh::numDevices() const {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  return n;
}

int64_t Mesh::linearIndex(const std::vector<int64_t> &coords) const {
  int64_t linear = 0;
  for (size_t a = 0; a < shape.size(); ++a)
    linear = linear * shape[a] + coords[a];
  return linear;
}

std::vector<int64_t> Mesh::coordsOfLinear(int64_t linear) const {
  std::vector<int64_t> coords(shape.size());
  for (size_t a = shape.size(); a-- > 0;) {
    coords[a] = linear % shape[a];
    linear /= shape[a];
  }
  return coords;
}

int64_t Mesh::rankAt(const std::vector<int64_t> &coords) const {
  int64_t linear = linearIndex(coords);
  return devices.empty() ? linear : devices[linear];
}

std::vector<int64_t> Mesh::coordsOfRank(int64_t rank) const {
  if (devices.empty())
    return coordsOfLinear(rank);
  auto it = std::find(devices.begin(), devices.end(), rank);
  assert(it != devices.end() && "rank not on the mesh");
  return coordsOfLinear(it - devices.begin());
}

bool ParamLayout::inSubmesh(const std::vector<int64_t> &coords) const {
  for (auto [axis, coord] : only)
    if (coords[axis] != coord)
      return false;
  return true;
}

std::vector<Range> ParamLayout::localBox(
    const Mesh &mesh, const std::vector<int64_t> &coords) const {
  std::vector<Range> box(shape.size());
  for (size_t d = 0; d < shape.size(); ++d) {
    Range r{0, shape[d]};
    // Major to minor: each axis chunks what the previous axes left.
    if (d < splitAxes.size())
      for (int64_t axis : splitAxes[d]) {
        Range sub = chunkRange(r.size(), mesh.shape[axis], coords[axis]);
        r = {r.begin + sub.begin, r.begin + sub.end};
      }
    box[d] = r;
  }
  return box;
}

bool ParamLayout::isSharded() const {
  for (const auto &axes : splitAxes)
    if (!axes.empty())
      return true;
  return false;
}

int64_t numMatrices(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (size_t d = 0; d + 2 < shape.size(); ++d)
    n *= shape[d];
  return n;
}

int64_t nsFlops(int64_t m, int64_t n, int64_t nsSteps) {
  int64_t a = std::min(m, n), b = std::max(m, n);
  return nsSteps * (4 * a * a * b + 2 * a * a * a);
}

} // namespace muon
