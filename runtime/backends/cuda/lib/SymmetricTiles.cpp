//===- SymmetricTiles.cpp - Newton-Schulz's products as BLAS calls --------===//
#include "SymmetricTiles.h"

#include <algorithm>

namespace muon::runtime::cuda {

int64_t gramSide(int64_t rows, int64_t cols) { return std::min(rows, cols); }

int64_t symmetricTile(int64_t m) {
  constexpr int64_t target = 1024, align = 128;
  if (m <= target)
    return std::max<int64_t>(m, 1);
  const int64_t count = (m + target - 1) / target;
  const int64_t even = (m + count - 1) / count;
  return (even + align - 1) / align * align;
}

/// Adds a tile to the group of its shape (groups in order of first use).
static void addTile(std::vector<TileGroup> &groups, const GemmShape &shape,
                    TileOffsets offsets) {
  for (TileGroup &group : groups)
    if (group.shape.m == shape.m && group.shape.n == shape.n) {
      group.tiles.push_back(offsets);
      return;
    }
  groups.push_back({shape, {offsets}});
}

/// Calls `visit(rowStart, rows, colStart, cols)` for each tile of an m x m
/// matrix on or below the diagonal, block column by block column.
template <typename F>
static void forLowerTiles(int64_t m, int64_t tile, F visit) {
  tile = std::max<int64_t>(tile, 1);
  for (int64_t col = 0; col < m; col += tile)
    for (int64_t row = col; row < m; row += tile)
      visit(row, std::min(tile, m - row), col, std::min(tile, m - col));
}

std::vector<TileGroup> gramTiles(int64_t rows, int64_t cols, int64_t tile) {
  std::vector<TileGroup> groups;
  const bool tall = rows > cols;
  const int64_t m = gramSide(rows, cols);
  forLowerTiles(
      m, tile,
      [&](int64_t row, int64_t tileRows, int64_t col, int64_t tileCols) {
        GemmShape s;
        s.m = tileRows;
        s.n = tileCols;
        s.lda = s.ldb = cols;
        s.ldc = m;
        TileOffsets at;
        at.c = row + col * m;
        if (tall) {
          // A = Y Y^T with Y = X^T (cols x rows): rows of Y are columns of X.
          s.transB = true;
          s.k = rows;
          at.a = row;
          at.b = col;
        } else {
          // A = Y^T Y: columns of Y are rows of X.
          s.transA = true;
          s.k = cols;
          at.a = row * cols;
          at.b = col * cols;
        }
        addTile(groups, s, at);
      });
  return groups;
}

std::vector<TileGroup> squareTiles(int64_t m, int64_t tile) {
  std::vector<TileGroup> groups;
  forLowerTiles(
      m, tile,
      [&](int64_t row, int64_t tileRows, int64_t col, int64_t tileCols) {
        GemmShape s;
        s.m = tileRows;
        s.n = tileCols;
        s.k = m;
        s.lda = s.ldb = s.ldc = m;
        // Rows `row..` of A times columns `col..` of A.
        addTile(groups, s, {row, col * m, row + col * m});
      });
  return groups;
}

UpdateProduct updateProduct(int64_t rows, int64_t cols) {
  // X'^T (cols x rows, column-major) = X^T B^T (wide) or B^T X^T (tall),
  // with B's buffer read column-major being B^T.
  UpdateProduct u;
  u.shape.m = cols;
  u.shape.n = rows;
  u.shape.ldc = cols;
  if (rows > cols) {
    u.polynomialFirst = true;
    u.shape.k = cols;
    u.shape.lda = cols; // B, cols x cols
    u.shape.ldb = cols; // X^T
  } else {
    u.shape.k = rows;
    u.shape.lda = cols; // X^T
    u.shape.ldb = rows; // B, rows x rows
  }
  return u;
}

} // namespace muon::runtime::cuda
