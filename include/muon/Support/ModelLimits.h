//===- ModelLimits.h - A model's sizes against the limits -------*- C++ -*-===//
//
// The size checks every entry point runs before it builds anything sized by
// the model: the IR verifier (for specs and IR files) and the plan reader.
// They count pieces, traffic and work in O(params x dims), without
// enumerating ranks, and in checked arithmetic, so an absurd input is an
// error that says which limit it passes, never an overflow or a huge
// allocation.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_MODELLIMITS_H
#define MUON_SUPPORT_MODELLIMITS_H

#include "muon/Support/Layout.h"
#include "muon/Support/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace muon {

/// Axis count, axis sizes, the world size and the device table of a mesh
/// (a permutation of 0..N-1 when present). InvalidArgument saying which
/// is past its limit.
Status checkMeshLimits(const Mesh &mesh);

/// Dim count, dim sizes and element counts of one parameter; parameters
/// whose matrices are orthogonalized (Muon's) also their matrix size and
/// count. InvalidArgument saying which is past its limit ("has 3 dims,
/// ...": the caller names the parameter).
Status checkShapeLimits(const std::vector<int64_t> &shape,
                             bool orthogonalized);

/// A size problem of a whole model; `param` is the parameter that passes
/// the limit (-1: the model as a whole).
struct ModelLimitError {
  int64_t param = -1;
  std::string message;
};

/// Model-wide sizes: parameters, matrices, total elements, the pieces a plan
/// will list (held pieces of Muon matrices, AdamW reductions), the bytes a
/// step may move and the Newton-Schulz flops of a step. The mesh and every
/// shape must already pass the checks above, and layouts must be valid for
/// the mesh (axes in range, each used once). `orthogonalized` says, per
/// parameter, whether its matrices are Muon's. Returns true when it all
/// fits.
bool checkModelLimits(const Mesh &mesh, const std::vector<ParamLayout> &layouts,
                      const std::vector<bool> &orthogonalized, int64_t nsSteps,
                      ModelLimitError &error);

/// Copies of every element of a parameter across the mesh: the product of
/// the sizes of the mesh axes that neither split it nor are fixed by `only`
/// (replicas and partial summands).
int64_t copiesOf(const Mesh &mesh, const ParamLayout &layout);

/// Ranks holding a non-empty piece of any one matrix of a parameter (the
/// count is the same for every matrix of it). Counted, not enumerated.
int64_t piecesPerMatrix(const Mesh &mesh, const ParamLayout &layout);

} // namespace muon

#endif // MUON_SUPPORT_MODELLIMITS_H
