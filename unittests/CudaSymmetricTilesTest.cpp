//===- CudaSymmetricTilesTest.cpp - The CUDA backend's product plans ------===//
//
// The CUDA backend's Newton-Schulz products (SymmetricTiles.h) run here on
// the CPU: each described GEMM goes to cblas_sgemm in column-major, with the
// same op flags, leading dimensions and offsets cuBLAS gets, then the lower
// triangle is mirrored as the GPU's kernel does. Small integers keep every
// product exact in f32, so the tiled results must equal the full products
// exactly, for wide and tall X, many sizes and tile sides (short last tiles
// included).
//
//===----------------------------------------------------------------------===//
#include "SymmetricTiles.h"

#include <cblas.h>
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <utility>

using namespace muon::runtime::cuda;

namespace {

std::vector<float> randomIntegers(int64_t n, std::mt19937 &rng) {
  std::uniform_int_distribution<int> value(-8, 8);
  std::vector<float> x(n);
  for (float &v : x)
    v = static_cast<float>(value(rng));
  return x;
}

/// C = alpha op(A) op(B) + beta C as cuBLAS would run it.
void runGemm(const GemmShape &s, float alpha, const float *a, const float *b,
             float beta, float *c) {
  cblas_sgemm(CblasColMajor, s.transA ? CblasTrans : CblasNoTrans,
              s.transB ? CblasTrans : CblasNoTrans, static_cast<int>(s.m),
              static_cast<int>(s.n), static_cast<int>(s.k), alpha, a,
              static_cast<int>(s.lda), b, static_cast<int>(s.ldb), beta, c,
              static_cast<int>(s.ldc));
}

void runTiles(const std::vector<TileGroup> &groups, float alpha, const float *a,
              const float *b, float beta, float *c) {
  for (const TileGroup &group : groups)
    for (const TileOffsets &at : group.tiles)
      runGemm(group.shape, alpha, a + at.a, b + at.b, beta, c + at.c);
}

/// The GPU's mirror: the lower triangle of a column-major m x m matrix onto
/// its strict upper triangle.
void mirrorLower(std::vector<float> &a, int64_t m) {
  for (int64_t col = 0; col < m; ++col)
    for (int64_t row = 0; row < col; ++row)
      a[row + col * m] = a[col + row * m];
}

/// Row-major products, exact for small integers.
std::vector<float> multiply(const std::vector<float> &a, bool transA,
                            const std::vector<float> &b, bool transB, int64_t m,
                            int64_t n, int64_t k) {
  std::vector<float> c(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0;
      for (int64_t l = 0; l < k; ++l)
        sum += static_cast<double>(transA ? a[l * m + i] : a[i * k + l]) *
               (transB ? b[j * k + l] : b[l * n + j]);
      c[i * n + j] = static_cast<float>(sum);
    }
  return c;
}

std::vector<int64_t> sizes() {
  std::vector<int64_t> out;
  for (int64_t m = 1; m <= 64; ++m)
    out.push_back(m);
  for (int64_t m = 65; m <= 300; m += 13)
    out.push_back(m);
  for (int64_t m : {127, 128, 129, 255, 256, 257, 300})
    out.push_back(m);
  return out;
}

std::vector<int64_t> tileSides(int64_t m) { return {1, 5, 16, 32, 64, 128, m}; }

/// Whether the tiles cover each element on or below the diagonal blocks
/// exactly once and nothing else.
void expectLowerTilesOnce(const std::vector<TileGroup> &groups, int64_t m,
                          int64_t tile) {
  const int64_t blocks = (m + tile - 1) / tile;
  std::vector<int> covered(m * m, 0);
  int64_t products = 0;
  std::set<std::pair<int64_t, int64_t>> shapes;
  for (const TileGroup &group : groups) {
    EXPECT_TRUE(shapes.insert({group.shape.m, group.shape.n}).second)
        << "two groups of one shape";
    for (const TileOffsets &at : group.tiles) {
      const int64_t row = at.c % m, col = at.c / m;
      EXPECT_EQ(row % tile, 0);
      EXPECT_EQ(col % tile, 0);
      EXPECT_GE(row, col) << "a tile above the diagonal";
      EXPECT_EQ(group.shape.m, std::min(tile, m - row));
      EXPECT_EQ(group.shape.n, std::min(tile, m - col));
      for (int64_t c = col; c < col + group.shape.n; ++c)
        for (int64_t r = row; r < row + group.shape.m; ++r)
          ++covered[r + c * m];
      ++products;
    }
  }
  EXPECT_EQ(products, blocks * (blocks + 1) / 2);
  EXPECT_LE(groups.size(), 3u);
  for (int64_t c = 0; c < m; ++c)
    for (int64_t r = 0; r < m; ++r)
      ASSERT_EQ(covered[r + c * m], r / tile >= c / tile ? 1 : 0)
          << "element " << r << "," << c << " of m=" << m << " tile=" << tile;
}

TEST(SymmetricTiles, TileSide) {
  for (int64_t m = 1; m <= 1024; ++m)
    EXPECT_EQ(symmetricTile(m), m);
  for (int64_t m : {1025, 1100, 2047, 2048, 2049, 2050, 3000, 4096, 5000, 8191,
                    8192, 12289, 65536}) {
    const int64_t tile = symmetricTile(m);
    const int64_t blocks = (m + tile - 1) / tile;
    EXPECT_EQ(tile % 128, 0) << m;
    EXPECT_LE(tile, 1024) << m;
    EXPECT_EQ(blocks, (m + 1023) / 1024) << m;  // no more tiles than needed
    EXPECT_GT(m - (blocks - 1) * tile, 0) << m; // the last tile is not empty
  }
  EXPECT_EQ(symmetricTile(2048), 1024);
  EXPECT_EQ(symmetricTile(4096), 1024);
}

TEST(SymmetricTiles, CoverTheLowerTrianglesTilesOnce) {
  for (int64_t m : sizes())
    for (int64_t tile : tileSides(m)) {
      expectLowerTilesOnce(gramTiles(m, m + 3, tile), m, tile);
      expectLowerTilesOnce(gramTiles(m + 3, m, tile), m, tile);
      expectLowerTilesOnce(squareTiles(m, tile), m, tile);
    }
}

TEST(SymmetricTiles, OneTileIsThePlainProduct) {
  std::vector<TileGroup> wide = gramTiles(30, 70, 30);
  ASSERT_EQ(wide.size(), 1u);
  ASSERT_EQ(wide[0].tiles.size(), 1u);
  EXPECT_TRUE(wide[0].shape.transA);
  EXPECT_FALSE(wide[0].shape.transB);
  EXPECT_EQ(wide[0].shape.k, 70);
  std::vector<TileGroup> tall = gramTiles(70, 30, 1000);
  ASSERT_EQ(tall.size(), 1u);
  ASSERT_EQ(tall[0].tiles.size(), 1u);
  EXPECT_FALSE(tall[0].shape.transA);
  EXPECT_TRUE(tall[0].shape.transB);
  EXPECT_EQ(tall[0].shape.k, 70);
}

/// A = X X^T (wide) or X^T X (tall) from the tiles and the mirror equals
/// the full row-major product.
TEST(SymmetricTiles, GramMatchesTheFullProduct) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> extra(1, 40);
  for (int64_t m : sizes())
    for (bool tall : {false, true}) {
      const int64_t n = m + extra(rng);
      const int64_t rows = tall ? n : m, cols = tall ? m : n;
      std::vector<float> x = randomIntegers(rows * cols, rng);
      // Row-major X X^T is m x m; X^T X likewise.
      std::vector<float> want = tall ? multiply(x, true, x, false, m, m, rows)
                                     : multiply(x, false, x, true, m, m, cols);
      for (int64_t tile : tileSides(m)) {
        std::vector<float> gram(m * m, -999.0f);
        runTiles(gramTiles(rows, cols, tile), 1.0f, x.data(), x.data(), 0.0f,
                 gram.data());
        mirrorLower(gram, m);
        ASSERT_EQ(gram, want) << (tall ? "tall " : "wide ") << rows << "x"
                              << cols << " tile " << tile;
      }
    }
}

