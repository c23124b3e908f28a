//===- CudaNcclCommunicatorTest.cpp - The NCCL transport without a GPU ----===//
//
// NcclCommunicator.cpp, as the CUDA backend builds it, on the fake GPU
// (FakeGpu/): ranks are threads joined by a LocalWorld bootstrap, device
// buffers are host memory, and libMuonFakeGpu is loaded as NCCL through the
// backend's own loader. What runs is the transport's logic: offsets and
// counts in bytes, the self copy, the group of sends and receives, the
// ordering after the compute stream, handles of exchanges in flight,
// deadlines, NCCL's asynchronous errors, the set-up's agreement, and what
// is destroyed or aborted at the end. The fake counts every call real CUDA
// or NCCL would refuse. What it cannot tell (NCCL's kernels, GPU memory,
// timing) waits for a GPU: test/Runtime/cuda-check.test and bench/gpu.
//
//===----------------------------------------------------------------------===//
#include "StatusTesting.h"
#include "FakeGpu/FakeGpu.h"
#include "NcclCommunicator.h"

#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/LocalCommunicator.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>
#include <thread>

using namespace muon;
using namespace muon::runtime;
using namespace muon::runtime::cuda;
namespace fake = muon::fakegpu;

namespace {

const nccl::Library &fakeNccl() {
  static std::unique_ptr<nccl::Library> library = [] {
    auto l = nccl::open(MUON_FAKE_GPU_LIBRARY, true);
    if (!l.ok()) {
      std::fprintf(stderr, "loading the fake NCCL: %s\n",
                   l.status().message().c_str());
      std::abort();
    }
    return std::move(l).value();
  }();
  return *library;
}

/// The transport's calls as these tests read them: false with `status`.
bool start(Communicator &comm, const AllToAllV &x, PendingExchange &pending,
           Status &status) {
  StatusOr<PendingExchange> started = comm.start(x);
  status = started.status();
  if (started.ok())
    pending = *started;
  return started.ok();
}
bool wait(Communicator &comm, PendingExchange &pending, double seconds,
          Status &status) {
  status = comm.wait(pending, seconds);
  return status.ok();
}

/// One rank's GPU: a compute stream of the fake and host memory.
struct FakeGpuRank {
  cpu::CpuDevice device;
  cudaStream_t compute = nullptr;
  FakeGpuRank() { EXPECT_EQ(cudaStreamCreateWithFlags(&compute, 0), cudaSuccess); }
  ~FakeGpuRank() { EXPECT_EQ(cudaStreamDestroy(compute), cudaSuccess); }
  NcclPlacement placement() { return NcclPlacement{device, 0, compute}; }
};

/// Runs `body(bootstrap, rank)` on `ranks` threads.
void onRanks(int64_t ranks,
             const std::function<void(Communicator &, int64_t)> &body) {
  LocalWorld world(ranks);
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      LocalCommunicator bootstrap(world, r);
      body(bootstrap, r);
    });
  for (std::thread &t : threads)
    t.join();
}

/// A barrier over the bootstrap.
void barrier(Communicator &bootstrap) {
  StatusOr<std::vector<uint64_t>> ignored = bootstrap.allGather(0, 60);
  ASSERT_TRUE(ignored.ok()) << ignored.status().text();
}

std::unique_ptr<Communicator> connect(Communicator &bootstrap,
                                      FakeGpuRank &gpu) {
  NcclPlacement placement = gpu.placement();
  StatusOr<std::unique_ptr<Communicator>> comm =
      setUpNcclCommunicator(bootstrap, &placement, &fakeNccl(), okStatus());
  EXPECT_TRUE(comm.ok()) << "rank " << bootstrap.rank() << ": "
                         << comm.status().text();
  return comm.ok() ? std::move(comm).value() : nullptr;
}

/// After every rank is gone: nothing live, nothing queued, nothing misused.
void expectCleanEnd(int64_t destroyed, int64_t aborted) {
  fake::Counters c = fake::counters();
  EXPECT_EQ(c.misuses, 0) << c.lastMisuse;
  EXPECT_EQ(c.liveStreams, 0);
  EXPECT_EQ(c.liveEvents, 0);
  EXPECT_EQ(c.liveComms, 0);
  EXPECT_EQ(c.pendingOps, 0);
  EXPECT_EQ(c.commsDestroyed, destroyed);
  EXPECT_EQ(c.commsAborted, aborted);
}

