//===- Plan.cpp - A compiled Muon step ------------------------------------===//
#include "muon/Plan/Plan.h"

namespace muon {

std::string PlanMatrix::label() const {
  return slice < 0 ? param : param + "[" + std::to_string(slice) + "]";
}

std::vector<RankFigures> computeRankFigures(const Plan &plan) {
  std::vector<RankFigures> figures(plan.worldSize);
  for (int64_t r = 0; r < plan.worldSize; ++r)
    for (int64_t m : plan.nsMatrices[r]) {
      figures[r].nsFlops += plan.matrices[m].nsFlops;
      if (plan.matrices[m].owner == r)
        figures[r].owned.push_back(plan.matrices[m].label());
    }
  for (const Exchange &ex : plan.exchanges)
    for (const Transfer &t : ex.transfers) {
      int64_t bytes = t.elements() * plan.wireBytes;
      figures[t.src].bytesSent += bytes;
      figures[t.dst].bytesReceived += bytes;
    }
  return figures;
}

int64_t wireDtypeBytes(const std::string &dtype) {
  if (dtype == "f32")
    return 4;
  if (dtype == "bf16")
    return 2;
  return 0;
}

} // namespace muon
