//===- QkClipTest.cpp - QK-clip (MuonClip) through the runtime ------------===//
//
// MuonClip (Kimi K2, arXiv 2507.20534) against a reference written from
// the paper's rule on one rank: after the update, query head h with
// S_h > tau has its W_q rows times sqrt(tau / S_h), and its W_k rows too
// (a key head shared by several query heads: by the largest S of the
// group); other heads keep their bits. Then 2 and 4 ranks, each passing its
// own part of the logits, equal one rank bit for bit; bad logits and bad
// layers are refused with nothing changed.
//
//===----------------------------------------------------------------------===//
#include "OneRankOptimizer.h"
#include "PlanRead.h"
#include "muon/Compiler/Compile.h"
#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Validate.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/ElementMath.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/Optimizer.h"

#include "ElementSteps.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

using namespace muon;
using namespace muon::compiler;
using namespace muon::runtime;
using muon::testing::elementsOf;
using muon::testing::addParam;
using muon::testing::OneRank;
using muon::testing::randomValues;

namespace {

constexpr double kTau = 50;

/// Two attention layers: "gqa" (8 query heads of 4 rows, 2 key heads of 4
/// rows: 4 query heads per key head) and "mha" (3 heads of 8 rows), their
/// weights sharded by rows or columns so that heads straddle ranks, beside
/// a Muon matrix and an AdamW vector QK-clip leaves alone.
Model attentionModel() {
  Model model;
  addParam(model, "wq", {32, 16}, {Placement::shard(0)});
  addParam(model, "wk", {8, 16}, {Placement::shard(1)});
  addParam(model, "wq2", {24, 12}, {Placement::shard(0)});
  addParam(model, "wk2", {24, 12}, {});
  addParam(model, "mlp", {20, 12}, {Placement::shard(0)});
  addParam(model, "norm", {16}, {Placement::shard(0)});
  model.muon.setNumber("lr", 0.02);
  model.muon.ns.nsDtype = "f32";
  model.qkClip = {{"gqa", "wq", "wk", 8, 2, kTau},
                  {"mha", "wq2", "wk2", 3, 0, kTau}};
  return model;
}

Plan compileFor(const Model &model, int64_t world) {
  DistributedConfig config = createDTensorConfig({{world}, {"fsdp"}});
  Plan plan;
  std::string error;
  {
    auto compiled = compile(model, &config);
    EXPECT_TRUE(compiled.ok()) << compiled.status().text();
    if (compiled.ok())
      plan = std::move(compiled).value();
  }
  return plan;
}

/// Head h's largest logit in step `step`: some heads above tau, some
/// below, changing with the step.
std::vector<float> stepLogits(const QkClipLayer &layer, int64_t step) {
  std::vector<float> s(layer.numHeads);
  for (int64_t h = 0; h < layer.numHeads; ++h)
    s[h] = static_cast<float>((h + step) % 5 == 0 ? kTau * (1.5 + 0.7 * h)
                                                  : kTau * (0.2 + 0.1 * h));
  return s;
}

/// The box `box` of a row-major whole tensor of `shape` (1-D or 2-D).
std::vector<float> cut(const std::vector<float> &whole,
                       const std::vector<int64_t> &shape,
                       const std::vector<Range> &box) {
  std::vector<float> out;
  if (shape.size() == 1) {
    out.assign(whole.begin() + box[0].begin, whole.begin() + box[0].end);
    return out;
  }
  for (int64_t r = box[0].begin; r < box[0].end; ++r)
    for (int64_t c = box[1].begin; c < box[1].end; ++c)
      out.push_back(whole[r * shape[1] + c]);
  return out;
}

/// What every rank passes in step `step`: rank 0 the step's logits of the
/// even heads, rank 1 (or rank 0 alone) those of the odd heads, the others
/// lower values; the largest over ranks is stepLogits.
std::vector<float> rankLogits(const QkClipLayer &layer, int64_t step,
                              int64_t rank, int64_t world) {
  std::vector<float> s = stepLogits(layer, step);
  for (int64_t h = 0; h < layer.numHeads; ++h) {
    const int64_t holder = world == 1 ? 0 : h % 2;
    if (rank != holder)
      s[h] -= static_cast<float>(1 + rank + h);
  }
  return s;
}

struct WorldRun {
  std::vector<std::vector<float>> whole; // per parameter, after the steps
  std::vector<int64_t> clipped;          // per step (rank 0's)
  std::string error;
};

/// `steps` steps of `plan` on ranks as threads, from the same whole values
/// and gradients whatever the world size, each rank passing rankLogits.
WorldRun runWorld(const Plan &plan, int64_t steps) {
  const int64_t world = plan.worldSize;
  WorldRun out;
  out.whole.resize(plan.params.size());
  std::mutex lock;
  LocalWorld local(world);
  std::vector<std::thread> ranks;
  for (int64_t rank = 0; rank < world; ++rank)
    ranks.emplace_back([&, rank] {
      LocalCommunicator comm(local, rank);
      cpu::CpuDevice device;
      std::unique_ptr<Optimizer> opt;
      auto fail = [&](const std::string &what) {
        std::lock_guard<std::mutex> g(lock);
        if (out.error.empty())
          out.error = "rank " + std::to_string(rank) + ": " + what;
      };
      if (Status s = Optimizer::create(plan, comm, device, {}, opt); !s.ok())
        return fail(s.message());
      const size_t n = plan.params.size();
      std::vector<std::vector<float>> values(n), grads(n);
      for (size_t i = 0; i < n; ++i) {
        const ParamSlot &slot = opt->params()[i];
        if (!slot.elements)
          continue;
        const auto &shape = plan.params[i].layout.shape;
        values[i] =
            cut(randomValues(elementsOf(shape), 100 + i), shape, slot.box);
        grads[i].resize(values[i].size());
        if (!opt->bind(slot.name, values[i].data(), grads[i].data(), DType::F32,
                       slot.elements)
                 .ok())
          return fail("bind " + slot.name);
      }
      for (int64_t step = 0; step < steps; ++step) {
        for (size_t i = 0; i < n; ++i)
          if (!grads[i].empty()) {
            const auto &shape = plan.params[i].layout.shape;
            // Into the bound storage (an assignment would move it).
            std::vector<float> g =
                cut(randomValues(elementsOf(shape), 1000 * (step + 1) + i),
                    shape, opt->params()[i].box);
            std::copy(g.begin(), g.end(), grads[i].begin());
          }
        for (const QkClipLayer &layer : plan.qkClip) {
          std::vector<float> s = rankLogits(layer, step, rank, world);
          if (Status st = opt->setQkMaxLogits(layer.name, s.data(), s.size());
              !st.ok())
            return fail(st.message());
        }
        StepResult result;
        if (Status st = opt->step(result); !st.ok() || !result.applied)
          return fail("step: " + st.message());
        if (rank == 0)
          out.clipped.push_back(result.qkClippedHeads);
      }
      for (size_t i = 0; i < n; ++i) {
        std::vector<float> whole(elementsOf(plan.params[i].layout.shape));
        if (Status st = opt->gatherParameter(plan.params[i].name, whole.data());
            !st.ok())
          return fail(st.message());
        if (rank == 0)
          out.whole[i] = std::move(whole);
      }
    });
  for (std::thread &t : ranks)
    t.join();
  return out;
}

/// The paper's rule on one whole weight, in double: row r of head
/// r / (rows / heads) times sqrt(tau / S) where S > tau, S the head's
/// largest logit (for a key head shared by g query heads, the largest of
/// theirs).
std::vector<double> referenceClip(const std::vector<float> &w, int64_t rows,
                                  int64_t heads,
                                  const std::vector<float> &queryLogits) {
  const int64_t cols = static_cast<int64_t>(w.size()) / rows;
  const int64_t group = static_cast<int64_t>(queryLogits.size()) / heads;
  std::vector<double> out(w.begin(), w.end());
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t head = r / (rows / heads);
    double s = -std::numeric_limits<double>::infinity();
    for (int64_t h = head * group; h < (head + 1) * group; ++h)
      s = std::max(s, static_cast<double>(queryLogits[h]));
    if (s > kTau)
      for (int64_t c = 0; c < cols; ++c)
        out[r * cols + c] *= std::sqrt(kTau / s);
  }
  return out;
}

} // namespace