/// The byte a sender puts at byte `b` of element `i` of its segment for
/// `to`: every (from, to, i, b) gives a different pattern.
char pattern(int64_t from, int64_t to, int64_t i, int64_t b) {
  return static_cast<char>(from * 61 + to * 17 + i * 7 + b * 3 + 1);
}
constexpr char kUntouched = static_cast<char>(0xEE);

/// One all-to-all-v of a world: counts from each rank to each, the element
/// size, and each rank's layout (segments in a shuffled order with gaps,
/// so that offsets, not positions, place them).
struct ExchangePlan {
  int64_t width = 1;
  std::vector<std::vector<int64_t>> counts; // [from][to]

  ExchangePlan(int64_t ranks, uint32_t seed) {
    std::mt19937 rng(seed);
    width = std::vector<int64_t>{1, 2, 4, 8, 12}[rng() % 5];
    counts.assign(ranks, std::vector<int64_t>(ranks));
    for (auto &row : counts)
      for (int64_t &c : row)
        c = rng() % 4 == 0 ? 0 : static_cast<int64_t>(rng() % 9);
  }

  /// Offsets for `sizes` with a gap of 0..2 elements before each, in a
  /// shuffled order; `total` is the buffer's length in elements.
  static std::vector<int64_t> layout(const std::vector<int64_t> &sizes,
                                     std::mt19937 &rng, int64_t &total) {
    std::vector<int64_t> order(sizes.size());
    for (size_t i = 0; i < order.size(); ++i)
      order[i] = static_cast<int64_t>(i);
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<int64_t> offsets(sizes.size());
    total = 0;
    for (int64_t p : order) {
      total += rng() % 3;
      offsets[p] = total;
      total += sizes[p];
    }
    total += 1;
    return offsets;
  }
};

/// One rank's side of an ExchangePlan with its buffers.
struct RankExchange {
  AllToAllV x;
  std::vector<char> send, recv;

  RankExchange(const ExchangePlan &plan, int64_t me, uint32_t seed) {
    const int64_t ranks = static_cast<int64_t>(plan.counts.size());
    std::mt19937 rng(seed * 131 + static_cast<uint32_t>(me));
    x.elementBytes = plan.width;
    for (int64_t p = 0; p < ranks; ++p) {
      x.sendCounts.push_back(plan.counts[me][p]);
      x.recvCounts.push_back(plan.counts[p][me]);
    }
    int64_t sendTotal = 0, recvTotal = 0;
    x.sendOffsets = ExchangePlan::layout(x.sendCounts, rng, sendTotal);
    x.recvOffsets = ExchangePlan::layout(x.recvCounts, rng, recvTotal);
    send.assign(sendTotal * plan.width, kUntouched);
    recv.assign(recvTotal * plan.width, kUntouched);
    for (int64_t p = 0; p < ranks; ++p)
      for (int64_t i = 0; i < x.sendCounts[p]; ++i)
        for (int64_t b = 0; b < plan.width; ++b)
          send[(x.sendOffsets[p] + i) * plan.width + b] = pattern(me, p, i, b);
    x.sendBuffer = send.data();
    x.recvBuffer = recv.data();
  }

  /// Every received element is the sender's, and nothing else was written.
  void expectReceived(int64_t me) const {
    const int64_t w = x.elementBytes;
    std::vector<char> want(recv.size(), kUntouched);
    for (size_t p = 0; p < x.recvCounts.size(); ++p)
      for (int64_t i = 0; i < x.recvCounts[p]; ++i)
        for (int64_t b = 0; b < w; ++b)
          want[(x.recvOffsets[p] + i) * w + b] =
              pattern(static_cast<int64_t>(p), me, i, b);
    EXPECT_EQ(recv, want) << "rank " << me;
  }
};

