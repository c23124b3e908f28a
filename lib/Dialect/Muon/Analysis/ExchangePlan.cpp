//===- ExchangePlan.cpp - The exchanges of a zero-redundancy step ---------===//
#include "muon/Dialect/Muon/Analysis/ExchangePlan.h"
#include "muon/Dialect/Muon/Analysis/Figures.h"

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

FailureOr<Plan> mlir::muon::buildPlan(ModelOp model, const ModelLayout &layout,
                                      StringRef wireDtype,
                                      bool withTransfers) {
  Plan plan;
  plan.worldSize = layout.mesh.numDevices();
  plan.wireDtype = wireDtype.str();
  plan.wireBytes = ::muon::wireDtypeBytes(plan.wireDtype);
  if (!plan.wireBytes)
    return model.emitError()
           << "unknown wire dtype '" << wireDtype << "'; expected f32 or bf16";
  plan.nsMatrices.resize(plan.worldSize);
  plan.mesh = layout.mesh;
  for (size_t i = 0; i < layout.params.size(); ++i) {
    ParamOp param = layout.params[i];
    ::muon::PlanParam pp;
    pp.name = param.getSymName().str();
    Type elem = param.getTensorType().getElementType();
    pp.dtype = elem.isBF16() ? "bf16" : elem.isF16() ? "f16" : "f32";
    pp.muon = param.isMuon();
    pp.layout = layout.layouts[i];
    plan.params.push_back(std::move(pp));
  }
  for (OptimizerOp opt : model.getBodyBlock().getOps<OptimizerOp>()) {
    plan.muon.lr = opt.getLr().convertToDouble();
    plan.muon.weightDecay = opt.getWeightDecay().convertToDouble();
    plan.muon.momentum = opt.getMomentum().convertToDouble();
    plan.muon.eps = opt.getEps().convertToDouble();
    plan.muon.nesterov = opt.getNesterov();
    plan.muon.nsSteps = static_cast<int64_t>(opt.getNsSteps());
    plan.muon.adjustLr = opt.getAdjustLr().str();
  }
  for (int64_t step = 0; step < plan.muon.nsSteps; ++step) {
    std::array<double, 3> abc = {3.4445, -4.775, 2.0315};
    for (OptimizerOp opt : model.getBodyBlock().getOps<OptimizerOp>())
      abc = opt.getCoefficients(step);
    plan.muon.coefficients.push_back(abc);
  }
  for (AdamWOp adamw : model.getBodyBlock().getOps<AdamWOp>()) {
    plan.adamw.lr = adamw.getLr().convertToDouble();
    plan.adamw.eps = adamw.getEps().convertToDouble();
    plan.adamw.weightDecay = adamw.getWeightDecay().convertToDouble();
    if (std::optional<ArrayRef<double>> betas = adamw.getBetas()) {
      plan.adamw.beta1 = (*betas)[0];
      plan.adamw.beta2 = (*betas)[1];
    }
  }

  std::vector<MuonMatrix> matrices = collectMuonMatrices(model, layout);
  std::vector<int64_t> owners = ownersFromAssignments(model, layout, matrices);
  bool distributed = !model.getBodyBlock().getOps<DistributedOp>().empty();
  plan.distributed = distributed;

  Exchange gather, scatter;
  gather.phase = Exchange::Phase::Gather;
  scatter.phase = Exchange::Phase::Scatter;
  std::vector<int64_t> sent(plan.worldSize, 0);
  for (size_t k = 0; k < matrices.size(); ++k) {
    const MuonMatrix &mm = matrices[k];
    const std::vector<int64_t> &shape = layout.layouts[mm.param].shape;
    PlanMatrix pm;
    pm.param = ParamOp(layout.params[mm.param]).getSymName().str();
    pm.paramIndex = mm.param;
    pm.slice = shape.size() > 2 ? mm.matrix : -1;
    pm.rows = mm.rows;
    pm.cols = mm.cols;
    pm.nsFlops = mm.nsFlops;
    if (distributed && !withTransfers) {
      if (owners[k] < 0)
        return model.emitError() << "matrix '" << mm.label
                                 << "' has no owner; run muon-assign-owners "
                                    "first";
      pm.owner = owners[k];
      plan.nsMatrices[owners[k]].push_back(k);
      plan.matrices.push_back(std::move(pm));
      continue;
    }
    std::vector<MatrixPiece> pieces = matrixPieces(layout, mm.param, mm.matrix);

    if (!distributed) {
      // Single-device algorithm on every rank: each holder (with the whole
      // matrix, as nothing is sharded) orthogonalizes it.
      for (const MatrixPiece &p : pieces)
        plan.nsMatrices[p.rank].push_back(k);
      plan.matrices.push_back(std::move(pm));
      continue;
    }
    int64_t owner = owners[k];
    if (owner < 0)
      return model.emitError() << "matrix '" << mm.label
                               << "' has no owner; run muon-assign-owners "
                                  "first";
    pm.owner = owner;
    plan.nsMatrices[owner].push_back(k);
    auto ownPiece = std::find_if(pieces.begin(), pieces.end(),
                                 [&](auto &p) { return p.rank == owner; });
    assert(ownPiece != pieces.end() && "verifier guarantees owners hold");
    auto key = [](const MatrixPiece &p) {
      return std::make_tuple(p.rows.begin, p.cols.begin, p.summand);
    };
    // Gather: one copy of every (piece, summand) the owner lacks. Replicas
    // of the same summand are adjacent after sorting by key then rank.
    std::vector<MatrixPiece> byKey = pieces;
    std::stable_sort(byKey.begin(), byKey.end(),
                     [&](auto &a, auto &b) { return key(a) < key(b); });
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
        gather.transfers.push_back(t);
      }
      i = j;
    }
    // Scatter: every other holder gets its new piece from the owner.
    for (const MatrixPiece &p : pieces)
      if (p.rank != owner) {
        Transfer t{owner, p.rank, static_cast<int64_t>(k), p.rows, p.cols, 0};
        sent[owner] += t.elements();
        scatter.transfers.push_back(t);
      }
    plan.matrices.push_back(std::move(pm));
  }
  if (distributed) {
    plan.exchanges.push_back(std::move(gather));
    plan.exchanges.push_back(std::move(scatter));
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
                                          bool withTransfers) {
  StringRef wire = wireWithoutConfig;
  for (DistributedOp d : model.getBodyBlock().getOps<DistributedOp>())
    wire = d.getWireDtype();
  FailureOr<Plan> plan = buildPlan(model, layout, wire, withTransfers);
  if (failed(plan))
    return failure();
  SmallVector<RoundOp> roundOps(model.getBodyBlock().getOps<RoundOp>());
  if (roundOps.empty())
    return plan;

  // Rounds from the IR (the verifier made them a partition).
  std::map<std::pair<std::string, int64_t>, int64_t> indexOf;
  for (size_t k = 0; k < plan->matrices.size(); ++k)
    indexOf[{plan->matrices[k].param,
             std::max<int64_t>(plan->matrices[k].slice, 0)}] = k;
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
  ::muon::ScheduleOptions options = scheduleOptionsOf(model);
  std::string error;
  // Records the options; the rounds it packs are replaced by the IR's.
  if (!::muon::packRounds(*plan, options, error))
    return model.emitError() << error;
  ::muon::setRounds(*plan, std::move(rounds));

  // The sequence from the IR, if there is one.
  for (ScheduleOp schedule : model.getBodyBlock().getOps<ScheduleOp>()) {
    plan->schedule.clear();
    for (Operation &op : schedule.getBodyBlock()) {
      using Kind = ::muon::ScheduleStep::Kind;
      if (auto start = dyn_cast<ExchangeStartOp>(op)) {
        int64_t e = 2 * static_cast<int64_t>(start.getRound()) +
                    (start.getPhase() == "scatter" ? 1 : 0);
        plan->schedule.push_back({Kind::Start, e});
      } else if (auto done = dyn_cast<ExchangeDoneOp>(op)) {
        auto start = done.getToken().getDefiningOp<ExchangeStartOp>();
        int64_t e = 2 * static_cast<int64_t>(start.getRound()) +
                    (start.getPhase() == "scatter" ? 1 : 0);
        plan->schedule.push_back({Kind::Done, e});
      } else if (auto ns = dyn_cast<NewtonSchulzOp>(op)) {
        plan->schedule.push_back(
            {Kind::NewtonSchulz, static_cast<int64_t>(ns.getRound())});
      }
    }
  }
  return plan;
}
