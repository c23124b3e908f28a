//===- Plan.cpp - A compiled Muon step ------------------------------------===//
#include "muon/Plan/Plan.h"
#include "muon/Support/Replicas.h"

#include "muon/Plan/Algorithm.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace muon {

namespace {
constexpr std::pair<Exchange::Phase, const char *> kPhaseNames[] = {
    {Exchange::Phase::Gather, "gather"},
    {Exchange::Phase::Scatter, "scatter"},
    {Exchange::Phase::Reduce, "reduce"}};
constexpr std::pair<ScheduleStep::Kind, const char *> kStepNames[] = {
    {ScheduleStep::Kind::Start, "start"},
    {ScheduleStep::Kind::Done, "done"},
    {ScheduleStep::Kind::NewtonSchulz, "ns"},
    {ScheduleStep::Kind::Momentum, "momentum"},
    {ScheduleStep::Kind::ApplyUpdate, "apply"},
    {ScheduleStep::Kind::AdamW, "adamw"}};
} // namespace

const char *phaseName(Exchange::Phase phase) {
  for (auto [p, name] : kPhaseNames)
    if (p == phase)
      return name;
  return "?";
}

std::optional<Exchange::Phase> parsePhase(std::string_view name) {
  for (auto [p, n] : kPhaseNames)
    if (name == n)
      return p;
  return std::nullopt;
}

const char *stepName(ScheduleStep::Kind kind) {
  for (auto [k, name] : kStepNames)
    if (k == kind)
      return name;
  return "?";
}

std::optional<ScheduleStep::Kind> parseStepName(std::string_view name) {
  for (auto [k, n] : kStepNames)
    if (name == n)
      return k;
  return std::nullopt;
}

std::string nameList(const std::string_view *names, size_t count,
                     char quote) {
  std::string list;
  for (size_t i = 0; i < count; ++i) {
    list += i == 0 ? "" : (i + 1 == count ? " or " : ", ");
    list += quote;
    list += names[i];
    list += quote;
  }
  return list;
}

int weightDecayModeIndex(std::string_view name) {
  auto at = std::find(kWeightDecayModes.begin(), kWeightDecayModes.end(), name);
  return at == kWeightDecayModes.end()
             ? -1
             : static_cast<int>(at - kWeightDecayModes.begin());
}

bool isAdjustLrName(std::string_view name) {
  return std::find(kAdjustLrNames.begin(), kAdjustLrNames.end(), name) !=
         kAdjustLrNames.end();
}

double adjustLrFactor(std::string_view name, int64_t rows, int64_t cols) {
  const double r = static_cast<double>(rows), c = static_cast<double>(cols);
  if (name == "original")
    return std::sqrt(std::max(1.0, r / c));
  if (name == "match_rms_adamw")
    return 0.2 * std::sqrt(std::max(r, c));
  if (name == "spectral")
    return std::sqrt(std::max(r, c));
  if (name == "unit_rms_norm" || name == "spectral_unclamped")
    return std::sqrt(r / c);
  return 0;
}

std::vector<PlanGroup> defaultGroups() {
  PlanGroup muon(kMuon), adamw(kAdamW);
  muon.name = "muon";
  adamw.name = "adamw";
  return {muon, adamw};
}

int64_t findGroup(const std::vector<PlanGroup> &groups, std::string_view name) {
  for (size_t i = 0; i < groups.size(); ++i)
    if (groups[i].name == name)
      return static_cast<int64_t>(i);
  return -1;
}

bool PlanParam::orthogonalized() const {
  return algorithmOf(algorithm).orthogonalizes;
}

std::string PlanMatrix::label() const {
  return slice < 0 ? param : param + "[" + std::to_string(slice) + "]";
}

std::vector<RankFigures> computeRankFigures(const Plan &plan) {
  std::vector<RankFigures> figures(plan.worldSize);
  for (int64_t r = 0; r < plan.worldSize; ++r)
    for (int64_t m : plan.nsMatrices[r]) {
      figures[r].nsFlops += plan.matrices[m].nsFlops;
      if (plan.matrices[m].owner == r || plan.matrices[m].redundant)
        figures[r].owned.push_back(plan.matrices[m].label());
    }
  for (const Exchange &ex : plan.exchanges) {
    for (const Transfer &t : ex.transfers) {
      int64_t bytes = t.elements() * plan.wireBytes;
      figures[t.src].bytesSent += bytes;
      figures[t.dst].bytesReceived += bytes;
    }
    for (const Reduction &r : ex.reductions) {
      int64_t bytes = r.elements * plan.wireBytes;
      figures[r.src].bytesSent += bytes;
      figures[r.dst].bytesReceived += bytes;
    }
  }
  return figures;
}

