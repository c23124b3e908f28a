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

namespace {

/// The groups the model declares, in declaration order, with their
/// Newton-Schulz configurations; Muon or AdamW, when no op declares one,
/// gets its default group, so that every parameter has one (the verifier
/// requires a declared group for any other algorithm).
void addGroups(ModelOp model, Plan &plan) {
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
}

/// The parameters, each in its named group (else the first of its
/// algorithm's), and the QK-clip layers.
void addParams(ModelOp model, const ModelLayout &layout, Plan &plan) {
  for (size_t i = 0; i < layout.params.size(); ++i) {
    ParamOp param = layout.params[i];
    ::muon::PlanParam pp;
    pp.name = param.getSymName().str();
    Type elem = param.getTensorType().getElementType();
    pp.dtype = elem.isBF16() ? "bf16" : elem.isF16() ? "f16" : "f32";
    pp.algorithm = param.getAlgorithm();
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
}

/// A piece's identity for the gather: its box and summand. Holders of the
/// same key hold the same data; the owner needs one copy of each key it
/// lacks.
std::tuple<int64_t, int64_t, int64_t> pieceKey(const MatrixPiece &p) {
  return std::make_tuple(p.rows.begin, p.cols.begin, p.summand);
}

/// The gather and scatter transfers of a plan's matrices, into one pair of
/// exchanges or, with the rounds known, a pair per round (gather 2r,
/// scatter 2r+1), or streamed to a sink; and what each rank has sent so
/// far, which chooses the sender among replicas.
class TransferWriter {
public:
  TransferWriter(const Plan &plan, bool bucketed, int64_t rounds,
                 ::muon::TransferSink *stream)
      : buckets(bucketed ? 2 * rounds : 2), sent(plan.worldSize, 0),
        stream(stream) {
    for (size_t e = 0; e < buckets.size(); ++e) {
      buckets[e].phase =
          e % 2 ? Exchange::Phase::Scatter : Exchange::Phase::Gather;
      buckets[e].round = bucketed ? static_cast<int64_t>(e / 2) : 0;
    }
    if (stream)
      stream->begin(plan);
  }

  /// Matrix k orthogonalized on `owner`: the owner gathers one copy of every
  /// (piece, summand) of `sorted` (the pieces sorted by pieceKey then rank:
  /// the replicas of a key adjacent) that it lacks, each from the replica
  /// that has sent least (the first minimum: ties go to the lowest rank);
  /// then every other holder in `holders` gets its new piece from the owner.
  /// `pair` is the gather's exchange.
  void gatherAndScatter(int64_t k, int64_t owner,
                        const std::vector<MatrixPiece> &sorted,
                        const std::vector<MatrixPiece> &holders, size_t pair) {
    auto own = std::find_if(holders.begin(), holders.end(),
                            [&](const MatrixPiece &p) { return p.rank == owner; });
    assert(own != holders.end() && "verifier guarantees owners hold");
    for (size_t i = 0; i < sorted.size();) {
      size_t j = i;
      while (j < sorted.size() && pieceKey(sorted[j]) == pieceKey(sorted[i]))
        ++j;
      if (pieceKey(sorted[i]) != pieceKey(*own)) {
        const MatrixPiece &p = *std::min_element(
            sorted.begin() + i, sorted.begin() + j,
            [&](auto &a, auto &b) { return sent[a.rank] < sent[b.rank]; });
        emit(pair, {p.rank, owner, k, p.rows, p.cols, p.summand});
      }
      i = j;
    }
    for (const MatrixPiece &p : holders)
      if (p.rank != owner)
        emit(pair + 1, {owner, p.rank, k, p.rows, p.cols, 0});
  }

  std::vector<Exchange> buckets;
  std::vector<int64_t> sent;

private:
  void emit(size_t exchange, const Transfer &t) {
    sent[t.src] += t.elements();
    if (stream)
      stream->add(static_cast<int64_t>(exchange), exchange % 2 == 0, t);
    else
      buckets[exchange].transfers.push_back(t);
  }

  ::muon::TransferSink *stream;
};

/// The pieces of a matrix sorted by pieceKey then rank, remade only when
/// the piece cache computes a new list (matrices of a batched parameter in
/// the same chunk of every batch dim share their pieces).
class SortedPieces {
public:
  const std::vector<MatrixPiece> &
  of(const std::vector<MatrixPiece> &pieces,
     const ::muon::MatrixPieceCache &cache) {
    if (version != cache.version()) {
      sorted = pieces;
      std::stable_sort(sorted.begin(), sorted.end(), [](auto &a, auto &b) {
        return pieceKey(a) < pieceKey(b);
      });
      version = cache.version();
    }
    return sorted;
  }

private:
  std::vector<MatrixPiece> sorted;
  uint64_t version = 0;
};

/// A redundant matrix's transfers: once per replica, each replica's owner
/// gathering its replica's pieces and scattering to its replica's holders
/// (under DDP a replica is one rank, and nothing moves).
void addReplicaTransfers(const ModelLayout &layout, const MuonMatrix &mm,
                         int64_t k, int64_t owner,
                         const std::vector<MatrixPiece> &pieces, size_t pair,
                         Plan &plan, TransferWriter &writer) {
  const ::muon::ParamLayout &pl = layout.layouts[mm.param];
  std::map<int64_t, std::vector<MatrixPiece>> byReplica;
  for (const MatrixPiece &p : pieces)
    byReplica[::muon::replicaOwnerOf(layout.mesh, pl, owner, p.rank)]
        .push_back(p);
  for (auto &[o, mine] : byReplica) {
    plan.nsMatrices[o].push_back(k);
    std::vector<MatrixPiece> sorted = mine;
    std::stable_sort(sorted.begin(), sorted.end(), [](auto &a, auto &b) {
      return pieceKey(a) < pieceKey(b);
    });
    writer.gatherAndScatter(k, o, sorted, mine, pair);
  }
}

} // namespace

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
  addGroups(model, plan);
  addParams(model, layout, plan);

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
  // Streamed only with the rounds known: the writer needs each transfer's
  // final exchange.
  if (!(stream && bucketed && distributed && withTransfers))
    stream = nullptr;
  TransferWriter writer(plan, bucketed, rounds, stream);
  ::muon::MatrixPieceCache pieceCache(layout.mesh);
  SortedPieces byKey;
  for (size_t k = 0; k < matrices.size(); ++k) {
    const MuonMatrix &mm = matrices[k];
    PlanMatrix pm;
    pm.param = ParamOp(layout.params[mm.param]).getSymName().str();
    pm.paramIndex = mm.param;
    pm.slice = layout.layouts[mm.param].slicedMatrices() ? mm.matrix : -1;
    pm.rows = mm.rows;
    pm.cols = mm.cols;
    pm.nsFlops = mm.nsFlops;
    if (distributed && owners[k] < 0)
      return model.emitError() << "matrix '" << mm.label
                               << "' has no owner; run muon-assign-owners "
                                  "first";
    if (distributed && !withTransfers) {
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
    const size_t pair = bucketed ? 2 * (*roundOf)[k] : 0;
    const int64_t owner = owners[k];
    pm.owner = owner;
    pm.redundant = redundantOf[k];
    if (pm.redundant) {
      addReplicaTransfers(layout, mm, static_cast<int64_t>(k), owner, pieces,
                          pair, plan, writer);
    } else {
      plan.nsMatrices[owner].push_back(k);
      writer.gatherAndScatter(static_cast<int64_t>(k), owner,
                              byKey.of(pieces, pieceCache), pieces, pair);
    }
    plan.matrices.push_back(std::move(pm));
  }
  if (distributed) {
    plan.exchanges = std::move(writer.buckets);
    Exchange reduce = adamwReductions(plan, writer.sent);
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
  // The IR's rounds, with the options recorded (packing rounds of its own
  // here would re-bucket every transfer once more, for nothing).
  if (::muon::Status used = ::muon::useRounds(*plan, options, std::move(rounds));
      !used.ok())
    return model.emitError() << used.message();

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
