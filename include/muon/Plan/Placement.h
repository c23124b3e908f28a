//===- Placement.h - Newton-Schulz placed by cost ---------------*- C++ -*-===//
//
// Where a matrix's whole gradient is on several ranks (DDP, context
// parallelism, HSDP's replicas), orthogonalizing it once saves flops but
// not always time: the update must then travel to every other holder. This
// is the cost model the compiler decides with (muon-assign-owners) and the
// dry-run report shows (muon-run --dry-run with a profile): for one matrix,
// the time it adds to a rank's step when it is orthogonalized once (one
// owner, then a scatter) and when it is orthogonalized once per replica
// ("redundant": under DDP every holder runs it on its own copy and nothing
// moves). Plain C++, shared by the compiler and the tools.
//
// The model is the simulator's (Simulate.h): a message costs
// `latency + bytes / bytes_per_second` on its link class, Newton-Schulz
// runs at the profile's matrix-multiply rate. A step's time is its busiest
// rank's; with many matrices the owners' work and traffic spread over the
// holders, so each choice is charged per holder:
//
//   once      = (T + alpha * m1 + b1 / beta) / H
//   redundant = (T + alpha * m2 + b2 / beta) / q
//
// T the matrix's Newton-Schulz time on one rank, H its holders, q = H / r
// the holders of one of its r replicas; b1, m1 the bytes and messages of
// one gather (the pieces the owner lacks) and one scatter (every other
// holder's new piece), b2, m2 the same inside one replica. Under DDP
// (q = 1, nothing to gather) redundant beats once when
// T < S / beta + alpha: orthogonalizing the matrix takes less time than
// receiving it. Bytes that cross nodes use the inter-node link.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_PLACEMENT_H
#define MUON_PLAN_PLACEMENT_H

#include "muon/Support/Layout.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace muon {

/// The numbers of a machine profile the placement needs (Simulate/Profile.h
/// has the whole profile; a tool copies these out of it).
struct PlacementMachine {
  /// Newton-Schulz's matrix-multiply rate on one rank, flop/s.
  double nsFlopsPerSecond = 0;
  double latencySeconds = 0, bytesPerSecond = 0;           // inside a node
  double interLatencySeconds = 0, interBytesPerSecond = 0; // across nodes
  /// Ranks per node, as consecutive blocks; 0: every rank on one node.
  int64_t ranksPerNode = 0;
  bool valid() const { return nsFlopsPerSecond > 0 && bytesPerSecond > 0; }
};

/// One matrix as the placement sees it.
struct PlacementMatrix {
  int64_t nsFlops = 0;
  int64_t bytes = 0;   // the whole matrix on the wire
  int64_t holders = 1; // H: ranks holding a piece
  int64_t replicas = 1; // r
  /// Per choice: bytes of one gather plus one scatter, their messages, and
  /// the share of those bytes that cross nodes.
  double onceBytes = 0, onceMessages = 0, onceRemoteShare = 0;
  double replicaBytes = 0, replicaMessages = 0, replicaRemoteShare = 0;
};

/// Seconds a matrix adds to a rank's step under each choice.
struct PlacementCost {
  double once = 0, redundant = 0;
};

/// The figures of matrix `matrix` of a parameter laid out as `layout` on
/// `mesh`, moving `wireBytes` per element, with the owner of the first
/// replica a holder of a largest piece (as the compiler picks).
PlacementMatrix placementMatrix(const Mesh &mesh, const ParamLayout &layout,
                                int64_t matrix, int64_t nsFlops,
                                int64_t wireBytes, int64_t ranksPerNode);

/// The same from the matrix's pieces (matrixPieces), when the caller has
/// them.
PlacementMatrix placementMatrix(const Mesh &mesh, const ParamLayout &layout,
                                const std::vector<MatrixPiece> &pieces,
                                int64_t nsFlops, int64_t wireBytes,
                                int64_t ranksPerNode);

PlacementCost placementCost(const PlacementMachine &machine,
                            const PlacementMatrix &matrix);

/// The `placement` setting of `muon.distributed` / the spec.
enum class PlacementPolicy { Auto, Once, RedundantBelow };
const char *placementName(PlacementPolicy policy);
std::optional<PlacementPolicy> parsePlacement(std::string_view name);

struct PlacementSetting {
  PlacementPolicy policy = PlacementPolicy::Auto;
  /// RedundantBelow: matrices of fewer elements are redundant.
  int64_t redundantBelow = 0;
};

/// Whether a replicated matrix of `elements` elements is orthogonalized
/// once per replica under `setting`; `auto` decides by placementCost on
/// `machine`, and without a machine keeps one owner. A matrix with a single
/// replica is never redundant.
bool chooseRedundant(const PlacementSetting &setting,
                     const PlacementMachine *machine,
                     const PlacementMatrix &matrix, int64_t elements);

struct Plan;
struct PlacementFigures;

/// The plan's placement figures (Report.h): its matrices once and
/// redundant, and with `machine` valid (named `profile`) the predicted
/// seconds of each choice, summed over the Muon matrices.
PlacementFigures placementFigures(const Plan &plan,
                                  const PlacementMachine &machine,
                                  const std::string &profile);

} // namespace muon

#endif // MUON_PLAN_PLACEMENT_H
