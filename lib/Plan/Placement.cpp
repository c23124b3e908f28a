//===- Placement.cpp - Newton-Schulz placed by cost -----------------------===//
#include "muon/Plan/Placement.h"

#include "muon/Plan/Plan.h"
#include "muon/Plan/Report.h"
#include "muon/Support/Replicas.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace muon {

namespace {
int64_t nodeOf(int64_t rank, int64_t ranksPerNode) {
  return ranksPerNode > 0 ? rank / ranksPerNode : 0;
}

/// Bytes and messages of one gather to `owner` (one copy of each distinct
/// piece it lacks) and one scatter (each other holder's piece), over
/// `pieces`; `remote` gets the bytes that cross nodes.
void exchangeOf(const std::vector<MatrixPiece> &pieces, int64_t owner,
                int64_t wireBytes, int64_t ranksPerNode, double &bytes,
                double &messages, double &remote) {
  bytes = messages = remote = 0;
  const MatrixPiece *own = nullptr;
  for (const MatrixPiece &p : pieces)
    if (p.rank == owner)
      own = &p;
  if (!own)
    return;
  auto key = [](const MatrixPiece &p) {
    return std::make_tuple(p.rows.begin, p.rows.end, p.cols.begin, p.cols.end,
                           p.summand);
  };
  std::set<decltype(key(*own))> seen = {key(*own)};
  const int64_t home = nodeOf(owner, ranksPerNode);
  for (const MatrixPiece &p : pieces) {
    if (p.rank == owner)
      continue;
    double b = static_cast<double>(p.elements() * wireBytes);
    bool far = nodeOf(p.rank, ranksPerNode) != home;
    if (seen.insert(key(p)).second) { // gathered
      bytes += b;
      messages += 1;
      remote += far ? b : 0;
    }
    bytes += b; // scattered back
    messages += 1;
    remote += far ? b : 0;
  }
}
} // namespace

PlacementMatrix placementMatrix(const Mesh &mesh, const ParamLayout &layout,
                                int64_t matrix, int64_t nsFlops,
                                int64_t wireBytes, int64_t ranksPerNode) {
  return placementMatrix(mesh, layout, matrixPieces(mesh, layout, matrix),
                         nsFlops, wireBytes, ranksPerNode);
}

PlacementMatrix placementMatrix(const Mesh &mesh, const ParamLayout &layout,
                                const std::vector<MatrixPiece> &pieces,
                                int64_t nsFlops, int64_t wireBytes,
                                int64_t ranksPerNode) {
  PlacementMatrix pm;
  pm.nsFlops = nsFlops;
  pm.bytes = layout.matrixRows() * layout.matrixCols() * wireBytes;
  pm.holders = std::max<int64_t>(1, pieces.size());
  pm.replicas = replicaCount(mesh, layout);
  if (pieces.empty())
    return pm;
  // The owner: the lowest holder of a largest piece (what the compiler's
  // LPT picks is one like it); its replica: the holders it mirrors to.
  int64_t largest = 0;
  for (const MatrixPiece &p : pieces)
    largest = std::max(largest, p.elements());
  int64_t owner = -1;
  for (const MatrixPiece &p : pieces)
    if (p.elements() == largest && inFirstReplica(mesh, layout, p.rank)) {
      owner = p.rank;
      break;
    }
  if (owner < 0)
    owner = pieces.front().rank;
  exchangeOf(pieces, owner, wireBytes, ranksPerNode, pm.onceBytes,
             pm.onceMessages, pm.onceRemoteShare);
  std::vector<MatrixPiece> replica;
  for (const MatrixPiece &p : pieces)
    if (replicaOwnerOf(mesh, layout, owner, p.rank) == owner)
      replica.push_back(p);
  exchangeOf(replica, owner, wireBytes, ranksPerNode, pm.replicaBytes,
             pm.replicaMessages, pm.replicaRemoteShare);
  if (pm.onceBytes > 0)
    pm.onceRemoteShare /= pm.onceBytes;
  if (pm.replicaBytes > 0)
    pm.replicaRemoteShare /= pm.replicaBytes;
  return pm;
}

