//===- ParamGroupsTest.cpp - Groups and hyper-parameters as step inputs ---===//
//
// What a real training loop does with the optimizer: several parameter
// groups with their own settings, a learning-rate and weight-decay schedule
// that changes them before every step, and errors that leave nothing behind.
// The model is described and compiled in process (Muon::Compiler), as a C++
// trainer would.
//
//===----------------------------------------------------------------------===//
#include "muon/Compiler/Compile.h"
#include "muon/Plan/Validate.h"
#include "muon/Planner/Schedule.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Runtime/Testing/Synthetic.h"
#include "muon/Support/NsCoefficients.h"

#include "ElementSteps.h"
#include "ModelParams.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <thread>
#include <utility>

using namespace muon;
using namespace muon::runtime;
namespace mc = muon::compiler;

namespace {

/// Four groups, two of each algorithm, each with its own lr and weight
/// decay: hidden matrices, attention, embeddings and norms.
mc::Model fourGroupModel() {
  mc::Model model;
  auto muonGroup = [](std::string name, double lr, double wd) {
    mc::ParamGroup g(kMuon);
    g.name = std::move(name);
    g.setNumber("lr", lr);
    g.setNumber("weight_decay", wd);
    return g;
  };
  auto adamwGroup = [](std::string name, double lr, double wd) {
    mc::ParamGroup g(kAdamW);
    g.name = std::move(name);
    g.setNumber("lr", lr);
    g.setNumber("weight_decay", wd);
    g.setNumber("beta2", 0.95);
    return g;
  };
  model.groups = {muonGroup("hidden", 0.02, 0.1), muonGroup("attn", 0.01, 0.05),
                  adamwGroup("embed", 0.003, 0.0),
                  adamwGroup("norms", 0.001, 0.01)};
  auto param = [&](std::string name, std::vector<int64_t> shape,
                   std::string group) {
    addRowShardedParam(model, std::move(name), std::move(shape),
                       std::move(group));
  };
  param("emb", {30, 12}, "embed");
  param("wq", {12, 12}, "attn");
  param("w1", {12, 20}, "hidden");
  param("w2", {20, 12}, "hidden");
  param("wo", {13, 12}, "attn");
  param("norm", {12}, "norms");
  return model;
}

Plan compileOn(const mc::Model &model, int64_t ranks) {
  mc::DistributedConfig config = mc::createDTensorConfig({{ranks}, {"dp"}});
  Plan plan;
  std::string error;
  {
    auto compiled = mc::compile(model, &config);
    EXPECT_TRUE(compiled.ok()) << compiled.status().text();
    if (compiled.ok())
      plan = std::move(compiled).value();
  }
  return plan;
}

/// The schedule the tests run: warmup then decay of every group's lr, and a
/// weight decay that changes every step too.
struct Schedule {
  double lrFactor(int64_t step) const {
    return step < 2 ? 0.5 * (step + 1) : 1.0 / (1.0 + 0.3 * (step - 1));
  }
  double wdFactor(int64_t step) const { return 1.0 + 0.25 * step; }

  /// The groups' settings before `step`, from the plan's starting values.
  std::vector<PlanGroup> at(const Plan &plan, int64_t step) const {
    std::vector<PlanGroup> groups = plan.groups;
    for (PlanGroup &g : groups) {
      g.setNumber("lr", g.number("lr") * lrFactor(step));
      g.setNumber("weight_decay", g.number("weight_decay") * wdFactor(step));
    }
    return groups;
  }
  void apply(Optimizer &opt, int64_t step) const {
    for (const PlanGroup &g : at(opt.plan(), step)) {
      Status s = opt.setGroupSettings(g.name, g);
      ASSERT_TRUE(s.ok()) << s.message();
    }
  }
};

std::vector<float> randomVector(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float &x : v)
    x = dist(rng);
  return v;
}

