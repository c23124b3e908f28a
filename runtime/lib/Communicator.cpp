//===- Communicator.cpp - The one-rank communicator -----------------------===//
#include "muon/Runtime/Communicator.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace muon::runtime {

StatusOr<std::vector<uint64_t>>
Communicator::allGatherWords(const std::vector<uint64_t> &mine,
                             double timeoutSeconds) {
  const size_t n = mine.size();
  std::vector<uint64_t> all(n * static_cast<size_t>(size()), 0);
  for (size_t w = 0; w < n; ++w) {
    MUON_ASSIGN_OR_RETURN(std::vector<uint64_t> words,
                          allGather(mine[w], timeoutSeconds));
    for (size_t r = 0; r < words.size(); ++r)
      all[r * n + w] = words[r];
  }
  return all;
}

StatusOr<std::vector<std::vector<char>>>
Communicator::allGatherBytes(const std::vector<char> &bytes,
                             double timeoutSeconds) {
  MUON_ASSIGN_OR_RETURN(std::vector<uint64_t> lengths,
                        allGather(bytes.size(), timeoutSeconds));
  uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
  std::vector<std::vector<char>> all(lengths.size());
  // Round k carries bytes [8k, 8k + 8) of every rank, zero-padded.
  for (uint64_t at = 0; at < longest; at += 8) {
    uint64_t word = 0;
    if (at < bytes.size())
      std::memcpy(&word, bytes.data() + at,
                  std::min<uint64_t>(8, bytes.size() - at));
    MUON_ASSIGN_OR_RETURN(std::vector<uint64_t> words,
                          allGather(word, timeoutSeconds));
    for (size_t r = 0; r < words.size(); ++r)
      if (at < lengths[r]) {
        const char *w = reinterpret_cast<const char *>(&words[r]);
        all[r].insert(all[r].end(), w,
                      w + std::min<uint64_t>(8, lengths[r] - at));
      }
  }
  return all;
}

StatusOr<PendingExchange>
SingleRankCommunicator::start(const AllToAllV &exchange) {
  // A plan for one rank never sends to itself; anything else is a bug in
  // the caller, reported rather than ignored.
  for (size_t p = 0; p < exchange.sendCounts.size(); ++p)
    if (exchange.sendCounts[p] || exchange.recvCounts[p])
      return invalidArgument("a one-rank run cannot exchange data");
  return PendingExchange{0};
}

Status SingleRankCommunicator::wait(PendingExchange &pending, double) {
  pending.id = -1;
  return okStatus();
}

void SingleRankCommunicator::abort(int exitCode) { std::_Exit(exitCode); }

std::string shareText(Communicator &comm, int64_t root, const std::string &text,
                      double timeoutSeconds) {
  std::vector<char> mine;
  if (comm.rank() == root)
    mine.assign(text.begin(),
                text.begin() + std::min<size_t>(text.size(), 4096));
  StatusOr<std::vector<std::vector<char>>> all =
      comm.allGatherBytes(mine, timeoutSeconds);
  if (!all.ok())
    return "(the message of rank " + std::to_string(root) +
           " could not be shared: " + all.status().message() + ")";
  return std::string((*all)[root].begin(), (*all)[root].end());
}

} // namespace muon::runtime
