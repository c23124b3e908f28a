//===- Replicas.h - A matrix's replicas, for Newton-Schulz placement -*- C++ -*-===//
//
// Where a parameter is replicated (data parallelism, HSDP's replicate axis,
// context parallelism), every replica holds the whole of the parameter and
// its gradient, cut the same way. A replica is the set of holders that
// share their coordinates on those axes; all replicas look alike.
// Newton-Schulz placed "once per replica" (a redundant matrix) runs on one
// owner in each replica, each gathering and scattering only inside its
// replica: under DDP a replica is a single rank and nothing moves.
//
// The owner of each replica is a mirror of the one owner the plan names:
// the rank with the named owner's coordinates off the replicated axes and
// the replica's own on them.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_SUPPORT_REPLICAS_H
#define MUON_SUPPORT_REPLICAS_H

#include "muon/Support/Layout.h"

#include <cstdint>
#include <vector>

namespace muon {

/// The mesh axes (size above 1) on which `layout` neither splits a dim,
/// keeps a partial sum, nor restricts itself to a coordinate (`only`),
/// ascending.
std::vector<int64_t> replicatedAxes(const Mesh &mesh, const ParamLayout &layout);

/// How many replicas the parameter has: the product of its replicated
/// axes' sizes (1 when there are none).
int64_t replicaCount(const Mesh &mesh, const ParamLayout &layout);

/// The owner of `rank`'s replica when `owner` owns its own: `owner`'s
/// coordinates with `rank`'s on the replicated axes.
int64_t replicaOwnerOf(const Mesh &mesh, const ParamLayout &layout,
                       int64_t owner, int64_t rank);

/// Every replica's owner, `owner` among them, sorted by rank.
std::vector<int64_t> replicaOwners(const Mesh &mesh, const ParamLayout &layout,
                                   int64_t owner);

/// Whether `owner` lies in the first replica (coordinate 0 on every
/// replicated axis), as the compiler names a redundant matrix's owner.
bool inFirstReplica(const Mesh &mesh, const ParamLayout &layout,
                    int64_t owner);

} // namespace muon

#endif // MUON_SUPPORT_REPLICAS_H
