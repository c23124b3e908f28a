//===- Layout.h - Sharded-tensor layout math (no MLIR) ----------*- C++ -*-===//
//
// Where each piece of a sharded parameter lives on a device mesh. Pure C++ so
// that the compiler, the runtime and tests share one definition of DTensor's
// chunking rules.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_LAYOUT_H
#define MUON_SUPPORT_LAYOUT_H

#include "muon/Support/Status.h"

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace muon {

/// Half-open index range [begin, end).
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range &o) const {
    return begin == o.begin && end == o.end;
  }
};

/// Calls `fn(local, global)` for every element of `box` (row-major), with
/// its index in the box and in the whole tensor of shape `shape`.
template <typename Fn>
void forEachElement(const std::vector<int64_t> &shape,
                    const std::vector<Range> &box, Fn fn) {
  if (box.size() != shape.size()) // outside the parameter's sub-mesh
    return;
  int64_t count = 1;
  for (const Range &r : box)
    count *= r.size();
  if (!count)
    return;
  std::vector<int64_t> at(box.size());
  for (size_t d = 0; d < box.size(); ++d)
    at[d] = box[d].begin;
  for (int64_t local = 0; local < count; ++local) {
    int64_t global = 0;
    for (size_t d = 0; d < shape.size(); ++d)
      global = global * shape[d] + at[d];
    fn(local, global);
    for (size_t d = box.size(); d-- > 0;) {
      if (++at[d] < box[d].end)
        break;
      at[d] = box[d].begin;
    }
  }
}

/// Chunk `index` of `parts` chunks of [0, size) with torch.chunk semantics:
/// every chunk has ceil(size/parts) elements except the trailing ones, which
/// may be smaller or empty.
Range chunkRange(int64_t size, int64_t parts, int64_t index);

/// A device mesh: axis sizes and, optionally, the world rank at each mesh
/// position (row-major linear index). Empty `devices` means rank == index.
struct Mesh {
  std::vector<int64_t> shape;
  std::vector<int64_t> devices;

  int64_t rank() const { return static_cast<int64_t>(shape.size()); }
  int64_t numDevices() const;
  int64_t linearIndex(const std::vector<int64_t> &coords) const;
  std::vector<int64_t> coordsOfLinear(int64_t linear) const;
  /// World rank of mesh coordinates, and back.
  int64_t rankAt(const std::vector<int64_t> &coords) const;
  std::vector<int64_t> coordsOfRank(int64_t rank) const;
};

/// How one parameter is laid out on a mesh, in the split-axes model of the
/// upstream `shard` dialect: for each tensor dim, the mesh axes splitting it
/// from major to minor; axes holding pending partial sums; and an optional
/// sub-mesh (`only`) outside of which the parameter does not exist.
struct ParamLayout {
  std::vector<int64_t> shape;
  std::vector<std::vector<int64_t>> splitAxes; // one entry per tensor dim
  std::vector<int64_t> partialAxes;
  std::vector<std::pair<int64_t, int64_t>> only; // (axis, coordinate)
  /// Per-head Newton-Schulz: dim `headSplitDim` of the trailing 2-D matrix
  /// (0: rows, 1: columns) is cut into `numHeads` equal blocks, and each
  /// block is a matrix of its own (orthogonalized, owned and balanced on its
  /// own). 1: the whole trailing matrix is one matrix.
  int64_t numHeads = 1;
  int64_t headSplitDim = 0;

  bool inSubmesh(const std::vector<int64_t> &coords) const;
  /// The box of the global tensor held at mesh coordinates `coords` (one
  /// range per dim). Empty ranges where chunking leaves nothing.
  std::vector<Range> localBox(const Mesh &mesh,
                              const std::vector<int64_t> &coords) const;
  bool isSharded() const;
  /// Whether the rank at `coords` holds a non-empty piece of matrix
  /// `matrix` (see numMatrices for the numbering). O(dims).
  bool holdsMatrix(const Mesh &mesh, const std::vector<int64_t> &coords,
                   int64_t matrix) const;
  bool isPartial() const { return !partialAxes.empty(); }