TEST(ParamGroups, ScheduledStepsMatchAReferenceBitForBit) {
  // One device: every step's update, recomputed from the device's own
  // primitives with that step's settings, must equal the optimizer's.
  const mc::Model model = fourGroupModel();
  const Plan plan = compileOn(model, 1);
  ASSERT_EQ(plan.groups.size(), 4u);
  SingleRankCommunicator comm;
  cpu::CpuDevice device;
  std::unique_ptr<Optimizer> opt;
  ASSERT_TRUE(Optimizer::create(plan, comm, device, {}, opt).ok());

  const size_t n = plan.params.size();
  std::vector<std::vector<float>> values(n), grads(n), refValues(n);
  std::vector<std::vector<float>> momentum(n), expAvg(n), expAvgSq(n);
  for (size_t i = 0; i < n; ++i) {
    const ParamSlot &slot = opt->params()[i];
    values[i] = randomVector(slot.elements, 100 + i);
    refValues[i] = values[i];
    grads[i].assign(slot.elements, 0.0f);
    momentum[i].assign(slot.elements, 0.0f);
    expAvg[i].assign(slot.elements, 0.0f);
    expAvgSq[i].assign(slot.elements, 0.0f);
    ASSERT_TRUE(opt->bind(slot.name, values[i].data(), grads[i].data(),
                          DType::F32, slot.elements)
                    .ok());
  }
  const Schedule schedule;
  for (int64_t step = 0; step < 4; ++step) {
    for (size_t i = 0; i < n; ++i) { // into the bound storage
      std::vector<float> g =
          randomVector(grads[i].size(), 1000 * (step + 1) + i);
      std::copy(g.begin(), g.end(), grads[i].begin());
    }
    schedule.apply(*opt, step);
    StepResult result;
    Status status = opt->step(result);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_TRUE(result.applied);

    const std::vector<PlanGroup> groups = schedule.at(plan, step);
    for (size_t i = 0; i < n; ++i) {
      const PlanParam &p = plan.params[i];
      const PlanGroup &g = groups[p.group];
      const int64_t count = static_cast<int64_t>(refValues[i].size());
      if (!g.orthogonalizes()) {
        calls::runAdamW(device, refValues[i].data(), DType::F32, grads[i].data(),
                     DType::F32, expAvg[i].data(), expAvgSq[i].data(), count,
                     g, step + 1);
        continue;
      }
      std::vector<float> update(count);
      calls::runMomentum(device, grads[i].data(), DType::F32, momentum[i].data(),
                      update.data(), count, g);
      const int64_t rows = p.layout.shape[0], cols = p.layout.shape[1];
      // In the precision the optimizer resolved "auto" to (bf16 on a CPU
      // with bf16 products).
      const NewtonSchulzConfig &ns = plan.ns.configs[g.nsConfig];
      device.newtonSchulz(update.data(), 1, rows, cols, ns.coefficients, ns.eps,
                          opt->nsDtype());
      calls::runMuonUpdate(device, refValues[i].data(), DType::F32, update.data(), count,
                         g, adjustedLr(g, rows, cols));
    }
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(0, std::memcmp(values[i].data(), refValues[i].data(),
                               values[i].size() * 4))
          << "step " << step << ", parameter '" << plan.params[i].name << "'";
  }
  // The optimizer reports what it runs with.
  EXPECT_DOUBLE_EQ(opt->group("attn")->number("lr"),
                   0.01 * schedule.lrFactor(3));
  EXPECT_DOUBLE_EQ(opt->group("norms")->number("weight_decay"),
                   0.01 * schedule.wdFactor(3));
}

/// Runs `plan` for `steps` synthetic steps on its ranks (threads) with the
/// schedule; returns the whole tensors.
std::vector<std::vector<float>> runScheduled(const Plan &plan, int64_t steps) {
  std::vector<std::vector<float>> whole = wholeTensors(plan);
  LocalWorld world(plan.worldSize);
  std::vector<std::thread> ranks;
  std::vector<std::string> errors(plan.worldSize);
  for (int64_t r = 0; r < plan.worldSize; ++r)
    ranks.emplace_back([&, r] {
      LocalCommunicator comm(world, r);
      cpu::CpuDevice device;
      std::unique_ptr<Optimizer> opt;
      if (Status s = Optimizer::create(plan, comm, device, {20.0}, opt);
          !s.ok()) {
        errors[r] = s.message();
        return;
      }
      SyntheticModel model(*opt, device, 7, summandCounts(plan));
      for (int64_t s = 0; s < steps; ++s) {
        model.makeGradients(s, 1, {});
        Schedule().apply(*opt, s);
        StepResult result;
        if (Status status = opt->step(result); !status.ok()) {
          errors[r] = status.message();
          return;
        }
      }
      model.copyInto(whole);
    });
  for (std::thread &t : ranks)
    t.join();
  for (const std::string &e : errors)
    EXPECT_EQ(e, "");
  return whole;
}

