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

#include "muon/Runtime/Device.h"
#include "muon/Runtime/LayeredCommunicator.h"

#include <map>
#include <vector>

namespace muon::runtime {

class HostStagedCommunicator final : public LayeredCommunicator {
public:
  /// `inner` moves host memory; `device` owns the exchanges' buffers. Both
  /// outlive this communicator.
  HostStagedCommunicator(Communicator &inner, Device &device)
      : LayeredCommunicator(inner), device(device) {}

  StatusOr<PendingExchange> start(const AllToAllV &exchange) override;
  Status wait(PendingExchange &pending, double timeoutSeconds) override;
  void progress() override { inner.progress(); }
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
