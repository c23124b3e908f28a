//===- AssignOwners.cpp - One owner per Muon matrix, LPT-balanced ---------===//
#include "muon/Dialect/Muon/Analysis/Figures.h"
#include "muon/Dialect/Muon/Transforms/Passes.h"
#include "muon/Plan/Placement.h"
#include "muon/Support/Replicas.h"

#include "mlir/IR/Builders.h"

#include <map>
#include <numeric>
#include <set>

namespace mlir::muon {
#define GEN_PASS_DEF_ASSIGNOWNERS
#include "muon/Dialect/Muon/Transforms/Passes.h.inc"
} // namespace mlir::muon

using namespace mlir;
using namespace mlir::muon;

namespace {

/// The ranks that may own a matrix (the holders of its largest piece:
/// gathering there moves the least data), as groups of ranks, and each
/// matrix's group.
struct CandidateGroups {
  std::vector<std::vector<int64_t>> groups;
  std::vector<size_t> groupOf;
};

/// Each distinct candidate set is a group of ranks that must absorb the work
/// only it can take; matrices sharing a cached piece list share the group
/// without comparing the sets again.
CandidateGroups candidateGroups(const ModelLayout &layout,
                                const std::vector<MuonMatrix> &matrices,
                                const std::vector<bool> &redundant) {
  CandidateGroups out;
  std::vector<std::vector<int64_t>> &groups = out.groups;
  std::vector<size_t> &groupOf = out.groupOf;
  groupOf.assign(matrices.size(), 0);
  std::map<std::vector<int64_t>, size_t> groupId;
  ::muon::MatrixPieceCache pieceCache(layout.mesh);
  uint64_t groupVersion = 0;
  size_t group = 0;
  for (size_t k = 0; k < matrices.size(); ++k) {
    const ::muon::ParamLayout &pl = layout.layouts[matrices[k].param];
    const std::vector<MatrixPiece> &pieces =
        pieceCache.pieces(pl, matrices[k].matrix);
    if (redundant[k]) {
      // Once per replica: the owner is picked in the first replica, and
      // its mirrors own the others.
      int64_t largest = 0;
      for (const MatrixPiece &p : pieces)
        largest = std::max(largest, p.elements());
      std::vector<int64_t> candidates;
      for (const MatrixPiece &p : pieces)
        if (p.elements() == largest &&
            ::muon::inFirstReplica(layout.mesh, pl, p.rank))
          candidates.push_back(p.rank);
      auto [it, inserted] = groupId.try_emplace(candidates, groups.size());
      if (inserted)
        groups.push_back(std::move(candidates));
      groupOf[k] = it->second;
      groupVersion = 0; // the next matrix recomputes its own group
      continue;
    }
    if (groupVersion != pieceCache.version()) {
      int64_t largest = 0;
      for (const MatrixPiece &p : pieces)
        largest = std::max(largest, p.elements());
      std::vector<int64_t> candidates; // sorted by rank, as the pieces
      for (const MatrixPiece &p : pieces)
        if (p.elements() == largest)
          candidates.push_back(p.rank);
      auto [it, inserted] = groupId.try_emplace(candidates, groups.size());
      if (inserted)
        groups.push_back(std::move(candidates));
      group = it->second;
      groupVersion = pieceCache.version();
    }
    groupOf[k] = group;
  }
  return out;
}

/// LPT: most expensive first, each matrix to its least loaded candidate;
/// a redundant matrix's mirrors in the other replicas carry its cost too.
std::vector<int64_t> balanceOwners(const ModelLayout &layout,
                                   const std::vector<MuonMatrix> &matrices,
                                   const std::vector<bool> &redundant,
                                   const CandidateGroups &candidates) {
  const int64_t world = layout.mesh.numDevices();
  const std::vector<std::vector<int64_t>> &groups = candidates.groups;
  const std::vector<size_t> &groupOf = candidates.groupOf;
  // LPT: most expensive first; stable on the model order for equal costs.
  std::vector<size_t> order(matrices.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return matrices[a].nsFlops > matrices[b].nsFlops;
  });
  // Look-ahead for ties: a rank's pressure is the highest expected final
  // average load, (work already on the group + work still pending for it)
  // / group size, over the groups it belongs to. Among equally loaded
  // candidates the one under least pressure wins, so work any rank may
  // take avoids groups that will be busy anyway; then the lowest rank.
  // Every rank computes the same owners.
  std::vector<std::vector<size_t>> groupsOfRank(world);
  for (size_t g = 0; g < groups.size(); ++g)
    for (int64_t r : groups[g])
      groupsOfRank[r].push_back(g);
  std::vector<double> groupLoad(groups.size(), 0), pending(groups.size(), 0);
  for (size_t k = 0; k < matrices.size(); ++k)
    pending[groupOf[k]] += matrices[k].nsFlops;
  auto pressure = [&](int64_t r) {
    double worst = 0;
    for (size_t g : groupsOfRank[r])
      worst = std::max(worst, (groupLoad[g] + pending[g]) / groups[g].size());
    return worst;
  };

