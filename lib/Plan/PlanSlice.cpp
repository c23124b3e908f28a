//===- PlanSlice.cpp - One rank's part of a plan --------------------------===//
//
// slicePlan (a rank's part cut from a whole plan, as loadPlanSlice builds it
// from the file), planSliceIdentity (what ranks compare of their parts) and
// planHeldBytes (what a part holds in memory).
//
//===----------------------------------------------------------------------===//
#include "PlanBinaryFormat.h"

#include "muon/Support/Fnv.h"

#include <cstring>

namespace muon {
using namespace planbin;

namespace {
template <typename T> int64_t vectorBytes(const std::vector<T> &v) {
  return static_cast<int64_t>(v.capacity() * sizeof(T));
}
int64_t stringBytes(const std::string &s) {
  // Short strings live inside the object (libstdc++ keeps 15 chars).
  return s.capacity() > 15 ? static_cast<int64_t>(s.capacity() + 1) : 0;
}
} // namespace

uint64_t planSliceIdentity(const Plan &slice) {
  std::string shared = encodeShared(slice, slice.totalMatrices);
  char id[8];
  for (int i = 0; i < 8; ++i)
    id[i] = static_cast<char>(slice.fileId >> (8 * i));
  return fnv1a(shared.data(), shared.size(), fnv1a(id, 8));
}

Plan slicePlan(const Plan &plan, int64_t rank) {
  Plan slice;
  slice.worldSize = plan.worldSize;
  slice.wireDtype = plan.wireDtype;
  slice.wireBytes = plan.wireBytes;
  slice.distributed = plan.distributed;
  slice.mesh = plan.mesh;
  slice.params = plan.params;
  slice.ns = plan.ns;
  slice.groups = plan.groups;
  slice.qkClip = plan.qkClip;
  slice.schedule = plan.schedule;
  slice.prefetchCount = plan.prefetchCount;
  slice.inflightLimit = plan.inflightLimit;
  slice.gatherBudgetBytes = plan.gatherBudgetBytes;
  slice.async = plan.async;
  slice.sliceRank = rank;
  slice.totalMatrices = static_cast<int64_t>(plan.matrices.size());
  // The same local set as the writer's.
  std::vector<int64_t> &ids = slice.matrixIds;
  for (size_t k = 0; k < plan.matrices.size(); ++k)
    if (plan.matrices[k].owner == rank)
      ids.push_back(static_cast<int64_t>(k));
  ids.insert(ids.end(), plan.nsMatrices[rank].begin(),
             plan.nsMatrices[rank].end());
  for (const Exchange &ex : plan.exchanges)
    for (const Transfer &t : ex.transfers)
      if (t.src == rank || t.dst == rank)
        ids.push_back(t.matrix);
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  for (int64_t k : ids)
    slice.matrices.push_back(plan.matrices[k]);
  auto local = [&](int64_t k) { return localIndex(ids, k); };
  auto has = [&](int64_t k) {
    return std::binary_search(ids.begin(), ids.end(), k);
  };
  for (const auto &round : plan.rounds) {
    slice.rounds.emplace_back();
    for (int64_t k : round)
      if (has(k))
        slice.rounds.back().push_back(local(k));
  }
  slice.nsMatrices.assign(plan.worldSize, {});
  slice.nsBatches.assign(plan.worldSize, {});
  for (NsBatch b : plan.nsBatches[rank]) {
    for (int64_t &k : b.matrices)
      k = local(k);
    slice.nsMatrices[rank].insert(slice.nsMatrices[rank].end(),
                                  b.matrices.begin(), b.matrices.end());
    slice.nsBatches[rank].push_back(std::move(b));
  }
  for (const Exchange &ex : plan.exchanges) {
    Exchange part;
    part.phase = ex.phase;
    part.round = ex.round;
    for (Transfer t : ex.transfers)
      if (t.src == rank || t.dst == rank) {
        t.matrix = local(t.matrix);
        part.transfers.push_back(t);
      }
    for (const Reduction &r : ex.reductions)
      if (r.src == rank || r.dst == rank)
        part.reductions.push_back(r);
    slice.exchanges.push_back(std::move(part));
  }
  return slice;
}

int64_t planHeldBytes(const Plan &plan) {
  int64_t bytes = sizeof(Plan) + stringBytes(plan.wireDtype) +
                  vectorBytes(plan.mesh.shape) + vectorBytes(plan.mesh.devices);
  bytes += vectorBytes(plan.ns.configs) + stringBytes(plan.ns.nsDtype);
  for (const NewtonSchulzConfig &c : plan.ns.configs)
    bytes += vectorBytes(c.coefficients);
  bytes += vectorBytes(plan.groups);
  for (const PlanGroup &g : plan.groups) {
    bytes += stringBytes(g.name) + vectorBytes(g.settings);
    for (const SettingValue &v : g.settings)
      bytes += stringBytes(v.text);
  }
  bytes += vectorBytes(plan.params);
  for (const PlanParam &p : plan.params) {
    bytes += stringBytes(p.name) + stringBytes(p.dtype) +
             vectorBytes(p.layout.shape) + vectorBytes(p.layout.splitAxes) +
             vectorBytes(p.layout.partialAxes) + vectorBytes(p.layout.only);
    for (const auto &axes : p.layout.splitAxes)
      bytes += vectorBytes(axes);
  }
  bytes += vectorBytes(plan.matrices) + vectorBytes(plan.matrixIds);
  for (const PlanMatrix &m : plan.matrices)
    bytes += stringBytes(m.param);
  bytes += vectorBytes(plan.exchanges);
  for (const Exchange &ex : plan.exchanges)
    bytes += vectorBytes(ex.transfers) + vectorBytes(ex.reductions);
  bytes += vectorBytes(plan.nsMatrices) + vectorBytes(plan.rounds) +
           vectorBytes(plan.nsBatches) + vectorBytes(plan.schedule);
  for (const auto &v : plan.nsMatrices)
    bytes += vectorBytes(v);
  for (const auto &v : plan.rounds)
    bytes += vectorBytes(v);
  for (const auto &batches : plan.nsBatches) {
    bytes += vectorBytes(batches);
    for (const NsBatch &b : batches)
      bytes += vectorBytes(b.matrices);
  }
  return bytes;
}

} // namespace muon
