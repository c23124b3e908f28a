//===- ExchangePlan.cpp - The exchanges of a zero-redundancy step ---------===//
#include "muon/Dialect/Muon/Analysis/ExchangePlan.h"
#include "muon/Dialect/Muon/Analysis/Figures.h"
#include "muon/Dialect/Muon/IR/GroupSettingAttrs.h"
#include "muon/Plan/Algorithm.h"
#include "muon/Support/Replicas.h"

#include <algorithm>
#include <cassert>
#include <map>
#include <tuple>

using namespace mlir;
using namespace mlir::muon;
using ::muon::Exchange;
using ::muon::Plan;
using ::muon::PlanMatrix;
using ::muon::Transfer;

/// The AdamW reduction: every holder of a piece of an AdamW parameter with
/// partial axes receives the other summands of that piece, each from one of
/// the replicas holding it (the one that has sent least, ties to the lowest
/// rank).
static Exchange adamwReductions(const Plan &plan, std::vector<int64_t> &sent) {
  Exchange reduce;
  reduce.phase = Exchange::Phase::Reduce;
  const ::muon::Mesh &mesh = plan.mesh;
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const ::muon::ParamLayout &pl = plan.params[i].layout;
    if (plan.params[i].orthogonalized() || pl.partialAxes.empty())
      continue;
    // Holders grouped by box, then summand: (box begins) -> summand -> ranks.
    std::map<std::vector<int64_t>, std::map<int64_t, std::vector<int64_t>>>
        holders;
    std::map<std::vector<int64_t>, int64_t> boxElements;
    for (int64_t linear = 0; linear < mesh.numDevices(); ++linear) {
      std::vector<int64_t> coords = mesh.coordsOfLinear(linear);
      if (!pl.inSubmesh(coords))
        continue;
      std::vector<::muon::Range> box = pl.localBox(mesh, coords);
      int64_t elements = 1;
      std::vector<int64_t> begins;
      for (const ::muon::Range &r : box) {
        elements *= r.size();
        begins.push_back(r.begin);
      }
      if (elements == 0)
        continue;
      int64_t summand = 0;
      for (int64_t axis : pl.partialAxes)
        summand = summand * mesh.shape[axis] + coords[axis];
      holders[begins][summand].push_back(mesh.rankAt(coords));
      boxElements[begins] = elements;
    }
    for (auto &[begins, bySummand] : holders) {
      for (auto &[s, ranks] : bySummand)
        llvm::sort(ranks);
      for (auto &[mySummand, receivers] : bySummand)
        for (int64_t dst : receivers)
          for (auto &[s, replicas] : bySummand) {
            if (s == mySummand)
              continue;
            int64_t src = *std::min_element(
                replicas.begin(), replicas.end(),
                [&](int64_t a, int64_t b) { return sent[a] < sent[b]; });
            int64_t elements = boxElements[begins];
            sent[src] += elements;
            reduce.reductions.push_back(
                {src, dst, static_cast<int64_t>(i), s, elements});
          }
    }
  }
  return reduce;
}

/// The Newton-Schulz configuration a Muon group runs.
static ::muon::NewtonSchulzConfig nsConfigOf(OptimizerOp opt) {
  ::muon::NewtonSchulzConfig c;
  c.nsSteps = static_cast<int64_t>(opt.getNsSteps());
  c.eps = opt.getEps().convertToDouble();
  for (int64_t step = 0; step < c.nsSteps; ++step)
    c.coefficients.push_back(opt.getCoefficients(step));
  return c;
}

/// The index of `config` in `ns.configs`, appended when new: groups with
/// the same settings share one configuration (and its NS batches).
static int64_t nsConfigIndex(::muon::NewtonSchulzSettings &ns,
                             const ::muon::NewtonSchulzConfig &config) {
  auto it = std::find(ns.configs.begin(), ns.configs.end(), config);
  if (it != ns.configs.end())
    return it - ns.configs.begin();
  ns.configs.push_back(config);
  return static_cast<int64_t>(ns.configs.size()) - 1;
}