  std::vector<int64_t> load(world, 0);
  std::vector<int64_t> owner(matrices.size(), -1);
  for (size_t k : order) {
    const std::vector<int64_t> &mine = groups[groupOf[k]];
    int64_t best = mine.front(); // sorted by rank
    double bestPressure = pressure(best);
    for (int64_t r : mine) {
      if (load[r] > load[best])
        continue;
      double p = pressure(r);
      if (load[r] < load[best] || p < bestPressure) {
        best = r;
        bestPressure = p;
      }
    }
    owner[k] = best;
    int64_t cost = matrices[k].nsFlops;
    if (redundant[k]) {
      for (int64_t o : ::muon::replicaOwners(
               layout.mesh, layout.layouts[matrices[k].param], best))
        if (o != best)
          load[o] += cost;
    }
    load[best] += cost;
    pending[groupOf[k]] -= cost;
    for (size_t g : groupsOfRank[best])
      groupLoad[g] += cost;
  }
  return owner;
}

/// The muon.assign ops: per rank (and placement), a whole parameter where
/// the rank owns all its matrices alike.
void writeAssignments(ModelOp model, const ModelLayout &layout,
                      const std::vector<MuonMatrix> &matrices,
                      const std::vector<int64_t> &owner,
                      const std::vector<bool> &redundant) {
  std::map<std::pair<int64_t, bool>, std::vector<std::pair<size_t, int64_t>>>
      byRank;
  std::map<size_t, std::set<std::pair<int64_t, bool>>> ownersOfParam;
  for (size_t k = 0; k < matrices.size(); ++k)
    ownersOfParam[matrices[k].param].insert({owner[k], redundant[k]});
  for (size_t k = 0; k < matrices.size(); ++k) {
    size_t i = matrices[k].param;
    bool whole = ownersOfParam[i].size() == 1;
    if (whole && matrices[k].matrix != 0)
      continue;
    byRank[{owner[k], redundant[k]}].push_back(
        {i, whole ? -1 : matrices[k].matrix});
  }
  OpBuilder builder = OpBuilder::atBlockEnd(&model.getBodyBlock());
  for (auto &[who, entries] : byRank) {
    auto [rank, isRedundant] = who;
    SmallVector<Attribute> refs;
    SmallVector<int64_t> slices;
    for (auto [i, slice] : entries) {
      refs.push_back(
          FlatSymbolRefAttr::get(ParamOp(layout.params[i]).getSymNameAttr()));
      slices.push_back(slice);
    }
    AssignOp::create(builder, model.getLoc(), rank,
                     builder.getArrayAttr(refs),
                     builder.getDenseI64ArrayAttr(slices),
                     /*redundant=*/isRedundant);
  }
}

struct AssignOwners : mlir::muon::impl::AssignOwnersBase<AssignOwners> {
  using AssignOwnersBase::AssignOwnersBase;

  void runOnOperation() override {
    ModelOp model = getOperation();
    if (model.usesProcessGroups()) {
      model.emitError() << "owners are assigned on a mesh; run "
                           "muon-convert-process-groups-to-mesh first";
      return signalPassFailure();
    }
    bool distributed = !model.getBodyBlock().getOps<DistributedOp>().empty();
    bool explicitOwners = !model.getBodyBlock().getOps<AssignOp>().empty();
    if (!distributed || explicitOwners)
      return;
    FailureOr<ModelLayout> layout = computeModelLayout(model);
    if (failed(layout))
      return signalPassFailure();
    std::vector<MuonMatrix> matrices = collectMuonMatrices(model, *layout);
    std::vector<bool> redundant = redundantMatrices(model, *layout, matrices);
    std::vector<int64_t> owner =
        balanceOwners(*layout, matrices, redundant,
                      candidateGroups(*layout, matrices, redundant));
    writeAssignments(model, *layout, matrices, owner, redundant);
  }

  /// Placement: which replicated matrices run once per replica, by the
  /// model's placement setting and the pass's machine.
  std::vector<bool> redundantMatrices(ModelOp model, const ModelLayout &layout,
                                      const std::vector<MuonMatrix> &matrices) {
    ::muon::PlacementSetting setting;
    int64_t wireBytes = 4;
    for (DistributedOp d : model.getBodyBlock().getOps<DistributedOp>()) {
      if (std::optional<StringRef> name = d.getPlacement())
        setting.policy =
            ::muon::parsePlacement(*name).value_or(setting.policy);
      if (std::optional<uint64_t> below = d.getRedundantBelow())
        setting.redundantBelow = static_cast<int64_t>(*below);
      wireBytes = d.getWireDtype() == WireDtype::BF16 ? 2 : 4;
    }
    ::muon::PlacementMachine machine;
    machine.nsFlopsPerSecond = nsFlopsPerSecond;
    machine.latencySeconds = linkLatency;
    machine.bytesPerSecond = linkBytesPerSecond;
    machine.interLatencySeconds = interLatency;
    machine.interBytesPerSecond = interBytesPerSecond;
    machine.ranksPerNode = ranksPerNode;
    std::vector<bool> redundant(matrices.size(), false);
    if (setting.policy != ::muon::PlacementPolicy::Once) {
      ::muon::MatrixPieceCache cache(layout.mesh);
      for (size_t k = 0; k < matrices.size(); ++k) {
        const ::muon::ParamLayout &pl = layout.layouts[matrices[k].param];
        if (::muon::replicaCount(layout.mesh, pl) <= 1)
          continue;
        ::muon::PlacementMatrix pm = ::muon::placementMatrix(
            layout.mesh, pl, cache.pieces(pl, matrices[k].matrix),
            matrices[k].nsFlops, wireBytes, ranksPerNode);
        redundant[k] = ::muon::chooseRedundant(
            setting, machine.valid() ? &machine : nullptr, pm,
            matrices[k].rows * matrices[k].cols);
      }
    }
    return redundant;
  }
};

} // namespace
