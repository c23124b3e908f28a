//===- Communicator.cpp - The one-rank communicator -----------------------===//
#include "muon/Runtime/Communicator.h"

#include <cstdlib>
#include <cstring>

namespace muon::runtime {

bool SingleRankCommunicator::start(const AllToAllV &exchange,
                                   PendingExchange &pending,
                                   std::string &error) {
  // A plan for one rank never sends to itself; anything else is a bug in
  // the caller, reported rather than ignored.
  for (size_t p = 0; p < exchange.sendCounts.size(); ++p)
    if (exchange.sendCounts[p] || exchange.recvCounts[p]) {
      error = "a one-rank run cannot exchange data";
      return false;
    }
  pending.id = 0;
  return true;
}

bool SingleRankCommunicator::wait(PendingExchange &pending, double,
                                  std::string &) {
  pending.id = -1;
  return true;
}

bool SingleRankCommunicator::allGather(uint64_t value,
                                       std::vector<uint64_t> &values, double,
                                       std::string &) {
  values.assign(1, value);
  return true;
}

bool SingleRankCommunicator::allReduceMin(int64_t value, int64_t &result,
                                          double, std::string &) {
  result = value;
  return true;
}

bool SingleRankCommunicator::gatherToRoot(
    const std::vector<char> &bytes, std::vector<std::vector<char>> &atRoot,
    double, std::string &) {
  atRoot.assign(1, bytes);
  return true;
}

void SingleRankCommunicator::abort(int exitCode) { std::_Exit(exitCode); }

} // namespace muon::runtime
