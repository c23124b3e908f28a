//===- StepLayout.cpp - What one rank runs of a plan's step ---------------===//
#include "StepLayout.h"

namespace muon::runtime {

void StepLayout::indexBatches(size_t rounds) {
  batchesByRound.assign(rounds, {});
  slotOf.clear();
  for (const NsBatch &b : batches) {
    if (b.round >= 0 && b.round < static_cast<int64_t>(rounds))
      batchesByRound[b.round].push_back(&b);
    for (size_t i = 0; i < b.matrices.size(); ++i)
      slotOf[b.matrices[i]] = {&b, static_cast<int64_t>(i)};
  }
}

void StepLayout::derive(const Plan &plan, int64_t rank, StepLayout &out) {
  out.views.clear();
  for (const Exchange &ex : plan.exchanges)
    out.views.push_back(rankExchangeView(ex, rank));
  out.batches.clear();
  if (rank < static_cast<int64_t>(plan.nsBatches.size()))
    out.batches = plan.nsBatches[rank];
  out.indexBatches(plan.rounds.size());
}

/// `slices` without the entries `keep` refuses, packed again: offsets
/// follow the kept elements, and a peer left with nothing is dropped.
template <typename Keep>
static void filterSlices(const std::vector<PeerSlice> &slices, Keep keep,
                         std::vector<PeerSlice> &out, int64_t &total) {
  out.clear();
  total = 0;
  for (const PeerSlice &slice : slices) {
    PeerSlice kept;
    kept.peer = slice.peer;
    kept.offset = total;
    for (int64_t i : slice.transfers)
      if (int64_t elements = keep(i); elements >= 0) {
        kept.transfers.push_back(i);
        kept.elements += elements;
      }
    if (kept.transfers.empty())
      continue;
    total += kept.elements;
    out.push_back(std::move(kept));
  }
}

void StepLayout::filter(const Plan &plan, const StepLayout &whole,
                        const std::vector<bool> &skipped, StepLayout &out) {
  auto matrixKept = [&](int64_t k) {
    return !skipped[plan.matrices[k].paramIndex];
  };
  out.views.assign(plan.exchanges.size(), {});
  for (size_t e = 0; e < plan.exchanges.size(); ++e) {
    const Exchange &ex = plan.exchanges[e];
    // The kept entry's element count, or -1.
    auto keep = [&](int64_t i) -> int64_t {
      if (ex.phase == Exchange::Phase::Reduce)
        return skipped[ex.reductions[i].param] ? -1
                                               : ex.reductions[i].elements;
      return matrixKept(ex.transfers[i].matrix) ? ex.transfers[i].elements()
                                                : -1;
    };
    RankExchangeView &view = out.views[e];
    filterSlices(whole.views[e].send, keep, view.send, view.sendElements);
    filterSlices(whole.views[e].recv, keep, view.recv, view.recvElements);
  }
  out.batches.clear();
  for (const NsBatch &b : whole.batches) {
    NsBatch kept = b;
    kept.matrices.clear();
    for (int64_t k : b.matrices)
      if (matrixKept(k))
        kept.matrices.push_back(k);
    if (!kept.matrices.empty())
      out.batches.push_back(std::move(kept));
  }
  out.indexBatches(plan.rounds.size());
}

} // namespace muon::runtime