/// Two ranks sending each other `elements` elements, none to themselves.
RankExchange pairExchange(int64_t me, int64_t elements, uint32_t seed) {
  ExchangePlan plan(2, seed);
  plan.counts = {{0, elements}, {elements, 0}};
  return RankExchange(plan, me, seed);
}

class NcclCommunicatorTest : public ::testing::Test {
protected:
  void SetUp() override {
    fakeNccl();
    fake::reset();
  }
};

/// Several exchanges in flight at once, waited for in reverse order, on 1
/// to 4 ranks; every byte lands where the receiver's offsets say.
TEST_F(NcclCommunicatorTest, ExchangesDeliverEveryByteToItsOffset) {
  for (int64_t ranks = 1; ranks <= 4; ++ranks) {
    fake::reset();
    onRanks(ranks, [&](Communicator &bootstrap, int64_t me) {
      FakeGpuRank gpu;
      auto comm = connect(bootstrap, gpu);
      ASSERT_TRUE(comm);
      EXPECT_EQ(comm->rank(), me);
      EXPECT_EQ(comm->size(), ranks);
      for (uint32_t round = 0; round < 4; ++round) {
        std::vector<RankExchange> exchanges;
        for (uint32_t k = 0; k < 3; ++k) {
          const uint32_t seed = 1000 * static_cast<uint32_t>(ranks) +
                                10 * round + k;
          exchanges.emplace_back(ExchangePlan(ranks, seed), me, seed);
        }
        std::vector<PendingExchange> pending(exchanges.size());
        Status error;
        for (size_t k = 0; k < exchanges.size(); ++k)
          ASSERT_TRUE(start(*comm, exchanges[k].x, pending[k], error))
              << error.text();
        for (size_t k = exchanges.size(); k-- > 0;) {
          ASSERT_TRUE(wait(*comm, pending[k], 30, error)) << error.text();
          EXPECT_EQ(pending[k].id, -1);
          exchanges[k].expectReceived(me);
        }
      }
    });
    expectCleanEnd(ranks, 0);
  }
}

/// The warm-up sends one byte to every peer, so that NCCL connects every
/// pair at set-up.
TEST_F(NcclCommunicatorTest, SetUpConnectsEveryPair) {
  const int64_t ranks = 4;
  onRanks(ranks, [&](Communicator &bootstrap, int64_t) {
    FakeGpuRank gpu;
    auto comm = connect(bootstrap, gpu);
    barrier(bootstrap);
    fake::Counters c = fake::counters();
    EXPECT_EQ(c.messages, ranks * (ranks - 1));
    EXPECT_EQ(c.bytes, ranks * (ranks - 1));
    barrier(bootstrap);
  });
  expectCleanEnd(ranks, 0);
}

/// The sends read the send buffer only after the work already queued on
/// the compute stream (the packing copies): while that stream is held,
/// nothing moves; once it runs, the peers get what it wrote.
TEST_F(NcclCommunicatorTest, ExchangesFollowTheComputeStream) {
  onRanks(2, [&](Communicator &bootstrap, int64_t me) {
    FakeGpuRank gpu;
    auto comm = connect(bootstrap, gpu);
    ASSERT_TRUE(comm);
    const int64_t peer = 1 - me;
    std::vector<char> packed(64), send(64, 0), recv(64, kUntouched);
    for (size_t i = 0; i < packed.size(); ++i)
      packed[i] = pattern(me, peer, static_cast<int64_t>(i), 0);
    barrier(bootstrap);
    const int64_t before = fake::counters().messages;

    fake::holdStream(gpu.compute, true);
    ASSERT_EQ(cudaMemcpyAsync(send.data(), packed.data(), packed.size(),
                              cudaMemcpyDeviceToDevice, gpu.compute),
              cudaSuccess);
    AllToAllV x;
    x.sendBuffer = send.data();
    x.recvBuffer = recv.data();
    x.elementBytes = 1;
    x.sendCounts = {0, 0};
    x.recvCounts = {0, 0};
    x.sendCounts[peer] = x.recvCounts[peer] = 64;
    x.sendOffsets = x.recvOffsets = {0, 0};
    PendingExchange pending;
    Status error;
    ASSERT_TRUE(start(*comm, x, pending, error)) << error.text();
    barrier(bootstrap); // both started, neither compute stream has run
    if (me == 0) {
      EXPECT_EQ(fake::counters().messages, before)
          << "an exchange ran ahead of the compute stream";
    }
    barrier(bootstrap);
    fake::holdStream(gpu.compute, false);
    ASSERT_TRUE(wait(*comm, pending, 30, error)) << error.text();
    for (size_t i = 0; i < recv.size(); ++i)
      ASSERT_EQ(recv[i], pattern(peer, me, static_cast<int64_t>(i), 0)) << i;
  });
  expectCleanEnd(2, 0);
}

