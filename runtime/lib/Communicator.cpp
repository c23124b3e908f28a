//===- Communicator.cpp - The one-rank communicator -----------------------===//
#include "muon/Runtime/Communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace muon::runtime {

// What isTimeoutError looks for: the part after the seconds.
static constexpr std::string_view kTimeoutTail = " s: a peer died or stalled";

std::string timeoutError(double seconds) {
  char limit[32];
  std::snprintf(limit, sizeof(limit), "%g", seconds);
  return "no answer within " + std::string(limit) + std::string(kTimeoutTail);
}

bool isTimeoutError(std::string_view error) {
  size_t at = error.find("no answer within ");
  return at != std::string_view::npos &&
         error.find(kTimeoutTail, at) != std::string_view::npos;
}

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