TEST(ParamGroups, ScheduledRunOnFourRanksEqualsOneDevice) {
  const mc::Model model = fourGroupModel();
  const Plan four = compileOn(model, 4);
  EXPECT_EQ(runScheduled(four, 4), runScheduled(referencePlan(four), 4));
}

TEST(ParamGroups, RanksWithDifferentSettingsAreRefusedBeforeAnythingChanges) {
  const Plan plan = compileOn(fourGroupModel(), 2);
  LocalWorld world(2);
  std::vector<Status> first(2), second(2);
  std::vector<bool> unchanged(2, false);
  std::vector<int64_t> steps(2, -1);
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      LocalCommunicator comm(world, r);
      cpu::CpuDevice device;
      std::unique_ptr<Optimizer> opt;
      ASSERT_TRUE(Optimizer::create(plan, comm, device, {20.0}, opt).ok());
      SyntheticModel model(*opt, device, 3, summandCounts(plan));
      model.makeGradients(0, 1, {});
      std::vector<std::vector<float>> before;
      for (size_t i = 0; i < plan.params.size(); ++i)
        before.push_back(model.values(i));
      // Rank 1 forgets to decay the embeddings' lr.
      ASSERT_TRUE(opt->setGroupLr("embed", r == 1 ? 0.003 : 0.0015).ok());
      StepResult result;
      first[r] = opt->step(result);
      bool same = true;
      for (size_t i = 0; i < plan.params.size(); ++i)
        same = same && model.values(i) == before[i];
      unchanged[r] = same;
      // Agreeing again, the step runs.
      ASSERT_TRUE(opt->setGroupLr("embed", 0.0015).ok());
      second[r] = opt->step(result);
      steps[r] = opt->stepsTaken();
    });
  for (std::thread &t : ranks)
    t.join();
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_EQ(first[r].code(), StatusCode::InvalidArgument);
    // Every rank names the group, the setting and both values.
    EXPECT_EQ(first[r].message(),
              "ranks [1] set group hyper-parameters different from rank 0's "
              "(group 'embed' lr: 0.003 on rank 1, 0.0015 on rank 0); every "
              "rank must set the same values before a step (nothing was "
              "changed)");
    EXPECT_TRUE(unchanged[r]) << "rank " << r;
    EXPECT_TRUE(second[r].ok()) << second[r].message();
    EXPECT_EQ(steps[r], 1);
  }
}

TEST(ParamGroups, BadSettingsAreRefusedWithNothingChanged) {
  const Plan plan = compileOn(fourGroupModel(), 1);
  SingleRankCommunicator comm;
  cpu::CpuDevice device;
  std::unique_ptr<Optimizer> opt;
  ASSERT_TRUE(Optimizer::create(plan, comm, device, {}, opt).ok());
  const std::vector<PlanGroup> before = opt->groups();

  PlanGroup m = *opt->group("hidden");
  m.setNumber("lr", -1);
  Status s = opt->setGroupSettings("hidden", m);
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_EQ(s.message(), "group 'hidden': lr: expected a finite number >= 0, "
                         "got -1 (nothing was changed)");
  m.setNumber("lr", NAN);
  EXPECT_FALSE(opt->setGroupSettings("hidden", m).ok());
  m.setNumber("lr", 0.01);
  m.setNumber("momentum", 1.0);
  s = opt->setGroupSettings("hidden", m);
  EXPECT_EQ(s.message(), "group 'hidden': momentum: expected a number in "
                         "[0, 1), got 1 (nothing was changed)");
  PlanGroup a(kAdamW);
  a.setNumber("beta2", 1.5);
  s = opt->setGroupSettings("embed", a);
  EXPECT_EQ(s.message(), "group 'embed': betas[1]: expected a number in "
                         "[0, 1), got 1.5 (nothing was changed)");
  s = opt->setGroupSettings("embed", PlanGroup(kMuon));
  EXPECT_EQ(s.message(), "group 'embed' is adamw, not muon; give it adamw "
                         "settings");
  s = opt->setGroupLr("head", 0.1);
  EXPECT_EQ(s.code(), StatusCode::NotFound);
  EXPECT_EQ(s.message(), "no parameter group named 'head' (the groups are "
                         "'hidden', 'attn', 'embed', 'norms')");
  ASSERT_EQ(opt->groups().size(), before.size());
  for (size_t g = 0; g < before.size(); ++g) {
    EXPECT_EQ(opt->groups()[g].settings, before[g].settings);
  }
}

