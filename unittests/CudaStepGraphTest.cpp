//===- CudaStepGraphTest.cpp - Step graphs on the fake GPU ----------------===//
//
// OptimizerOptions::graphs on CudaDevice over the fake GPU, whose stream
// capture records what each stream queues and replays it on every launch
// (FakeGpu/FakeGraphs.cpp): a step recorded once and replayed must leave
// every parameter and every state bit for bit as the same steps run call by
// call, with a learning-rate schedule and AdamW's bias corrections
// changing the scalars of every replay; a change of binding or of the
// parameters left out records again; NCCL's exchanges of two ranks are
// recorded into each rank's graph; a transport that reaches the host runs
// eagerly. The fake also refuses, as CUDA does, what a capture cannot hold.
//
//===----------------------------------------------------------------------===//
#include "CudaDevice.h"
#include "FakeGpu/FakeGpu.h"

#include "muon/Compiler/Compile.h"
#include "muon/Runtime/Cuda/CudaBackend.h"
#include "muon/Runtime/HostStagedCommunicator.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/Optimizer.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <random>
#include <thread>

using namespace muon;
using namespace muon::runtime;
namespace fake = muon::fakegpu;

namespace {

/// Three layers of a wide, a tall and a square matrix (batches of 3, both
/// forms of Newton-Schulz), a norm under AdamW and a bf16 matrix, on one
/// device.
const char *kOneRankSpec = R"json({
 "format": "muon-spec/1",
 "mesh": {"shape": [1]},
 "optimizer": {"lr": 0.02, "momentum": 0.95, "nesterov": true,
               "weight_decay": 0.1, "ns_steps": 5, "adjust_lr": "original",
               "ns_dtype": "bf16"},
 "distributed": null,
 "params": [
  {"name": "l0.wq", "shape": [16, 48], "placements": ["R"]},
  {"name": "l0.w1", "shape": [48, 16], "placements": ["R"]},
  {"name": "l0.wo", "shape": [24, 24], "placements": ["R"]},
  {"name": "l1.wq", "shape": [16, 48], "placements": ["R"]},
  {"name": "l1.w1", "shape": [48, 16], "placements": ["R"]},
  {"name": "l1.wo", "shape": [24, 24], "placements": ["R"]},
  {"name": "l2.wq", "shape": [16, 48], "placements": ["R"]},
  {"name": "l2.w1", "shape": [48, 16], "placements": ["R"]},
  {"name": "l2.wo", "shape": [24, 24], "placements": ["R"]},
  {"name": "head", "shape": [20, 40], "dtype": "bf16", "placements": ["R"]},
  {"name": "norm", "shape": [48], "placements": ["R"]}
 ]
})json";

/// FSDP over 2 ranks: gathers and scatters every round, and a partial
/// AdamW gradient.
const char *kTwoRankSpec = R"json({
 "format": "muon-spec/1",
 "mesh": {"shape": [2], "names": ["fsdp"]},
 "optimizer": {"ns_steps": 5, "ns_dtype": "bf16"},
 "distributed": {},
 "params": [
  {"name": "w0", "shape": [32, 48], "placements": ["S(0)"]},
  {"name": "w1", "shape": [48, 32], "placements": ["S(0)"]},
  {"name": "w2", "shape": [20, 24], "placements": ["S(0)"]},
  {"name": "w3", "shape": [20, 24], "placements": ["S(1)"]},
  {"name": "bias", "shape": [30], "placements": ["S(0)"]}
 ]
})json";

Plan compilePlan(const char *spec) {
  Plan plan;
  std::string error;
  {
    auto compiled = compiler::compileSpec(spec, "");
    EXPECT_TRUE(compiled.ok()) << compiled.status().text();
    if (compiled.ok())
      plan = std::move(compiled).value();
  }
  return plan;
}

