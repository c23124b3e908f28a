//===- ScheduleVerifier.cpp - The rules every schedule keeps --------------===//
#include "muon/Plan/ScheduleVerifier.h"

#include <vector>

namespace muon {

Status verifySchedule(const Plan &plan) {
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
    return std::string("the ") +
           phaseName(e % 2 ? Exchange::Phase::Scatter
                           : Exchange::Phase::Gather) +
           " of round " + std::to_string(e / 2);
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
    return invalidArgument("expected 2 exchanges per round and at most one reduce, found " +
           std::to_string(exchanges) + " exchanges for " +
           std::to_string(rounds) + " rounds");
  for (int64_t e = 0; e < exchanges; ++e) {
    const Exchange &ex = plan.exchanges[e];
    if (e == reduceExchange)
      continue;
    bool gather = ex.phase == Exchange::Phase::Gather;
    if (ex.phase == Exchange::Phase::Reduce || ex.round != e / 2 ||
        gather != (e % 2 == 0))
      return invalidArgument("exchange " + std::to_string(e) +
             " is not the expected gather/scatter of round " +
             std::to_string(e / 2));
    for (const Transfer &t : ex.transfers)
      if (roundOf[t.matrix] != ex.round)
        return invalidArgument("exchange " + std::to_string(e) + " moves matrix '" +
               plan.matrices[t.matrix].label() + "' of another round");
  }
  int momentum = 0, adamw = 0;
  std::vector<int> applied(rounds, 0);
  for (size_t i = 0; i < plan.schedule.size(); ++i) {
    const ScheduleStep &s = plan.schedule[i];
    // Momentum and AdamW act on every local piece: their index is 0.
    if ((s.kind == ScheduleStep::Kind::Momentum ||
         s.kind == ScheduleStep::Kind::AdamW) &&
        s.index != 0)
      return invalidArgument(where(i) + ": " +
             (s.kind == ScheduleStep::Kind::Momentum ? "momentum" : "adamw") +
             " takes index 0, got " + std::to_string(s.index));
    if (s.kind == ScheduleStep::Kind::Momentum) {
      // (A gather started before it fails at that gather's start.)
      if (momentum++)
        return invalidArgument(where(i) + ": momentum runs twice");
      continue;
    }
    if (s.kind == ScheduleStep::Kind::ApplyUpdate) {
      if (s.index < 0 || s.index >= rounds)
        return invalidArgument(where(i) + ": update of unknown round " +
               std::to_string(s.index));
      if (!nsRuns[s.index] || (exchanges && !finished[2 * s.index + 1]))
        return invalidArgument(where(i) + ": update of round " + std::to_string(s.index) +
               " before its scatter is done");
      if (applied[s.index]++)
        return invalidArgument(where(i) + ": update of round " + std::to_string(s.index) +
               " applied twice");
      continue;
    }
    if (s.kind == ScheduleStep::Kind::AdamW) {
      if (adamw++)
        return invalidArgument(where(i) + ": AdamW runs twice");
      if (reduceExchange >= 0 && !finished[reduceExchange])
        return invalidArgument(where(i) + ": AdamW before its gradients are reduced");
      continue;
    }
    if (s.kind == ScheduleStep::Kind::NewtonSchulz) {
      if (s.index < 0 || s.index >= rounds)
        return invalidArgument(where(i) + ": NS of unknown round " + std::to_string(s.index));
      if (exchanges && !finished[2 * s.index])
        return invalidArgument(where(i) + ": NS of round " + std::to_string(s.index) +
               " before its gather is done");
      if (nsRuns[s.index]++)
        return invalidArgument(where(i) + ": NS of round " + std::to_string(s.index) +
               " runs twice");
      continue;
    }
    if (s.index < 0 || s.index >= exchanges)
      return invalidArgument(where(i) + ": unknown exchange " + std::to_string(s.index) +
             " (the model has " + std::to_string(rounds) + " rounds)");
    bool reduce = s.index == reduceExchange;
    bool gather = !reduce && s.index % 2 == 0;
    int64_t round = s.index / 2;
    if (s.kind == ScheduleStep::Kind::Start) {
      if (started[s.index]++)
        return invalidArgument(where(i) + ": " + name(s.index) + " starts twice");
      if (gather && !momentum)
        return invalidArgument(where(i) + ": gather of round " + std::to_string(round) +
               " starts before momentum");
      if (!gather && !reduce && !nsRuns[round])
        return invalidArgument(where(i) + ": scatter of round " + std::to_string(round) +
               " starts before its NS");
      if (++inflight > plan.inflightLimit)
        return invalidArgument(where(i) + ": " + std::to_string(inflight) +
               " exchanges in flight, limit " +
               std::to_string(plan.inflightLimit));
      if (gather)
        for (int64_t r = 0; r < plan.worldSize; ++r) {
          memory[r] += bytes[round][r];
          if (plan.gatherBudgetBytes && memory[r] > plan.gatherBudgetBytes)
            return invalidArgument(where(i) + ": rank " + std::to_string(r) + " holds " +
                   std::to_string(memory[r]) +
                   " bytes of gathered matrices, budget " +
                   std::to_string(plan.gatherBudgetBytes));
        }
    } else {
      if (!started[s.index])
        return invalidArgument(where(i) + ": " + name(s.index) + " is done before it starts");
      if (finished[s.index]++)
        return invalidArgument(where(i) + ": " + name(s.index) + " is done twice");
      --inflight;
      if (!gather && !reduce)
        for (int64_t r = 0; r < plan.worldSize; ++r)
          memory[r] -= bytes[round][r];
    }
  }
  for (int64_t e = 0; e < exchanges; ++e)
    if (!started[e] || !finished[e])
      return invalidArgument(name(e) + " is never " + (started[e] ? "done" : "started"));
  for (int64_t r = 0; r < rounds; ++r) {
    if (!nsRuns[r])
      return invalidArgument("NS of round " + std::to_string(r) + " never runs");
    if (!applied[r])
      return invalidArgument("the update of round " + std::to_string(r) + " is never applied");
  }
  if (!momentum)
    return invalidArgument("momentum never runs");
  if (!adamw)
    return invalidArgument("AdamW never runs");
  return okStatus();
}

} // namespace muon
