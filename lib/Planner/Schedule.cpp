//===- Schedule.cpp - Rounds and the overlapped step schedule -------------===//
//
// The compiler's scheduling algorithms (plain C++; the passes run them).
// The rules a schedule must keep are checked separately, by
// verifySchedule (Plan/ScheduleVerifier.h), which the plan reader shares.
//
//===----------------------------------------------------------------------===//
#include "muon/Planner/Schedule.h"
#include "muon/Support/Limits.h"

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

namespace muon {
namespace {


/// Async rounds: each owner spreads its matrices over `count` rounds,
/// balancing its NS work (largest first to the least-loaded round).
std::vector<std::vector<int64_t>>
balancedRounds(const Plan &plan, const std::vector<std::vector<int64_t>> &owned,
               int64_t count) {
  std::vector<std::vector<int64_t>> rounds(count);
  for (const std::vector<int64_t> &mine : owned) {
    std::vector<int64_t> order = mine;
    std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
      return plan.matrices[a].nsFlops > plan.matrices[b].nsFlops;
    });
    std::vector<int64_t> work(count, 0);
    for (int64_t m : order) {
      int64_t best = std::min_element(work.begin(), work.end()) - work.begin();
      work[best] += plan.matrices[m].nsFlops;
      rounds[best].push_back(m);
    }
  }
  for (auto &round : rounds)
    std::sort(round.begin(), round.end());
  return rounds;
}

/// Debug rounds: owners one after another, each owner's matrices split only
/// as much as the budget requires.
std::vector<std::vector<int64_t>>
ownerRounds(const Plan &plan, const std::vector<std::vector<int64_t>> &owned,
            int64_t budget) {
  std::vector<std::vector<int64_t>> rounds;
  for (const std::vector<int64_t> &mine : owned) {
    std::vector<int64_t> current;
    int64_t bytes = 0;
    for (int64_t m : mine) {
      if (budget && !current.empty() && bytes + gatheredMatrixBytes(plan, m) > budget) {
        rounds.push_back(std::move(current));
        current.clear();
        bytes = 0;
      }
      current.push_back(m);
      bytes += gatheredMatrixBytes(plan, m);
    }
    if (!current.empty())
      rounds.push_back(std::move(current));
  }
  return rounds;
}

bool fitsBudget(const Plan &plan,
                const std::vector<std::vector<int64_t>> &rounds,
                int64_t budget) {
  if (!budget)
    return true;
  for (const auto &perRank : gatheredBytes(plan, rounds))
    for (int64_t b : perRank)
      if (b > budget)
        return false;
  return true;
}

} // namespace

static void setOptions(Plan &plan, const ScheduleOptions &options) {
  plan.async = options.async;
  plan.prefetchCount = options.async ? options.prefetchCount : 0;
  plan.inflightLimit = plan.prefetchCount + 1;
  plan.gatherBudgetBytes = options.gatherBudgetBytes;
}

/// The per-rank tables grow with ranks x exchanges: refuse before building
/// them.
static Status roundsWithinLimits(const Plan &plan, int64_t count,
                                 bool async) {
  if (count > limits::kMaxRounds)
    return invalidArgument(
        std::string(async ? "the gather budget"
                          : "the sequential debug order") +
        " needs " + std::to_string(count) + " rounds, above the limit of " +
        limits::describe(limits::kMaxRounds) +
        (async ? "; raise gather_budget_bytes"
               : " (one round per owning rank); use async"));
  if (plan.worldSize * (2 * count + 1) > limits::kMaxRankExchanges)
    return invalidArgument(
        std::to_string(plan.worldSize) + " ranks x " +
        std::to_string(2 * count + 1) + " exchanges is above the limit of " +
        limits::describe(limits::kMaxRankExchanges) +
        " for the plan's per-rank tables; lower max_rounds");
  return okStatus();
}

Status useRounds(Plan &plan, const ScheduleOptions &options,
                 std::vector<std::vector<int64_t>> rounds) {
  setOptions(plan, options);
  MUON_RETURN_IF_ERROR(roundsWithinLimits(
      plan, static_cast<int64_t>(rounds.size()), options.async));
  setRounds(plan, std::move(rounds));
  return okStatus();
}

