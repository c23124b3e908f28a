//===- Schedule.cpp - Rounds and the overlapped step schedule -------------===//
#include "muon/Plan/Schedule.h"
#include "muon/Support/Limits.h"

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <optional>
#include <tuple>

namespace muon {
namespace {

int64_t matrixBytes(const Plan &plan, int64_t m) {
  return plan.matrices[m].rows * plan.matrices[m].cols * plan.wireBytes;
}

/// Per round, per rank: bytes of the full matrices it gathers as owner.
std::vector<std::vector<int64_t>>
gatheredBytes(const Plan &plan,
              const std::vector<std::vector<int64_t>> &rounds) {
  std::vector<std::vector<int64_t>> bytes(
      rounds.size(), std::vector<int64_t>(plan.worldSize, 0));
  for (size_t r = 0; r < rounds.size(); ++r)
    for (int64_t m : rounds[r])
      if (plan.matrices[m].owner >= 0)
        bytes[r][plan.matrices[m].owner] += matrixBytes(plan, m);
  return bytes;
}

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
      if (budget && !current.empty() && bytes + matrixBytes(plan, m) > budget) {
        rounds.push_back(std::move(current));
        current.clear();
        bytes = 0;
      }
      current.push_back(m);
      bytes += matrixBytes(plan, m);
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

bool packRounds(Plan &plan, const ScheduleOptions &options,
                std::string &error) {
  setOptions(plan, options);
  if (!plan.distributed) {
    // Nothing moves: every rank runs its own NS batches in one round.
    std::vector<int64_t> all(plan.matrices.size());
    std::iota(all.begin(), all.end(), 0);
    setRounds(plan, {all});
    return true;
  }
  std::vector<std::vector<int64_t>> owned(plan.worldSize);
  for (int64_t r = 0; r < plan.worldSize; ++r)
    owned[r] = plan.nsMatrices[r];
  for (int64_t m = 0; m < static_cast<int64_t>(plan.matrices.size()); ++m)
    if (plan.gatherBudgetBytes &&
        matrixBytes(plan, m) > plan.gatherBudgetBytes) {
      error = "gather buffer budget of " +
              std::to_string(plan.gatherBudgetBytes) +
              " bytes is too small: matrix '" + plan.matrices[m].label() +
              "' alone needs " + std::to_string(matrixBytes(plan, m));
      return false;
    }
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
  // The plan's per-rank tables grow with ranks x exchanges: refuse before
  // building them.
  int64_t count = rounds.size();
  if (count > limits::kMaxRounds) {
    error = std::string(options.async ? "the gather budget" :
                                        "the sequential debug order") +
            " needs " + std::to_string(count) +
            " rounds, above the limit of " +
            limits::describe(limits::kMaxRounds) +
            (options.async ? "; raise gather_budget_bytes"
                           : " (one round per owning rank); use async");
    return false;
  }
  if (plan.worldSize * (2 * count + 1) > limits::kMaxRankExchanges) {
    error = std::to_string(plan.worldSize) + " ranks x " +
            std::to_string(2 * count + 1) +
            " exchanges is above the limit of " +
            limits::describe(limits::kMaxRankExchanges) +
            " for the plan's per-rank tables; lower max_rounds";
    return false;
  }
  setRounds(plan, std::move(rounds));
  return true;
}

void setRounds(Plan &plan, std::vector<std::vector<int64_t>> rounds) {
  plan.rounds = std::move(rounds);
  if (plan.distributed) {
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
    std::optional<Exchange> reduce;
    for (const Exchange &ex : plan.exchanges) {
      if (ex.phase == Exchange::Phase::Reduce) {
        reduce = ex;
        continue;
      }
      for (const Transfer &t : ex.transfers)
        exchanges[2 * roundOf[t.matrix] +
                  (ex.phase == Exchange::Phase::Scatter ? 1 : 0)]
            .transfers.push_back(t);
    }
    if (reduce)
      exchanges.push_back(std::move(*reduce));
    plan.exchanges = std::move(exchanges);
  }
  // NS batches: per rank and round, same-shape matrices together (each
  // rank walks only its own matrices).
  std::vector<int64_t> roundOf(plan.matrices.size(), 0);
  for (size_t r = 0; r < plan.rounds.size(); ++r)
    for (int64_t m : plan.rounds[r])
      roundOf[m] = r;
  plan.nsBatches.assign(plan.worldSize, {});
  for (int64_t rank = 0; rank < plan.worldSize; ++rank) {
    std::map<std::tuple<int64_t, int64_t, int64_t>, NsBatch> batches;
    std::vector<int64_t> mine = plan.nsMatrices[rank];
    std::sort(mine.begin(), mine.end());
    for (int64_t m : mine) {
      const PlanMatrix &pm = plan.matrices[m];
      NsBatch &b = batches[{roundOf[m], pm.rows, pm.cols}];
      b.round = roundOf[m];
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
  for (int64_t r = 0; r < rounds; ++r) {
    while (nextGather < rounds && nextGather <= r + plan.prefetchCount) {
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

bool schedulePlan(Plan &plan, const ScheduleOptions &options,
                  std::string &error) {
  if (!packRounds(plan, options, error))
    return false;
  sequenceSchedule(plan);
  return true;
}


std::string verifySchedule(const Plan &plan) {
  int64_t exchanges = plan.exchanges.size();
  int64_t rounds = plan.rounds.size();
  std::vector<int> started(exchanges, 0), finished(exchanges, 0);
  std::vector<int> nsRuns(rounds, 0);
  std::vector<int64_t> memory(plan.worldSize, 0);
  std::vector<std::vector<int64_t>> bytes = gatheredBytes(plan, plan.rounds);
  int64_t inflight = 0;
  auto where = [](size_t i) { return "schedule step " + std::to_string(i); };
  auto name = [&](int64_t e) -> std::string {
    if (e >= 0 && e < exchanges &&
        plan.exchanges[e].phase == Exchange::Phase::Reduce)
      return "the AdamW reduce";
    return std::string(e % 2 ? "the scatter" : "the gather") + " of round " +
           std::to_string(e / 2);
  };
  std::vector<int64_t> roundOf(plan.matrices.size(), -1);
  for (int64_t r = 0; r < rounds; ++r)
    for (int64_t m : plan.rounds[r])
      roundOf[m] = r;
  // Round r gathers in 2r and scatters in 2r+1; a reduce may follow.
  int64_t reduceExchange = -1;
  if (exchanges > 2 * rounds)
    reduceExchange = 2 * rounds;
  if (exchanges > 2 * rounds + 1 ||
      (reduceExchange >= 0 &&
       plan.exchanges[reduceExchange].phase != Exchange::Phase::Reduce))
    return "expected 2 exchanges per round and at most one reduce, found " +
           std::to_string(exchanges) + " exchanges for " +
           std::to_string(rounds) + " rounds";
  for (int64_t e = 0; e < exchanges; ++e) {
    const Exchange &ex = plan.exchanges[e];
    if (e == reduceExchange)
      continue;
    bool gather = ex.phase == Exchange::Phase::Gather;
    if (ex.phase == Exchange::Phase::Reduce || ex.round != e / 2 ||
        gather != (e % 2 == 0))
      return "exchange " + std::to_string(e) +
             " is not the expected gather/scatter of round " +
             std::to_string(e / 2);
    for (const Transfer &t : ex.transfers)
      if (roundOf[t.matrix] != ex.round)
        return "exchange " + std::to_string(e) + " moves matrix '" +
               plan.matrices[t.matrix].label() + "' of another round";
  }
  int momentum = 0, adamw = 0;
  std::vector<int> applied(rounds, 0);
  for (size_t i = 0; i < plan.schedule.size(); ++i) {
    const ScheduleStep &s = plan.schedule[i];
    if (s.kind == ScheduleStep::Kind::Momentum) {
      // (A gather started before it fails at that gather's start.)
      if (momentum++)
        return where(i) + ": momentum runs twice";
      continue;
    }
    if (s.kind == ScheduleStep::Kind::ApplyUpdate) {
      if (s.index < 0 || s.index >= rounds)
        return where(i) + ": update of unknown round " +
               std::to_string(s.index);
      if (!nsRuns[s.index] || (exchanges && !finished[2 * s.index + 1]))
        return where(i) + ": update of round " + std::to_string(s.index) +
               " before its scatter is done";
      if (applied[s.index]++)
        return where(i) + ": update of round " + std::to_string(s.index) +
               " applied twice";
      continue;
    }
    if (s.kind == ScheduleStep::Kind::AdamW) {
      if (adamw++)
        return where(i) + ": AdamW runs twice";
      if (reduceExchange >= 0 && !finished[reduceExchange])
        return where(i) + ": AdamW before its gradients are reduced";
      continue;
    }
    if (s.kind == ScheduleStep::Kind::NewtonSchulz) {
      if (s.index < 0 || s.index >= rounds)
        return where(i) + ": NS of unknown round " + std::to_string(s.index);
      if (exchanges && !finished[2 * s.index])
        return where(i) + ": NS of round " + std::to_string(s.index) +
               " before its gather is done";
      if (nsRuns[s.index]++)
        return where(i) + ": NS of round " + std::to_string(s.index) +
               " runs twice";
      continue;
    }
    if (s.index < 0 || s.index >= exchanges)
      return where(i) + ": unknown exchange " + std::to_string(s.index) +
             " (the model has " + std::to_string(rounds) + " rounds)";
    bool reduce = s.index == reduceExchange;
    bool gather = !reduce && s.index % 2 == 0;
    int64_t round = s.index / 2;
    if (s.kind == ScheduleStep::Kind::Start) {
      if (started[s.index]++)
        return where(i) + ": " + name(s.index) + " starts twice";
      if (gather && !momentum)
        return where(i) + ": gather of round " + std::to_string(round) +
               " starts before momentum";
      if (!gather && !reduce && !nsRuns[round])
        return where(i) + ": scatter of round " + std::to_string(round) +
               " starts before its NS";
      if (++inflight > plan.inflightLimit)
        return where(i) + ": " + std::to_string(inflight) +
               " exchanges in flight, limit " +
               std::to_string(plan.inflightLimit);
      if (gather)
        for (int64_t r = 0; r < plan.worldSize; ++r) {
          memory[r] += bytes[round][r];
          if (plan.gatherBudgetBytes && memory[r] > plan.gatherBudgetBytes)
            return where(i) + ": rank " + std::to_string(r) + " holds " +
                   std::to_string(memory[r]) +
                   " bytes of gathered matrices, budget " +
                   std::to_string(plan.gatherBudgetBytes);
        }
    } else {
      if (!started[s.index])
        return where(i) + ": " + name(s.index) + " is done before it starts";
      if (finished[s.index]++)
        return where(i) + ": " + name(s.index) + " is done twice";
      --inflight;
      if (!gather && !reduce)
        for (int64_t r = 0; r < plan.worldSize; ++r)
          memory[r] -= bytes[round][r];
    }
  }
  for (int64_t e = 0; e < exchanges; ++e)
    if (!started[e] || !finished[e])
      return name(e) + " is never " + (started[e] ? "done" : "started");
  for (int64_t r = 0; r < rounds; ++r) {
    if (!nsRuns[r])
      return "NS of round " + std::to_string(r) + " never runs";
    if (!applied[r])
      return "the update of round " + std::to_string(r) + " is never applied";
  }
  if (!momentum)
    return "momentum never runs";
  if (!adamw)
    return "AdamW never runs";
  return "";
}

} // namespace muon