FailureOr<Plan> mlir::muon::buildPlan(ModelOp model, const ModelLayout &layout,
                                      StringRef wireDtype, bool withTransfers,
                                      const std::vector<int64_t> *roundOf,
                                      int64_t rounds,
                                      ::muon::TransferSink *stream) {
  Plan plan;
  plan.worldSize = layout.mesh.numDevices();
  plan.wireDtype = wireDtype.str();
  plan.wireBytes = ::muon::wireDtypeBytes(plan.wireDtype);
  if (!plan.wireBytes)
    return model.emitError()
           << "unknown wire dtype '" << wireDtype << "'; expected f32 or bf16";
  plan.nsMatrices.resize(plan.worldSize);
  plan.mesh = layout.mesh;
  // Groups in declaration order; Muon or AdamW, when no op declares one,
  // gets its default group, so that every parameter has one (the verifier
  // requires a declared group for any other algorithm).
  plan.groups.clear();
  plan.ns.configs.clear();
  std::vector<bool> declared(::muon::algorithms().size(), false);
  for (Operation &op : model.getBodyBlock()) {
    std::optional<::muon::AlgorithmId> algorithm = groupAlgorithm(&op);
    if (!algorithm)
      continue;
    declared[*algorithm] = true;
    ::muon::PlanGroup g(*algorithm);
    g.name = groupNameOf(&op).str();
    if (auto opt = dyn_cast<OptimizerOp>(op)) {
      g.setNumber("lr", opt.getLr().convertToDouble());
      g.setNumber("weight_decay", opt.getWeightDecay().convertToDouble());
      g.setNumber("momentum", opt.getMomentum().convertToDouble());
      g.setFlag("nesterov", opt.getNesterov());
      g.setText("adjust_lr", stringifyAdjustLr(opt.getAdjustLr()).str());
      g.setText("weight_decay_mode",
                stringifyWeightDecayMode(opt.getWeightDecayMode()).str());
      g.nsConfig = nsConfigIndex(plan.ns, nsConfigOf(opt));
      // Every Muon group has the same precision (verified).
      plan.ns.nsDtype = stringifyNsDtype(opt.getNsDtype()).str();
    } else if (auto adamw = dyn_cast<AdamWOp>(op)) {
      g.setNumber("lr", adamw.getLr().convertToDouble());
      g.setNumber("eps", adamw.getEps().convertToDouble());
      g.setNumber("weight_decay", adamw.getWeightDecay().convertToDouble());
      if (std::optional<ArrayRef<double>> betas = adamw.getBetas()) {
        g.setNumber("beta1", (*betas)[0]);
        g.setNumber("beta2", (*betas)[1]);
      }
    }
    readSettingAttrs(&op, g); // the settings the op does not declare
    plan.groups.push_back(std::move(g));
  }
  for (const ::muon::PlanGroup &g : ::muon::defaultGroups())
    if (!declared[g.algorithm])
      plan.groups.push_back(g);
  // A model without Muon groups still has a configuration: the default
  // group's.
  if (plan.ns.configs.empty())
    plan.ns.configs.push_back(
        {5, std::vector<std::array<double, 3>>(5, {3.4445, -4.775, 2.0315}),
         1e-7});
  for (size_t i = 0; i < layout.params.size(); ++i) {
    ParamOp param = layout.params[i];
    ::muon::PlanParam pp;
    pp.name = param.getSymName().str();
    Type elem = param.getTensorType().getElementType();
    pp.dtype = elem.isBF16() ? "bf16" : elem.isF16() ? "f16" : "f32";
    pp.algorithm = param.getAlgorithm();
    // The named group, else the first of the parameter's algorithm.
    pp.group = -1;
    if (std::optional<StringRef> name = param.getParamGroup())
      pp.group = ::muon::findGroup(plan.groups, *name);
    for (size_t g = 0; pp.group < 0 && g < plan.groups.size(); ++g)
      if (plan.groups[g].algorithm == pp.algorithm)
        pp.group = static_cast<int64_t>(g);
    pp.layout = layout.layouts[i];
    plan.params.push_back(std::move(pp));
  }
  for (QkClipOp clip : model.getBodyBlock().getOps<QkClipOp>()) {
    ::muon::QkClipLayer l;
    l.name = clip.getLayer().str();
    l.query = clip.getQuery().str();
    l.key = clip.getKey().str();
    l.numHeads = static_cast<int64_t>(clip.getNumHeads());
    l.numKvHeads = static_cast<int64_t>(clip.getNumKvHeads());
    l.threshold = clip.getThreshold().convertToDouble();
    plan.qkClip.push_back(std::move(l));
  }

  std::vector<MuonMatrix> matrices = collectMuonMatrices(model, layout);
  std::vector<bool> redundantOf;
  std::vector<int64_t> owners =
      ownersFromAssignments(model, layout, matrices, &redundantOf);
  bool distributed = !model.getBodyBlock().getOps<DistributedOp>().empty();
  plan.distributed = distributed;

  // One gather and one scatter, or with rounds known, a pair per round.
  bool bucketed = roundOf && roundOf->size() == matrices.size() &&
                  std::all_of(roundOf->begin(), roundOf->end(),
                              [&](int64_t r) { return r >= 0 && r < rounds; });
  std::vector<Exchange> buckets(bucketed ? 2 * rounds : 2);
  for (size_t e = 0; e < buckets.size(); ++e) {
    buckets[e].phase =
        e % 2 ? Exchange::Phase::Scatter : Exchange::Phase::Gather;
    buckets[e].round = bucketed ? static_cast<int64_t>(e / 2) : 0;
  }
  std::vector<int64_t> sent(plan.worldSize, 0);
  // Streamed only with the rounds known: the writer needs each transfer's
  // final exchange.
  if (!(stream && bucketed && distributed && withTransfers))
    stream = nullptr;
  if (stream)
    stream->begin(plan);
  auto emit = [&](size_t exchange, const Transfer &t) {
    if (stream)
      stream->add(static_cast<int64_t>(exchange), exchange % 2 == 0, t);
    else
      buckets[exchange].transfers.push_back(t);
  };
  ::muon::MatrixPieceCache pieceCache(layout.mesh);
  // The cached pieces sorted by (rows, cols, summand) then rank, remade
  // only when the cache computes a new list.
  std::vector<MatrixPiece> byKey;
  uint64_t byKeyVersion = 0;
  auto key = [](const MatrixPiece &p) {
    return std::make_tuple(p.rows.begin, p.cols.begin, p.summand);
  };
  for (size_t k = 0; k < matrices.size(); ++k) {
    const MuonMatrix &mm = matrices[k];
    PlanMatrix pm;
    pm.param = ParamOp(layout.params[mm.param]).getSymName().str();
    pm.paramIndex = mm.param;
    pm.slice = layout.layouts[mm.param].slicedMatrices() ? mm.matrix : -1;
    pm.rows = mm.rows;
    pm.cols = mm.cols;
    pm.nsFlops = mm.nsFlops;
    if (distributed && !withTransfers) {
      if (owners[k] < 0)
        return model.emitError() << "matrix '" << mm.label
                                 << "' has no owner; run muon-assign-owners "
                                    "first";
      pm.owner = owners[k];
      pm.redundant = redundantOf[k];
      if (pm.redundant)
        for (int64_t o : ::muon::replicaOwners(
                 layout.mesh, layout.layouts[mm.param], owners[k]))
          plan.nsMatrices[o].push_back(k);
      else
        plan.nsMatrices[owners[k]].push_back(k);
      plan.matrices.push_back(std::move(pm));
      continue;
    }
    const std::vector<MatrixPiece> &pieces =
        pieceCache.pieces(layout.layouts[mm.param], mm.matrix);

    if (!distributed) {
      // Single-device algorithm on every rank: each holder (with the whole
      // matrix, as nothing is sharded) orthogonalizes it.
      for (const MatrixPiece &p : pieces)
        plan.nsMatrices[p.rank].push_back(k);
      plan.matrices.push_back(std::move(pm));
      continue;
    }
    size_t pair = bucketed ? 2 * (*roundOf)[k] : 0;
    int64_t owner = owners[k];
    if (owner < 0)
      return model.emitError() << "matrix '" << mm.label
                               << "' has no owner; run muon-assign-owners "
                                  "first";
    pm.owner = owner;
    if (redundantOf[k]) {
      // Once per replica: each replica's owner gathers its replica's
      // pieces and scatters to its replica's holders (under DDP a replica
      // is one rank, and nothing moves).
      pm.redundant = true;
      const ::muon::ParamLayout &pl = layout.layouts[mm.param];
      std::map<int64_t, std::vector<MatrixPiece>> byReplica;
      for (const MatrixPiece &p : pieces)
        byReplica[::muon::replicaOwnerOf(layout.mesh, pl, owner, p.rank)]
            .push_back(p);
      for (auto &[o, mine] : byReplica) {
        plan.nsMatrices[o].push_back(k);
        auto own = std::find_if(mine.begin(), mine.end(),
                                [&](auto &p) { return p.rank == o; });
        assert(own != mine.end() && "a replica's owner mirrors the owner");
        std::vector<MatrixPiece> sorted = mine;
        std::stable_sort(sorted.begin(), sorted.end(),
                         [&](auto &a, auto &b) { return key(a) < key(b); });
        for (size_t i = 0; i < sorted.size();) {
          size_t j = i;
          while (j < sorted.size() && key(sorted[j]) == key(sorted[i]))
            ++j;
          if (key(sorted[i]) != key(*own)) {
            const MatrixPiece &p = *std::min_element(
                sorted.begin() + i, sorted.begin() + j,
                [&](auto &a, auto &b) { return sent[a.rank] < sent[b.rank]; });
            Transfer t{p.rank, o,      static_cast<int64_t>(k),
                       p.rows, p.cols, p.summand};
            sent[p.rank] += t.elements();
            emit(pair, t);
          }
          i = j;
        }
        for (const MatrixPiece &p : mine)
          if (p.rank != o) {
            Transfer t{o, p.rank, static_cast<int64_t>(k), p.rows, p.cols, 0};
            sent[o] += t.elements();
            emit(pair + 1, t);
          }
      }
      plan.matrices.push_back(std::move(pm));
      continue;
    }
    plan.nsMatrices[owner].push_back(k);
    auto ownPiece = std::find_if(pieces.begin(), pieces.end(),
                                 [&](auto &p) { return p.rank == owner; });
    assert(ownPiece != pieces.end() && "verifier guarantees owners hold");
    // Gather: one copy of every (piece, summand) the owner lacks. Replicas
    // of the same summand are adjacent after sorting by key then rank.
    if (byKeyVersion != pieceCache.version()) {
      byKey = pieces;
      std::stable_sort(byKey.begin(), byKey.end(),
                       [&](auto &a, auto &b) { return key(a) < key(b); });
      byKeyVersion = pieceCache.version();
    }
    for (size_t i = 0; i < byKey.size();) {
      size_t j = i;
      while (j < byKey.size() && key(byKey[j]) == key(byKey[i]))
        ++j;
      if (key(byKey[i]) != key(*ownPiece)) {
        // The first minimum: ties go to the lowest rank.
        const MatrixPiece &p = *std::min_element(
            byKey.begin() + i, byKey.begin() + j,
            [&](auto &a, auto &b) { return sent[a.rank] < sent[b.rank]; });
        Transfer t{p.rank, owner,  static_cast<int64_t>(k),
                   p.rows, p.cols, p.summand};
        sent[p.rank] += t.elements();
        emit(pair, t);
      }
      i = j;
    }
    // Scatter: every other holder gets its new piece from the owner.
    for (const MatrixPiece &p : pieces)
      if (p.rank != owner) {
        Transfer t{owner, p.rank, static_cast<int64_t>(k), p.rows, p.cols, 0};
        sent[owner] += t.elements();
        emit(pair + 1, t);
      }
    plan.matrices.push_back(std::move(pm));
  }
  if (distributed) {
    plan.exchanges = std::move(buckets);
    Exchange reduce = adamwReductions(plan, sent);
    if (!reduce.reductions.empty())
      plan.exchanges.push_back(std::move(reduce));
  }
  return plan;
}