TEST(QkClip, OneRankMatchesTheRuleOfThePaper) {
  // Two optimizers on the same gradients and values before every step: A
  // gets no logits (no clip), B the step's; B's values must be the
  // reference's clip of A's, and the momentum is untouched (the next
  // step's A starts from B's values).
  Plan plan = compileFor(attentionModel(), 1);
  ASSERT_EQ(plan.qkClip.size(), 2u);
  OneRank a(plan), b(plan);
  ASSERT_TRUE(a.opt && b.opt);
  std::map<std::string, int64_t> keptRows, scaledRows;
  for (int64_t step = 0; step < 3; ++step) {
    a.setGrads(plan, step);
    b.setGrads(plan, step);
    a.values = b.values;
    for (size_t i = 0; i < plan.params.size(); ++i) // rebind A's copies
      ASSERT_TRUE(a.opt
                      ->bind(plan.params[i].name, a.values[i].data(),
                             a.grads[i].data(), DType::F32, a.values[i].size())
                      .ok());
    int64_t expectClipped = 0;
    for (const QkClipLayer &layer : plan.qkClip) {
      std::vector<float> s = stepLogits(layer, step);
      for (float x : s)
        expectClipped += x > kTau;
      ASSERT_TRUE(b.opt->setQkMaxLogits(layer.name, s.data(), s.size()).ok());
    }
    StepResult ra, rb;
    ASSERT_TRUE(a.opt->step(ra).ok());
    ASSERT_TRUE(b.opt->step(rb).ok());
    EXPECT_EQ(ra.qkClippedHeads, 0);
    EXPECT_EQ(rb.qkClippedHeads, expectClipped) << "step " << step;
    std::map<std::string, std::pair<const QkClipLayer *, bool>> role;
    for (const QkClipLayer &layer : plan.qkClip) {
      role[layer.query] = {&layer, true};
      role[layer.key] = {&layer, false};
    }
    for (size_t i = 0; i < plan.params.size(); ++i) {
      const std::string &name = plan.params[i].name;
      auto it = role.find(name);
      if (it == role.end()) {
        EXPECT_EQ(a.values[i], b.values[i]) << name << " is not clipped";
        continue;
      }
      const QkClipLayer &layer = *it->second.first;
      const int64_t rows = plan.params[i].layout.shape[0];
      const int64_t heads =
          it->second.second ? layer.numHeads : layer.numKvHeads;
      std::vector<double> want =
          referenceClip(a.values[i], rows, heads, stepLogits(layer, step));
      int64_t scaled = 0, kept = 0;
      for (size_t e = 0; e < want.size(); ++e) {
        if (want[e] == a.values[i][e]) {
          // Heads at or below the threshold keep their bits.
          EXPECT_EQ(b.values[i][e], a.values[i][e]) << name << " " << e;
          ++kept;
        } else {
          EXPECT_NEAR(b.values[i][e], want[e], 1e-6 * std::abs(want[e]))
              << name << " " << e << " step " << step;
          ++scaled;
        }
      }
      // Over the steps, the logits clip some rows of every weight and spare
      // others (a GQA key head is spared only when all 4 of its query heads
      // are).
      scaledRows[name] += scaled;
      keptRows[name] += kept;
    }
    // Momentum is not QK-clip's business.
    StateDict da, db;
    ASSERT_TRUE(a.opt->stateDict(false, da).ok());
    ASSERT_TRUE(b.opt->stateDict(false, db).ok());
    for (size_t p = 0; p < da.pieces.size(); ++p)
      EXPECT_EQ(da.pieces[p].states, db.pieces[p].states);
  }
  for (const char *name : {"wq", "wk", "wq2", "wk2"})
    EXPECT_TRUE(keptRows[name] > 0 && scaledRows[name] > 0) << name;
}

