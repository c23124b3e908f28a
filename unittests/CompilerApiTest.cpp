//===- CompilerApiTest.cpp - The compiler and runtime as libraries --------===//
//
// What a C++ trainer does: describe the model and a distributed config in
// code (as the seeds' create_dtensor_config / create_auto_config do), compile
// in process, run the plan through the Optimizer API, and check that every
// rank ends bit for bit where one device ends.
//
//===----------------------------------------------------------------------===//
#include "StatusTesting.h"
#include "GroupSettingValues.h"

#include "muon/Compiler/Compile.h"
#include "muon/Plan/Algorithm.h"
#include "muon/Support/NsCoefficients.h"
#include "muon/Plan/Validate.h"
#include "muon/Planner/Bounds.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Runtime/Testing/Synthetic.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>
#include <set>
#include <thread>

using namespace muon;
using namespace muon::compiler;
using namespace muon::runtime;

namespace {

/// The seeds' hook for custom gather/redistribute: a trainer-supplied
/// transport. This one wraps another and counts what crosses it.
class CountingCommunicator final : public Communicator {
public:
  explicit CountingCommunicator(Communicator &inner) : inner(inner) {}
  int64_t rank() const override { return inner.rank(); }
  int64_t size() const override { return inner.size(); }
  StatusOr<PendingExchange> start(const AllToAllV &x) override {
    for (int64_t c : x.recvCounts)
      received += c * x.elementBytes;
    return inner.start(x);
  }
  Status wait(PendingExchange &p, double t) override {
    return inner.wait(p, t);
  }
  void progress() override { inner.progress(); }
  StatusOr<std::vector<uint64_t>> allGather(uint64_t v, double t) override {
    return inner.allGather(v, t);
  }
  StatusOr<int64_t> allReduceMin(int64_t v, double t) override {
    return inner.allReduceMin(v, t);
  }
  StatusOr<std::vector<std::vector<char>>>
  gatherToRoot(const std::vector<char> &b, double t) override {
    return inner.gatherToRoot(b, t);
  }
  [[noreturn]] void abort(int code) override {
    inner.abort(code);
    __builtin_unreachable();
  }
  int64_t received = 0;

private:
  Communicator &inner;
};

/// Runs `plan` for three synthetic steps on its ranks (threads, through a
/// counting communicator) and on one device; expects equal results.
/// Returns the bytes the ranks received.
int64_t runLikeOneDevice(const Plan &plan) {
  std::vector<std::vector<float>> whole = wholeTensors(plan);
  LocalWorld world(plan.worldSize);
  std::vector<std::thread> ranks;
  std::mutex mutex;
  int64_t received = 0;
  for (int64_t r = 0; r < plan.worldSize; ++r)
    ranks.emplace_back([&, r] {
      LocalCommunicator local(world, r);
      CountingCommunicator comm(local);
      cpu::CpuDevice device;
      std::string error;
      std::unique_ptr<Optimizer> opt;
      error = Optimizer::create(plan, comm, device, {20.0}, opt).message();
      ASSERT_TRUE(opt) << error;
      SyntheticModel model(*opt, device, 3, summandCounts(plan));
      for (int64_t s = 0; s < 3; ++s) {
        model.makeGradients(s, 1, {});
        StepResult result;
        ASSERT_TRUE((error = opt->step(result).message()).empty()) << error;
      }
      std::lock_guard<std::mutex> lock(mutex);
      received += comm.received;
      model.copyInto(whole);
    });
  for (std::thread &t : ranks)
    t.join();
  cpu::CpuDevice device;
  StatusOr<std::vector<std::vector<float>>> reference =
      runReference(plan, device, 3, 3, 1, {});
  EXPECT_OK(reference);
  if (reference.ok()) {
    EXPECT_EQ(whole, *reference);
  }
  return received;
}

Model smallTransformer() {
  Model model;
  model.params = {{"wq", {16, 16}},
                  {"w_up", {32, 16}},
                  {"w_down", {16, 32}},
                  {"norm", {16}}};
  model.muon.setNumber("lr", 0.02);
  return model;
}

TEST(CompilerApi, DTensorConfigRunsLikeOneDevice) {
  Model model = smallTransformer();
  for (Param &p : model.params)
    p.placements = p.shape.size() == 2
                       ? std::vector<Placement>{Placement::shard(0),
                                                Placement::shard(1)}
                       : std::vector<Placement>{};
  DistributedConfig config = createDTensorConfig({{2, 2}, {"fsdp", "tp"}});
  Plan plan;
  std::string error;
  {
    auto compiled = compile(model, &config);
    ASSERT_TRUE(compiled.ok()) << compiled.status().text();
    plan = std::move(compiled).value();
  }
  EXPECT_EQ(plan.worldSize, 4);
  EXPECT_TRUE(validatePlan(plan).ok());
  int64_t received = runLikeOneDevice(plan);
  // What the plan says moves is what crossed the trainer's transport, per
  // step (3 steps).
  int64_t planned = 0;
  for (const RankFigures &f : computeRankFigures(plan))
    planned += f.bytesReceived;
  EXPECT_EQ(received, 3 * planned);
}

TEST(CompilerApi, AutoConfigStrategies) {
  std::string error;
  // FSDP x TP with a TP dim per parameter.
  {
    AutoConfig groups;
    groups.worldSize = 4;
    groups.fsdp = {{0, 1}, {2, 3}};
    groups.tp = {{0, 2}, {1, 3}};
    groups.tpDimPerParam = {{0, 0}, {1, 1}, {2, 0}};
    DistributedConfig config = createAutoConfig(groups);
    Plan plan;
    {
      auto compiled = compile(smallTransformer(), &config);
      ASSERT_TRUE(compiled.ok()) << compiled.status().text();
      plan = std::move(compiled).value();
    }
    runLikeOneDevice(plan);
  }
  // CP: the context-parallel ranks hold full replicas.
  {
    AutoConfig groups;
    groups.worldSize = 2;
    groups.cp = {{0, 1}};
    DistributedConfig config = createAutoConfig(groups);
    Plan plan;
    {
      auto compiled = compile(smallTransformer(), &config);
      ASSERT_TRUE(compiled.ok()) << compiled.status().text();
      plan = std::move(compiled).value();
    }
    runLikeOneDevice(plan);
  }
  // HSDP: shard + replicate.
  {
    AutoConfig groups;
    groups.worldSize = 4;
    groups.shard = {{0, 1}, {2, 3}};
    groups.replicate = {{0, 2}, {1, 3}};
    DistributedConfig config = createAutoConfig(groups);
    Plan plan;
    {
      auto compiled = compile(smallTransformer(), &config);
      ASSERT_TRUE(compiled.ok()) << compiled.status().text();
      plan = std::move(compiled).value();
    }
    runLikeOneDevice(plan);
  }
  // EP: expert weights placed by id; and PP: parameters by stage.
  {
    Model model;
    for (int e = 0; e < 4; ++e) {
      Param p{"expert" + std::to_string(e), {8, 8}};
      p.expert = e;
      model.params.push_back(p);
    }
    model.params.push_back({"router", {4, 8}});
    AutoConfig groups;
    groups.worldSize = 2;
    groups.ep = {{0, 1}};
    groups.numExperts = 4;
    DistributedConfig config = createAutoConfig(groups);
    Plan plan;
    {
      auto compiled = compile(model, &config);
      ASSERT_TRUE(compiled.ok()) << compiled.status().text();
      plan = std::move(compiled).value();
    }
    runLikeOneDevice(plan);
  }
  {
    Model model = smallTransformer();
    for (size_t i = 0; i < model.params.size(); ++i)
      model.params[i].stage = i < 2 ? 0 : 1;
    AutoConfig groups;
    groups.worldSize = 4;
    groups.pp = {{0, 2}, {1, 3}};
    groups.ddp = {{0, 1}, {2, 3}};
    DistributedConfig config = createAutoConfig(groups);
    Plan plan;
    {
      auto compiled = compile(model, &config);
      ASSERT_TRUE(compiled.ok()) << compiled.status().text();
      plan = std::move(compiled).value();
    }
    runLikeOneDevice(plan);
  }
}

TEST(CompilerApi, AssignCallbackChoosesOwners) {
  // The seeds' assign_fn: here, every matrix to its last holder.
  Model model = smallTransformer();
  for (Param &p : model.params)
    p.placements = {Placement::replicate()};
  DistributedConfig config = createDTensorConfig({{4}, {"dp"}});
  std::vector<MatrixInfo> seen;
  config.assignFn = [&](const std::vector<MatrixInfo> &matrices,
                        int64_t world) {
    EXPECT_EQ(world, 4);
    seen = matrices;
    std::map<int64_t, std::vector<std::string>> byRank;
    for (const MatrixInfo &m : matrices)
      byRank[m.holders.back()].push_back(m.name);
    return byRank;
  };
  Plan plan;
  std::string error;
  {
    auto compiled = compile(model, &config);
    ASSERT_TRUE(compiled.ok()) << compiled.status().text();
    plan = std::move(compiled).value();
  }
  ASSERT_EQ(seen.size(), 3u);
  EXPECT_EQ(seen[0].name, "wq");
  EXPECT_EQ(seen[0].holders, (std::vector<int64_t>{0, 1, 2, 3}));
  for (const PlanMatrix &m : plan.matrices)
    EXPECT_EQ(m.owner, 3) << m.label();
  runLikeOneDevice(plan);

  // An incomplete assignment is the seeds' error, with the matrix named.
  config.assignFn = [](const std::vector<MatrixInfo> &, int64_t) {
    return std::map<int64_t, std::vector<std::string>>{{0, {"wq"}}};
  };
  {
    auto compiled = compile(model, &config);
    EXPECT_FALSE(compiled.ok());
    error = compiled.status().text();
  }
  EXPECT_EQ(error, "parameter 'w_up': incomplete assignments: parameter "
                   "'w_up' is assigned to no rank");
}

TEST(CompilerApi, ErrorsNameTheParameter) {
  Model model = smallTransformer();
  model.params[1].placements = {Placement::shard(2)};
  DistributedConfig config = createDTensorConfig({{2}});
  Plan plan;
  std::string error;
  {
    auto compiled = compile(model, &config);
    EXPECT_FALSE(compiled.ok());
    error = compiled.status().text();
  }
  EXPECT_EQ(error, "parameter 'w_up' (placements[0]): S(2) is out of range "
                   "for a tensor of 2 dim(s)");
  // The same model as a spec: what muon-run reads.
  EXPECT_NE(toSpec(model, &config).find("\"placements\": [\n        \"S(2)\""),
            std::string::npos);
}

TEST(CompilerApi, PerHeadMatricesSpreadAndRunLikeOneDevice) {
  // A fused QKV projection in 6 heads of rows and an output projection in 3
  // heads of columns, each sharded against its heads (so every head is
  // gathered), on 2 x 2 ranks: each head a matrix of its own.
  Model model;
  model.params = {{"wqkv", {48, 16}}, {"wo", {16, 48}}, {"norm", {16}}};
  model.params[0].numHeads = 6;
  model.params[0].placements = {Placement::replicate(), Placement::shard(1)};
  model.params[1].numHeads = 3;
  model.params[1].headSplitDim = 1;
  model.params[1].placements = {Placement::replicate(), Placement::shard(0)};
  model.muon.setNumber("lr", 0.02);
  DistributedConfig config = createDTensorConfig({{2, 2}, {"dp", "fsdp"}});
  std::vector<std::string> names;
  Plan plan;
  std::string error;
  {
    auto compiled = compile(model, &config);
    ASSERT_TRUE(compiled.ok()) << compiled.status().text();
    plan = std::move(compiled).value();
  }
  EXPECT_TRUE(validatePlan(plan).ok());
  ASSERT_EQ(plan.matrices.size(), 9u);
  std::set<int64_t> qkvOwners, woOwners;
  for (const PlanMatrix &m : plan.matrices) {
    names.push_back(m.label());
    if (m.param == "wqkv") {
      EXPECT_EQ(m.rows, 8);
      EXPECT_EQ(m.cols, 16);
      qkvOwners.insert(m.owner);
    } else {
      EXPECT_EQ(m.rows, 16);
      EXPECT_EQ(m.cols, 16);
      woOwners.insert(m.owner);
    }
  }
  EXPECT_EQ(names, (std::vector<std::string>{
                       "wqkv[0]", "wqkv[1]", "wqkv[2]", "wqkv[3]", "wqkv[4]",
                       "wqkv[5]", "wo[0]", "wo[1]", "wo[2]"}));
  // The heads of each parameter spread over the ranks, every rank
  // orthogonalizes some, and the busiest rank is within LPT's guarantee
  // (the makespan bound plus one head) and below the bound of the same
  // model without heads (two whole matrices on four ranks).
  EXPECT_GT(qkvOwners.size(), 1u);
  EXPECT_GT(woOwners.size(), 1u);
  std::set<int64_t> owners(qkvOwners);
  owners.insert(woOwners.begin(), woOwners.end());
  EXPECT_EQ(owners.size(), 4u);
  int64_t busiest = 0, largest = 0;
  for (const RankFigures &f : computeRankFigures(plan))
    busiest = std::max(busiest, f.nsFlops);
  for (const PlanMatrix &m : plan.matrices)
    largest = std::max(largest, m.nsFlops);
  LowerBounds bounds = planLowerBounds(plan);
  EXPECT_LE(busiest, bounds.makespanFlops + largest);
  Model whole = model;
  for (Param &p : whole.params)
    p.numHeads = 1, p.headSplitDim = 0;
  Plan wholePlan;
  {
    auto compiled = compile(whole, &config);
    ASSERT_TRUE(compiled.ok()) << compiled.status().text();
    wholePlan = std::move(compiled).value();
  }
  EXPECT_LT(busiest, planLowerBounds(wholePlan).makespanFlops);
  int64_t received = runLikeOneDevice(plan);
  EXPECT_EQ(received, 3 * bounds.bytesReceived); // 3 steps at the bound

  // A count that does not divide the dim names the parameter and the key.
  model.params[1].numHeads = 5;
  {
    auto compiled = compile(model, &config);
    EXPECT_FALSE(compiled.ok());
    error = compiled.status().text();
  }
  EXPECT_EQ(error, "parameter 'wo' (num_heads): num_heads 5 does not divide "
                   "the columns (48) of the 16 x 48 matrix");
}

TEST(CompilerApi, NewtonSchulzCoefficientPresets) {
  DistributedConfig config = createDTensorConfig({{2}});
  Plan plan;
  std::string error;
  // Default: Jordan's triple for every step.
  {
    auto compiled = compile(smallTransformer(), &config);
    ASSERT_TRUE(compiled.ok()) << compiled.status().text();
    plan = std::move(compiled).value();
  }
  ASSERT_EQ(plan.ns.configs.size(), 1u);
  ASSERT_EQ(plan.ns.configs[0].coefficients.size(), 5u);
  EXPECT_EQ(plan.ns.configs[0].coefficients[4],
            (std::array<double, 3>{3.4445, -4.775, 2.0315}));
  // Polar Express: one triple per step, the paper's schedule.
  Model model = smallTransformer();
  model.muon.ns.nsPreset = "polar_express";
  model.muon.ns.nsSteps = 6;
  {
    auto compiled = compile(model, &config);
    ASSERT_TRUE(compiled.ok()) << compiled.status().text();
    plan = std::move(compiled).value();
  }
  std::optional<std::vector<NsTriple>> polar = nsPreset("polar_express", 6);
  ASSERT_TRUE(polar);
  EXPECT_EQ(plan.ns.configs[0].coefficients, *polar);
  EXPECT_EQ(plan.ns.configs[0].coefficients[0][0], 8.28721201814563 / 1.01);
  // An explicit table wins over the preset.
  model.muon.ns.nsCoefficients = {{1.5, -0.5, 0.0}};
  {
    auto compiled = compile(model, &config);
    ASSERT_TRUE(compiled.ok()) << compiled.status().text();
    plan = std::move(compiled).value();
  }
  EXPECT_EQ(plan.ns.configs[0].coefficients,
            std::vector<NsTriple>(6, {1.5, -0.5, 0.0}));
  // An unknown preset is the spec's error.
  model.muon.ns.nsCoefficients.clear();
  model.muon.ns.nsPreset = "you";
  {
    auto compiled = compile(model, &config);
    EXPECT_FALSE(compiled.ok());
    error = compiled.status().text();
  }
  EXPECT_NE(error.find("unknown preset 'you'; expected a preset ('jordan', "
                       "'polar_express')"),
            std::string::npos)
      << error;
}

TEST(CompilerApi, EveryGroupSettingReachesThePlan) {
  // Each row of the settings table, set on the model to a valid value other
  // than its default, goes through the spec the API writes, the importer,
  // the IR (a declared attribute or one the table alone describes) and the
  // plan, and comes out with that value.
  DistributedConfig config = createDTensorConfig({{2}});
  int walked = 0;
  for (const GroupSetting &s : groupSettings()) {
    Model model = smallTransformer();
    // Muon's and AdamW's through the model's two groups; another
    // algorithm's through param_groups, as a group of its own beside them.
    const bool legacy = s.algorithm == kMuon || s.algorithm == kAdamW;
    ParamGroup &g = s.algorithm == kMuon    ? model.muon
                    : s.algorithm == kAdamW ? model.adamw
                                            : model.groups.emplace_back(
                                                  ParamGroup(s.algorithm));
    if (!legacy) {
      g.name = algorithmName(s.algorithm);
      model.muon.name = "muon";
      model.adamw.name = "adamw";
      model.groups.insert(model.groups.begin(), {model.muon, model.adamw});
    }
    ParamGroup &changed = legacy ? g : model.groups.back();
    if (s.onlyWith)
      setSettingValue(*findGroupSetting(s.algorithm, s.onlyWith), changed,
                      1.0);
    setOtherValidValue(s, changed);
    const std::string want = valueOf(s, changed);
    Plan plan;
    std::string error;
    {
      auto compiled = compile(model, &config);
      ASSERT_TRUE(compiled.ok()) << s.name << ": " << compiled.status().text();
      plan = std::move(compiled).value();
    }
    auto group = std::find_if(
        plan.groups.begin(), plan.groups.end(),
        [&](const PlanGroup &p) { return p.algorithm == s.algorithm; });
    ASSERT_NE(group, plan.groups.end()) << s.name;
    EXPECT_EQ(valueOf(s, *group), want) << s.name;
    ++walked;
  }
  EXPECT_EQ(walked, static_cast<int>(groupSettings().size()));
}

} // namespace
