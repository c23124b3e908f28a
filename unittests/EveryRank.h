//===- EveryRank.h - A plan's optimizer on every rank, as threads -*- C++ -*-===//
//
// What the tests that run a plan on several ranks share: one thread per
// rank over a LocalWorld, each with its CPU device and optimizer.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_UNITTESTS_EVERYRANK_H
#define MUON_UNITTESTS_EVERYRANK_H

#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/Optimizer.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace muon::testing {

/// Runs `body(rank, optimizer, device)` on every rank of `plan` (threads),
/// each optimizer waiting on its peers at most 20 s.
inline void onEveryRank(
    const Plan &plan,
    const std::function<void(int64_t, runtime::Optimizer &,
                             runtime::Device &)> &body) {
  runtime::LocalWorld world(plan.worldSize);
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < plan.worldSize; ++r)
    ranks.emplace_back([&, r] {
      runtime::LocalCommunicator comm(world, r);
      runtime::cpu::CpuDevice device;
      std::unique_ptr<runtime::Optimizer> opt;
      muon::Status s =
          runtime::Optimizer::create(plan, comm, device, {20.0}, opt);
      ASSERT_TRUE(s.ok()) << s.message();
      body(r, *opt, device);
    });
  for (std::thread &t : ranks)
    t.join();
}

} // namespace muon::testing

#endif // MUON_UNITTESTS_EVERYRANK_H