/// B = c A A + b A from the tiles (on a copy of A) and the mirror.
TEST(SymmetricTiles, SquareMatchesTheFullProduct) {
  std::mt19937 rng(11);
  const float c = 2.0f, b = -3.0f;
  for (int64_t m : sizes()) {
    std::vector<float> a = randomIntegers(m * m, rng);
    mirrorLower(a, m); // symmetric
    std::vector<float> want = multiply(a, false, a, false, m, m, m);
    for (int64_t i = 0; i < m * m; ++i)
      want[i] = c * want[i] + b * a[i];
    for (int64_t tile : tileSides(m)) {
      std::vector<float> poly = a;
      runTiles(squareTiles(m, tile), c, a.data(), a.data(), b, poly.data());
      mirrorLower(poly, m);
      ASSERT_EQ(poly, want) << "m " << m << " tile " << tile;
    }
  }
}

/// X' = a X + B X (wide) or a X + X B (tall), on a copy of X.
TEST(SymmetricTiles, UpdateMatchesTheRowMajorProduct) {
  std::mt19937 rng(13);
  std::uniform_int_distribution<int64_t> extra(0, 40);
  const float a = 3.0f;
  for (int64_t m : sizes())
    for (bool tall : {false, true}) {
      const int64_t n = m + extra(rng) + (tall ? 1 : 0);
      const int64_t rows = tall ? n : m, cols = tall ? m : n;
      std::vector<float> x = randomIntegers(rows * cols, rng);
      std::vector<float> poly = randomIntegers(m * m, rng);
      mirrorLower(poly, m);
      std::vector<float> want =
          tall ? multiply(x, false, poly, false, rows, cols, cols)
               : multiply(poly, false, x, false, rows, cols, rows);
      for (int64_t i = 0; i < rows * cols; ++i)
        want[i] += a * x[i];
      UpdateProduct update = updateProduct(rows, cols);
      EXPECT_EQ(update.polynomialFirst, tall);
      std::vector<float> next = x;
      if (update.polynomialFirst)
        runGemm(update.shape, 1.0f, poly.data(), x.data(), a, next.data());
      else
        runGemm(update.shape, 1.0f, x.data(), poly.data(), a, next.data());
      ASSERT_EQ(next, want) << rows << "x" << cols;
    }
}

} // namespace