TEST(ParamGroups, PlanHashLeavesHyperParametersOut) {
  // Ranks agree on the plan, not on the learning rate: two plans that
  // differ only in a group's starting lr hash alike, and a structural
  // difference does not.
  Plan a = compileOn(fourGroupModel(), 2), b = a;
  b.groups[0].setNumber("lr", b.groups[0].number("lr") * 3);
  b.groups[2].setNumber("beta1", 0.8);
  EXPECT_EQ(planHash(a), planHash(b));
  b.ns.configs[0].eps *= 2;
  EXPECT_NE(planHash(a), planHash(b));
}

TEST(ParamGroups, AFailedCallLeavesNoErrorBehind) {
  // A failed bind used to leave its message in the caller's string, and
  // every later call that was handed the same string failed with it.
  const Plan plan = compileOn(fourGroupModel(), 1);
  SingleRankCommunicator comm;
  cpu::CpuDevice device;
  std::unique_ptr<Optimizer> opt;
  ASSERT_TRUE(Optimizer::create(plan, comm, device, {}, opt).ok());
  std::vector<std::vector<float>> values, grads;
  for (const ParamSlot &slot : opt->params()) {
    values.emplace_back(slot.elements, 0.5f);
    grads.emplace_back(slot.elements, 0.25f);
  }
  // One status object through a failure and the successes after it, as a
  // trainer's loop reuses its variable.
  Status status = opt->bind("emb", values[0].data(), grads[0].data(),
                            DType::F32, values[0].size() + 1);
  EXPECT_EQ(status.code(), StatusCode::InvalidArgument);
  for (size_t i = 0; i < values.size(); ++i) {
    status = opt->bind(opt->params()[i].name, values[i].data(), grads[i].data(),
                       DType::F32, values[i].size());
    ASSERT_TRUE(status.ok()) << status.message();
  }
  StepResult result;
  status = opt->step(result);
  EXPECT_TRUE(status.ok()) << status.message();
  EXPECT_TRUE(result.applied);
}

TEST(ParamGroups, CheckpointsAndStateDictsCarryTheSettings) {
  // torch's optimizer state_dict holds param_groups: a resumed run starts
  // with the settings the saved one had, whatever its plan says.
  const Plan plan = compileOn(fourGroupModel(), 2);
  char dirTemplate[] = "/tmp/muon-groups-XXXXXX";
  ASSERT_TRUE(mkdtemp(dirTemplate));
  const std::string dir = dirTemplate;
  std::vector<std::vector<PlanGroup>> saved(2), loaded(2), fromDict(2);
  std::vector<std::string> refused(2);
  for (int phase = 0; phase < 2; ++phase) {
    LocalWorld world(2);
    std::vector<std::thread> ranks;
    for (int64_t r = 0; r < 2; ++r)
      ranks.emplace_back([&, r] {
        LocalCommunicator comm(world, r);
        cpu::CpuDevice device;
        std::unique_ptr<Optimizer> opt;
        ASSERT_TRUE(Optimizer::create(plan, comm, device, {20.0}, opt).ok());
        SyntheticModel model(*opt, device, 3, summandCounts(plan));
        if (phase == 0) {
          Schedule().apply(*opt, 3);
          PlanGroup a = *opt->group("embed");
          a.setNumber("beta2", 0.99);
          ASSERT_TRUE(opt->setGroupSettings("embed", a).ok());
          model.makeGradients(0, 1, {});
          StepResult result;
          ASSERT_TRUE(opt->step(result).ok());
          Status s = opt->saveCheckpoint(dir, false);
          ASSERT_TRUE(s.ok()) << s.message();
          saved[r] = opt->groups();
          return;
        }
        Status s = opt->loadCheckpoint(dir, false);
        ASSERT_TRUE(s.ok()) << s.message();
        loaded[r] = opt->groups();
        // A state dict carries them too, and one naming a group this model
        // lacks is refused with nothing changed.
        StateDict dict;
        ASSERT_TRUE(opt->stateDict(false, dict).ok());
        ASSERT_TRUE(opt->setGroupLr("hidden", 0.5).ok());
        ASSERT_TRUE(opt->loadStateDict(dict, false).ok());
        fromDict[r] = opt->groups();
        dict.groups[0].name = "head";
        Status bad = opt->loadStateDict(dict, false);
        refused[r] = bad.message();
        EXPECT_EQ(bad.code(), StatusCode::InvalidArgument);
      });
    for (std::thread &t : ranks)
      t.join();
  }
  for (int64_t r = 0; r < 2; ++r) {
    ASSERT_EQ(loaded[r].size(), saved[r].size());
    for (size_t g = 0; g < saved[r].size(); ++g) {
      EXPECT_EQ(loaded[r][g].settings, saved[r][g].settings);
      EXPECT_EQ(fromDict[r][g].number("lr"), saved[r][g].number("lr"));
    }
    EXPECT_NE(loaded[r][0].number("lr"), plan.groups[0].number("lr"));
    EXPECT_EQ(loaded[r][2].number("beta2"), 0.99);
    EXPECT_EQ(refused[r], "loading a state dict: group 'head' is not a group "
                          "of this model; nothing was changed");
  }
}

