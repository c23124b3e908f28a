//===- Communicator.cpp - The one-rank communicator -----------------------===//
#include "muon/Runtime/Communicator.h"

#include <algorithm>
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

namespace muon::runtime {

std::string shareText(Communicator &comm, int64_t root, const std::string &text,
                      double timeoutSeconds) {
  // Eight bytes a round: only failures take this path, and their messages
  // are short.
  const bool mine = comm.rank() == root;
  std::string error;
  std::vector<uint64_t> words;
  const uint64_t length = mine ? std::min<size_t>(text.size(), 4096) : 0;
  if (!comm.allGather(length, words, timeoutSeconds, error))
    return "(the message of rank " + std::to_string(root) +
           " could not be shared: " + error + ")";
  const uint64_t size = words[root];
  std::string shared;
  for (uint64_t at = 0; at < size; at += 8) {
    uint64_t chunk = 0;
    if (mine)
      std::memcpy(&chunk, text.data() + at, std::min<uint64_t>(8, size - at));
    if (!comm.allGather(chunk, words, timeoutSeconds, error))
      return "(the message of rank " + std::to_string(root) +
             " could not be shared: " + error + ")";
    char bytes[8];
    std::memcpy(bytes, &words[root], 8);
    shared.append(bytes, std::min<uint64_t>(8, size - at));
  }
  return shared;
}

} // namespace muon::runtime