/// A peer whose messages never arrive: the wait ends at its deadline with
/// the --timeout hint, the communicator refuses further exchanges, and its
/// end aborts NCCL rather than waiting on the peer. The peer, which got its
/// data, ends normally.
TEST_F(NcclCommunicatorTest, ALostPeerTimesOutAndBreaksTheCommunicator) {
  onRanks(2, [&](Communicator &bootstrap, int64_t me) {
    FakeGpuRank gpu;
    auto comm = connect(bootstrap, gpu);
    ASSERT_TRUE(comm);
    barrier(bootstrap);
    if (me == 0)
      fake::dropSendsFrom(1);
    barrier(bootstrap);
    ExchangePlan plan(2, 7);
    plan.counts = {{1, 3}, {2, 1}};
    RankExchange exchange(plan, me, 7);
    PendingExchange pending;
    Status error;
    ASSERT_TRUE(start(*comm, exchange.x, pending, error)) << error.text();
    if (me == 1) {
      ASSERT_TRUE(wait(*comm, pending, 30, error)) << error.text();
      exchange.expectReceived(me);
      return;
    }
    EXPECT_FALSE(wait(*comm, pending, 0.25, error));
    EXPECT_EQ(error.code(), StatusCode::DeadlineExceeded);
    EXPECT_EQ(error.message(),
              "no answer within 0.25 s: a peer died or stalled");
    EXPECT_FALSE(start(*comm, exchange.x, pending, error));
    EXPECT_EQ(error.code(), StatusCode::FailedPrecondition);
    EXPECT_EQ(error.message(),
              "the NCCL communicator is unusable after an earlier "
              "failure: no answer within 0.25 s: a peer died or "
              "stalled");
  });
  expectCleanEnd(/*destroyed=*/1, /*aborted=*/1);
}

/// NCCL's asynchronous error ends the wait at once, with NCCL's words.
TEST_F(NcclCommunicatorTest, AnAsynchronousErrorEndsTheWait) {
  onRanks(2, [&](Communicator &bootstrap, int64_t me) {
    FakeGpuRank gpu;
    auto comm = connect(bootstrap, gpu);
    ASSERT_TRUE(comm);
    barrier(bootstrap);
    if (me == 0) {
      fake::dropSendsFrom(1);
      fake::setAsyncError(0, 6);
    }
    barrier(bootstrap);
    RankExchange exchange = pairExchange(me, 3, 11);
    PendingExchange pending;
    Status error;
    ASSERT_TRUE(start(*comm, exchange.x, pending, error)) << error.text();
    if (me == 1) {
      EXPECT_TRUE(wait(*comm, pending, 30, error)) << error.text();
      return;
    }
    EXPECT_FALSE(wait(*comm, pending, 5, error));
    EXPECT_EQ(error.code(), StatusCode::Unavailable);
    EXPECT_EQ(error.message(),
              "NCCL: remote process exited or there was a network "
              "error (NCCL error 6)");
  });
  expectCleanEnd(1, 1);
}