/// A CPU device whose Newton-Schulz fails once, as a GPU reports an illegal
/// address: the operation returns, and the error waits for takeError. Its
/// "auto" precision is `autoNs`.
class FailingDevice final : public Device {
public:
  explicit FailingDevice(bool fail, DType autoNs = DType::F32)
      : fail(fail), autoNs(autoNs) {}
  const char *name() const override { return "failing-cpu"; }
  DType defaultNsDtype() const override { return autoNs; }
  void *allocate(int64_t b) override { return cpu.allocate(b); }
  void release(void *m) override { cpu.release(m); }
  void zero(void *m, int64_t b) override { cpu.zero(m, b); }
  void copyToDevice(void *d, const void *s, int64_t b) override {
    cpu.copyToDevice(d, s, b);
  }
  void copyToHost(void *d, const void *s, int64_t b) override {
    cpu.copyToHost(d, s, b);
  }
  bool allFinite(const void *x, DType t, int64_t n) override {
    return cpu.allFinite(x, t, n);
  }
  void runElementStep(const ElementStep &step, const ElementOperands &o,
                      const StepScalars &s) override {
    cpu.runElementStep(step, o, s);
  }
  void copyBox(const BoxCopy &c) override { cpu.copyBox(c); }
  int64_t newtonSchulz(float *x, int64_t count, int64_t rows, int64_t cols,
                       const std::vector<std::array<double, 3>> &abc,
                       double eps, DType precision) override {
    if (std::exchange(fail, false))
      error = Status(StatusCode::Internal,
                     "cublasGemmEx failed: CUBLAS_STATUS_EXECUTION_FAILED "
                     "(injected)");
    return cpu.newtonSchulz(x, count, rows, cols, abc, eps, precision);
  }
  Status takeError() override { return std::exchange(error, Status()); }

private:
  cpu::CpuDevice cpu;
  bool fail;
  DType autoNs;
  Status error;
};

TEST(ParamGroups, ADeviceErrorFailsTheStepOnEveryRank) {
  const Plan plan = compileOn(fourGroupModel(), 4);
  LocalWorld world(4);
  std::vector<Status> statuses(4), after(4);
  std::vector<std::thread> ranks;
  for (int64_t r = 0; r < 4; ++r)
    ranks.emplace_back([&, r] {
      LocalCommunicator comm(world, r);
      FailingDevice device(/*fail=*/r == 2);
      std::unique_ptr<Optimizer> opt;
      ASSERT_TRUE(Optimizer::create(plan, comm, device, {20.0}, opt).ok());
      SyntheticModel model(*opt, device, 3, summandCounts(plan));
      model.makeGradients(0, 1, {});
      StepResult result;
      statuses[r] = opt->step(result);
      // The error was reported once; the next step runs.
      after[r] = opt->step(result);
    });
  for (std::thread &t : ranks)
    t.join();
  for (int64_t r = 0; r < 4; ++r) {
    EXPECT_EQ(statuses[r].code(), StatusCode::Internal) << "rank " << r;
    EXPECT_EQ(statuses[r].message(),
              "the device of rank 2 failed during the step, whose updates may "
              "be partly applied: cublasGemmEx failed: "
              "CUBLAS_STATUS_EXECUTION_FAILED (injected)")
        << "rank " << r;
    EXPECT_TRUE(after[r].ok()) << after[r].message();
  }
}

