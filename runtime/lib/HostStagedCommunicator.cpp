//===- HostStagedCommunicator.cpp - Device exchanges over a host transport ===//
#include "muon/Runtime/HostStagedCommunicator.h"

#include <algorithm>
#include <cstdlib>

namespace muon::runtime {

/// The byte ranges `counts`/`offsets` (in elements) cover, sorted and
/// merged: one copy per contiguous run instead of one per peer.
static std::vector<std::pair<int64_t, int64_t>>
coveredRanges(const std::vector<int64_t> &counts,
              const std::vector<int64_t> &offsets, int64_t elementBytes) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (size_t p = 0; p < counts.size() && p < offsets.size(); ++p)
    if (counts[p] > 0)
      ranges.push_back({offsets[p] * elementBytes,
                        (offsets[p] + counts[p]) * elementBytes});
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<int64_t, int64_t>> merged;
  for (const auto &r : ranges) {
    if (!merged.empty() && r.first <= merged.back().second)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  return merged;
}

StatusOr<PendingExchange>
HostStagedCommunicator::start(const AllToAllV &exchange) {
  Staged s;
  Ranges sendRanges = coveredRanges(exchange.sendCounts, exchange.sendOffsets,
                                    exchange.elementBytes);
  s.recvRanges = coveredRanges(exchange.recvCounts, exchange.recvOffsets,
                               exchange.elementBytes);
  s.send.resize(sendRanges.empty() ? 0 : sendRanges.back().second);
  s.recv.resize(s.recvRanges.empty() ? 0 : s.recvRanges.back().second);
  // copyToHost waits for the device work that filled the buffer.
  for (const auto &[begin, end] : sendRanges) {
    device.copyToHost(s.send.data() + begin,
                      static_cast<const char *>(exchange.sendBuffer) + begin,
                      end - begin);
    ++copied.copies;
    copied.bytes += end - begin;
  }
  s.deviceRecv = exchange.recvBuffer;
  AllToAllV host = exchange;
  host.sendBuffer = s.send.data();
  host.recvBuffer = s.recv.data();
  StatusOr<PendingExchange> innerPending = inner.start(host);
  if (!innerPending.ok()) {
    // Part of the exchange may be posted: its host buffers stay until this
    // communicator goes (the run is failing).
    abandoned.push_back(std::move(s));
    return innerPending.status();
  }
  s.innerPending = *innerPending;
  PendingExchange pending{nextId++};
  staged.emplace(pending.id, std::move(s));
  return pending;
}

Status HostStagedCommunicator::wait(PendingExchange &pending,
                                    double timeoutSeconds) {
  auto it = staged.find(pending.id);
  if (it == staged.end())
    return failedPrecondition("waiting for an exchange that was not started");
  Staged &s = it->second;
  Status status = inner.wait(s.innerPending, timeoutSeconds);
  if (!status.ok()) {
    // A failed wait leaves the transfers posted (MPI may still write into
    // `recv`, a progress thread may still test them): keep the buffers.
    abandoned.push_back(std::move(s));
    staged.erase(it);
    return status;
  }
  for (const auto &[begin, end] : s.recvRanges) {
    device.copyToDevice(static_cast<char *>(s.deviceRecv) + begin,
                        s.recv.data() + begin, end - begin);
    ++copied.copies;
    copied.bytes += end - begin;
  }
  staged.erase(it);
  pending.id = -1;
  return okStatus();
}

} // namespace muon::runtime
