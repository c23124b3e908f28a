//===- PlanFile.cpp - The plan file (muon-plan/1) -------------------------===//
#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Schedule.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

namespace muon {
namespace json = llvm::json;

namespace {
const char *phaseName(Exchange::Phase p) {
  switch (p) {
  case Exchange::Phase::Gather:
    return "gather";
  case Exchange::Phase::Scatter:
    return "scatter";
  case Exchange::Phase::Reduce:
    return "reduce";
  }
  return "?";
}
const char *stepName(ScheduleStep::Kind k) {
  switch (k) {
  case ScheduleStep::Kind::Start:
    return "start";
  case ScheduleStep::Kind::Done:
    return "done";
  case ScheduleStep::Kind::NewtonSchulz:
    return "ns";
  case ScheduleStep::Kind::Momentum:
    return "momentum";
  case ScheduleStep::Kind::ApplyUpdate:
    return "apply";
  case ScheduleStep::Kind::AdamW:
    return "adamw";
  }
  return "?";
}
} // namespace

std::string renderPlan(const Plan &plan) {
  // Streamed: a large plan (a million transfers) never exists as a tree.
  std::string text;
  llvm::raw_string_ostream os(text);
  json::OStream j(os);
  auto ints = [&](const std::vector<int64_t> &v) {
    j.array([&] {
      for (int64_t x : v)
        j.value(x);
    });
  };
  j.object([&] {
    j.attribute("format", "muon-plan/1");
    j.attribute("world_size", plan.worldSize);
    j.attribute("wire_dtype", plan.wireDtype);
    j.attribute("distributed", plan.distributed);
    j.attribute("async", plan.async);
    j.attribute("prefetch_count", plan.prefetchCount);
    j.attribute("inflight_limit", plan.inflightLimit);
    j.attribute("gather_budget_bytes", plan.gatherBudgetBytes);
    j.attributeObject("mesh", [&] {
      j.attributeBegin("shape");
      ints(plan.mesh.shape);
      j.attributeEnd();
      j.attributeBegin("devices");
      ints(plan.mesh.devices);
      j.attributeEnd();
    });
    j.attributeObject("optimizer", [&] {
      j.attribute("lr", plan.muon.lr);
      j.attribute("weight_decay", plan.muon.weightDecay);
      j.attribute("momentum", plan.muon.momentum);
      j.attribute("nesterov", plan.muon.nesterov);
      j.attribute("ns_steps", plan.muon.nsSteps);
      j.attributeArray("ns_coefficients", [&] {
        for (const auto &abc : plan.muon.coefficients)
          j.array([&] {
            for (double x : abc)
              j.value(x);
          });
      });
      j.attribute("eps", plan.muon.eps);
      j.attribute("adjust_lr", plan.muon.adjustLr);
    });
    j.attributeObject("adamw", [&] {
      j.attribute("lr", plan.adamw.lr);
      j.attributeArray("betas", [&] {
        j.value(plan.adamw.beta1);
        j.value(plan.adamw.beta2);
      });
      j.attribute("eps", plan.adamw.eps);
      j.attribute("weight_decay", plan.adamw.weightDecay);
    });
    j.attributeArray("params", [&] {
      for (const PlanParam &p : plan.params)
        j.object([&] {
          j.attribute("name", p.name);
          j.attributeBegin("shape");
          ints(p.layout.shape);
          j.attributeEnd();
          j.attribute("dtype", p.dtype);
          j.attribute("group", p.muon ? "muon" : "adamw");
          j.attributeArray("split", [&] {
            for (const auto &axes : p.layout.splitAxes)
              ints(axes);
          });
          j.attributeBegin("partial");
          ints(p.layout.partialAxes);
          j.attributeEnd();
          j.attributeArray("only", [&] {
            for (auto [axis, coord] : p.layout.only)
              ints({axis, coord});
          });
        });
    });
    j.attributeArray("matrices", [&] {
      for (const PlanMatrix &m : plan.matrices)
        j.object([&] {
          j.attribute("param", m.paramIndex);
          j.attribute("slice", m.slice);
          j.attribute("rows", m.rows);
          j.attribute("cols", m.cols);
          j.attribute("owner", m.owner);
          j.attribute("ns_flops", m.nsFlops);
        });
    });
    j.attributeArray("rounds", [&] {
      for (const auto &r : plan.rounds)
        ints(r);
    });
    j.attributeArray("exchanges", [&] {
      for (const Exchange &ex : plan.exchanges)
        j.object([&] {
          j.attribute("phase", phaseName(ex.phase));
          j.attribute("round", ex.round);
          j.attributeArray("transfers", [&] {
            for (const Transfer &t : ex.transfers)
              ints({t.src, t.dst, t.matrix, t.rows.begin, t.rows.end,
                    t.cols.begin, t.cols.end, t.summand});
          });
          j.attributeArray("reductions", [&] {
            for (const Reduction &r : ex.reductions)
              ints({r.src, r.dst, r.param, r.summand, r.elements});
          });
        });
    });
    j.attributeArray("schedule", [&] {
      for (const ScheduleStep &s : plan.schedule)
        j.array([&] {
          j.value(stepName(s.kind));
          j.value(s.index);
        });
    });
    std::vector<std::vector<RankExchangeView>> views;
    for (const Exchange &ex : plan.exchanges)
      views.push_back(rankExchangeViews(ex, plan.worldSize));
    j.attributeArray("ranks", [&] {
      for (int64_t r = 0; r < plan.worldSize; ++r)
        j.object([&] {
          j.attribute("rank", r);
          j.attributeArray("ns_batches", [&] {
            if (r < static_cast<int64_t>(plan.nsBatches.size()))
              for (const NsBatch &b : plan.nsBatches[r])
                j.object([&] {
                  j.attribute("round", b.round);
                  j.attribute("rows", b.rows);
                  j.attribute("cols", b.cols);
                  j.attributeBegin("matrices");
                  ints(b.matrices);
                  j.attributeEnd();
                });
          });
          auto slices = [&](const std::vector<PeerSlice> &list) {
            j.array([&] {
              for (const PeerSlice &s : list)
                ints({s.peer, s.elements, s.offset});
            });
          };
          j.attributeArray("exchanges", [&] {
            for (const auto &perRank : views)
              j.object([&] {
                j.attributeBegin("send");
                slices(perRank[r].send);
                j.attributeEnd();
                j.attributeBegin("recv");
                slices(perRank[r].recv);
                j.attributeEnd();
              });
          });
        });
    });
  });
  os << "\n";
  return text;
}

namespace {
/// Typed access with JSON paths in the errors; the first error sticks.
struct Reader {
  std::string error;
  bool ok() const { return error.empty(); }
  void fail(const std::string &path, const std::string &what) {
    if (error.empty())
      error = path + ": " + what;
  }
  const json::Object *object(const json::Value *v, const std::string &path) {
    const json::Object *o = v ? v->getAsObject() : nullptr;
    if (!o)
      fail(path, v ? "expected an object" : "missing");
    return o;
  }
  const json::Array *array(const json::Value *v, const std::string &path) {
    const json::Array *a = v ? v->getAsArray() : nullptr;
    if (!a)
      fail(path, v ? "expected an array" : "missing");
    return a;
  }
  int64_t integer(const json::Value *v, const std::string &path,
                  int64_t min = INT64_MIN, int64_t max = INT64_MAX) {
    std::optional<int64_t> i = v ? v->getAsInteger() : std::nullopt;
    if (!i) {
      fail(path, v ? "expected an integer" : "missing");
      return 0;
    }
    if (*i < min || *i > max) {
      fail(path, "value " + std::to_string(*i) + " out of range [" +
                     std::to_string(min) + ", " + std::to_string(max) + "]");
      return 0;
    }
    return *i;
  }
  double number(const json::Value *v, const std::string &path) {
    std::optional<double> d = v ? v->getAsNumber() : std::nullopt;
    if (!d)
      fail(path, v ? "expected a number" : "missing");
    return d.value_or(0);
  }
  bool boolean(const json::Value *v, const std::string &path) {
    std::optional<bool> b = v ? v->getAsBoolean() : std::nullopt;
    if (!b)
      fail(path, v ? "expected true or false" : "missing");
    return b.value_or(false);
  }
  std::string string(const json::Value *v, const std::string &path) {
    std::optional<llvm::StringRef> s = v ? v->getAsString() : std::nullopt;
    if (!s)
      fail(path, v ? "expected a string" : "missing");
    return s ? s->str() : "";
  }
  std::vector<int64_t> ints(const json::Value *v, const std::string &path,
                            int64_t min = INT64_MIN,
                            int64_t max = INT64_MAX) {
    std::vector<int64_t> out;
    if (const json::Array *a = array(v, path))
      for (size_t i = 0; i < a->size() && ok(); ++i)
        out.push_back(integer(&(*a)[i], path + "[" + std::to_string(i) + "]",
                              min, max));
    return out;
  }
};
std::string at(const std::string &path, size_t i) {
  return path + "[" + std::to_string(i) + "]";
}
} // namespace

bool parsePlan(const std::string &text, Plan &plan, std::string &error) {
  llvm::Expected<json::Value> parsed = json::parse(text);
  if (!parsed) {
    error = "invalid JSON: " + llvm::toString(parsed.takeError());
    return false;
  }
  Reader rd;
  const json::Object *root = rd.object(&*parsed, "<root>");
  if (!root) {
    error = rd.error;
    return false;
  }
  if (rd.string(root->get("format"), "format") != "muon-plan/1" && rd.ok())
    rd.fail("format", "expected \"muon-plan/1\"");
  plan = Plan();
  plan.worldSize = rd.integer(root->get("world_size"), "world_size", 1);
  plan.wireDtype = rd.string(root->get("wire_dtype"), "wire_dtype");
  plan.wireBytes = wireDtypeBytes(plan.wireDtype);
  if (rd.ok() && !plan.wireBytes)
    rd.fail("wire_dtype", "expected \"f32\" or \"bf16\"");
  plan.distributed = rd.boolean(root->get("distributed"), "distributed");
  plan.async = rd.boolean(root->get("async"), "async");
  plan.prefetchCount =
      rd.integer(root->get("prefetch_count"), "prefetch_count", 0);
  plan.inflightLimit =
      rd.integer(root->get("inflight_limit"), "inflight_limit", 1);
  plan.gatherBudgetBytes =
      rd.integer(root->get("gather_budget_bytes"), "gather_budget_bytes", 0);
  int64_t world = plan.worldSize;

  if (const json::Object *mesh = rd.object(root->get("mesh"), "mesh")) {
    plan.mesh.shape = rd.ints(mesh->get("shape"), "mesh.shape", 1);
    plan.mesh.devices =
        rd.ints(mesh->get("devices"), "mesh.devices", 0, world - 1);
    if (rd.ok() && plan.mesh.numDevices() != world)
      rd.fail("mesh.shape", "does not multiply to world_size");
  }
  if (const json::Object *o = rd.object(root->get("optimizer"), "optimizer")) {
    plan.muon.lr = rd.number(o->get("lr"), "optimizer.lr");
    plan.muon.weightDecay =
        rd.number(o->get("weight_decay"), "optimizer.weight_decay");
    plan.muon.momentum = rd.number(o->get("momentum"), "optimizer.momentum");
    plan.muon.nesterov = rd.boolean(o->get("nesterov"), "optimizer.nesterov");
    plan.muon.nsSteps =
        rd.integer(o->get("ns_steps"), "optimizer.ns_steps", 1, 99);
    plan.muon.eps = rd.number(o->get("eps"), "optimizer.eps");
    plan.muon.adjustLr = rd.string(o->get("adjust_lr"), "optimizer.adjust_lr");
    if (const json::Array *rows =
            rd.array(o->get("ns_coefficients"), "optimizer.ns_coefficients")) {
      for (size_t i = 0; i < rows->size() && rd.ok(); ++i) {
        std::string path = at("optimizer.ns_coefficients", i);
        const json::Array *row = rd.array(&(*rows)[i], path);
        if (row && row->size() != 3)
          rd.fail(path, "expected [a, b, c]");
        if (row && rd.ok())
          plan.muon.coefficients.push_back(
              {rd.number(&(*row)[0], at(path, 0)),
               rd.number(&(*row)[1], at(path, 1)),
               rd.number(&(*row)[2], at(path, 2))});
      }
      if (rd.ok() &&
          static_cast<int64_t>(plan.muon.coefficients.size()) !=
              plan.muon.nsSteps)
        rd.fail("optimizer.ns_coefficients", "expected one row per NS step");
    }
  }
  if (const json::Object *o = rd.object(root->get("adamw"), "adamw")) {
    plan.adamw.lr = rd.number(o->get("lr"), "adamw.lr");
    plan.adamw.eps = rd.number(o->get("eps"), "adamw.eps");
    plan.adamw.weightDecay =
        rd.number(o->get("weight_decay"), "adamw.weight_decay");
    if (const json::Array *b = rd.array(o->get("betas"), "adamw.betas")) {
      if (b->size() != 2)
        rd.fail("adamw.betas", "expected [beta1, beta2]");
      else {
        plan.adamw.beta1 = rd.number(&(*b)[0], "adamw.betas[0]");
        plan.adamw.beta2 = rd.number(&(*b)[1], "adamw.betas[1]");
      }
    }
  }
  int64_t meshRank = plan.mesh.rank();
  if (const json::Array *ps = rd.array(root->get("params"), "params"))
    for (size_t i = 0; i < ps->size() && rd.ok(); ++i) {
      std::string path = at("params", i);
      const json::Object *o = rd.object(&(*ps)[i], path);
      if (!o)
        break;
      PlanParam p;
      p.name = rd.string(o->get("name"), path + ".name");
      p.dtype = rd.string(o->get("dtype"), path + ".dtype");
      p.muon = rd.string(o->get("group"), path + ".group") == "muon";
      p.layout.shape = rd.ints(o->get("shape"), path + ".shape", 1);
      if (const json::Array *split = rd.array(o->get("split"), path + ".split"))
        for (size_t d = 0; d < split->size() && rd.ok(); ++d)
          p.layout.splitAxes.push_back(rd.ints(
              &(*split)[d], at(path + ".split", d), 0, meshRank - 1));
      if (rd.ok() && p.layout.splitAxes.size() != p.layout.shape.size())
        rd.fail(path + ".split", "expected one entry per dim");
      p.layout.partialAxes =
          rd.ints(o->get("partial"), path + ".partial", 0, meshRank - 1);
      if (const json::Array *only = rd.array(o->get("only"), path + ".only"))
        for (size_t k = 0; k < only->size() && rd.ok(); ++k) {
          std::vector<int64_t> pair =
              rd.ints(&(*only)[k], at(path + ".only", k), 0);
          if (rd.ok() && (pair.size() != 2 || pair[0] >= meshRank ||
                          pair[1] >= plan.mesh.shape[pair[0]]))
            rd.fail(at(path + ".only", k), "expected [axis, coordinate]");
          else if (rd.ok())
            p.layout.only.push_back({pair[0], pair[1]});
        }
      plan.params.push_back(std::move(p));
    }
  int64_t numParams = plan.params.size();
  if (const json::Array *ms = rd.array(root->get("matrices"), "matrices"))
    for (size_t i = 0; i < ms->size() && rd.ok(); ++i) {
      std::string path = at("matrices", i);
      const json::Object *o = rd.object(&(*ms)[i], path);
      if (!o)
        break;
      PlanMatrix m;
      m.paramIndex =
          rd.integer(o->get("param"), path + ".param", 0, numParams - 1);
      if (rd.ok())
        m.param = plan.params[m.paramIndex].name;
      m.slice = rd.integer(o->get("slice"), path + ".slice", -1);
      m.rows = rd.integer(o->get("rows"), path + ".rows", 1);
      m.cols = rd.integer(o->get("cols"), path + ".cols", 1);
      m.owner = rd.integer(o->get("owner"), path + ".owner", -1, world - 1);
      m.nsFlops = rd.integer(o->get("ns_flops"), path + ".ns_flops", 0);
      plan.matrices.push_back(std::move(m));
    }
  int64_t numMatrices = plan.matrices.size();
  if (const json::Array *rs = rd.array(root->get("rounds"), "rounds"))
    for (size_t i = 0; i < rs->size() && rd.ok(); ++i)
      plan.rounds.push_back(
          rd.ints(&(*rs)[i], at("rounds", i), 0, numMatrices - 1));
  if (const json::Array *es = rd.array(root->get("exchanges"), "exchanges"))
    for (size_t e = 0; e < es->size() && rd.ok(); ++e) {
      std::string path = at("exchanges", e);
      const json::Object *o = rd.object(&(*es)[e], path);
      if (!o)
        break;
      Exchange ex;
      std::string phase = rd.string(o->get("phase"), path + ".phase");
      if (rd.ok() && phase != "gather" && phase != "scatter" &&
          phase != "reduce")
        rd.fail(path + ".phase",
                "expected \"gather\", \"scatter\" or \"reduce\"");
      ex.phase = phase == "gather"    ? Exchange::Phase::Gather
                 : phase == "scatter" ? Exchange::Phase::Scatter
                                      : Exchange::Phase::Reduce;
      ex.round = rd.integer(o->get("round"), path + ".round", 0);
      if (const json::Array *ts =
              rd.array(o->get("transfers"), path + ".transfers"))
        for (size_t k = 0; k < ts->size() && rd.ok(); ++k) {
          std::string tpath = at(path + ".transfers", k);
          std::vector<int64_t> v = rd.ints(&(*ts)[k], tpath, -1);
          if (!rd.ok())
            break;
          if (v.size() != 8) {
            rd.fail(tpath, "expected [src, dst, matrix, row_begin, row_end, "
                           "col_begin, col_end, summand]");
            break;
          }
          Transfer t{v[0], v[1], v[2], {v[3], v[4]}, {v[5], v[6]}, v[7]};
          bool valid = t.src >= 0 && t.src < world && t.dst >= 0 &&
                       t.dst < world && t.src != t.dst && t.matrix >= 0 &&
                       t.matrix < numMatrices;
          if (valid) {
            const PlanMatrix &m = plan.matrices[t.matrix];
            valid = 0 <= t.rows.begin && t.rows.begin < t.rows.end &&
                    t.rows.end <= m.rows && 0 <= t.cols.begin &&
                    t.cols.begin < t.cols.end && t.cols.end <= m.cols &&
                    t.summand >= 0;
          }
          if (!valid)
            rd.fail(tpath, "ranks, matrix or box out of range");
          ex.transfers.push_back(t);
        }
      if (const json::Array *rs =
              rd.array(o->get("reductions"), path + ".reductions"))
        for (size_t k = 0; k < rs->size() && rd.ok(); ++k) {
          std::string rpath = at(path + ".reductions", k);
          std::vector<int64_t> v = rd.ints(&(*rs)[k], rpath, 0);
          if (!rd.ok())
            break;
          if (v.size() != 5 || v[0] >= world || v[1] >= world ||
              v[0] == v[1] || v[2] >= numParams || v[4] < 1) {
            rd.fail(rpath, "expected [src, dst, param, summand, elements] "
                           "in range");
            break;
          }
          ex.reductions.push_back({v[0], v[1], v[2], v[3], v[4]});
        }
      plan.exchanges.push_back(std::move(ex));
    }
  if (const json::Array *ss = rd.array(root->get("schedule"), "schedule"))
    for (size_t i = 0; i < ss->size() && rd.ok(); ++i) {
      std::string path = at("schedule", i);
      const json::Array *step = rd.array(&(*ss)[i], path);
      if (!step || step->size() != 2) {
        rd.fail(path, "expected [\"start\"|\"done\"|\"ns\", index]");
        break;
      }
      std::string kind = rd.string(&(*step)[0], at(path, 0));
      ScheduleStep s;
      using Kind = ScheduleStep::Kind;
      static const std::pair<const char *, Kind> kinds[] = {
          {"start", Kind::Start},       {"done", Kind::Done},
          {"ns", Kind::NewtonSchulz},   {"momentum", Kind::Momentum},
          {"apply", Kind::ApplyUpdate}, {"adamw", Kind::AdamW}};
      auto known = std::find_if(std::begin(kinds), std::end(kinds),
                                [&](auto &k) { return kind == k.first; });
      if (rd.ok() && known == std::end(kinds))
        rd.fail(at(path, 0), "expected \"start\", \"done\", \"ns\", "
                             "\"momentum\", \"apply\" or \"adamw\"");
      if (known != std::end(kinds))
        s.kind = known->second;
      s.index = rd.integer(&(*step)[1], at(path, 1), 0);
      plan.schedule.push_back(s);
    }
  plan.nsMatrices.assign(world, {});
  plan.nsBatches.assign(world, {});
  std::vector<std::vector<RankExchangeView>> views;
  if (rd.ok())
    for (const Exchange &ex : plan.exchanges)
      views.push_back(rankExchangeViews(ex, world));
  if (const json::Array *rs = rd.array(root->get("ranks"), "ranks")) {
    if (rd.ok() && static_cast<int64_t>(rs->size()) != world)
      rd.fail("ranks", "expected one entry per rank");
    for (size_t r = 0; r < rs->size() && rd.ok(); ++r) {
      std::string path = at("ranks", r);
      const json::Object *o = rd.object(&(*rs)[r], path);
      if (!o)
        break;
      if (rd.integer(o->get("rank"), path + ".rank") != (int64_t)r && rd.ok())
        rd.fail(path + ".rank", "expected " + std::to_string(r));
      if (const json::Array *bs =
              rd.array(o->get("ns_batches"), path + ".ns_batches"))
        for (size_t b = 0; b < bs->size() && rd.ok(); ++b) {
          std::string bpath = at(path + ".ns_batches", b);
          const json::Object *bo = rd.object(&(*bs)[b], bpath);
          if (!bo)
            break;
          NsBatch batch;
          batch.round = rd.integer(bo->get("round"), bpath + ".round", 0);
          batch.rows = rd.integer(bo->get("rows"), bpath + ".rows", 1);
          batch.cols = rd.integer(bo->get("cols"), bpath + ".cols", 1);
          batch.matrices = rd.ints(bo->get("matrices"), bpath + ".matrices", 0,
                                   numMatrices - 1);
          for (int64_t m : batch.matrices)
            plan.nsMatrices[r].push_back(m);
          plan.nsBatches[r].push_back(std::move(batch));
        }
      // The ready-made counts and offsets must match the transfers.
      if (const json::Array *vs =
              rd.array(o->get("exchanges"), path + ".exchanges")) {
        if (rd.ok() && vs->size() != plan.exchanges.size())
          rd.fail(path + ".exchanges", "expected one entry per exchange");
        for (size_t e = 0; e < vs->size() && rd.ok(); ++e) {
          RankExchangeView &view = views[e][r];
          std::string vpath = at(path + ".exchanges", e);
          const json::Object *vo = rd.object(&(*vs)[e], vpath);
          if (!vo)
            break;
          for (auto [key, slices] :
               {std::pair<const char *, std::vector<PeerSlice> *>{"send",
                                                                  &view.send},
                {"recv", &view.recv}}) {
            const json::Array *list =
                rd.array(vo->get(key), vpath + "." + key);
            if (!list)
              break;
            bool same = list->size() == slices->size();
            for (size_t k = 0; same && k < list->size(); ++k) {
              std::vector<int64_t> v =
                  rd.ints(&(*list)[k], at(vpath + "." + key, k));
              const PeerSlice &s = (*slices)[k];
              same = v.size() == 3 && v[0] == s.peer &&
                     v[1] == s.elements && v[2] == s.offset;
            }
            if (rd.ok() && !same)
              rd.fail(vpath + "." + key,
                      "counts and offsets do not match the transfers");
          }
        }
      }
    }
  }
  if (rd.ok())
    if (std::string bad = verifySchedule(plan); !bad.empty())
      rd.fail("schedule", bad);
  error = rd.error;
  return rd.ok();
}

} // namespace muon