TEST(QkClip, TwoAndFourRanksEqualOneBitForBit) {
  Model model = attentionModel();
  WorldRun one = runWorld(compileFor(model, 1), 3);
  ASSERT_EQ(one.error, "");
  // And the clip ran: without logits the values differ.
  Model plain = model;
  plain.qkClip.clear();
  WorldRun unclipped = runWorld(compileFor(plain, 1), 3);
  ASSERT_EQ(unclipped.error, "");
  EXPECT_NE(unclipped.whole[0], one.whole[0]);
  EXPECT_EQ(unclipped.whole[4], one.whole[4]); // mlp: no attention weight
  for (int64_t world : {2, 4}) {
    WorldRun r = runWorld(compileFor(model, world), 3);
    ASSERT_EQ(r.error, "") << world << " ranks";
    EXPECT_EQ(r.clipped, one.clipped) << world << " ranks";
    bool equal = r.whole == one.whole;
    EXPECT_TRUE(equal) << world << " ranks";
    std::printf("QK-clip: %lld ranks equal one rank bit for bit: %s (heads "
                "clipped per step: %lld %lld %lld)\n",
                static_cast<long long>(world), equal ? "yes" : "NO",
                static_cast<long long>(r.clipped[0]),
                static_cast<long long>(r.clipped[1]),
                static_cast<long long>(r.clipped[2]));
  }
}

