//===- LayeredCommunicator.h - A transport over a run's ranks ---*- C++ -*-===//
//
// A transport layered over another communicator (the ranks of the run: MPI,
// a Python process group): the ranks, their count and the control
// collectives (the step's agreements, start-up's plan check) are the inner
// communicator's, and a fatal abort ends the ranks through it; a subclass
// carries the plan's exchanges its own way (host-staged copies, NCCL on the
// device, or the inner one's itself).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_LAYEREDCOMMUNICATOR_H
#define MUON_RUNTIME_LAYEREDCOMMUNICATOR_H

#include "muon/Runtime/Communicator.h"

#include <cstdlib>

namespace muon::runtime {

class LayeredCommunicator : public Communicator {
public:
  /// `inner` outlives this communicator.
  explicit LayeredCommunicator(Communicator &inner) : inner(inner) {}

  int64_t rank() const override { return inner.rank(); }
  int64_t size() const override { return inner.size(); }
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
  [[noreturn]] void abort(int exitCode) override {
    inner.abort(exitCode);
    std::_Exit(exitCode); // not reached: the inner transport ends the process
  }

protected:
  Communicator &inner;
};

} // namespace muon::runtime

#endif // MUON_RUNTIME_LAYEREDCOMMUNICATOR_H