PlacementCost placementCost(const PlacementMachine &machine,
                            const PlacementMatrix &m) {
  const double ns = machine.nsFlopsPerSecond > 0
                        ? static_cast<double>(m.nsFlops) /
                              machine.nsFlopsPerSecond
                        : 0;
  auto link = [&](double bytes, double messages, double remoteShare) {
    double interBeta = machine.interBytesPerSecond > 0
                           ? machine.interBytesPerSecond
                           : machine.bytesPerSecond;
    double interAlpha = machine.interBytesPerSecond > 0
                            ? machine.interLatencySeconds
                            : machine.latencySeconds;
    double t = 0;
    if (machine.bytesPerSecond > 0)
      t += bytes * (1 - remoteShare) / machine.bytesPerSecond;
    if (interBeta > 0)
      t += bytes * remoteShare / interBeta;
    double alpha = remoteShare > 0 ? interAlpha : machine.latencySeconds;
    return t + messages * alpha;
  };
  const double holders = static_cast<double>(std::max<int64_t>(1, m.holders));
  const double perReplica =
      holders / static_cast<double>(std::max<int64_t>(1, m.replicas));
  PlacementCost c;
  c.once = (ns + link(m.onceBytes, m.onceMessages, m.onceRemoteShare)) /
           holders;
  c.redundant =
      (ns + link(m.replicaBytes, m.replicaMessages, m.replicaRemoteShare)) /
      std::max(1.0, perReplica);
  return c;
}

const char *placementName(PlacementPolicy policy) {
  switch (policy) {
  case PlacementPolicy::Auto:
    return "auto";
  case PlacementPolicy::Once:
    return "once";
  case PlacementPolicy::RedundantBelow:
    return "redundant_below";
  }
  return "auto";
}

std::optional<PlacementPolicy> parsePlacement(std::string_view name) {
  for (PlacementPolicy p : {PlacementPolicy::Auto, PlacementPolicy::Once,
                            PlacementPolicy::RedundantBelow})
    if (name == placementName(p))
      return p;
  return std::nullopt;
}

bool chooseRedundant(const PlacementSetting &setting,
                     const PlacementMachine *machine,
                     const PlacementMatrix &matrix, int64_t elements) {
  if (matrix.replicas <= 1)
    return false;
  switch (setting.policy) {
  case PlacementPolicy::Once:
    return false;
  case PlacementPolicy::RedundantBelow:
    return elements < setting.redundantBelow;
  case PlacementPolicy::Auto:
    if (!machine || !machine->valid())
      return false;
    PlacementCost c = placementCost(*machine, matrix);
    return c.redundant < c.once;
  }
  return false;
}

PlacementFigures placementFigures(const Plan &plan,
                                  const PlacementMachine &machine,
                                  const std::string &profile) {
  PlacementFigures f;
  const bool predict = plan.distributed && machine.valid();
  if (predict)
    f.profile = profile;
  MatrixPieceCache cache(plan.mesh);
  for (size_t k = 0; k < plan.matrices.size(); ++k) {
    const PlanMatrix &m = plan.matrices[k];
    (m.redundant ? f.matricesRedundant : f.matricesOnce) += 1;
    const ParamLayout &layout = plan.params[m.paramIndex].layout;
    bool replicated = plan.distributed && replicaCount(plan.mesh, layout) > 1;
    f.matricesReplicated += replicated ? 1 : 0;
    if (!predict)
      continue;
    int64_t matrix = std::max<int64_t>(m.slice, 0);
    PlacementCost c = placementCost(
        machine, placementMatrix(plan.mesh, layout, cache.pieces(layout, matrix),
                                 m.nsFlops, plan.wireBytes,
                                 machine.ranksPerNode));
    f.onceSeconds += c.once;
    f.redundantSeconds += replicated ? c.redundant : c.once;
    f.chosenSeconds += m.redundant ? c.redundant : c.once;
  }
  return f;
}

} // namespace muon