/// A failing call inside the group fails the start with the call, the peer
/// and NCCL's words; the group is still closed (the fake counts a group
/// left open as a misuse), and the communicator is then refused and
/// aborted at its end. The peer, which started nothing, ends normally.
TEST_F(NcclCommunicatorTest, AFailedCallInTheGroupFailsTheStart) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"ncclSend", "ncclSend to rank 1: unhandled system error (NCCL error 2)"},
      {"ncclRecv",
       "ncclRecv from rank 1: unhandled system error (NCCL error 2)"},
      {"ncclGroupEnd", "ncclGroupEnd: unhandled system error (NCCL error 2)"}};
  for (const auto &[call, message] : cases) {
    SCOPED_TRACE(call);
    fake::reset();
    onRanks(2, [&](Communicator &bootstrap, int64_t me) {
      FakeGpuRank gpu;
      auto comm = connect(bootstrap, gpu);
      ASSERT_TRUE(comm);
      barrier(bootstrap);
      if (me == 1)
        return;
      fake::failNext(call, 0, 2);
      RankExchange exchange = pairExchange(me, 2, 5);
      PendingExchange pending;
      Status error;
      EXPECT_FALSE(start(*comm, exchange.x, pending, error));
      EXPECT_EQ(error.message(), message);
      EXPECT_EQ(pending.id, -1);
      EXPECT_FALSE(start(*comm, exchange.x, pending, error));
      EXPECT_EQ(error.message(),
                "the NCCL communicator is unusable after an earlier "
                "failure: " +
                    message);
    });
    expectCleanEnd(1, 1);
  }
}

/// Exchanges the transport cannot express are refused before anything is
/// queued, and the communicator stays usable.
TEST_F(NcclCommunicatorTest, MalformedExchangesAreRefusedHarmlessly) {
  onRanks(2, [&](Communicator &bootstrap, int64_t me) {
    FakeGpuRank gpu;
    auto comm = connect(bootstrap, gpu);
    ASSERT_TRUE(comm);
    RankExchange good(ExchangePlan(2, 3), me, 3);
    PendingExchange pending;
    Status error;

    AllToAllV bad = good.x;
    bad.sendCounts.pop_back();
    EXPECT_FALSE(start(*comm, bad, pending, error));
    EXPECT_EQ(error.code(), StatusCode::InvalidArgument);
    EXPECT_EQ(error.message(),
              "an exchange needs a count and an offset per rank and a "
              "positive element size");
    bad = good.x;
    bad.elementBytes = 0;
    EXPECT_FALSE(start(*comm, bad, pending, error));
    bad = good.x;
    bad.recvOffsets[1 - me] = -4;
    EXPECT_FALSE(start(*comm, bad, pending, error));
    EXPECT_EQ(error.message(),
              "an exchange count or offset of -4 elements is out of "
              "range");
    bad = good.x;
    bad.elementBytes = 8;
    bad.sendCounts[1 - me] = int64_t(1) << 61;
    EXPECT_FALSE(start(*comm, bad, pending, error));
    EXPECT_NE(error.message().find("out of range"), std::string::npos)
        << error.text();
    bad = good.x;
    bad.sendCounts[me] = bad.recvCounts[me] + 1;
    EXPECT_FALSE(start(*comm, bad, pending, error));
    EXPECT_EQ(error.message(), "an exchange sends " +
                                   std::to_string(bad.sendCounts[me]) +
                                   " elements to its own rank but receives " +
                                   std::to_string(bad.recvCounts[me]));
    EXPECT_EQ(pending.id, -1);
    PendingExchange never;
    never.id = 41;
    EXPECT_FALSE(wait(*comm, never, 1, error));
    EXPECT_EQ(error.message(), "wait on an exchange that was not started");

    ASSERT_TRUE(start(*comm, good.x, pending, error)) << error.text();
    ASSERT_TRUE(wait(*comm, pending, 30, error)) << error.text();
    good.expectReceived(me);
  });
  expectCleanEnd(2, 0);
}

/// A rank that cannot set up fails every rank at once: itself with its
/// reason, the others naming it, before anyone joins NCCL.
TEST_F(NcclCommunicatorTest, OneRanksSetUpFailureFailsEveryRank) {
  std::vector<std::string> errors(3);
  onRanks(3, [&](Communicator &bootstrap, int64_t me) {
    FakeGpuRank gpu;
    NcclPlacement placement = gpu.placement();
    auto comm = setUpNcclCommunicator(
        bootstrap, me == 1 ? nullptr : &placement,
        me == 1 ? nullptr : &fakeNccl(),
        me == 1 ? unavailable("no GPU for this rank") : okStatus());
    ASSERT_FALSE(comm.ok());
    errors[me] = comm.status().message();
  });
  EXPECT_EQ(errors[0], "setting up NCCL: rank 1 could not (see its message)");
  EXPECT_EQ(errors[1], "setting up NCCL: no GPU for this rank");
  EXPECT_EQ(errors[2], "setting up NCCL: rank 1 could not (see its message)");
  expectCleanEnd(0, 0);
}