TEST(QkClip, BadLogitsAreRefusedWithNothingChanged) {
  Plan plan = compileFor(attentionModel(), 1);
  OneRank a(plan), b(plan);
  ASSERT_TRUE(a.opt && b.opt);
  a.setGrads(plan, 0);
  b.setGrads(plan, 0);
  std::vector<float> gqa = stepLogits(plan.qkClip[0], 0);
  ASSERT_TRUE(a.opt->setQkMaxLogits("gqa", gqa.data(), gqa.size()).ok());
  ASSERT_TRUE(b.opt->setQkMaxLogits("gqa", gqa.data(), gqa.size()).ok());
  // Each refused on B, naming what is wrong, and leaving the logits set
  // before as they were.
  std::vector<float> nan = gqa;
  nan[5] = std::nanf("");
  std::vector<float> inf = gqa;
  inf[0] = std::numeric_limits<float>::infinity();
  struct Case {
    std::string layer;
    std::vector<float> logits;
    std::string says;
  } cases[] = {
      {"attn9", gqa,
       "no layer named 'attn9'; the plan's layers are 'gqa', "
       "'mha'"},
      {"gqa", std::vector<float>(7, 1.0f),
       "layer 'gqa' has 8 query heads but 7 logits were given"},
      {"gqa", std::vector<float>(2, 1000.0f),
       "layer 'gqa' has 8 query heads but 2 logits were given"},
      {"gqa", nan, "the logit of head 5 is not finite"},
      {"gqa", inf, "the logit of head 0 is not finite"},
  };
  for (const Case &c : cases) {
    Status s = b.opt->setQkMaxLogits(c.layer, c.logits.data(), c.logits.size());
    EXPECT_EQ(s.code(), StatusCode::InvalidArgument) << c.says;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << s.message();
  }
  StepResult ra, rb;
  ASSERT_TRUE(a.opt->step(ra).ok());
  ASSERT_TRUE(b.opt->step(rb).ok());
  EXPECT_GT(rb.qkClippedHeads, 0);
  EXPECT_EQ(ra.qkClippedHeads, rb.qkClippedHeads);
  EXPECT_EQ(a.values, b.values);
  // The logits held for that step only: the next clips nothing.
  ASSERT_TRUE(b.opt->step(rb).ok());
  EXPECT_EQ(rb.qkClippedHeads, 0);

  // A plan without QK-clip refuses logits, saying it has no layers.
  Model plain = attentionModel();
  plain.qkClip.clear();
  Plan none = compileFor(plain, 1);
  EXPECT_TRUE(none.qkClip.empty());
  OneRank c(none);
  Status s = c.opt->setQkMaxLogits("gqa", gqa.data(), gqa.size());
  EXPECT_NE(s.message().find("the plan has no qk_clip layers"),
            std::string::npos)
      << s.message();
}