std::vector<RankExchangeView> rankExchangeViews(const Exchange &exchange,
                                                int64_t worldSize) {
  // Per rank, per peer (ordered), the transfers in exchange order.
  std::vector<std::map<int64_t, PeerSlice>> sends(worldSize), recvs(worldSize);
  auto add = [&](int64_t src, int64_t dst, int64_t elements, size_t i) {
    PeerSlice &s = sends[src][dst];
    s.peer = dst;
    s.elements += elements;
    s.transfers.push_back(static_cast<int64_t>(i));
    PeerSlice &r = recvs[dst][src];
    r.peer = src;
    r.elements += elements;
    r.transfers.push_back(static_cast<int64_t>(i));
  };
  // Transfers (gather, scatter) or reductions (reduce): an exchange has one
  // kind, and the slices index into that list.
  for (size_t i = 0; i < exchange.transfers.size(); ++i)
    add(exchange.transfers[i].src, exchange.transfers[i].dst,
        exchange.transfers[i].elements(), i);
  for (size_t i = 0; i < exchange.reductions.size(); ++i)
    add(exchange.reductions[i].src, exchange.reductions[i].dst,
        exchange.reductions[i].elements, i);
  std::vector<RankExchangeView> views(worldSize);
  auto lay = [](std::map<int64_t, PeerSlice> &byPeer,
                std::vector<PeerSlice> &out, int64_t &total) {
    for (auto &[peer, slice] : byPeer) {
      slice.offset = total;
      total += slice.elements;
      out.push_back(std::move(slice));
    }
  };
  for (int64_t r = 0; r < worldSize; ++r) {
    lay(sends[r], views[r].send, views[r].sendElements);
    lay(recvs[r], views[r].recv, views[r].recvElements);
  }
  return views;
}

RankExchangeView rankExchangeView(const Exchange &exchange, int64_t rank) {
  // Only this rank's peers: a slice of a large plan names peers up to the
  // world size, and the all-ranks version would allocate for every one.
  std::map<int64_t, PeerSlice> sends, recvs;
  auto add = [&](int64_t src, int64_t dst, int64_t elements, size_t i) {
    if (src == rank) {
      PeerSlice &s = sends[dst];
      s.peer = dst;
      s.elements += elements;
      s.transfers.push_back(static_cast<int64_t>(i));
    }
    if (dst == rank) {
      PeerSlice &r = recvs[src];
      r.peer = src;
      r.elements += elements;
      r.transfers.push_back(static_cast<int64_t>(i));
    }
  };
  for (size_t i = 0; i < exchange.transfers.size(); ++i)
    add(exchange.transfers[i].src, exchange.transfers[i].dst,
        exchange.transfers[i].elements(), i);
  for (size_t i = 0; i < exchange.reductions.size(); ++i)
    add(exchange.reductions[i].src, exchange.reductions[i].dst,
        exchange.reductions[i].elements, i);
  RankExchangeView view;
  auto lay = [](std::map<int64_t, PeerSlice> &byPeer,
                std::vector<PeerSlice> &out, int64_t &total) {
    for (auto &[peer, slice] : byPeer) {
      slice.offset = total;
      total += slice.elements;
      out.push_back(std::move(slice));
    }
  };
  lay(sends, view.send, view.sendElements);
  lay(recvs, view.recv, view.recvElements);
  return view;
}

int64_t nsConfigOf(const std::vector<PlanParam> &params,
                   const std::vector<PlanGroup> &groups, int64_t param) {
  return groups[params[param].group].nsConfig;
}

int64_t maxNsSteps(const NewtonSchulzSettings &ns) {
  int64_t steps = 0;
  for (const NewtonSchulzConfig &c : ns.configs)
    steps = std::max(steps, c.nsSteps);
  return steps;
}

std::vector<PlanMatrix> muonMatrices(const std::vector<PlanParam> &params,
                                     const std::vector<PlanGroup> &groups,
                                     const NewtonSchulzSettings &ns) {
  std::vector<PlanMatrix> out;
  for (size_t i = 0; i < params.size(); ++i) {
    const PlanParam &p = params[i];
    if (!p.orthogonalized() || p.layout.shape.size() < 2)
      continue;
    const int64_t steps =
        ns.configs[nsConfigOf(params, groups, static_cast<int64_t>(i))].nsSteps;
    int64_t count = p.layout.numMatrices();
    for (int64_t s = 0; s < count; ++s) {
      PlanMatrix m;
      m.param = p.name;
      m.paramIndex = static_cast<int64_t>(i);
      m.slice = p.layout.slicedMatrices() ? s : -1;
      m.rows = p.layout.matrixRows();
      m.cols = p.layout.matrixCols();
      m.nsFlops = nsFlops(m.rows, m.cols, steps);
      out.push_back(std::move(m));
    }
  }
  return out;
}

std::vector<int64_t> nsRanksOf(const Plan &plan, int64_t m) {
  const PlanMatrix &pm = plan.matrices[m];
  if (!pm.redundant)
    return {pm.owner};
  return replicaOwners(plan.mesh, plan.params[pm.paramIndex].layout, pm.owner);
}

int64_t ownerFor(const Plan &plan, int64_t m, int64_t rank) {
  const PlanMatrix &pm = plan.matrices[m];
  if (!pm.redundant)
    return pm.owner;
  return replicaOwnerOf(plan.mesh, plan.params[pm.paramIndex].layout, pm.owner,
                        rank);
}

int64_t gatheredMatrixBytes(const Plan &plan, int64_t m) {
  return plan.matrices[m].rows * plan.matrices[m].cols * plan.wireBytes;
}

std::vector<std::vector<int64_t>>
gatheredBytes(const Plan &plan,
              const std::vector<std::vector<int64_t>> &rounds) {
  std::vector<std::vector<int64_t>> bytes(
      rounds.size(), std::vector<int64_t>(plan.worldSize, 0));
  for (size_t r = 0; r < rounds.size(); ++r)
    for (int64_t m : rounds[r])
      if (plan.matrices[m].owner >= 0)
        for (int64_t o : nsRanksOf(plan, m))
          bytes[r][o] += gatheredMatrixBytes(plan, m);
  return bytes;
}

int64_t wireDtypeBytes(const std::string &dtype) {
  if (dtype == "f32")
    return 4;
  if (dtype == "bf16")
    return 2;
  return 0;
}

} // namespace muon
