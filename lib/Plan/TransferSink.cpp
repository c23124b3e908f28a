//===- TransferSink.cpp - Transfers taken as the compiler makes them -------===//
#include "muon/Plan/TransferSink.h"

namespace muon {

TransferSink::~TransferSink() = default;

void TransferCounter::begin(const Plan &plan) {
  started = true;
  wireBytes = plan.wireBytes;
  transfers = 0;
  sent.assign(plan.worldSize, 0);
  received.assign(plan.worldSize, 0);
}

void TransferCounter::add(int64_t, bool, const Transfer &t) {
  int64_t bytes = t.elements() * wireBytes;
  sent[t.src] += bytes;
  received[t.dst] += bytes;
  ++transfers;
}

std::vector<RankFigures> TransferCounter::figures(const Plan &plan) const {
  std::vector<RankFigures> figures = computeRankFigures(plan);
  for (size_t r = 0; r < figures.size() && r < sent.size(); ++r) {
    figures[r].bytesSent += sent[r];
    figures[r].bytesReceived += received[r];
  }
  return figures;
}

} // namespace muon