/// NCCL failing at set-up: rank 0 without a unique id fails every rank; a
/// communicator that cannot be made is named with NCCL's version and file.
TEST_F(NcclCommunicatorTest, NcclFailuresAtSetUpAreNamed) {
  std::vector<std::string> errors(2);
  fake::failNext("ncclGetUniqueId", 0, 3);
  onRanks(2, [&](Communicator &bootstrap, int64_t me) {
    FakeGpuRank gpu;
    NcclPlacement placement = gpu.placement();
    auto comm =
        setUpNcclCommunicator(bootstrap, &placement, &fakeNccl(), okStatus());
    ASSERT_FALSE(comm.ok());
    errors[me] = comm.status().message();
  });
  EXPECT_EQ(errors[0],
            "setting up NCCL: ncclGetUniqueId: internal error (NCCL error 3)");
  EXPECT_EQ(errors[1], "setting up NCCL: rank 0 could not (see its message)");
  expectCleanEnd(0, 0);

  fake::reset();
  fake::failNext("ncclCommInitRank", 0, 5);
  fake::failNext("ncclCommInitRank", 1, 5);
  onRanks(2, [&](Communicator &bootstrap, int64_t me) {
    FakeGpuRank gpu;
    NcclPlacement placement = gpu.placement();
    auto comm =
        setUpNcclCommunicator(bootstrap, &placement, &fakeNccl(), okStatus());
    ASSERT_FALSE(comm.ok());
    errors[me] = comm.status().message();
  });
  for (const std::string &error : errors)
    EXPECT_EQ(error, std::string("setting up NCCL 2.28.3 (") +
                         MUON_FAKE_GPU_LIBRARY +
                         "): ncclCommInitRank: invalid usage (NCCL error 5)");
  expectCleanEnd(0, 0);
}

/// The loader names the file it could not load, or the entry point that
/// file lacks.
TEST(NcclLibrary, NamesWhatIsMissing) {
  std::string error = failureText(nccl::open("/nonexistent/libnccl.so.2", true));
  EXPECT_EQ(error.rfind("cannot load NCCL from '/nonexistent/libnccl.so.2' "
                        "(MUON_NCCL_LIBRARY, instead of libnccl.so.2): ",
                        0),
            0u)
      << error;
  error = failureText(nccl::open("libnccl-not-installed.so.2", false));
  EXPECT_EQ(error.rfind("cannot load libnccl-not-installed.so.2 (install NCCL "
                        "2 or point MUON_NCCL_LIBRARY at it): ",
                        0),
            0u)
      << error;
  error = failureText(nccl::open("libm.so.6", true));
  EXPECT_EQ(error, "libm.so.6 has no ncclGetUniqueId (the CUDA backend needs "
                   "NCCL 2.7 or newer)");
}

int versionCode = 0;
nccl::Result reportVersion(int *code) {
  *code = versionCode;
  return nccl::kSuccess;
}

/// NCCL's version codes: X*1000+Y*100+Z before 2.9, X*10000+Y*100+Z since.
TEST(NcclLibrary, ReadsBothVersionEncodings) {
  EXPECT_EQ(fakeNccl().version(), "2.28.3");
  nccl::Library library;
  EXPECT_EQ(library.version(), "unknown");
  library.getVersion = reportVersion;
  for (auto [code, text] : std::vector<std::pair<int, std::string>>{
           {2708, "2.7.8"}, {2804, "2.8.4"}, {20903, "2.9.3"},
           {22803, "2.28.3"}, {0, "unknown"}}) {
    versionCode = code;
    EXPECT_EQ(library.version(), text) << code;
  }
  EXPECT_EQ(library.describe(5), "unknown error (NCCL error 5)");
}

} // namespace
