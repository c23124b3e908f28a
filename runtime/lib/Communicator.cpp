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

bool Communicator::allGatherWords(const std::vector<uint64_t> &mine,
                                  std::vector<uint64_t> &all,
                                  double timeoutSeconds, std::string &error) {
  const size_t n = mine.size();
  all.assign(n * static_cast<size_t>(size()), 0);
  std::vector<uint64_t> words;
  for (size_t w = 0; w < n; ++w) {
    if (!allGather(mine[w], words, timeoutSeconds, error))
      return false;
    for (size_t r = 0; r < words.size(); ++r)
      all[r * n + w] = words[r];
  }
  return true;
}

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

bool SingleRankCommunicator::allGatherBytes(const std::vector<char> &bytes,
                                            std::vector<std::vector<char>> &all,
                                            double, std::string &) {
  all.assign(1, bytes);
  return true;
}

void SingleRankCommunicator::abort(int exitCode) { std::_Exit(exitCode); }

} // namespace muon::runtime

namespace muon::runtime {

std::string shareText(Communicator &comm, int64_t root, const std::string &text,
                      double timeoutSeconds) {
  std::vector<char> mine;
  if (comm.rank() == root)
    mine.assign(text.begin(),
                text.begin() + std::min<size_t>(text.size(), 4096));
  std::vector<std::vector<char>> all;
  std::string error;
  if (!comm.allGatherBytes(mine, all, timeoutSeconds, error))
    return "(the message of rank " + std::to_string(root) +
           " could not be shared: " + error + ")";
  return std::string(all[root].begin(), all[root].end());
}

} // namespace muon::runtime
