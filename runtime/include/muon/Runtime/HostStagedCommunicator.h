//===- HostStagedCommunicator.h - Device exchanges over a host transport -===//
//
// Carries exchanges of device memory over a transport that moves host
// memory (MPI): start() copies what goes out into host memory and starts the
// inner exchange there; wait() completes it and copies what came in back to
// the device. Only the ranges the exchange names are copied, so the rest of
// the receive buffer keeps what it holds. It is how several ranks share one
// GPU (NCCL refuses two ranks on one device), and on the CPU it exercises
// the same path without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_HOSTSTAGEDCOMMUNICATOR_H
#define MUON_RUNTIME_HOSTSTAGEDCOMMUNICATOR_H

#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/Device.h"

#include <map>
#include <vector>

namespace muon::runtime {

class HostStagedCommunicator final : public Communicator {
public:
  /// `inner` moves host memory; `device` owns the exchanges' buffers. Both
  /// outlive this communicator.
  HostStagedCommunicator(Communicator &inner, Device &device)
      : inner(inner), device(device) {}

  int64_t rank() const override { return inner.rank(); }
  int64_t size() const override { return inner.size(); }
  StatusOr<PendingExchange> start(const AllToAllV &exchange) override;
  Status wait(PendingExchange &pending, double timeoutSeconds) override;
  void progress() override { inner.progress(); }
  StatusOr<std::vector<uint64_t>> allGather(uint64_t value,
                                            double timeoutSeconds) override {
    return inner.allGather(value, timeoutSeconds);
  }
  StatusOr<int64_t> allReduceMin(int64_t value,
                                 double timeoutSeconds) override {
    return inner.allReduceMin(value, timeoutSeconds);
  }
  StatusOr<std::vector<uint64_t>>
  allGatherWords(const std::vector<uint64_t> &mine,
                 double timeoutSeconds) override {
    return inner.allGatherWords(mine, timeoutSeconds);
  }
  StatusOr<std::vector<std::vector<char>>>
  gatherToRoot(const std::vector<char> &bytes, double timeoutSeconds) override {
    return inner.gatherToRoot(bytes, timeoutSeconds);
  }
  StatusOr<std::vector<std::vector<char>>>
  allGatherBytes(const std::vector<char> &bytes,
                 double timeoutSeconds) override {
    return inner.allGatherBytes(bytes, timeoutSeconds);
  }
  [[noreturn]] void abort(int exitCode) override;
  HostCopies hostCopies() const override { return copied; }

private:
  /// Byte ranges [begin, end) of a buffer, merged where they touch.
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  struct Staged {
    std::vector<char> send, recv;
    void *deviceRecv = nullptr;
    Ranges recvRanges;
    PendingExchange innerPending;
  };

  Communicator &inner;
  Device &device;
  std::map<int64_t, Staged> staged;
  /// Exchanges whose start or wait failed: their transfers may still be in
  /// flight, so their host buffers live as long as the communicator.
  std::vector<Staged> abandoned;
  int64_t nextId = 0;
  HostCopies copied;
};

} // namespace muon::runtime

#endif // MUON_RUNTIME_HOSTSTAGEDCOMMUNICATOR_H