/// What a run leaves: every bound parameter's bytes, every state slot's.
struct Outcome {
  std::vector<std::vector<uint8_t>> values;
  std::vector<std::vector<float>> state;
  std::vector<GraphUse> uses;
  std::vector<std::string> notes;
};

/// What happens to the bindings before a step (`step` from 0).
using BeforeStep = std::function<void(int64_t step, Optimizer &opt,
                                      Device &gpu)>;

/// One rank's optimizer of `plan` on `gpu` over `comm`, bound to device
/// buffers (values from a seed per rank and parameter, fresh gradients each
/// step), `steps` steps with a learning-rate schedule.
class RankRun {
public:
  RankRun(const Plan &plan, Communicator &comm, Device &gpu, bool graphs)
      : gpu(gpu) {
    OptimizerOptions options;
    options.graphs = graphs;
    options.timeoutSeconds = 60;
    Status s = Optimizer::create(plan, comm, gpu, options, opt);
    EXPECT_TRUE(opt) << s.message();
    std::mt19937 rng(17 + static_cast<unsigned>(comm.rank()));
    std::uniform_real_distribution<float> u(-1, 1);
    for (const ParamSlot &slot : opt->params()) {
      const int64_t bytes = slot.elements * dtypeBytes(slot.dtype);
      values.emplace_back(gpu, bytes);
      grads.emplace_back(gpu, slot.elements * 4);
      std::vector<uint8_t> host(static_cast<size_t>(bytes));
      for (int64_t i = 0; i < slot.elements; ++i)
        storeAs(host.data(), slot.dtype, i, u(rng));
      gpu.copyToDevice(values.back().data(), host.data(), bytes);
      EXPECT_TRUE(opt->bind(slot.name, values.back().data(), slot.dtype,
                            grads.back().data(), DType::F32, slot.elements)
                      .ok());
    }
  }

  Outcome run(int64_t steps, const BeforeStep &before = nullptr) {
    Outcome out;
    for (int64_t step = 0; step < steps; ++step) {
      setGradients(step);
      for (const char *group : {"muon", "adamw"})
        EXPECT_TRUE(opt->setGroupLr(group, 0.02 / (1.0 + step)).ok());
      if (before)
        before(step, *opt, gpu);
      StepResult result;
      Status s = opt->step(result);
      EXPECT_TRUE(s.ok()) << s.message();
      EXPECT_TRUE(result.applied);
      out.uses.push_back(opt->counters().graph);
      out.notes.push_back(opt->counters().graphNote);
    }
    for (size_t i = 0; i < opt->params().size(); ++i) {
      const ParamSlot &slot = opt->params()[i];
      std::vector<uint8_t> host(
          static_cast<size_t>(slot.elements * dtypeBytes(slot.dtype)));
      gpu.copyToHost(host.data(), values[i].data(),
                     static_cast<int64_t>(host.size()));
      out.values.push_back(host);
      for (const char *name : {"momentum", "exp_avg", "exp_avg_sq"})
        if (float *state = opt->stateData(slot.name, name)) {
          std::vector<float> s(static_cast<size_t>(slot.elements));
          gpu.copyToHost(s.data(), state, slot.elements * 4);
          out.state.push_back(s);
        }
    }
    return out;
  }

  /// Step `step`'s gradients: a seed per step, rank and parameter.
  void setGradients(int64_t step) {
    for (size_t i = 0; i < opt->params().size(); ++i) {
      const ParamSlot &slot = opt->params()[i];
      std::mt19937 rng(static_cast<unsigned>(1000 * step + 31 * i +
                                             7 * opt->currentRank()));
      std::normal_distribution<float> normal;
      std::vector<float> g(static_cast<size_t>(slot.elements));
      for (float &v : g)
        v = 0.01f * normal(rng);
      gpu.copyToDevice(grads[i].data(), g.data(), slot.elements * 4);
    }
  }

  std::unique_ptr<Optimizer> opt;
  Device &gpu;
  std::vector<DeviceBuffer> values, grads;
};