::muon::ScheduleOptions mlir::muon::scheduleOptionsOf(ModelOp model) {
  ::muon::ScheduleOptions options;
  for (DistributedOp d : model.getBodyBlock().getOps<DistributedOp>()) {
    options.prefetchCount = static_cast<int64_t>(d.getPrefetchCount());
    options.async = d.getAsync();
    options.gatherBudgetBytes = static_cast<int64_t>(d.getGatherBudgetBytes());
    options.maxRounds = static_cast<int64_t>(d.getMaxRounds());
  }
  return options;
}

FailureOr<Plan> mlir::muon::planFromModel(ModelOp model,
                                          const ModelLayout &layout,
                                          StringRef wireWithoutConfig,
                                          bool withTransfers,
                                          ::muon::TransferSink *stream) {
  StringRef wire = wireWithoutConfig;
  for (DistributedOp d : model.getBodyBlock().getOps<DistributedOp>())
    wire = stringifyWireDtype(d.getWireDtype());
  SmallVector<RoundOp> roundOps(model.getBodyBlock().getOps<RoundOp>());
  // No rounds and no schedule: not packed yet. (A packed model without Muon
  // matrices has a schedule and no rounds.)
  if (roundOps.empty() && model.getBodyBlock().getOps<ScheduleOp>().empty())
    return buildPlan(model, layout, wire, withTransfers);

  // Rounds from the IR (the verifier made them a partition), read first so
  // that the transfers are built in their rounds' exchanges.
  std::vector<MuonMatrix> muonMatrices = collectMuonMatrices(model, layout);
  std::map<std::pair<std::string, int64_t>, int64_t> indexOf;
  for (size_t k = 0; k < muonMatrices.size(); ++k) {
    const MuonMatrix &mm = muonMatrices[k];
    bool batched = layout.layouts[mm.param].slicedMatrices();
    indexOf[{ParamOp(layout.params[mm.param]).getSymName().str(),
             batched ? mm.matrix : 0}] = k;
  }
  std::vector<std::vector<int64_t>> rounds(roundOps.size());
  for (RoundOp round : roundOps)
    for (auto [ref, slice] : llvm::zip(round.getParams(), round.getSlices())) {
      std::string name = cast<FlatSymbolRefAttr>(ref).getValue().str();
      for (int64_t m = slice < 0 ? 0 : slice;; ++m) {
        auto it = indexOf.find({name, m});
        if (it == indexOf.end())
          break;
        rounds[round.getIndex()].push_back(it->second);
        if (slice >= 0)
          break;
      }
    }
  for (auto &r : rounds)
    llvm::sort(r);
  std::vector<int64_t> roundOf(muonMatrices.size(), -1);
  for (size_t r = 0; r < rounds.size(); ++r)
    for (int64_t k : rounds[r])
      roundOf[k] = static_cast<int64_t>(r);
  FailureOr<Plan> plan =
      buildPlan(model, layout, wire, withTransfers, &roundOf,
                static_cast<int64_t>(rounds.size()), stream);
  if (failed(plan))
    return failure();
  ::muon::ScheduleOptions options = scheduleOptionsOf(model);
  std::string error;
  // The IR's rounds, with the options recorded (packing rounds of its own
  // here would re-bucket every transfer once more, for nothing).
  if (!::muon::useRounds(*plan, options, std::move(rounds), error))
    return model.emitError() << error;

  // The sequence from the IR, if there is one.
  bool hasReduce = !plan->exchanges.empty() &&
                   plan->exchanges.back().phase == Exchange::Phase::Reduce;
  for (ScheduleOp schedule : model.getBodyBlock().getOps<ScheduleOp>()) {
    plan->schedule.clear();
    auto exchangeOf = [&](ExchangeStartOp start) -> FailureOr<int64_t> {
      if (start.getPhase() == ExchangePhase::Reduce) {
        if (!hasReduce)
          return start.emitError()
                 << "no parameter needs an AdamW reduction here";
        return static_cast<int64_t>(plan->exchanges.size()) - 1;
      }
      int64_t round = static_cast<int64_t>(start.getRound());
      if (round >= static_cast<int64_t>(plan->rounds.size()))
        return start.emitError() << "the model has no round " << round;
      return 2 * round + (start.getPhase() == ExchangePhase::Scatter ? 1 : 0);
    };
    for (Operation &op : schedule.getBodyBlock()) {
      using Kind = ::muon::ScheduleStep::Kind;
      if (auto start = dyn_cast<ExchangeStartOp>(op)) {
        FailureOr<int64_t> e = exchangeOf(start);
        if (failed(e))
          return failure();
        plan->schedule.push_back({Kind::Start, *e});
      } else if (auto done = dyn_cast<ExchangeDoneOp>(op)) {
        FailureOr<int64_t> e =
            exchangeOf(done.getToken().getDefiningOp<ExchangeStartOp>());
        if (failed(e))
          return failure();
        plan->schedule.push_back({Kind::Done, *e});
      } else if (auto ns = dyn_cast<NewtonSchulzOp>(op)) {
        plan->schedule.push_back(
            {Kind::NewtonSchulz, static_cast<int64_t>(ns.getRound())});
      } else if (isa<MomentumOp>(op)) {
        plan->schedule.push_back({Kind::Momentum, 0});
      } else if (auto apply = dyn_cast<ApplyUpdateOp>(op)) {
        plan->schedule.push_back(
            {Kind::ApplyUpdate, static_cast<int64_t>(apply.getRound())});
      } else if (isa<AdamWUpdateOp>(op)) {
        plan->schedule.push_back({Kind::AdamW, 0});
      }
    }
  }
  return plan;
}

FailureOr<Plan> mlir::muon::ownersPlanOf(ModelOp model) {
  FailureOr<ModelLayout> layout = computeModelLayout(model);
  if (failed(layout))
    return failure();
  return planFromModel(model, *layout, "f32", /*withTransfers=*/false);
}
