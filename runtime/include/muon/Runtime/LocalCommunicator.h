//===- LocalCommunicator.h - Ranks as threads of one process ----*- C++ -*-===//
//
// A transport for N ranks that are threads of one process: exchanges copy
// between the ranks' own buffers. It runs multi-rank plans where MPI is not
// wanted: unit tests, the plan fuzzer (every rank under AddressSanitizer in
// one process), and trainers that simulate a world. Every wait has the same
// deadline semantics as the MPI transport.
//
// Each collective is numbered in issue order per rank; since every rank
// issues the same collectives in the same order, the k-th collective of all
// ranks is one collective.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_LOCALCOMMUNICATOR_H
#define MUON_RUNTIME_LOCALCOMMUNICATOR_H

#include "muon/Runtime/Communicator.h"

#include <memory>

namespace muon::runtime {

/// The shared state of one world of threads.
class LocalWorld {
public:
  explicit LocalWorld(int64_t size);
  ~LocalWorld();
  int64_t size() const;

private:
  friend class LocalCommunicator;
  struct State;
  std::unique_ptr<State> state;
};

class LocalCommunicator final : public Communicator {
public:
  LocalCommunicator(LocalWorld &world, int64_t rank);

  int64_t rank() const override { return me; }
  int64_t size() const override;
  StatusOr<PendingExchange> start(const AllToAllV &exchange) override;
  Status wait(PendingExchange &pending, double timeoutSeconds) override;
  void progress() override {}
  StatusOr<std::vector<uint64_t>> allGather(uint64_t value,
                                            double timeoutSeconds) override;
  StatusOr<int64_t> allReduceMin(int64_t value, double timeoutSeconds) override;
  StatusOr<std::vector<std::vector<char>>>
  gatherToRoot(const std::vector<char> &bytes, double timeoutSeconds) override;
  StatusOr<std::vector<uint64_t>>
  allGatherWords(const std::vector<uint64_t> &mine,
                 double timeoutSeconds) override;
  StatusOr<std::vector<std::vector<char>>>
  allGatherBytes(const std::vector<char> &bytes,
                 double timeoutSeconds) override;
  [[noreturn]] void abort(int exitCode) override;

private:
  /// Every rank posts `mine` and gets every rank's bytes in rank order.
  StatusOr<std::vector<std::vector<char>>> exchangeBytes(std::vector<char> mine,
                                                         double timeoutSeconds);

  LocalWorld &world;
  int64_t me;
  int64_t issued = 0; // collectives this rank has started
};

} // namespace muon::runtime

#endif // MUON_RUNTIME_LOCALCOMMUNICATOR_H