std::unique_ptr<Device> makeGpu() {
  StatusOr<std::unique_ptr<Device>> gpu = cuda::createDevice(0);
  EXPECT_TRUE(gpu.ok()) << gpu.status().text();
  return gpu.ok() ? std::move(gpu).value() : nullptr;
}

/// Both outcomes hold the same bits.
void expectSameBits(const Outcome &eager, const Outcome &graphs) {
  ASSERT_EQ(eager.values.size(), graphs.values.size());
  for (size_t i = 0; i < eager.values.size(); ++i)
    EXPECT_EQ(eager.values[i], graphs.values[i]) << "parameter " << i;
  ASSERT_EQ(eager.state.size(), graphs.state.size());
  for (size_t i = 0; i < eager.state.size(); ++i)
    EXPECT_EQ(0, std::memcmp(eager.state[i].data(), graphs.state[i].data(),
                             eager.state[i].size() * 4))
        << "state " << i;
}

class StepGraphTest : public ::testing::Test {
protected:
  void SetUp() override { fake::reset(); }
  void TearDown() override {
    fake::Counters c = fake::counters();
    EXPECT_EQ(c.misuses, 0) << c.lastMisuse;
    EXPECT_EQ(c.liveGraphs, 0);
    EXPECT_EQ(c.liveGraphExecs, 0);
    fake::reset();
  }
};

/// One warm-up step, one recorded (then replayed), the rest replayed with
/// each step's learning rate and AdamW bias corrections: the bits of the
/// same steps run call by call.
TEST_F(StepGraphTest, AReplayDoesWhatTheEagerStepDoes) {
  const Plan plan = compilePlan(kOneRankSpec);
  Outcome eager, graphs;
  int64_t launches = 0;
  {
    SingleRankCommunicator comm;
    std::unique_ptr<Device> gpu = makeGpu();
    eager = RankRun(plan, comm, *gpu, false).run(6);
  }
  {
    SingleRankCommunicator comm;
    std::unique_ptr<Device> gpu = makeGpu();
    const int64_t before = fake::counters().graphLaunches;
    graphs = RankRun(plan, comm, *gpu, true).run(6);
    launches = fake::counters().graphLaunches - before;
  }
  expectSameBits(eager, graphs);
  EXPECT_EQ(eager.uses, std::vector<GraphUse>(6, GraphUse::Off));
  const std::vector<GraphUse> want = {GraphUse::Eager,    GraphUse::Recorded,
                                      GraphUse::Replayed, GraphUse::Replayed,
                                      GraphUse::Replayed, GraphUse::Replayed};
  EXPECT_EQ(graphs.uses, want);
  EXPECT_EQ(graphs.notes[0], "warm-up before the recording");
  EXPECT_EQ(launches, 5);
}

