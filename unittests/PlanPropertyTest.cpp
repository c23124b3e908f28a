//===- PlanPropertyTest.cpp - Random specs through the whole compiler -----===//
//
// Random models (meshes up to 3-D, every placement kind, strided splits,
// uneven and empty shards, batch dims, `only`, both configuration styles) go
// through import, process groups to mesh, owner assignment and the exchange
// plan. Whatever the model, the plan must be a zero-redundancy step.
//
//===----------------------------------------------------------------------===//
#include "StatusTesting.h"
#include "PlanRead.h"
#include "muon/Conversion/Passes.h"
#include "muon/Dialect/Muon/Analysis/ExchangePlan.h"
#include "muon/Dialect/Muon/Analysis/Figures.h"
#include "muon/Dialect/Muon/Transforms/Passes.h"
#include "muon/Dialect/Muon/Transforms/Pipelines.h"
#include "muon/InitAll.h"
#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Validate.h"
#include "muon/Planner/Schedule.h"
#include "muon/Target/Spec/SpecImport.h"

#include "mlir/IR/MLIRContext.h"
#include "mlir/Pass/PassManager.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>
#include <random>
#include <set>
#include <sstream>

using namespace mlir;
using ::muon::Plan;

namespace {

struct RandomSpec {
  std::mt19937 rng;
  /// Per-head Newton-Schulz on some Muon parameters of the DTensor style
  /// (off: the specs, and so the random sequence, of the original test).
  bool heads = false;
  explicit RandomSpec(unsigned seed) : rng(seed) {}
  int64_t pick(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }

  static std::string list(const std::vector<int64_t> &v) {
    std::ostringstream os;
    os << "[";
    for (size_t i = 0; i < v.size(); ++i)
      os << (i ? ", " : "") << v[i];
    os << "]";
    return os.str();
  }

  std::vector<int64_t> randomShape() {
    std::vector<int64_t> shape;
    if (pick(0, 3) == 0)
      shape.push_back(pick(1, 4)); // a batch dim (expert stack)
    shape.push_back(pick(1, 9));
    shape.push_back(pick(1, 9));
    return shape;
  }

  std::string dtensor() {
    int64_t meshRank = pick(1, 3);
    std::vector<int64_t> mesh;
    for (int64_t a = 0; a < meshRank; ++a)
      mesh.push_back(pick(1, 3));
    std::ostringstream os;
    os << R"({"format": "muon-spec/1", "mesh": {"shape": )" << list(mesh)
       << R"(, "names": [)";
    for (int64_t a = 0; a < meshRank; ++a)
      os << (a ? ", " : "") << "\"a" << a << "\"";
    os << R"(]}, "distributed": {"prefetch_count": )" << pick(0, 2)
       << R"(}, "params": [)";
    int64_t count = pick(1, 6);
    for (int64_t i = 0; i < count; ++i) {
      std::vector<int64_t> shape = randomShape();
      int64_t rank = shape.size();
      std::vector<std::string> placement(meshRank, "R");
      std::map<int64_t, std::vector<int64_t>> split; // dim -> axes
      std::vector<std::pair<int64_t, int64_t>> only;
      for (int64_t a = 0; a < meshRank; ++a) {
        switch (pick(0, 4)) {
        case 0:
        case 1: {
          int64_t d = pick(0, rank - 1);
          placement[a] = "S(" + std::to_string(d) + ")";
          split[d].push_back(a);
          break;
        }
        case 2:
          placement[a] = "P";
          break;
        case 3:
          only.push_back({a, pick(0, mesh[a] - 1)});
          break;
        default:
          break;
        }
      }
      os << (i ? ", " : "") << R"({"name": "p)" << i << R"(", "shape": )"
         << list(shape);
      bool adamw = pick(0, 3) == 0;
      if (adamw)
        os << R"(, "optimizer": "adamw")";
      if (heads && !adamw && pick(0, 2)) {
        // A divisor of the dim, so heads cut sharded pieces in every way.
        int64_t dim = pick(0, 1), size = shape[rank - 2 + dim];
        std::vector<int64_t> divisors;
        for (int64_t h = 1; h <= size; ++h)
          if (size % h == 0)
            divisors.push_back(h);
        int64_t h = divisors[pick(0, divisors.size() - 1)];
        os << R"(, "num_heads": )" << h << R"(, "head_split_dim": )" << dim;
      }
      bool strided = pick(0, 1) && !split.empty();
      if (strided) {
        // Explicit major-to-minor orders, reversed from the DTensor default.
        os << R"(, "split": {)";
        bool first = true;
        for (auto &[d, axes] : split) {
          std::vector<int64_t> rev(axes.rbegin(), axes.rend());
          os << (first ? "" : ", ") << "\"" << d << "\": " << list(rev);
          first = false;
        }
        os << "}, \"placements\": [";
        for (int64_t a = 0; a < meshRank; ++a)
          os << (a ? ", " : "") << "\""
             << (placement[a][0] == 'S' ? "S" : placement[a]) << "\"";
        os << "]";
      } else {
        os << ", \"placements\": [";
        for (int64_t a = 0; a < meshRank; ++a)
          os << (a ? ", " : "") << "\"" << placement[a] << "\"";
        os << "]";
      }
      if (!only.empty()) {
        os << ", \"only\": {";
        for (size_t k = 0; k < only.size(); ++k)
          os << (k ? ", " : "") << "\"a" << only[k].first
             << "\": " << only[k].second;
        os << "}";
      }
      os << "}";
    }
    os << "]}";
    return os.str();
  }