TEST(ParamGroups, AutoIsRank0sChoiceAndAGivenPrecisionIsHonoured) {
  // ns_dtype "auto" is each device's choice, and devices can choose
  // differently (on the CPU by the rates their products ran at, two ranks
  // measuring on either side of the margin, or CPUs of two kinds): every
  // rank runs rank 0's. A precision the plan names runs on every rank
  // whatever the devices would choose.
  Plan plan = compileOn(fourGroupModel(), 4);
  ASSERT_EQ(plan.ns.nsDtype, "auto");
  std::vector<std::string> reasons(4);
  auto start = [&](const Plan &p, DType rank0, DType others) {
    LocalWorld world(4);
    std::vector<Status> statuses(4);
    std::vector<DType> ran(4, DType::F16);
    std::vector<std::thread> ranks;
    for (int64_t r = 0; r < 4; ++r)
      ranks.emplace_back([&, r] {
        LocalCommunicator comm(world, r);
        FailingDevice device(false, r == 0 ? rank0 : others);
        std::unique_ptr<Optimizer> opt;
        statuses[r] = Optimizer::create(p, comm, device, {20.0}, opt);
        if (statuses[r].ok()) {
          ran[r] = opt->nsDtype();
          reasons[r] = opt->nsDtypeReason();
        }
      });
    for (std::thread &t : ranks)
      t.join();
    for (int64_t r = 0; r < 4; ++r)
      EXPECT_TRUE(statuses[r].ok()) << r << ": " << statuses[r].message();
    return ran;
  };
  const std::vector<DType> allF32(4, DType::F32), allBf16(4, DType::BF16);
  EXPECT_EQ(start(plan, DType::F32, DType::BF16), allF32);
  // Each rank says whose choice it runs.
  EXPECT_EQ(reasons[0], "f32: the failing-cpu device's default");
  EXPECT_EQ(reasons[1], "f32: rank 0's choice for ns_dtype auto (this "
                        "rank's device chose bf16: the failing-cpu device's "
                        "default)");
  EXPECT_EQ(start(plan, DType::BF16, DType::F32), allBf16);
  EXPECT_EQ(start(plan, DType::BF16, DType::BF16), allBf16);
  plan.ns.nsDtype = "bf16";
  EXPECT_EQ(start(plan, DType::F32, DType::F32), allBf16);
  EXPECT_EQ(reasons, std::vector<std::string>(4, "bf16: the plan's ns_dtype"));
  EXPECT_EQ(start(plan, DType::F32, DType::BF16), allBf16);
  plan.ns.nsDtype = "f32";
  EXPECT_EQ(start(plan, DType::BF16, DType::BF16), allF32);
  EXPECT_EQ(start(plan, DType::BF16, DType::F32), allF32);
}

/// Three Muon groups and an AdamW one: "jordan" (torch's Newton-Schulz),
/// "polar" (6 Polar Express steps, eps 1e-6: every setting differs) and
/// "again" (jordan's settings, its own lr), with same-shape matrices across
/// them, so that batching by shape alone would mix the groups.
mc::Model nsGroupsModel() {
  mc::Model model;
  mc::ParamGroup jordan, polar, again, embed(kAdamW);
  jordan.name = "jordan";
  jordan.setNumber("lr", 0.02);
  polar.name = "polar";
  polar.setNumber("lr", 0.02);
  polar.ns.nsSteps = 6;
  polar.ns.nsPreset = "polar_express";
  polar.ns.eps = 1e-6;
  again.name = "again";
  again.setNumber("lr", 0.01);
  embed.name = "embed";
  model.groups = {jordan, polar, again, embed};
  auto param = [&](std::string name, std::vector<int64_t> shape,
                   std::string group) {
    addRowShardedParam(model, std::move(name), std::move(shape),
                       std::move(group));
  };
  param("emb", {30, 12}, "embed");
  param("a1", {12, 20}, "jordan");
  param("p1", {12, 20}, "polar");
  param("a2", {12, 20}, "again");
  param("p2", {20, 12}, "polar");
  param("a3", {20, 12}, "jordan");
  param("norm", {12}, "embed");
  return model;
}