  /// The number of Muon matrices: the product of the batch dims times
  /// numHeads. Matrix `m` is head `m % numHeads` of batch slice
  /// `m / numHeads` (row-major over the batch dims).
  int64_t numMatrices() const;
  /// Whether the matrices are named by index (`p[i]`): batched or per-head.
  bool slicedMatrices() const { return shape.size() > 2 || numHeads > 1; }
  /// Every matrix's shape: the trailing two dims, with the head's share of
  /// dim headSplitDim.
  int64_t matrixRows() const;
  int64_t matrixCols() const;
  /// Where matrix `m` lies: its batch slice and its box of the trailing
  /// 2-D matrix.
  int64_t batchSliceOf(int64_t m) const { return m / numHeads; }
  Range headRowsOf(int64_t m) const;
  Range headColsOf(int64_t m) const;
};

/// One rank's non-empty piece of one matrix (the trailing two dims of a
/// parameter, or one head's block of them), in the matrix's coordinates.
struct MatrixPiece {
  int64_t rank;
  Range rows, cols;
  /// Which partial summand the rank holds: its coordinates on the partial
  /// axes, row-major in axis order (0 when there are none).
  int64_t summand = 0;
  int64_t elements() const { return rows.size() * cols.size(); }
};

/// The pieces of matrix `matrix` (ParamLayout::numMatrices' numbering) of a
/// parameter, one per rank holding a non-empty piece, sorted by rank.
/// Replicas and partial summands count as pieces of their own. The cost is
/// proportional to the number of pieces, not to the size of the mesh.
std::vector<MatrixPiece>
matrixPieces(const Mesh &mesh, const ParamLayout &layout, int64_t matrix);

/// matrixPieces with reuse: the matrices of a batched parameter whose batch
/// indices fall in the same chunk on every batch dim have the same pieces
/// (Kimi-K2's 384 experts split 16 ways share 16 piece lists), so a list is
/// computed once per chunk and kept while callers ask about the same chunk,
/// as they do walking a parameter's matrices in order. The layouts asked
/// about must stay where they are, unchanged, while the cache is in use.
class MatrixPieceCache {
public:
  explicit MatrixPieceCache(const Mesh &mesh) : mesh(mesh) {}
  /// What matrixPieces(mesh, layout, matrix) returns; valid until the next
  /// call.
  const std::vector<MatrixPiece> &pieces(const ParamLayout &layout,
                                         int64_t matrix);
  /// Changes whenever pieces() computes a new list: callers deriving data
  /// from a list redo it only then.
  uint64_t version() const { return computed; }

private:
  const Mesh &mesh;
  const ParamLayout *lastLayout = nullptr;
  std::vector<int64_t> lastChunk, chunk; // per batch dim, the chunk's begin
  int64_t lastHead = -1;
  std::vector<MatrixPiece> list;
  uint64_t computed = 0;
};

/// One rank's non-empty piece of a whole parameter.
struct ParamPiece {
  int64_t rank;
  std::vector<Range> box; // one range per dim
  int64_t summand = 0;
};

/// The pieces of a parameter (every dim), one per rank holding a non-empty
/// piece, sorted by rank. The cost is proportional to the number of pieces.
std::vector<ParamPiece> paramPieces(const Mesh &mesh,
                                    const ParamLayout &layout);

/// "[0, 1, 2]": how messages show a list of ranks.
std::string formatRanks(const std::vector<int64_t> &ranks);

/// Number of independent matrices in a tensor of this shape: the product of
/// the leading (batch) dims; 1 for a 2-D tensor.
int64_t numMatrices(const std::vector<int64_t> &shape);

/// Whether per-head Newton-Schulz (`numHeads` blocks along dim
/// `headSplitDim` of the trailing matrix) fits a parameter of this shape and
/// algorithm (always for numHeads 1 with dim 0); InvalidArgument saying why
/// not.
Status checkHeads(const std::vector<int64_t> &shape, bool orthogonalized,
                       int64_t numHeads, int64_t headSplitDim);

/// Newton-Schulz flops for one m x n matrix, as the report counts them:
/// ns_steps * (4*a*a*b + 2*a*a*a) with a = min(m, n), b = max(m, n).
int64_t nsFlops(int64_t m, int64_t n, int64_t nsSteps);

} // namespace muon

#endif // MUON_SUPPORT_LAYOUT_H