  std::string processGroups() {
    // A row-major grid over the chosen kinds, listed as groups per kind.
    std::vector<std::string> kinds;
    for (const char *k : {"ddp", "fsdp", "tp"})
      if (pick(0, 2))
        kinds.push_back(k);
    if (kinds.empty())
      kinds.push_back("fsdp");
    std::vector<int64_t> sizes;
    int64_t world = 1;
    for (size_t k = 0; k < kinds.size(); ++k) {
      sizes.push_back(pick(1, 3));
      world *= sizes.back();
    }
    std::ostringstream os;
    os << R"({"format": "muon-spec/1", "world_size": )" << world
       << R"(, "groups": {)";
    for (size_t k = 0; k < kinds.size(); ++k) {
      // Groups of kind k: ranks that agree on every other coordinate.
      std::map<std::vector<int64_t>, std::vector<int64_t>> groups;
      for (int64_t r = 0; r < world; ++r) {
        std::vector<int64_t> coords(kinds.size());
        int64_t rest = r;
        for (size_t a = kinds.size(); a-- > 0;) {
          coords[a] = rest % sizes[a];
          rest /= sizes[a];
        }
        coords[k] = -1;
        groups[coords].push_back(r);
      }
      os << (k ? ", " : "") << "\"" << kinds[k] << "\": [";
      bool first = true;
      for (auto &[key, ranks] : groups) {
        os << (first ? "" : ", ") << list(ranks);
        first = false;
      }
      os << "]";
    }
    os << "}, \"params\": [";
    int64_t count = pick(1, 5);
    std::ostringstream tp;
    for (int64_t i = 0; i < count; ++i) {
      std::vector<int64_t> shape = randomShape();
      os << (i ? ", " : "") << R"({"name": "p)" << i << R"(", "shape": )"
         << list(shape) << "}";
      tp << (i ? ", " : "") << "\"" << i
         << "\": " << pick(0, static_cast<int64_t>(shape.size()) - 1);
    }
    os << "]";
    if (std::find(kinds.begin(), kinds.end(), "tp") != kinds.end())
      os << ", \"tp_dim_per_param\": {" << tp.str() << "}";
    os << "}";
    return os.str();
  }
};

/// Compiles a spec; returns the plan and fills the layout view.
std::optional<Plan> compile(MLIRContext &ctx, const std::string &spec,
                            OwningOpRef<ModuleOp> &module,
                            mlir::muon::ModelLayout &layout, int64_t &bound) {
  module = mlir::muon::importSpec(spec, &ctx);
  if (!module)
    return std::nullopt;
  // The compiler as the tools run it; the plan is what the IR describes.
  FailureOr<Plan> plan = mlir::muon::compileModule(*module);
  if (failed(plan))
    return std::nullopt;
  auto model = *module->getOps<mlir::muon::ModelOp>().begin();
  FailureOr<mlir::muon::ModelLayout> l = mlir::muon::computeModelLayout(model);
  if (failed(l))
    return std::nullopt;
  layout = *l;
  bound = mlir::muon::computeLowerBounds(
              layout, mlir::muon::collectMuonMatrices(model, layout), 4)
              .bytesReceived;
  return *plan;
}

void checkPlan(const Plan &plan, const mlir::muon::ModelLayout &layout,
               int64_t bound, const std::string &spec) {
  SCOPED_TRACE(spec);
  // Exactly one owner per matrix, and it holds the matrix.
  std::vector<int> runs(plan.matrices.size(), 0);
  for (const auto &list : plan.nsMatrices)
    for (int64_t m : list)
      ++runs[m];
  std::map<std::string, size_t> paramIndex;
  for (size_t i = 0; i < layout.params.size(); ++i)
    paramIndex[mlir::muon::ParamOp(layout.params[i]).getSymName().str()] = i;
  std::vector<std::vector<::muon::MatrixPiece>> pieces;
  for (size_t m = 0; m < plan.matrices.size(); ++m) {
    const auto &pm = plan.matrices[m];
    EXPECT_EQ(runs[m], 1) << pm.label();
    pieces.push_back(::muon::matrixPieces(layout.mesh,
                                          layout.layouts[paramIndex[pm.param]],
                                          pm.slice < 0 ? 0 : pm.slice));
    bool ownerHolds = false;
    for (auto &p : pieces.back())
      ownerHolds |= p.rank == pm.owner;
    EXPECT_TRUE(ownerHolds) << pm.label();
  }
  // Traffic equals the lower bound.
  // Muon traffic equals the lower bound (which counts Muon matrices only;
  // AdamW reductions are checked by checkReductions).
  int64_t received = 0;
  for (const auto &ex : plan.exchanges)
    for (const auto &t : ex.transfers)
      received += t.elements() * plan.wireBytes;
  EXPECT_EQ(received, bound);

  // Gathers: the owner ends with every summand of every element exactly once;
  // each sender holds what it sends. Scatters: each other holder receives its
  // own piece exactly once.
  for (size_t m = 0; m < plan.matrices.size(); ++m) {
    const auto &pm = plan.matrices[m];
    int64_t summands = 0;
    for (auto &p : pieces[m])
      summands = std::max(summands, p.summand + 1);
    std::vector<int> cover(summands * pm.rows * pm.cols, 0);
    auto paint = [&](int64_t s, ::muon::Range rows, ::muon::Range cols) {
      for (int64_t i = rows.begin; i < rows.end; ++i)
        for (int64_t j = cols.begin; j < cols.end; ++j)
          ++cover[(s * pm.rows + i) * pm.cols + j];
    };
    for (auto &p : pieces[m])
      if (p.rank == pm.owner)
        paint(p.summand, p.rows, p.cols);
    std::map<int64_t, int> scattered;
    for (const auto &ex : plan.exchanges)
      for (const auto &t : ex.transfers) {
        if (t.matrix != static_cast<int64_t>(m))
          continue;
        EXPECT_NE(t.src, t.dst);
        if (ex.phase == ::muon::Exchange::Phase::Gather) {
          EXPECT_EQ(t.dst, pm.owner);
          bool held = false;
          for (auto &p : pieces[m])
            held |= p.rank == t.src && p.rows == t.rows && p.cols == t.cols &&
                    p.summand == t.summand;
          EXPECT_TRUE(held) << pm.label() << " sender " << t.src;
          paint(t.summand, t.rows, t.cols);
        } else {
          EXPECT_EQ(t.src, pm.owner);
          bool own = false;
          for (auto &p : pieces[m])
            own |= p.rank == t.dst && p.rows == t.rows && p.cols == t.cols;
          EXPECT_TRUE(own) << pm.label() << " receiver " << t.dst;
          ++scattered[t.dst];
        }
      }
    for (int c : cover)
      ASSERT_EQ(c, 1) << pm.label()
                      << ": owner's sum is incomplete or "
                         "counts a summand twice";
    for (auto &p : pieces[m]) {
      if (p.rank != pm.owner) {
        EXPECT_EQ(scattered[p.rank], 1) << pm.label() << " rank " << p.rank;
      }
    }
  }
}

/// Per-head pieces against the whole matrix's: for every 2-D slice, each
/// rank's head pieces, moved back to the slice's coordinates, lie inside
/// its piece of the whole slice and add up to it (the heads tile it).
void checkHeadPieces(const mlir::muon::ModelLayout &layout,
                     const std::string &spec) {
  SCOPED_TRACE(spec);
  for (const ::muon::ParamLayout &pl : layout.layouts) {
    if (pl.numHeads == 1)
      continue;
    ::muon::ParamLayout whole = pl;
    whole.numHeads = 1;
    whole.headSplitDim = 0;
    for (int64_t s = 0; s < whole.numMatrices(); ++s) {
      std::map<std::pair<int64_t, int64_t>, int64_t> left; // rank, summand
      std::map<std::pair<int64_t, int64_t>, ::muon::MatrixPiece> box;
      for (const auto &p : ::muon::matrixPieces(layout.mesh, whole, s)) {
        left[{p.rank, p.summand}] = p.elements();
        box[{p.rank, p.summand}] = p;
      }
      for (int64_t h = 0; h < pl.numHeads; ++h) {
        int64_t m = s * pl.numHeads + h;
        ::muon::Range hr = pl.headRowsOf(m), hc = pl.headColsOf(m);
        EXPECT_EQ(hr.size(), pl.matrixRows());
        EXPECT_EQ(hc.size(), pl.matrixCols());
        for (const auto &p : ::muon::matrixPieces(layout.mesh, pl, m)) {
          auto it = box.find({p.rank, p.summand});
          ASSERT_TRUE(it != box.end()) << "rank " << p.rank << " head " << h;
          const ::muon::MatrixPiece &w = it->second;
          EXPECT_TRUE(w.rows.begin <= p.rows.begin + hr.begin &&
                      p.rows.end + hr.begin <= w.rows.end &&
                      w.cols.begin <= p.cols.begin + hc.begin &&
                      p.cols.end + hc.begin <= w.cols.end)
              << "rank " << p.rank << " head " << h;
          left[{p.rank, p.summand}] -= p.elements();
        }
      }
      for (const auto &[key, n] : left)
        EXPECT_EQ(n, 0) << "rank " << key.first << " slice " << s;
    }
  }
}

/// AdamW reductions: every holder of a piece of an AdamW parameter with
/// partial axes receives each other summand of its box exactly once, from a
/// rank that holds that summand of the same box; nobody else receives any.
void checkReductions(const Plan &plan, const std::string &spec) {
  SCOPED_TRACE(spec);
  const ::muon::Mesh &mesh = plan.mesh;
  // (param, receiver, summand) -> count
  std::map<std::tuple<int64_t, int64_t, int64_t>, int> got;
  for (const auto &ex : plan.exchanges)
    for (const auto &r : ex.reductions) {
      ++got[{r.param, r.dst, r.summand}];
      const ::muon::ParamLayout &pl = plan.params[r.param].layout;
      auto src = mesh.coordsOfRank(r.src), dst = mesh.coordsOfRank(r.dst);
      EXPECT_TRUE(pl.inSubmesh(src) && pl.inSubmesh(dst));
      EXPECT_EQ(pl.localBox(mesh, src), pl.localBox(mesh, dst));
      int64_t summand = 0;
      for (int64_t axis : pl.partialAxes)
        summand = summand * mesh.shape[axis] + src[axis];
      EXPECT_EQ(summand, r.summand) << "sender holds another summand";
    }
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const ::muon::ParamLayout &pl = plan.params[i].layout;
    if (plan.params[i].orthogonalized() || pl.partialAxes.empty())
      continue;
    int64_t summands = 1;
    for (int64_t axis : pl.partialAxes)
      summands *= mesh.shape[axis];
    for (int64_t rank = 0; rank < plan.worldSize; ++rank) {
      auto coords = mesh.coordsOfRank(rank);
      int64_t elements = 1;
      for (const auto &r : pl.localBox(mesh, coords))
        elements *= r.size();
      bool holds = pl.inSubmesh(coords) && elements > 0;
      int64_t mine = 0;
      for (int64_t axis : pl.partialAxes)
        mine = mine * mesh.shape[axis] + coords[axis];
      for (int64_t s = 0; s < summands; ++s) {
        int want = holds && s != mine ? 1 : 0;
        EXPECT_EQ((got[{static_cast<int64_t>(i), rank, s}]), want)
            << plan.params[i].name << " rank " << rank << " summand " << s;
      }
    }
  }
}