Status packRounds(Plan &plan, const ScheduleOptions &options) {
  setOptions(plan, options);
  if (!plan.distributed) {
    // Nothing moves: every rank runs its own NS batches in one round.
    std::vector<int64_t> all(plan.matrices.size());
    std::iota(all.begin(), all.end(), 0);
    setRounds(plan, {all});
    return okStatus();
  }
  // Each matrix goes in one round, placed by the owner the plan names (a
  // redundant matrix's mirrors follow it into the same round).
  std::vector<std::vector<int64_t>> owned(plan.worldSize);
  for (int64_t r = 0; r < plan.worldSize; ++r)
    for (int64_t m : plan.nsMatrices[r])
      if (plan.matrices[m].owner == r)
        owned[r].push_back(m);
  for (int64_t m = 0; m < static_cast<int64_t>(plan.matrices.size()); ++m)
    if (plan.gatherBudgetBytes &&
        gatheredMatrixBytes(plan, m) > plan.gatherBudgetBytes)
      return invalidArgument(
          "gather buffer budget of " + std::to_string(plan.gatherBudgetBytes) +
          " bytes is too small: matrix '" + plan.matrices[m].label() +
          "' alone needs " + std::to_string(gatheredMatrixBytes(plan, m)));
  std::vector<std::vector<int64_t>> rounds;
  if (!options.async) {
    rounds = ownerRounds(plan, owned, plan.gatherBudgetBytes);
  } else {
    int64_t most = 1;
    for (const auto &mine : owned)
      most = std::max<int64_t>(most, mine.size());
    int64_t count = std::min(std::max<int64_t>(1, options.maxRounds), most);
    rounds = balancedRounds(plan, owned, count);
    // One matrix per owner per round always fits (checked above).
    while (!fitsBudget(plan, rounds, plan.gatherBudgetBytes) && count < most)
      rounds = balancedRounds(plan, owned, ++count);
  }
  rounds.erase(std::remove_if(rounds.begin(), rounds.end(),
                              [](auto &r) { return r.empty(); }),
               rounds.end());
  MUON_RETURN_IF_ERROR(roundsWithinLimits(
      plan, static_cast<int64_t>(rounds.size()), options.async));
  setRounds(plan, std::move(rounds));
  return okStatus();
}

void setRounds(Plan &plan, std::vector<std::vector<int64_t>> rounds) {
  plan.rounds = std::move(rounds);
  // Built in place already (buildPlan with the rounds): nothing to move.
  bool inPlace = plan.distributed;
  std::vector<int64_t> roundOfMatrix(plan.matrices.size(), -1);
  for (size_t r = 0; r < plan.rounds.size(); ++r)
    for (int64_t m : plan.rounds[r])
      roundOfMatrix[m] = r;
  size_t pairs = 2 * plan.rounds.size();
  inPlace &= plan.exchanges.size() == pairs ||
             (plan.exchanges.size() == pairs + 1 &&
              plan.exchanges.back().phase == Exchange::Phase::Reduce);
  for (size_t e = 0; inPlace && e < pairs; ++e) {
    const Exchange &ex = plan.exchanges[e];
    inPlace = ex.phase == (e % 2 ? Exchange::Phase::Scatter
                                 : Exchange::Phase::Gather) &&
              ex.round == static_cast<int64_t>(e / 2);
    for (size_t i = 0; inPlace && i < ex.transfers.size(); ++i)
      inPlace = roundOfMatrix[ex.transfers[i].matrix] ==
                static_cast<int64_t>(e / 2);
  }
  if (plan.distributed && !inPlace) {
    // Re-bucket the transfers: round r gathers in 2r, scatters in 2r+1.
    std::vector<int64_t> roundOf(plan.matrices.size(), 0);
    for (size_t r = 0; r < plan.rounds.size(); ++r)
      for (int64_t m : plan.rounds[r])
        roundOf[m] = r;
    std::vector<Exchange> exchanges(2 * plan.rounds.size());
    for (size_t r = 0; r < plan.rounds.size(); ++r) {
      exchanges[2 * r] = {Exchange::Phase::Gather, static_cast<int64_t>(r),
                          {}, {}};
      exchanges[2 * r + 1] = {Exchange::Phase::Scatter,
                              static_cast<int64_t>(r), {}, {}};
    }
    auto target = [&](const Exchange &ex, const Transfer &t) -> size_t {
      return 2 * roundOf[t.matrix] +
             (ex.phase == Exchange::Phase::Scatter ? 1 : 0);
    };
    // Sized first: at scale the transfers are most of the plan's memory
    // (17 million at 16,384 ranks), and growing by doubling would touch
    // several times their size.
    std::vector<size_t> sizes(exchanges.size(), 0);
    for (const Exchange &ex : plan.exchanges)
      if (ex.phase != Exchange::Phase::Reduce)
        for (const Transfer &t : ex.transfers)
          ++sizes[target(ex, t)];
    for (size_t e = 0; e < exchanges.size(); ++e)
      exchanges[e].transfers.reserve(sizes[e]);
    std::optional<Exchange> reduce;
    for (Exchange &ex : plan.exchanges) {
      if (ex.phase == Exchange::Phase::Reduce) {
        reduce = std::move(ex);
        continue;
      }
      for (const Transfer &t : ex.transfers)
        exchanges[target(ex, t)].transfers.push_back(t);
      std::vector<Transfer>().swap(ex.transfers); // freed as it is copied
    }
    if (reduce)
      exchanges.push_back(std::move(*reduce));
    plan.exchanges = std::move(exchanges);
  }
  // NS batches: per rank and round, same-shape matrices of one
  // Newton-Schulz configuration together (a batch runs one iteration; each
  // rank walks only its own matrices).
  std::vector<int64_t> roundOf(plan.matrices.size(), 0);
  for (size_t r = 0; r < plan.rounds.size(); ++r)
    for (int64_t m : plan.rounds[r])
      roundOf[m] = r;
  plan.nsBatches.assign(plan.worldSize, {});
  for (int64_t rank = 0; rank < plan.worldSize; ++rank) {
    std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, NsBatch> batches;
    std::vector<int64_t> mine = plan.nsMatrices[rank];
    std::sort(mine.begin(), mine.end());
    for (int64_t m : mine) {
      const PlanMatrix &pm = plan.matrices[m];
      const int64_t config = nsConfigOf(plan, pm.paramIndex);
      NsBatch &b = batches[{roundOf[m], pm.rows, pm.cols, config}];
      b.round = roundOf[m];
      b.config = config;
      b.rows = pm.rows;
      b.cols = pm.cols;
      b.matrices.push_back(m);
    }
    for (auto &[key, batch] : batches)
      plan.nsBatches[rank].push_back(std::move(batch));
  }
}

