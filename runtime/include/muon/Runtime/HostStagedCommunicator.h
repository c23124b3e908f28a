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
  bool start(const AllToAllV &exchange, PendingExchange &pending,
             std::string &error) override;
  bool wait(PendingExchange &pending, double timeoutSeconds,
            std::string &error) override;
  void progress() override { inner.progress(); }
  bool allGather(uint64_t value, std::vector<uint64_t> &values,
                 double timeoutSeconds, std::string &error) override {
    return inner.allGather(value, values, timeoutSeconds, error);
  }
  bool allReduceMin(int64_t value, int64_t &result, double timeoutSeconds,
                    std::string &error) override {
    return inner.allReduceMin(value, result, timeoutSeconds, error);
  }
  bool allGatherWords(const std::vector<uint64_t> &mine,
                      std::vector<uint64_t> &all, double timeoutSeconds,
                      std::string &error) override {
    return inner.allGatherWords(mine, all, timeoutSeconds, error);
  }
  bool gatherToRoot(const std::vector<char> &bytes,
                    std::vector<std::vector<char>> &atRoot,
                    double timeoutSeconds, std::string &error) override {
    return inner.gatherToRoot(bytes, atRoot, timeoutSeconds, error);
  }
  bool allGatherBytes(const std::vector<char> &bytes,
                      std::vector<std::vector<char>> &all,
                      double timeoutSeconds, std::string &error) override {
    return inner.allGatherBytes(bytes, all, timeoutSeconds, error);
  }
  [[noreturn]] void abort(int exitCode) override;

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
};

} // namespace muon::runtime

#endif // MUON_RUNTIME_HOSTSTAGEDCOMMUNICATOR_H