/// A binding that changes, then a parameter left out (no gradient), then
/// both back: each changed step is checked, found different and recorded
/// again; every step's bits are the eager run's.
TEST_F(StepGraphTest, AChangedStepIsRecordedAgain) {
  const Plan plan = compilePlan(kOneRankSpec);
  auto run = [&](bool graphs) {
    SingleRankCommunicator comm;
    std::unique_ptr<Device> gpu = makeGpu();
    RankRun r(plan, comm, *gpu, graphs);
    const ParamSlot &wq = *r.opt->param("l1.wq");
    const size_t wqIndex = static_cast<size_t>(&wq - &r.opt->params()[0]);
    DeviceBuffer other(*gpu, wq.elements * 4);
    Outcome out = r.run(8, [&](int64_t step, Optimizer &opt, Device &g) {
      if (step == 3) { // l1.wq's gradient in another buffer, same values
        std::vector<float> host(static_cast<size_t>(wq.elements));
        g.copyToHost(host.data(), r.grads[wqIndex].data(), wq.elements * 4);
        g.copyToDevice(other.data(), host.data(), wq.elements * 4);
        EXPECT_TRUE(opt.bind("l1.wq", r.values[wqIndex].data(), wq.dtype,
                             other.data(), DType::F32, wq.elements)
                        .ok());
      }
      if (step == 5) { // l1.wq left out: no gradient
        EXPECT_TRUE(opt.bind("l1.wq", r.values[wqIndex].data(), wq.dtype,
                             nullptr, DType::F32, wq.elements)
                        .ok());
      }
      if (step == 7) { // back to its own gradient
        EXPECT_TRUE(opt.bind("l1.wq", r.values[wqIndex].data(), wq.dtype,
                             r.grads[wqIndex].data(), DType::F32,
                             wq.elements)
                        .ok());
      }
    });
    return out;
  };
  const Outcome eager = run(false), graphs = run(true);
  expectSameBits(eager, graphs);
  const std::vector<GraphUse> want = {
      GraphUse::Eager,    GraphUse::Recorded, GraphUse::Replayed,
      GraphUse::Recorded, GraphUse::Replayed, GraphUse::Recorded,
      GraphUse::Replayed, GraphUse::Recorded};
  EXPECT_EQ(graphs.uses, want);
  for (int64_t step : {3, 5, 7})
    EXPECT_NE(graphs.notes[step].find("recorded again: call "),
              std::string::npos)
        << graphs.notes[step];
}

/// Two ranks over NCCL (threads, the fake's NCCL): each rank's graph holds
/// its gathers, scatters and the AdamW reduce, and replays move the bytes
/// the eager steps move, with the same results.
TEST_F(StepGraphTest, NcclExchangesAreRecordedIntoTheGraph) {
  const Plan plan = compilePlan(kTwoRankSpec);
  auto runRanks = [&](bool graphs, int64_t &messages) {
    std::vector<Outcome> outcomes(2);
    LocalWorld world(2);
    const int64_t before = fake::counters().messages;
    std::vector<std::thread> threads;
    for (int64_t r = 0; r < 2; ++r)
      threads.emplace_back([&, r] {
        LocalCommunicator bootstrap(world, r);
        std::unique_ptr<Device> gpu = makeGpu();
        StatusOr<std::unique_ptr<Communicator>> created =
            cuda::createNcclCommunicator(bootstrap, *gpu);
        ASSERT_TRUE(created.ok()) << created.status().text();
        std::unique_ptr<Communicator> nccl = std::move(created).value();
        EXPECT_TRUE(nccl->recordable());
        {
          RankRun run(plan, *nccl, *gpu, graphs);
          outcomes[r] = run.run(5);
        }
        nccl.reset();
      });
    for (std::thread &t : threads)
      t.join();
    messages = fake::counters().messages - before;
    return outcomes;
  };
  int64_t eagerMessages = 0, graphMessages = 0;
  const std::vector<Outcome> eager = runRanks(false, eagerMessages);
  const std::vector<Outcome> graphs = runRanks(true, graphMessages);
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    expectSameBits(eager[r], graphs[r]);
    EXPECT_EQ(graphs[r].uses.back(), GraphUse::Replayed);
  }
  EXPECT_GT(eagerMessages, 2); // the warm-up's 2 and the steps'
  EXPECT_EQ(graphMessages, eagerMessages);
}

/// Host-staged exchanges reach the host: every step runs call by call, and
/// says why.
TEST_F(StepGraphTest, ATransportThatReachesTheHostRunsEagerly) {
  const Plan plan = compilePlan(kOneRankSpec);
  SingleRankCommunicator base;
  std::unique_ptr<Device> gpu = makeGpu();
  HostStagedCommunicator staged(base, *gpu);
  EXPECT_FALSE(staged.recordable());
  const Outcome out = RankRun(plan, staged, *gpu, true).run(3);
  EXPECT_EQ(out.uses, std::vector<GraphUse>(3, GraphUse::Eager));
  EXPECT_NE(out.notes[2].find("the transport's exchanges reach the host"),
            std::string::npos)
      << out.notes[2];
}

