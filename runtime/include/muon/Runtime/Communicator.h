//===- Communicator.h - What the runtime needs from a transport -*- C++ -*-===//
//
// The runtime moves data only through this interface: MPI on the CPU
// (MpiCommunicator), NCCL on the GPU (NcclCommunicator), threads of one
// process (LocalCommunicator), torch.distributed (muonc's), and a one-rank
// communicator for the single-device reference and for tests. Every
// collective is started and then waited for with a deadline, so a dead or
// stalled peer ends the run with DeadlineExceeded instead of a hang.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_COMMUNICATOR_H
#define MUON_RUNTIME_COMMUNICATOR_H

#include "muon/Support/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace muon::runtime {

/// A started collective; `id` is the communicator's own handle.
struct PendingExchange {
  int64_t id = -1;
};

/// One rank's side of an all-to-all-v, in elements of `elementBytes` bytes.
/// `sendCounts[p]` elements at `sendOffsets[p]` go to peer p; the peer's
/// elements land at `recvOffsets[p]`.
struct AllToAllV {
  const void *sendBuffer = nullptr;
  void *recvBuffer = nullptr;
  std::vector<int64_t> sendCounts, sendOffsets, recvCounts, recvOffsets;
  int64_t elementBytes = 4;
};

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t size() const = 0;

  /// Starts an all-to-all-v; buffers must stay alive until `wait` returns.
  /// The send buffer's contents may still be queued on the device (a GPU's
  /// stream): a transport that reads it from outside that queue waits for
  /// the device first, as HostStagedCommunicator does; NCCL orders itself
  /// after the device's stream. InvalidArgument when the exchange cannot be
  /// expressed (counts beyond what the transport addresses).
  virtual StatusOr<PendingExchange> start(const AllToAllV &exchange) = 0;
  /// Waits for a started exchange for at most `timeoutSeconds`:
  /// DeadlineExceeded on a timeout (deadlineExceeded()), Unavailable on a
  /// transport failure.
  virtual Status wait(PendingExchange &pending, double timeoutSeconds) = 0;
  /// Lets started exchanges advance while the caller computes (transports
  /// without a progress thread move data only inside their own calls).
  virtual void progress() = 0;

  /// Whether start and wait only queue work on the device's own queue (NCCL
  /// on the GPU's stream; nothing, for one rank), so that a device may
  /// record them into a step graph (Device::beginRecording). While the
  /// device records, wait() queues the wait without polling for the end.
  virtual bool recordable() const { return false; }
  /// After a replayed step graph whose exchanges this transport started:
  /// waits at most `timeoutSeconds` for the device's work queued so far,
  /// watching for the transport's errors as wait() does.
  virtual Status waitForReplay(double timeoutSeconds) {
    (void)timeoutSeconds;
    return okStatus();
  }

  /// Small control collectives (never counted as payload), with the same
  /// deadline and errors as wait(): every rank's value, and the minimum
  /// over ranks.
  virtual StatusOr<std::vector<uint64_t>> allGather(uint64_t value,
                                                    double timeoutSeconds) = 0;
  virtual StatusOr<int64_t> allReduceMin(int64_t value,
                                         double timeoutSeconds) = 0;
  /// Every rank's `mine` (each rank the same number of words), on every
  /// rank, rank after rank. The default is one allGather per word;
  /// transports override it with one collective.
  virtual StatusOr<std::vector<uint64_t>>
  allGatherWords(const std::vector<uint64_t> &mine, double timeoutSeconds);
  /// Every rank's bytes, at rank 0 (empty elsewhere).
  virtual StatusOr<std::vector<std::vector<char>>>
  gatherToRoot(const std::vector<char> &bytes, double timeoutSeconds) = 0;
  /// Every rank's bytes, on every rank, in rank order. The default is built
  /// from allGather: the lengths, then 8 bytes per round for the longest
  /// (one round when every rank sends nothing), so any transport has it;
  /// transports with a variable-length all-gather override it. Meant for
  /// small control messages (an error a peer hit).
  virtual StatusOr<std::vector<std::vector<char>>>
  allGatherBytes(const std::vector<char> &bytes, double timeoutSeconds);

  /// Ends every rank of the run with `exitCode` (after a fatal error on one
  /// rank, the others must not wait for it).
  [[noreturn]] virtual void abort(int exitCode) = 0;

  /// Whether exchanges in flight advance on a thread of their own (MPI's
  /// progress thread), not only inside this communicator's calls.
  virtual bool progressThread() const { return false; }

  /// The copies of exchange buffers between device and host memory so far,
  /// and their bytes: a transport that stages a GPU's exchanges through the
  /// host counts them (HostStagedCommunicator); where the data stays where
  /// it is (NCCL on the GPU, MPI on the CPU) there are none.
  struct HostCopies {
    int64_t copies = 0, bytes = 0;
  };
  virtual HostCopies hostCopies() const { return {}; }
};

/// Rank `root`'s `text` on every rank (at most 4 KiB of it), through the
/// small collectives: for error messages that one rank knows and every rank
/// must report. Collective; on a transport failure, a note saying so.
std::string shareText(Communicator &comm, int64_t root, const std::string &text,
                      double timeoutSeconds);

/// The communicator of a run with one rank: exchanges can only be empty, and
/// collectives return the rank's own values.
class SingleRankCommunicator final : public Communicator {
public:
  int64_t rank() const override { return 0; }
  int64_t size() const override { return 1; }
  StatusOr<PendingExchange> start(const AllToAllV &exchange) override;
  Status wait(PendingExchange &pending, double timeoutSeconds) override;
  void progress() override {}
  /// Its exchanges are empty: nothing to record.
  bool recordable() const override { return true; }
  StatusOr<std::vector<uint64_t>> allGather(uint64_t value, double) override {
    return std::vector<uint64_t>{value};
  }
  StatusOr<int64_t> allReduceMin(int64_t value, double) override {
    return value;
  }
  StatusOr<std::vector<uint64_t>>
  allGatherWords(const std::vector<uint64_t> &mine, double) override {
    return mine;
  }
  StatusOr<std::vector<std::vector<char>>>
  gatherToRoot(const std::vector<char> &bytes, double) override {
    return std::vector<std::vector<char>>{bytes};
  }
  StatusOr<std::vector<std::vector<char>>>
  allGatherBytes(const std::vector<char> &bytes, double) override {
    return std::vector<std::vector<char>>{bytes};
  }
  [[noreturn]] void abort(int exitCode) override;
};

} // namespace muon::runtime

#endif // MUON_RUNTIME_COMMUNICATOR_H
