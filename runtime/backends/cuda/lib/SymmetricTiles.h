//===- SymmetricTiles.h - Newton-Schulz's products as GEMMs -----*- C++ -*-===//
//
// The products of one Newton-Schulz iteration on a row-major rows x cols X,
// in the column-major terms of BLAS (cuBLAS here, cblas in the unit test):
// X's buffer read column-major is X^T (cols x rows, leading dimension cols),
// so transposes become op flags and nothing is copied.
//
// A = X X^T (or X^T X) and B = c A A + b A are symmetric: from a tiling of
// their m x m result into T = ceil(m / tile) blocks per side, only the
// T (T + 1) / 2 tiles on and below the diagonal are computed; a mirror
// kernel copies the lower triangle onto the upper one. With tile >= m there
// is one tile, the whole product. Plain C++ (no CUDA), so that the plan is
// unit-tested on any machine.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_SYMMETRICTILES_H
#define MUON_RUNTIME_CUDA_SYMMETRICTILES_H

#include <cstdint>
#include <vector>

namespace muon::runtime::cuda {

/// C = alpha op(A) op(B) + beta C, column-major, op(A) m x k, op(B) k x n.
struct GemmShape {
  bool transA = false, transB = false;
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 0, ldb = 0, ldc = 0;
};

/// Where one product's operands start, in elements from their matrices'
/// first element.
struct TileOffsets {
  int64_t a = 0, b = 0, c = 0;
};

/// Tile products that share a shape (one group of a grouped GEMM).
struct TileGroup {
  GemmShape shape;
  std::vector<TileOffsets> tiles;
};

/// The side of the Gram matrix: min(rows, cols).
int64_t gramSide(int64_t rows, int64_t cols);

/// A tile side for an m x m symmetric product: the whole matrix up to 1024,
/// else about 1024, a multiple of 128, splitting m into near-equal tiles.
int64_t symmetricTile(int64_t m);

/// The tiles of the Gram matrix, both operands being X's buffer: A = X X^T
/// for a wide X (rows <= cols; m = rows, k = cols), A = X^T X for a tall one
/// (m = cols, k = rows). The result is m x m, leading dimension m.
std::vector<TileGroup> gramTiles(int64_t rows, int64_t cols, int64_t tile);

/// The tiles of A A for B = c A A + b A (A symmetric, m x m, leading
/// dimension m; both operands are A's buffer, the result B's).
std::vector<TileGroup> squareTiles(int64_t m, int64_t tile);

/// X' = a X + B X (wide) or a X + X B (tall) as C = op(A) op(B) + a C on
/// a copy of X. `polynomialFirst`: B's buffer is the A operand and X's the
/// B operand (tall); otherwise the other way round (wide).
struct UpdateProduct {
  GemmShape shape;
  bool polynomialFirst = false;
};
UpdateProduct updateProduct(int64_t rows, int64_t cols);

} // namespace muon::runtime::cuda

#endif // MUON_RUNTIME_CUDA_SYMMETRICTILES_H