/// The fake refuses what CUDA refuses in a capture: a synchronize of the
/// capturing stream and a query of an event recorded in it (each ends the
/// capture invalid), a stream left unjoined; a capture replays what it
/// recorded, not what ran while it was being made.
TEST_F(StepGraphTest, TheFakeCapturesAsCudaDoes) {
  cudaStream_t a = nullptr, b = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&a, 0), cudaSuccess);
  ASSERT_EQ(cudaStreamCreateWithFlags(&b, 0), cudaSuccess);
  cudaEvent_t fork = nullptr, join = nullptr;
  ASSERT_EQ(cudaEventCreateWithFlags(&fork, 0), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&join, 0), cudaSuccess);
  void *memory = nullptr;
  ASSERT_EQ(cudaMalloc(&memory, 64), cudaSuccess);
  auto *bytes = static_cast<unsigned char *>(memory);
  ASSERT_EQ(cudaMemsetAsync(memory, 0, 64, a), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);

  // A fork and a join: b fills the second half while a fills the first.
  ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeRelaxed),
            cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(memory, 1, 32, a), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(fork, a), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(b, fork, 0), cudaSuccess);
  ASSERT_EQ(cudaMemsetAsync(bytes + 32, 2, 32, b), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(join, b), cudaSuccess);
  ASSERT_EQ(cudaStreamWaitEvent(a, join, 0), cudaSuccess);
  cudaGraph_t graph = nullptr;
  ASSERT_EQ(cudaStreamEndCapture(a, &graph), cudaSuccess);
  EXPECT_EQ(bytes[0], 0); // recorded, not run
  cudaGraphExec_t exec = nullptr;
  ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
  for (int launch = 0; launch < 2; ++launch) {
    std::memset(bytes, 0, 64);
    ASSERT_EQ(cudaGraphLaunch(exec, a), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(a), cudaSuccess);
    EXPECT_EQ(bytes[0], 1);
    EXPECT_EQ(bytes[63], 2);
  }
  EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
  EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
  EXPECT_EQ(fake::counters().misuses, 0);

  auto expectInvalid = [&](const std::function<void()> &misuse,
                           const char *what, cudaError_t end) {
    ASSERT_EQ(cudaStreamBeginCapture(a, cudaStreamCaptureModeRelaxed),
              cudaSuccess);
    misuse();
    cudaGraph_t dropped = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(a, &dropped), end) << what;
    EXPECT_EQ(dropped, nullptr);
    fake::Counters c = fake::counters();
    EXPECT_GE(c.misuses, 1) << what;
    EXPECT_NE(c.lastMisuse.find(what), std::string::npos) << c.lastMisuse;
    fake::reset();
  };
  expectInvalid([&] { (void)cudaStreamSynchronize(a); },
                "cudaStreamSynchronize of a capturing stream",
                cudaErrorStreamCaptureInvalidated);
  expectInvalid(
      [&] {
        (void)cudaEventRecord(fork, a);
        (void)cudaEventQuery(fork);
      },
      "cudaEventQuery of an event recorded in a capture",
      cudaErrorStreamCaptureInvalidated);
  expectInvalid(
      [&] {
        (void)cudaEventRecord(fork, a);
        (void)cudaStreamWaitEvent(b, fork, 0);
        (void)cudaMemsetAsync(memory, 3, 8, b);
      },
      "not joined back", cudaErrorStreamCaptureUnjoined);
  EXPECT_EQ(cudaFree(memory), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(fork), cudaSuccess);
  EXPECT_EQ(cudaEventDestroy(join), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(a), cudaSuccess);
  EXPECT_EQ(cudaStreamDestroy(b), cudaSuccess);
}

} // namespace