void sequenceSchedule(Plan &plan) {
  using Kind = ScheduleStep::Kind;
  plan.schedule.clear();
  plan.schedule.push_back({Kind::Momentum, 0});
  if (!plan.distributed) {
    plan.schedule.push_back({Kind::NewtonSchulz, 0});
    plan.schedule.push_back({Kind::ApplyUpdate, 0});
    plan.schedule.push_back({Kind::AdamW, 0});
    return;
  }
  int64_t reduceExchange = -1;
  if (!plan.exchanges.empty() &&
      plan.exchanges.back().phase == Exchange::Phase::Reduce)
    reduceExchange = static_cast<int64_t>(plan.exchanges.size()) - 1;
  // The sequence: starts early, dones late, within the limits.
  int64_t rounds = plan.rounds.size();
  std::vector<std::vector<int64_t>> bytes = gatheredBytes(plan, plan.rounds);
  std::vector<int64_t> memory(plan.worldSize, 0);
  std::deque<int64_t> inflight;
  auto emit = [&](ScheduleStep::Kind kind, int64_t index) {
    plan.schedule.push_back({kind, index});
  };
  auto done = [&](int64_t exchange) {
    inflight.erase(std::find(inflight.begin(), inflight.end(), exchange));
    emit(ScheduleStep::Kind::Done, exchange);
    if (exchange == reduceExchange) {
      // Summed AdamW gradients: AdamW can run now.
      emit(ScheduleStep::Kind::AdamW, 0);
      return;
    }
    if (exchange % 2 == 1) { // a scatter: apply the round, free its buffers
      emit(ScheduleStep::Kind::ApplyUpdate, exchange / 2);
      for (int64_t r = 0; r < plan.worldSize; ++r)
        memory[r] -= bytes[exchange / 2][r];
    }
  };
  // The AdamW reduction goes first and finishes whenever its slot is needed
  // (or at the end): it overlaps the Muon rounds.
  if (reduceExchange >= 0) {
    emit(ScheduleStep::Kind::Start, reduceExchange);
    inflight.push_back(reduceExchange);
  }
  auto fits = [&](int64_t round) {
    if (static_cast<int64_t>(inflight.size()) >= plan.inflightLimit)
      return false;
    if (!plan.gatherBudgetBytes)
      return true;
    for (int64_t r = 0; r < plan.worldSize; ++r)
      if (memory[r] + bytes[round][r] > plan.gatherBudgetBytes)
        return false;
    return true;
  };
  int64_t nextGather = 0;
  auto inFlight = [&](int64_t exchange) {
    return std::find(inflight.begin(), inflight.end(), exchange) !=
           inflight.end();
  };
  for (int64_t r = 0; r < rounds; ++r) {
    while (nextGather < rounds && nextGather <= r + plan.prefetchCount) {
      if (!fits(nextGather) && nextGather > r && inFlight(2 * r)) {
        // Round r's gather must finish before its Newton-Schulz anyway:
        // finishing it now frees its slot for the prefetch, which then
        // moves while round r computes (instead of the previous round's
        // scatter holding the slot and the prefetch waiting a round).
        done(2 * r);
        continue;
      }
      if (!fits(nextGather)) {
        if (nextGather > r)
          break; // a prefetch waits for room
        // Gather r is needed now: finish the oldest exchanges (scatters of
        // earlier rounds) until it fits.
        while (!fits(nextGather))
          done(inflight.front());
      }
      emit(ScheduleStep::Kind::Start, 2 * nextGather);
      inflight.push_back(2 * nextGather);
      for (int64_t rank = 0; rank < plan.worldSize; ++rank)
        memory[rank] += bytes[nextGather][rank];
      ++nextGather;
    }
    if (inFlight(2 * r))
      done(2 * r);
    emit(ScheduleStep::Kind::NewtonSchulz, r);
    while (static_cast<int64_t>(inflight.size()) >= plan.inflightLimit)
      done(inflight.front());
    emit(ScheduleStep::Kind::Start, 2 * r + 1);
    inflight.push_back(2 * r + 1);
  }
  while (!inflight.empty())
    done(inflight.front());
  if (reduceExchange < 0)
    emit(ScheduleStep::Kind::AdamW, 0);
}

Status schedulePlan(Plan &plan, const ScheduleOptions &options) {
  MUON_RETURN_IF_ERROR(packRounds(plan, options));
  sequenceSchedule(plan);
  return okStatus();
}


} // namespace muon
