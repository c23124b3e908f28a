//===- Layout.cpp - Sharded-tensor layout math ----------------------------===//
#include "muon/Support/Layout.h"

#include "muon/Support/Format.h"
#include "muon/Support/Limits.h"

#include <algorithm>
#include <array>
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

std::vector<Range>
ParamLayout::localBox(const Mesh &mesh,
                      const std::vector<int64_t> &coords) const {
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

bool ParamLayout::holdsMatrix(const Mesh &mesh,
                              const std::vector<int64_t> &coords,
                              int64_t matrix) const {
  if (!inSubmesh(coords))
    return false;
  std::vector<Range> box = localBox(mesh, coords);
  size_t rank = shape.size();
  Range rows = headRowsOf(matrix), cols = headColsOf(matrix);
  if (std::min(box[rank - 2].end, rows.end) <=
          std::max(box[rank - 2].begin, rows.begin) ||
      std::min(box[rank - 1].end, cols.end) <=
          std::max(box[rank - 1].begin, cols.begin))
    return false;
  matrix = batchSliceOf(matrix);
  for (size_t d = rank - 2; d-- > 0;) {
    int64_t index = matrix % shape[d];
    matrix /= shape[d];
    if (index < box[d].begin || index >= box[d].end)
      return false;
  }
  return true;
}

int64_t ParamLayout::numMatrices() const {
  return muon::numMatrices(shape) * numHeads;
}

int64_t ParamLayout::matrixRows() const {
  int64_t rows = shape[shape.size() - 2];
  return headSplitDim == 0 ? rows / numHeads : rows;
}

int64_t ParamLayout::matrixCols() const {
  int64_t cols = shape.back();
  return headSplitDim == 1 ? cols / numHeads : cols;
}

Range ParamLayout::headRowsOf(int64_t m) const {
  int64_t rows = matrixRows();
  if (headSplitDim != 0)
    return {0, rows};
  int64_t head = m % numHeads;
  return {head * rows, (head + 1) * rows};
}

Range ParamLayout::headColsOf(int64_t m) const {
  int64_t cols = matrixCols();
  if (headSplitDim != 1)
    return {0, cols};
  int64_t head = m % numHeads;
  return {head * cols, (head + 1) * cols};
}

bool ParamLayout::isSharded() const {
  for (const auto &axes : splitAxes)
    if (!axes.empty())
      return true;
  return false;
}

namespace {
/// A way to pick coordinates on the axes splitting one dim, with the range of
/// the dim it leaves.
struct DimChoice {
  // The coordinates on the dim's split axes, in their order. Inline: pieces
  // are enumerated per matrix, and a heap vector per choice made the
  // allocator most of the cost at scale (millions of choices at 16,384
  // ranks). A dim is split by distinct mesh axes, and a checked mesh has at
  // most kMaxMeshAxes.
  std::array<int32_t, limits::kMaxMeshAxes> coords{};
  int32_t count = 0;
  Range range;
};
} // namespace

namespace {
/// Calls `fn(rank, box choices per dim, summand)` for every rank holding a
/// non-empty piece of the parameter; with `batch`, only pieces holding that
/// batch index (one coordinate per leading dim). The cost is proportional
/// to the number of pieces, not to the size of the mesh.
template <typename Fn>
void forEachPiece(const Mesh &mesh, const ParamLayout &layout,
                  const std::vector<int64_t> *batch, Fn fn) {
  size_t rank = layout.shape.size();
  // Per dim, the coordinate choices of its split axes that keep a non-empty
  // range (containing the batch index for batch dims).
  std::vector<std::vector<DimChoice>> choices(rank);
  std::vector<bool> isSplit(mesh.shape.size(), false);
  for (size_t d = 0; d < rank; ++d) {
    DimChoice whole;
    whole.range = {0, layout.shape[d]};
    std::vector<DimChoice> current{whole};
    const std::vector<int64_t> noAxes;
    const std::vector<int64_t> &axes =
        d < layout.splitAxes.size() ? layout.splitAxes[d] : noAxes;
    for (int64_t axis : axes) {
      isSplit[axis] = true;
      std::vector<DimChoice> next;
      for (const DimChoice &c : current)
        for (int64_t k = 0; k < mesh.shape[axis]; ++k) {
          Range sub = chunkRange(c.range.size(), mesh.shape[axis], k);
          if (sub.size() == 0)
            continue;
          DimChoice n = c;
          assert(n.count < limits::kMaxMeshAxes && "a checked mesh");
          if (n.count < limits::kMaxMeshAxes)
            n.coords[n.count++] = static_cast<int32_t>(k);
          n.range = {c.range.begin + sub.begin, c.range.begin + sub.end};
          next.push_back(std::move(n));
        }
      current = std::move(next);
    }
    if (batch && d < batch->size()) {
      std::vector<DimChoice> keep;
      for (DimChoice &c : current)
        if (c.range.begin <= (*batch)[d] && (*batch)[d] < c.range.end)
          keep.push_back(std::move(c));
      current = std::move(keep);
    }
    choices[d] = std::move(current);
  }
  // Free axes (replicated or partial) take every coordinate; `only` axes one.
  std::vector<std::vector<int64_t>> freeValues(mesh.shape.size());
  for (size_t a = 0; a < mesh.shape.size(); ++a) {
    if (isSplit[a])
      continue;
    auto fixed = std::find_if(layout.only.begin(), layout.only.end(),
                              [&](auto p) { return p.first == (int64_t)a; });
    if (fixed != layout.only.end()) {
      freeValues[a] = {fixed->second};
    } else {
      for (int64_t k = 0; k < mesh.shape[a]; ++k)
        freeValues[a].push_back(k);
    }
  }
  // Odometer over the dims' choices and the free axes' values.
  for (const auto &c : choices)
    if (c.empty())
      return;
  std::vector<size_t> dimIdx(rank, 0), freeIdx(mesh.shape.size(), 0);
  std::vector<int64_t> coords(mesh.shape.size(), 0);
  std::vector<const DimChoice *> picked(rank);
  while (true) {
    for (size_t d = 0; d < rank; ++d) {
      picked[d] = &choices[d][dimIdx[d]];
      for (int32_t i = 0; i < picked[d]->count; ++i)
        coords[layout.splitAxes[d][i]] = picked[d]->coords[i];
    }
    for (size_t a = 0; a < mesh.shape.size(); ++a)
      if (!isSplit[a])
        coords[a] = freeValues[a][freeIdx[a]];
    int64_t summand = 0;
    for (int64_t axis : layout.partialAxes)
      summand = summand * mesh.shape[axis] + coords[axis];
    fn(mesh.rankAt(coords), picked, summand);
    // Advance: free axes first, then dims.
    size_t a = 0;
    for (; a < mesh.shape.size(); ++a) {
      if (isSplit[a])
        continue;
      if (++freeIdx[a] < freeValues[a].size())
        break;
      freeIdx[a] = 0;
    }
    if (a < mesh.shape.size())
      continue;
    size_t d = 0;
    for (; d < rank; ++d) {
      if (++dimIdx[d] < choices[d].size())
        break;
      dimIdx[d] = 0;
    }
    if (d == rank)
      break;
  }
}
} // namespace

std::vector<MatrixPiece>
matrixPieces(const Mesh &mesh, const ParamLayout &layout, int64_t matrix) {
  size_t rank = layout.shape.size();
  assert(rank >= 2 && "a matrix needs two dims");
  // A head's block: the pieces of the whole trailing matrix cut to the
  // block, in the block's coordinates; holders of none of it drop out.
  Range headRows = layout.headRowsOf(matrix),
        headCols = layout.headColsOf(matrix);
  matrix = layout.batchSliceOf(matrix);
  std::vector<int64_t> batch(rank - 2);
  for (size_t d = batch.size(); d-- > 0;) {
    batch[d] = matrix % layout.shape[d];
    matrix /= layout.shape[d];
  }
  std::vector<MatrixPiece> pieces;
  forEachPiece(mesh, layout, &batch,
               [&](int64_t r, const std::vector<const DimChoice *> &box,
                   int64_t summand) {
                 Range rows = box[rank - 2]->range, cols = box[rank - 1]->range;
                 rows = {std::max(rows.begin, headRows.begin) - headRows.begin,
                         std::min(rows.end, headRows.end) - headRows.begin};
                 cols = {std::max(cols.begin, headCols.begin) - headCols.begin,
                         std::min(cols.end, headCols.end) - headCols.begin};
                 if (rows.size() > 0 && cols.size() > 0)
                   pieces.push_back({r, rows, cols, summand});
               });
  std::sort(pieces.begin(), pieces.end(),
            [](const MatrixPiece &x, const MatrixPiece &y) {
              return x.rank < y.rank;
            });
  return pieces;
}

const std::vector<MatrixPiece> &
MatrixPieceCache::pieces(const ParamLayout &layout, int64_t matrix) {
  size_t batchDims = layout.shape.size() - 2;
  // The chunk holding the matrix on each batch dim, split as localBox
  // splits it: major axis first, each chunking what the previous left.
  chunk.assign(batchDims, 0);
  int64_t m = layout.batchSliceOf(matrix);
  int64_t head = matrix % layout.numHeads;
  for (size_t d = batchDims; d-- > 0;) {
    int64_t index = m % layout.shape[d];
    m /= layout.shape[d];
    Range r{0, layout.shape[d]};
    if (d < layout.splitAxes.size())
      for (int64_t axis : layout.splitAxes[d]) {
        int64_t parts = mesh.shape[axis];
        int64_t size = (r.size() + parts - 1) / parts;
        Range sub = chunkRange(r.size(), parts, (index - r.begin) / size);
        r = {r.begin + sub.begin, r.begin + sub.end};
      }
    chunk[d] = r.begin;
  }
  if (lastLayout != &layout || chunk != lastChunk || head != lastHead) {
    list = matrixPieces(mesh, layout, matrix);
    lastLayout = &layout;
    lastChunk = chunk;
    lastHead = head;
    ++computed;
  }
  return list;
}

std::vector<ParamPiece> paramPieces(const Mesh &mesh,
                                    const ParamLayout &layout) {
  std::vector<ParamPiece> pieces;
  forEachPiece(mesh, layout, nullptr,
               [&](int64_t r, const std::vector<const DimChoice *> &box,
                   int64_t summand) {
                 ParamPiece p{r, {}, summand};
                 for (const DimChoice *c : box)
                   p.box.push_back(c->range);
                 pieces.push_back(std::move(p));
               });
  std::sort(pieces.begin(), pieces.end(),
            [](const ParamPiece &x, const ParamPiece &y) {
              return x.rank < y.rank;
            });
  return pieces;
}

std::string formatRanks(const std::vector<int64_t> &ranks) {
  return formatList(ranks);
}

int64_t numMatrices(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (size_t d = 0; d + 2 < shape.size(); ++d)
    n *= shape[d];
  return n;
}

Status checkHeads(const std::vector<int64_t> &shape, bool orthogonalized,
                       int64_t numHeads, int64_t headSplitDim) {
  if (numHeads < 1)
    return invalidArgument("num_heads must be at least 1, got " + std::to_string(numHeads));
  if (headSplitDim != 0 && headSplitDim != 1)
    return invalidArgument("head_split_dim must be 0 (rows) or 1 (columns) of the matrix, "
           "got " +
           std::to_string(headSplitDim));
  if (numHeads == 1 && headSplitDim == 0)
    return okStatus();
  if (!orthogonalized || shape.size() < 2)
    return invalidArgument("per-head Newton-Schulz needs a Muon parameter of 2 or more dims");
  int64_t size = shape[shape.size() - 2 + headSplitDim];
  if (size % numHeads != 0)
    return invalidArgument("num_heads " + std::to_string(numHeads) + " does not divide " +
           (headSplitDim == 0 ? "the rows" : "the columns") + " (" +
           std::to_string(size) + ") of the " +
           std::to_string(shape[shape.size() - 2]) + " x " +
           std::to_string(shape.back()) + " matrix");
  return okStatus();
}

int64_t nsFlops(int64_t m, int64_t n, int64_t nsSteps) {
  int64_t a = std::min(m, n), b = std::max(m, n);
  return nsSteps * (4 * a * a * b + 2 * a * a * a);
}

} // namespace muon