/// The Newton-Schulz settings the model gives group `name`, from the
/// model itself (not from a plan).
NewtonSchulzConfig modelNsConfig(const mc::Model &model,
                                 const std::string &name) {
  for (const mc::ParamGroup &g : model.groups)
    if (g.name == name) {
      NewtonSchulzConfig c;
      c.nsSteps = g.ns.nsSteps;
      c.coefficients = *nsPreset(g.ns.nsPreset, g.ns.nsSteps);
      c.coefficients.resize(c.nsSteps, c.coefficients.back());
      c.eps = g.ns.eps;
      return c;
    }
  ADD_FAILURE() << "no group " << name;
  return {};
}

/// `steps` steps of `plan` on one device from seeded values and gradients,
/// beside a reference that recomputes every parameter from the device's
/// primitives with the Newton-Schulz settings `nsOf(param)` gives. Returns
/// the parameters whose values differ from the reference in any bit.
std::vector<std::string> differingFromReference(
    const Plan &plan, int64_t steps,
    const std::function<NewtonSchulzConfig(const PlanParam &)> &nsOf) {
  SingleRankCommunicator comm;
  cpu::CpuDevice device;
  std::unique_ptr<Optimizer> opt;
  Status created = Optimizer::create(plan, comm, device, {}, opt);
  EXPECT_TRUE(created.ok()) << created.message();
  if (!created.ok())
    return {"the optimizer"};
  const size_t n = plan.params.size();
  std::vector<std::vector<float>> values(n), grads(n), refValues(n);
  std::vector<std::vector<float>> momentum(n), expAvg(n), expAvgSq(n);
  for (size_t i = 0; i < n; ++i) {
    const ParamSlot &slot = opt->params()[i];
    values[i] = randomVector(slot.elements, 300 + i);
    refValues[i] = values[i];
    grads[i].assign(slot.elements, 0.0f);
    momentum[i].assign(slot.elements, 0.0f);
    expAvg[i].assign(slot.elements, 0.0f);
    expAvgSq[i].assign(slot.elements, 0.0f);
    EXPECT_TRUE(opt->bind(slot.name, values[i].data(), grads[i].data(),
                          DType::F32, slot.elements)
                    .ok());
  }
  for (int64_t step = 0; step < steps; ++step) {
    for (size_t i = 0; i < n; ++i) {
      std::vector<float> g =
          randomVector(grads[i].size(), 2000 * (step + 1) + i);
      std::copy(g.begin(), g.end(), grads[i].begin());
    }
    StepResult result;
    Status status = opt->step(result);
    EXPECT_TRUE(status.ok()) << status.message();
    for (size_t i = 0; i < n; ++i) {
      const PlanParam &p = plan.params[i];
      const PlanGroup &g = plan.groups[p.group];
      const int64_t count = static_cast<int64_t>(refValues[i].size());
      if (!g.orthogonalizes()) {
        calls::runAdamW(device, refValues[i].data(), DType::F32, grads[i].data(),
                     DType::F32, expAvg[i].data(), expAvgSq[i].data(), count,
                     g, step + 1);
        continue;
      }
      std::vector<float> update(count);
      calls::runMomentum(device, grads[i].data(), DType::F32, momentum[i].data(),
                      update.data(), count, g);
      const int64_t rows = p.layout.shape[0], cols = p.layout.shape[1];
      const NewtonSchulzConfig ns = nsOf(p);
      device.newtonSchulz(update.data(), 1, rows, cols, ns.coefficients, ns.eps,
                          opt->nsDtype());
      calls::runMuonUpdate(device, refValues[i].data(), DType::F32, update.data(), count,
                         g, adjustedLr(g, rows, cols));
    }
  }
  std::vector<std::string> differ;
  for (size_t i = 0; i < n; ++i)
    if (std::memcmp(values[i].data(), refValues[i].data(),
                    values[i].size() * 4) != 0)
      differ.push_back(plan.params[i].name);
  return differ;
}

