//===- Communicator.cpp - The one-rank communicator -----------------------===//
#include "muon/Runtime/Communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace muon::runtime {

bool Communicator::allGatherBytes(const std::vector<char> &bytes,
                                  std::vector<std::vector<char>> &all,
                                  double timeoutSeconds, std::string &error) {
  std::vector<uint64_t> lengths;
  if (!allGather(bytes.size(), lengths, timeoutSeconds, error))
    return false;
  uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
  all.assign(lengths.size(), {});
  // Round k carries bytes [8k, 8k + 8) of every rank, zero-padded.
  for (uint64_t at = 0; at < longest; at += 8) {
    uint64_t word = 0;
    if (at < bytes.size())
      std::memcpy(&word, bytes.data() + at,
                  std::min<uint64_t>(8, bytes.size() - at));
    std::vector<uint64_t> words;
    if (!allGather(word, words, timeoutSeconds, error))
      return false;
    for (size_t r = 0; r < words.size(); ++r)
      if (at < lengths[r]) {
        const char *w = reinterpret_cast<const char *>(&words[r]);
        all[r].insert(all[r].end(), w,
                      w + std::min<uint64_t>(8, lengths[r] - at));
      }
  }
  return true;
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

bool SingleRankCommunicator::allGatherBytes(
    const std::vector<char> &bytes, std::vector<std::vector<char>> &all,
    double, std::string &) {
  all.assign(1, bytes);
  return true;
}

void SingleRankCommunicator::abort(int exitCode) { std::_Exit(exitCode); }

} // namespace muon::runtime