bool samePlan(const Plan &a, const Plan &b) {
  if (a.matrices.size() != b.matrices.size() ||
      a.exchanges.size() != b.exchanges.size())
    return false;
  for (size_t m = 0; m < a.matrices.size(); ++m)
    if (a.matrices[m].owner != b.matrices[m].owner)
      return false;
  for (size_t e = 0; e < a.exchanges.size(); ++e) {
    const auto &x = a.exchanges[e].transfers, &y = b.exchanges[e].transfers;
    const auto &rx = a.exchanges[e].reductions, &ry = b.exchanges[e].reductions;
    if (x.size() != y.size() || rx.size() != ry.size())
      return false;
    for (size_t i = 0; i < rx.size(); ++i)
      if (rx[i].src != ry[i].src || rx[i].dst != ry[i].dst ||
          rx[i].param != ry[i].param || rx[i].summand != ry[i].summand)
        return false;
    for (size_t i = 0; i < x.size(); ++i)
      if (x[i].src != y[i].src || x[i].dst != y[i].dst ||
          x[i].matrix != y[i].matrix || !(x[i].rows == y[i].rows) ||
          !(x[i].cols == y[i].cols) || x[i].summand != y[i].summand)
        return false;
  }
  return true;
}

} // namespace

static void checkRandomSpecs(bool heads) {
  DialectRegistry registry;
  mlir::muon::registerAllDialects(registry);
  int compiled = 0;
  for (unsigned seed = 0; seed < 300; ++seed) {
    RandomSpec gen(seed);
    gen.heads = heads;
    std::string spec = gen.pick(0, 2) ? gen.dtensor() : gen.processGroups();
    MLIRContext ctx(registry);
    // Random specs may be invalid (e.g. a matrix empty everywhere cannot
    // happen, but nothing forbids errors); count the ones that compile.
    ctx.getDiagEngine().registerHandler([](Diagnostic &) { return success(); });
    OwningOpRef<ModuleOp> module;
    mlir::muon::ModelLayout layout;
    int64_t bound = 0;
    std::optional<Plan> plan = compile(ctx, spec, module, layout, bound);
    ASSERT_TRUE(plan) << "valid random spec failed to compile: " << spec;
    ++compiled;
    checkPlan(*plan, layout, bound, spec);
    checkReductions(*plan, spec);
    checkHeadPieces(layout, spec);

    // Every schedule passes the verifier, for prefetch 0/1/2, the debug
    // order, with and without a gather budget, and moves the same bytes.
    for (int mode = 0; mode < 8; ++mode) {
      Plan scheduled = *plan;
      ::muon::ScheduleOptions options;
      options.async = mode % 4 != 3;
      options.prefetchCount = mode % 4 == 3 ? 0 : mode % 4;
      options.maxRounds = 1 + seed % 5;
      if (mode >= 4) { // the tightest budget that any schedule can meet
        for (const auto &m : scheduled.matrices)
          options.gatherBudgetBytes = std::max(
              options.gatherBudgetBytes, m.rows * m.cols * scheduled.wireBytes);
      }
      std::string error;
      ASSERT_OK(::muon::schedulePlan(scheduled, options));
      EXPECT_OK(::muon::verifySchedule(scheduled)) << spec;
      checkPlan(scheduled, layout, bound, spec);
      // The plan file round-trips exactly and passes the reader's checks.
      std::string text = ::muon::renderPlan(scheduled);
      Plan reread;
      ASSERT_TRUE(take(::muon::parsePlan(text), reread, error))
          << error << spec;
      EXPECT_EQ(::muon::renderPlan(reread), text);
      // So does the binary form, and each rank's part of it is the
      // corresponding part of the whole plan.
      std::string binary = ::muon::renderPlanBinary(scheduled);
      Plan fromBinary;
      ASSERT_TRUE(take(::muon::parsePlanBinary(binary), fromBinary, error))
          << error << spec;
      EXPECT_EQ(::muon::renderPlan(fromBinary), text);
      for (int64_t r = 0; r < scheduled.worldSize; ++r) {
        Plan part;
        ASSERT_TRUE(take(::muon::parsePlanSlice(binary, r), part, error))
            << error << spec;
        Plan want = ::muon::slicePlan(scheduled, r);
        EXPECT_EQ(part.matrixIds, want.matrixIds);
        EXPECT_EQ(::muon::renderPlan(part), ::muon::renderPlan(want)) << spec;
      }
      if (!options.async) {
        // Debug order: each round belongs to one owner, in rank order.
        int64_t lastOwner = -1;
        for (const auto &round : scheduled.rounds) {
          int64_t owner = scheduled.matrices[round.front()].owner;
          for (int64_t m : round)
            EXPECT_EQ(scheduled.matrices[m].owner, owner);
          EXPECT_GE(owner, lastOwner);
          lastOwner = owner;
        }
      }
    }

    // Streaming the transfers into the binary writer as they are made (what
    // muon-run does for a binary plan) gives the file of the whole plan.
    {
      MLIRContext ctx3(registry);
      ctx3.getDiagEngine().registerHandler(
          [](Diagnostic &) { return success(); });
      OwningOpRef<ModuleOp> module3 = mlir::muon::importSpec(spec, &ctx3);
      ASSERT_TRUE(module3);
      ::muon::PlanBinaryWriter writer;
      mlir::muon::CompileOverrides overrides;
      overrides.stream = &writer;
      FailureOr<Plan> streamed = mlir::muon::compileModule(*module3, overrides);
      ASSERT_TRUE(succeeded(streamed));
      std::string bytes = writer.begun() ? writer.finish(*streamed)
                                         : ::muon::renderPlanBinary(*streamed);
      EXPECT_EQ(bytes, ::muon::renderPlanBinary(*plan)) << spec;
      if (writer.begun()) {
        std::vector<::muon::RankFigures> a = writer.figures(*streamed),
                                         b = ::muon::computeRankFigures(*plan);
        for (size_t r = 0; r < a.size(); ++r)
          EXPECT_TRUE(a[r].bytesSent == b[r].bytesSent &&
                      a[r].bytesReceived == b[r].bytesReceived &&
                      a[r].nsFlops == b[r].nsFlops)
              << spec;
      }
    }

    // Determinism: the same spec compiles to the same plan.
    MLIRContext ctx2(registry);
    OwningOpRef<ModuleOp> module2;
    mlir::muon::ModelLayout layout2;
    int64_t bound2 = 0;
    std::optional<Plan> again = compile(ctx2, spec, module2, layout2, bound2);
    ASSERT_TRUE(again);
    EXPECT_TRUE(samePlan(*plan, *again)) << spec;
  }
  EXPECT_EQ(compiled, 300);
}

TEST(PlanProperties, RandomSpecsGiveZeroRedundancyPlans) {
  checkRandomSpecs(/*heads=*/false);
}

// The same properties with per-head Newton-Schulz on random parameters:
// each head's block a matrix of its own, cut from pieces sharded every way.
TEST(PlanProperties, RandomSpecsWithHeadsGiveZeroRedundancyPlans) {
  checkRandomSpecs(/*heads=*/true);
}