TEST(QkClip, ARefusedStepKeepsTheLogitsAndASkippedOneDropsThem) {
  Plan plan = compileFor(attentionModel(), 1);
  std::vector<float> gqa = stepLogits(plan.qkClip[0], 0);
  int64_t above = 0;
  for (float x : gqa)
    above += x > kTau;
  ASSERT_GT(above, 0);
  {
    // Non-finite gradients: the step is skipped, the logits go with it.
    OneRank b(plan);
    ASSERT_TRUE(b.opt);
    ASSERT_TRUE(b.opt->setQkMaxLogits("gqa", gqa.data(), gqa.size()).ok());
    b.setGrads(plan, 0);
    b.grads[0][3] = std::numeric_limits<float>::infinity();
    std::vector<std::vector<float>> before = b.values;
    StepResult r;
    ASSERT_TRUE(b.opt->step(r).ok());
    EXPECT_FALSE(r.applied);
    EXPECT_EQ(b.values, before);
    b.setGrads(plan, 0);
    ASSERT_TRUE(b.opt->step(r).ok());
    EXPECT_TRUE(r.applied);
    EXPECT_EQ(r.qkClippedHeads, 0);
  }
  // A step refused (a parameter not bound) changes nothing and keeps them
  // for the step that runs.
  SingleRankCommunicator comm;
  cpu::CpuDevice device;
  std::unique_ptr<Optimizer> opt;
  ASSERT_TRUE(Optimizer::create(plan, comm, device, {}, opt).ok());
  ASSERT_TRUE(opt->setQkMaxLogits("gqa", gqa.data(), gqa.size()).ok());
  StepResult r;
  EXPECT_EQ(opt->step(r).code(), StatusCode::FailedPrecondition);
  std::vector<std::vector<float>> values, grads;
  for (const PlanParam &p : plan.params) {
    int64_t n = elementsOf(p.layout.shape);
    values.push_back(randomValues(n, 7));
    grads.push_back(randomValues(n, 8));
  }
  for (size_t i = 0; i < plan.params.size(); ++i)
    ASSERT_TRUE(opt->bind(plan.params[i].name, values[i].data(),
                          grads[i].data(), DType::F32, values[i].size())
                    .ok());
  ASSERT_TRUE(opt->step(r).ok());
  EXPECT_TRUE(r.applied);
  EXPECT_EQ(r.qkClippedHeads, above);
}

