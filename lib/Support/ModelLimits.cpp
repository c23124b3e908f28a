//===- ModelLimits.cpp - A model's sizes against the limits ---------------===//
#include "muon/Support/ModelLimits.h"
#include "muon/Support/Limits.h"

#include <algorithm>

namespace muon {
using namespace limits;

Status checkMeshLimits(const Mesh &mesh) {
  if (mesh.shape.empty())
    return invalidArgument("a mesh needs at least one axis");
  if (static_cast<int64_t>(mesh.shape.size()) > kMaxMeshAxes)
    return invalidArgument("a mesh of " + std::to_string(mesh.shape.size()) +
           " axes is above the limit of " + describe(kMaxMeshAxes));
  for (size_t a = 0; a < mesh.shape.size(); ++a)
    if (mesh.shape[a] < 1)
      return invalidArgument("mesh axis " + std::to_string(a) + " has size " +
             std::to_string(mesh.shape[a]) + "; sizes must be at least 1");
  if (!boundedProduct(mesh.shape, kMaxWorldSize)) {
    std::string sizes;
    for (int64_t s : mesh.shape)
      sizes += (sizes.empty() ? "" : " x ") + std::to_string(s);
    return invalidArgument("a mesh of " + sizes + " devices is above the limit of " +
           describe(kMaxWorldSize) + " ranks");
  }
  if (!mesh.devices.empty()) {
    int64_t world = mesh.numDevices();
    if (static_cast<int64_t>(mesh.devices.size()) != world)
      return invalidArgument("the device table has " + std::to_string(mesh.devices.size()) +
             " entries for " + std::to_string(world) + " devices");
    std::vector<bool> seen(world, false);
    for (size_t i = 0; i < mesh.devices.size(); ++i) {
      int64_t r = mesh.devices[i];
      if (r < 0 || r >= world)
        return invalidArgument("the device table names rank " + std::to_string(r) +
               ", outside the world of " + std::to_string(world) + " ranks");
      if (seen[r])
        return invalidArgument("the device table names rank " + std::to_string(r) + " twice");
      seen[r] = true;
    }
  }
  return okStatus();
}

Status checkShapeLimits(const std::vector<int64_t> &shape,
                             bool orthogonalized) {
  if (static_cast<int64_t>(shape.size()) > kMaxTensorDims)
    return invalidArgument("has " + std::to_string(shape.size()) +
           " dims, above the limit of " + describe(kMaxTensorDims));
  for (size_t d = 0; d < shape.size(); ++d)
    if (shape[d] < 1)
      return invalidArgument("has dim " + std::to_string(d) + " of size " +
             std::to_string(shape[d]) + "; sizes must be at least 1");
  if (!boundedProduct(shape, kMaxParamElements))
    return invalidArgument("has more elements than the limit of " +
           describe(kMaxParamElements) + " per parameter");
  if (!orthogonalized)
    return okStatus();
  if (shape.size() < 2)
    return invalidArgument("has " + std::to_string(shape.size()) +
           " dim(s) but Muon orthogonalizes matrices");
  int64_t rows = shape[shape.size() - 2], cols = shape.back();
  if (!boundedProduct({rows, cols}, kMaxMatrixElements))
    return invalidArgument("has " + std::to_string(rows) + " x " + std::to_string(cols) +
           " matrices, above the limit of " + describe(kMaxMatrixElements) +
           " elements per Muon matrix");
  if (numMatrices(shape) > kMaxMatrices)
    return invalidArgument("has " + std::to_string(numMatrices(shape)) +
           " matrices, above the limit of " + describe(kMaxMatrices));
  return okStatus();
}

namespace {
/// Mesh-axis sizes of the axes splitting each dim, major to minor.
std::vector<std::vector<int64_t>> chains(const Mesh &mesh,
                                         const ParamLayout &layout) {
  std::vector<std::vector<int64_t>> out(layout.shape.size());
  for (size_t d = 0; d < layout.shape.size() && d < layout.splitAxes.size();
       ++d)
    for (int64_t axis : layout.splitAxes[d])
      out[d].push_back(mesh.shape[axis]);
  return out;
}

/// Non-empty chunks a chain of splits leaves of a dim of `size`: each level
/// cuts every chunk into full chunks of ceil(size/parts) and one remainder.
int64_t nonEmptyChunks(int64_t size, const std::vector<int64_t> &chain,
                       size_t level = 0) {
  if (size == 0)
    return 0;
  if (level == chain.size())
    return 1;
  int64_t chunk = (size + chain[level] - 1) / chain[level];
  int64_t full = size / chunk, rest = size - full * chunk;
  // At most `chain[level]` chunks, so the counts stay within the mesh size.
  return full * nonEmptyChunks(chunk, chain, level + 1) +
         (rest ? nonEmptyChunks(rest, chain, level + 1) : 0);
}

/// The largest chunk a chain of splits leaves of a dim of `size`.
int64_t largestChunk(int64_t size, const std::vector<int64_t> &chain) {
  for (int64_t parts : chain)
    size = (size + parts - 1) / parts;
  return size;
}

/// Product of the sizes of the axes that neither split a dim nor are fixed
/// by `only`: the copies (replicas and partial summands) of every piece.
int64_t copies(const Mesh &mesh, const ParamLayout &layout) {
  int64_t c = 1;
  for (int64_t axis = 0; axis < mesh.rank(); ++axis) {
    bool split = false;
    for (const auto &axes : layout.splitAxes)
      split |= std::find(axes.begin(), axes.end(), axis) != axes.end();
    bool only = std::any_of(layout.only.begin(), layout.only.end(),
                            [&](auto p) { return p.first == axis; });
    if (!split && !only)
      c *= mesh.shape[axis]; // within the world size
  }
  return c;
}

int64_t summands(const Mesh &mesh, const ParamLayout &layout) {
  int64_t s = 1;
  for (int64_t axis : layout.partialAxes)
    s *= mesh.shape[axis];
  return s;
}
} // namespace

int64_t copiesOf(const Mesh &mesh, const ParamLayout &layout) {
  return copies(mesh, layout);
}

int64_t piecesPerMatrix(const Mesh &mesh, const ParamLayout &layout) {
  std::vector<std::vector<int64_t>> ch = chains(mesh, layout);
  size_t rank = layout.shape.size();
  int64_t pieces = copies(mesh, layout);
  // Batch dims: the slice's index lies in exactly one non-empty chunk.
  for (size_t d = rank >= 2 ? rank - 2 : 0; d < rank; ++d)
    pieces *= nonEmptyChunks(layout.shape[d], ch[d]); // both within the world
  return pieces;
}

bool checkModelLimits(const Mesh &mesh, const std::vector<ParamLayout> &layouts,
                      const std::vector<bool> &orthogonalized, int64_t nsSteps,
                      ModelLimitError &error) {
  auto fail = [&](int64_t param, std::string message) {
    error = {param, std::move(message)};
    return false;
  };
  if (static_cast<int64_t>(layouts.size()) > kMaxParams)
    return fail(-1, "the model has " + std::to_string(layouts.size()) +
                        " parameters, above the limit of " +
                        describe(kMaxParams));
  int64_t elements = 0, matrices = 0, pieces = 0, bytes = 0, flops = 0;
  // Adds `moved` elements (nothing: it overflowed) to the step's bytes.
  auto addBytes = [&](size_t i, std::optional<int64_t> moved) {
    if (moved)
      moved = checkedMul(*moved, 4);
    if (!moved || (bytes += *moved) > kMaxStepBytes)
      return fail(i, "a step would move more than " + describe(kMaxStepBytes) +
                         " bytes with this parameter");
    return true;
  };
  for (size_t i = 0; i < layouts.size(); ++i) {
    const ParamLayout &pl = layouts[i];
    // Each within its own limit, so the sums below stay far from overflow
    // until they pass the model's limits.
    std::optional<int64_t> size = boundedProduct(pl.shape, kMaxParamElements);
    if (!size)
      return fail(i, "has more elements than the limit of " +
                         describe(kMaxParamElements) + " per parameter");
    elements += *size;
    if (elements > kMaxModelElements)
      return fail(i, "the model's parameters reach more than " +
                         describe(kMaxModelElements) +
                         " elements with this one");
    std::vector<std::vector<int64_t>> ch = chains(mesh, pl);
    if (orthogonalized[i]) {
      int64_t count = pl.numMatrices();
      matrices += count;
      if (matrices > kMaxMatrices)
        return fail(i, "the model has more than " + describe(kMaxMatrices) +
                           " Muon matrices with this parameter");
      std::optional<int64_t> p =
          checkedMul(count, piecesPerMatrix(mesh, pl));
      if (!p || (pieces += *p) > kMaxPieces)
        return fail(i, "the model's matrices have more than " +
                           describe(kMaxPieces) +
                           " pieces across ranks with this parameter");
      int64_t rows = pl.matrixRows(), cols = pl.matrixCols();
      // Gathers move at most every summand of every copy, scatters every
      // copy: (summands + copies) x elements per matrix.
      if (!addBytes(i, checkedMul(summands(mesh, pl) + copies(mesh, pl),
                                  count * rows * cols)))
        return false;
      std::optional<int64_t> f =
          checkedMul(count, nsFlops(rows, cols, nsSteps));
      if (!f || (flops += *f) > kMaxStepFlops)
        return fail(i, "a step's Newton-Schulz work passes the limit of " +
                           describe(kMaxStepFlops) +
                           " flops with this parameter");
    } else if (!pl.partialAxes.empty()) {
      // The AdamW reduce: every holder gets every other summand of its
      // piece.
      int64_t holders = copies(mesh, pl), piece = 1;
      for (size_t d = 0; d < pl.shape.size(); ++d) {
        holders *= nonEmptyChunks(pl.shape[d], ch[d]);
        piece *= largestChunk(pl.shape[d], ch[d]);
      }
      std::optional<int64_t> r =
          checkedMul(holders, summands(mesh, pl) - 1);
      if (!r || (pieces += *r) > kMaxPieces)
        return fail(i, "the AdamW reductions pass the limit of " +
                           describe(kMaxPieces) +
                           " pieces with this parameter");
      if (!addBytes(i, checkedMul(*r, piece)))
        return false;
    }
  }
  return true;
}

} // namespace muon