TEST(ParamGroups, EachGroupRunsItsOwnNewtonSchulz) {
  // torch.optim.Muon's groups may differ in ns_steps, ns_coefficients and
  // eps. The plan holds each distinct set once; every matrix runs its own
  // group's, bit for bit as the device's primitives with the model's
  // settings give it.
  mc::Model model = nsGroupsModel();
  // Without a distributed config (nothing sharded): one round, so that
  // same-shape matrices of every group meet in it.
  for (mc::Param &p : model.params)
    p.placements.clear();
  Plan plan;
  std::string error;
  {
    auto compiled = mc::compile(model, nullptr);
    ASSERT_TRUE(compiled.ok()) << compiled.status().text();
    plan = std::move(compiled).value();
  }
  ASSERT_EQ(plan.rounds.size(), 1u);
  ASSERT_EQ(plan.ns.configs.size(), 2u);
  EXPECT_EQ(plan.ns.configs[0], modelNsConfig(model, "jordan"));
  EXPECT_EQ(plan.ns.configs[1], modelNsConfig(model, "polar"));
  const int64_t polar = findGroup(plan.groups, "polar");
  EXPECT_EQ(plan.groups[findGroup(plan.groups, "jordan")].nsConfig, 0);
  EXPECT_EQ(plan.groups[polar].nsConfig, 1);
  EXPECT_EQ(plan.groups[findGroup(plan.groups, "again")].nsConfig, 0);
  // Each matrix's flops are its group's: 6 steps for "polar".
  for (const PlanMatrix &m : plan.matrices)
    EXPECT_EQ(m.nsFlops,
              nsFlops(m.rows, m.cols,
                      plan.params[m.paramIndex].group == polar ? 6 : 5))
        << m.label();
  // The 12 x 20 matrices: "a1" and "a2" share a batch, "p1" has its own.
  size_t wideBatches = 0;
  for (const NsBatch &b : plan.nsBatches[0])
    if (b.rows == 12 && b.cols == 20) {
      ++wideBatches;
      EXPECT_EQ(b.matrices.size(), b.config == 0 ? 2u : 1u);
    }
  EXPECT_EQ(wideBatches, 2u);
  auto ownSettings = [&](const PlanParam &p) {
    return modelNsConfig(model, plan.groups[p.group].name);
  };
  EXPECT_EQ(differingFromReference(plan, 3, ownSettings),
            std::vector<std::string>());

  // Break it: "polar" pointed at configuration 0 (a valid plan whose
  // batches run its matrices with jordan's coefficients) no longer equals
  // the reference, in exactly polar's parameters.
  Plan wrong = plan;
  wrong.groups[polar].nsConfig = 0;
  wrong.matrices = muonMatrices(wrong.params, wrong.groups, wrong.ns);
  setRounds(wrong, wrong.rounds);
  ASSERT_TRUE(validatePlan(wrong).ok()) << json::describe(validatePlan(wrong));
  EXPECT_EQ(differingFromReference(wrong, 3, ownSettings),
            (std::vector<std::string>{"p1", "p2"}));
}

TEST(ParamGroups, NewtonSchulzGroupsOnFourRanksEqualOneDevice) {
  const Plan four = compileOn(nsGroupsModel(), 4);
  ASSERT_EQ(four.ns.configs.size(), 2u);
  EXPECT_EQ(runScheduled(four, 3), runScheduled(referencePlan(four), 3));
  // Ranks must agree on every configuration and on which group runs which.
  Plan other = four;
  other.ns.configs[1].coefficients[2][1] += 0.5;
  EXPECT_NE(planHash(four), planHash(other));
  other = four;
  other.groups[findGroup(other.groups, "again")].nsConfig = 1;
  EXPECT_NE(planHash(four), planHash(other));
}

TEST(ParamGroups, NewtonSchulzPrecisionIsThePlans) {
  // Groups may differ in steps, coefficients and eps, not in ns_dtype.
  mc::Model model = nsGroupsModel();
  model.groups[1].ns.nsDtype = "bf16";
  mc::DistributedConfig config = mc::createDTensorConfig({{2}, {"dp"}});
  Plan plan;
  std::string error;
  {
    auto compiled = mc::compile(model, &config);
    EXPECT_FALSE(compiled.ok());
    error = compiled.status().text();
  }
  EXPECT_NE(error.find("Muon groups 'jordan' and 'polar' differ in "
                       "'ns_dtype'; the Newton-Schulz precision is shared by "
                       "every Muon group"),
            std::string::npos)
      << error;
}

} // namespace
