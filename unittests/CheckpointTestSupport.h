//===- CheckpointTestSupport.h - What checkpoint tests share ----*- C++ -*-===//
//
// The checkpoint and state-dict tests (CheckpointTest.cpp,
// CheckpointIntegrityTest.cpp) compile one model for several world sizes
// and run its ranks as threads (LocalCommunicator); these are their common
// steps: the plans, the ranks, scratch directories, whole files, and a
// bit-for-bit comparison of state dicts.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_UNITTESTS_CHECKPOINTTESTSUPPORT_H
#define MUON_UNITTESTS_CHECKPOINTTESTSUPPORT_H

#include "muon/Compiler/Compile.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Support/OutputFile.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace muon::testing {

/// `model` on a 1-D FSDP mesh of `world` ranks.
inline Plan compileFor(const compiler::Model &model, int64_t world) {
  compiler::DistributedConfig config =
      compiler::createDTensorConfig({{world}, {"fsdp"}});
  Plan plan;
  std::string error;
  {
    auto compiled = compiler::compile(model, &config);
    EXPECT_TRUE(compiled.ok()) << compiled.status().text();
    if (compiled.ok())
      plan = std::move(compiled).value();
  }
  EXPECT_EQ(plan.worldSize, world);
  return plan;
}

/// Runs `fn(rank, comm)` on every rank of a `world`-rank LocalWorld, each
/// in a thread of its own.
template <typename Fn> void onEveryRank(int64_t world, Fn fn) {
  runtime::LocalWorld local(world);
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      runtime::LocalCommunicator comm(local, r);
      fn(r, comm);
    });
  for (std::thread &t : ranks)
    t.join();
}

/// A fresh path under the test's temporary directory (removed if there).
inline std::string scratchDir(const std::string &name) {
  std::string dir = ::testing::TempDir() + "muon-ckpt-" + name + "-" +
                    std::to_string(::getpid());
  removeTree(dir);
  return dir;
}

inline std::string readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

inline void writeBytes(const std::string &path, const std::string &bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

/// Whether two sets of state dicts hold the same pieces, bit for bit (the
/// floats' bytes: NaN-safe, -0 != 0), and the same step counts.
inline bool sameDicts(const std::vector<runtime::StateDict> &a,
                      const std::vector<runtime::StateDict> &b) {
  if (a.size() != b.size())
    return false;
  for (size_t r = 0; r < a.size(); ++r) {
    if (a[r].steps != b[r].steps || a[r].pieces.size() != b[r].pieces.size() ||
        a[r].rowStates.size() != b[r].rowStates.size())
      return false;
    for (size_t k = 0; k < a[r].pieces.size(); ++k) {
      const runtime::StatePiece &x = a[r].pieces[k], &y = b[r].pieces[k];
      if (x.param != y.param || !(x.box == y.box) || x.summand != y.summand ||
          x.summands != y.summands || x.step != y.step ||
          x.states.size() != y.states.size())
        return false;
      for (const auto &[name, data] : x.states) {
        auto it = y.states.find(name);
        if (it == y.states.end() || it->second.size() != data.size() ||
            std::memcmp(it->second.data(), data.data(), data.size() * 4))
          return false;
      }
    }
    for (size_t k = 0; k < a[r].rowStates.size(); ++k) {
      const runtime::RowStatePiece &x = a[r].rowStates[k],
                                   &y = b[r].rowStates[k];
      if (x.param != y.param || x.slice != y.slice || x.state != y.state ||
          x.values.size() != y.values.size() ||
          std::memcmp(x.values.data(), y.values.data(), x.values.size() * 4))
        return false;
    }
  }
  return true;
}

} // namespace muon::testing

#endif // MUON_UNITTESTS_CHECKPOINTTESTSUPPORT_H