TEST(QkClip, PlansCarryTheLayersAndTheValidatorChecksThem) {
  Plan plan = compileFor(attentionModel(), 2);
  std::string text = renderPlan(plan);
  Plan back;
  std::string error;
  ASSERT_TRUE(take(parsePlan(text), back, error)) << error;
  ASSERT_EQ(back.qkClip.size(), 2u);
  EXPECT_EQ(back.qkClip[0].query, "wq");
  EXPECT_EQ(back.qkClip[0].numKvHeads, 2);
  EXPECT_EQ(back.qkClip[1].numKvHeads, 3);
  EXPECT_EQ(back.qkClip[1].threshold, kTau);
  EXPECT_EQ(renderPlan(back), text);
  // The binary format: version 3 with the layers, whole and sliced.
  std::string bytes = renderPlanBinary(plan);
  ASSERT_TRUE(take(parsePlanBinary(bytes), back, error)) << error;
  EXPECT_EQ(renderPlan(back), text);
  Plan slice;
  ASSERT_TRUE(take(parsePlanSlice(bytes, 1), slice, error)) << error;
  ASSERT_EQ(slice.qkClip.size(), 2u);
  EXPECT_EQ(slice.qkClip[1].key, "wk2");
  EXPECT_TRUE(validatePlanSlice(slice).ok())
      << json::describe(validatePlanSlice(slice));
  // Without layers the plan has no qk_clip key at all, and the binary
  // plan is version 2 as before.
  Model plain = attentionModel();
  plain.qkClip.clear();
  Plan plainPlan = compileFor(plain, 2);
  EXPECT_EQ(renderPlan(plainPlan).find("qk_clip"), std::string::npos);
  EXPECT_EQ(bytes[8], 3);
  EXPECT_EQ(renderPlanBinary(plainPlan)[8], 2);
  struct Case {
    void (*edit)(QkClipLayer &);
    std::string path, says;
  } cases[] = {
      {[](QkClipLayer &l) { l.numHeads = 5; }, "qk_clip[0].num_kv_heads",
       "expected a divisor of num_heads (5), got 2"},
      {[](QkClipLayer &l) { l.numHeads = 6, l.numKvHeads = 3; },
       "qk_clip[0].query", "has 32 rows, not a multiple of its 6 heads"},
      {[](QkClipLayer &l) { l.key = "nope"; }, "qk_clip[0].key",
       "no parameter named 'nope'"},
      {[](QkClipLayer &l) { l.key = "norm"; }, "qk_clip[0].key", "has 1 dims"},
      {[](QkClipLayer &l) { l.threshold = 0; }, "qk_clip[0].threshold",
       "expected a finite number > 0, got 0"},
  };
  for (const Case &c : cases) {
    Plan bad = plan;
    c.edit(bad.qkClip[0]);
    Status e = validatePlan(bad);
    EXPECT_EQ(e.location(), c.path) << json::describe(e);
    EXPECT_NE(e.message().find(c.says), std::string::npos) << json::describe(e);
  }
  // The compiler refuses the same, naming the spec's JSON path.
  Model bad = attentionModel();
  bad.qkClip[1].numHeads = 5;
  bad.qkClip[1].numKvHeads = 5;
  Plan out;
  DistributedConfig config = createDTensorConfig({{2}, {"fsdp"}});
  {
    auto compiled = compile(bad, &config);
    EXPECT_FALSE(compiled.ok());
    error = compiled.status().text();
  }
  EXPECT_NE(error.find("qk_clip.layers[1].query"), std::string::npos) << error;
  EXPECT_NE(error.find("24 rows, not a multiple of its 5 heads"),
            std::string::npos)
      << error;
}

TEST(QkClip, RowsOfEveryStorageTypeAreScaledAndRounded) {
  // A piece stored as bf16, f16 or f32: a clipped row is each value times
  // the factor in f32, rounded to the storage type; a row with factor 1
  // keeps its bits.
  cpu::CpuDevice device;
  const int64_t rows = 3, cols = 5;
  const float factors[rows] = {qkClipFactor(kTau, 4 * kTau), 1.0f,
                               qkClipFactor(kTau, 1.7 * kTau)};
  EXPECT_EQ(factors[0], 0.5f);
  EXPECT_EQ(qkClipFactor(kTau, kTau), 1.0f); // at the threshold: untouched
  for (DType type : {DType::BF16, DType::F16, DType::F32}) {
    std::vector<float> start = randomValues(rows * cols, 5);
    std::vector<char> stored(rows * cols * dtypeBytes(type));
    for (int64_t e = 0; e < rows * cols; ++e)
      storeAs(stored.data(), type, e, start[e]);
    const std::vector<char> before = stored;
    calls::runQkClip(device, stored.data(), type, rows, cols, factors,
                       PlanGroup(kMuon));
    for (int64_t e = 0; e < rows * cols; ++e) {
      const float was = loadAs(before.data(), type, e);
      const float want = roundTo(type, was * factors[e / cols]);
      EXPECT_EQ(loadAs(stored.data(), type, e), want)
          << dtypeName(type) << " " << e;
    }
    const size_t rowBytes = cols * dtypeBytes(type);
    EXPECT_EQ(std::memcmp(stored.data() + rowBytes, before.data() + rowBytes,
                          rowBytes),
              0)
        << dtypeName(type);
  }
}
