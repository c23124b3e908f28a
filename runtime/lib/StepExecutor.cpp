//===- StepExecutor.cpp - One rank's side of a compiled step --------------===//
#include "muon/Runtime/StepExecutor.h"

#include "muon/Plan/PlanFile.h"
#include "muon/Runtime/Kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace muon::runtime {

uint64_t planHash(const Plan &plan) {
  uint64_t hash = 1469598103934665603ull;
  for (char c : renderPlan(plan)) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

StepExecutor::StepExecutor(const Plan &plan, Communicator &comm,
                           ExecutorOptions options)
    : planRef(plan), comm(comm), options(options) {}

bool StepExecutor::initialize(std::string &error) {
  const Plan &plan = planRef;
  rank = comm.rank();
  if (comm.size() != plan.worldSize) {
    error = "the plan is for " + std::to_string(plan.worldSize) +
            " ranks but the run has " + std::to_string(comm.size());
    return false;
  }
  // Every rank must execute the same plan: exchanges are collectives, and
  // a rank with another plan would pair wrong buffers or wait forever.
  std::vector<uint64_t> hashes;
  if (!comm.allGather(planHash(plan), hashes, options.timeoutSeconds, error)) {
    error = "start-up: comparing plans: " + error;
    return false;
  }
  std::vector<int64_t> differ;
  for (size_t r = 0; r < hashes.size(); ++r)
    if (hashes[r] != hashes[0])
      differ.push_back(static_cast<int64_t>(r));
  if (!differ.empty()) {
    error = "ranks " + formatRanks(differ) +
            " hold a plan different from rank 0's; every rank must load the "
            "same plan";
    return false;
  }

  locals.assign(plan.params.size(), {});
  std::vector<int64_t> coords = plan.mesh.coordsOfRank(rank);
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const PlanParam &p = plan.params[i];
    LocalParam &local = locals[i];
    if (!p.layout.inSubmesh(coords))
      continue;
    local.box = p.layout.localBox(plan.mesh, coords);
    local.elements = 1;
    for (const Range &r : local.box)
      local.elements *= r.size();
    for (int64_t axis : p.layout.partialAxes)
      local.summand = local.summand * plan.mesh.shape[axis] + coords[axis];
    if (!plan.distributed && local.elements &&
        (p.layout.isSharded() || p.layout.isPartial())) {
      error = "parameter '" + p.name +
              "' is sharded but the plan has no distributed config";
      return false;
    }
    if (!local.elements)
      continue;
    if (p.muon) {
      local.momentum.assign(local.elements, 0.0f);
      local.update.assign(local.elements, 0.0f);
      local.orthogonalized.assign(local.elements, 0.0f);
    } else {
      local.expAvg.assign(local.elements, 0.0f);
      local.expAvgSq.assign(local.elements, 0.0f);
    }
  }
  views.clear();
  for (const Exchange &ex : plan.exchanges)
    views.push_back(rankExchangeView(ex, rank));
  batchesByRound.assign(plan.rounds.size(), {});
  if (rank < static_cast<int64_t>(plan.nsBatches.size()))
    for (const NsBatch &b : plan.nsBatches[rank])
      if (b.round >= 0 && b.round < static_cast<int64_t>(plan.rounds.size()))
        batchesByRound[b.round].push_back(&b);
  return true;
}

const std::vector<Range> &StepExecutor::localBox(int64_t param) const {
  return locals[param].box;
}
int64_t StepExecutor::localElements(int64_t param) const {
  return locals[param].elements;
}
int64_t StepExecutor::localSummand(int64_t param) const {
  return locals[param].summand;
}

void StepExecutor::bind(int64_t param, float *values, const float *grad) {
  locals[param].values = values;
  locals[param].grad = grad;
}

StepExecutor::Piece StepExecutor::piece(int64_t k) const {
  const PlanMatrix &m = planRef.matrices[k];
  const LocalParam &local = locals[m.paramIndex];
  Piece piece;
  if (!local.elements)
    return piece;
  const std::vector<int64_t> &shape = planRef.params[m.paramIndex].layout.shape;
  size_t batchDims = shape.size() - 2;
  // The slice's coordinates over the batch dims, then its place among the
  // local slices (row-major over the local box).
  int64_t slice = std::max<int64_t>(m.slice, 0), localSlice = 0;
  std::vector<int64_t> coord(batchDims);
  for (size_t d = batchDims; d-- > 0;) {
    coord[d] = slice % shape[d];
    slice /= shape[d];
  }
  for (size_t d = 0; d < batchDims; ++d) {
    const Range &r = local.box[d];
    if (coord[d] < r.begin || coord[d] >= r.end)
      return piece;
    localSlice = localSlice * r.size() + (coord[d] - r.begin);
  }
  piece.rows = local.box[batchDims];
  piece.cols = local.box[batchDims + 1];
  piece.offset = localSlice * piece.elements();
  return piece;
}

namespace {
/// Writes / reads floats in the wire dtype.
struct Wire {
  int64_t bytes = 4;
  void put(const float *src, int64_t n, char *dst) const {
    if (bytes == 4) {
      std::memcpy(dst, src, n * 4);
      return;
    }
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h = toBf16Bits(src[i]);
      std::memcpy(dst + 2 * i, &h, 2);
    }
  }
  float get(const char *src, int64_t i) const {
    if (bytes == 4) {
      float v;
      std::memcpy(&v, src + 4 * i, 4);
      return v;
    }
    uint16_t h;
    std::memcpy(&h, src + 2 * i, 2);
    return fromBf16Bits(h);
  }
  /// What a value is after a trip through the wire.
  float round(float v) const { return bytes == 4 ? v : roundToBf16(v); }
};
} // namespace

std::vector<float> &StepExecutor::fullMatrix(int64_t k) {
  auto it = full.find(k);
  if (it != full.end())
    return it->second;
  const PlanMatrix &m = planRef.matrices[k];
  std::vector<float> &matrix = full[k];
  matrix.assign(m.rows * m.cols, 0.0f);
  // The owner's own piece enters as if it had crossed the wire, so that the
  // values Newton-Schulz sees do not depend on who holds what.
  Piece own = piece(k);
  if (own.offset >= 0) {
    Wire wire{planRef.wireBytes};
    const float *src = locals[m.paramIndex].update.data() + own.offset;
    for (int64_t r = own.rows.begin; r < own.rows.end; ++r)
      for (int64_t c = own.cols.begin; c < own.cols.end; ++c)
        matrix[r * m.cols + c] += wire.round(*src++);
  }
  return matrix;
}

std::string StepExecutor::describeExchange(int64_t index) const {
  const Exchange &ex = planRef.exchanges[index];
  switch (ex.phase) {
  case Exchange::Phase::Gather:
    return "exchange " + std::to_string(index) + " (gather of round " +
           std::to_string(ex.round) + ")";
  case Exchange::Phase::Scatter:
    return "exchange " + std::to_string(index) + " (scatter of round " +
           std::to_string(ex.round) + ")";
  case Exchange::Phase::Reduce:
    break;
  }
  return "exchange " + std::to_string(index) + " (AdamW reduce)";
}

bool StepExecutor::startExchange(int64_t index, std::string &error) {
  const Exchange &ex = planRef.exchanges[index];
  const RankExchangeView &view = views[index];
  Wire wire{planRef.wireBytes};
  InFlight &flight = inFlight[index];
  flight.send.assign(view.sendElements * wire.bytes, 0);
  flight.recv.assign(view.recvElements * wire.bytes, 0);
  for (const PeerSlice &slice : view.send) {
    char *out = flight.send.data() + slice.offset * wire.bytes;
    for (int64_t ti : slice.transfers) {
      if (ex.phase == Exchange::Phase::Reduce) {
        const Reduction &red = ex.reductions[ti];
        const LocalParam &local = locals[red.param];
        wire.put(local.grad, red.elements, out);
        out += red.elements * wire.bytes;
        continue;
      }
      const Transfer &t = ex.transfers[ti];
      const PlanMatrix &m = planRef.matrices[t.matrix];
      const int64_t width = t.cols.size();
      if (ex.phase == Exchange::Phase::Gather) {
        // A box of this rank's momentum-updated piece, for the owner.
        Piece from = piece(t.matrix);
        const float *base = locals[m.paramIndex].update.data() + from.offset;
        for (int64_t r = t.rows.begin; r < t.rows.end; ++r) {
          wire.put(base + (r - from.rows.begin) * from.cols.size() +
                       (t.cols.begin - from.cols.begin),
                   width, out);
          out += width * wire.bytes;
        }
      } else {
        // A holder's new piece, cut from the orthogonalized matrix.
        const std::vector<float> &matrix = full.at(t.matrix);
        for (int64_t r = t.rows.begin; r < t.rows.end; ++r) {
          wire.put(matrix.data() + r * m.cols + t.cols.begin, width, out);
          out += width * wire.bytes;
        }
      }
    }
  }
  AllToAllV call;
  int64_t world = planRef.worldSize;
  call.sendBuffer = flight.send.data();
  call.recvBuffer = flight.recv.data();
  call.elementBytes = wire.bytes;
  call.sendCounts.assign(world, 0);
  call.sendOffsets.assign(world, 0);
  call.recvCounts.assign(world, 0);
  call.recvOffsets.assign(world, 0);
  for (const PeerSlice &s : view.send) {
    call.sendCounts[s.peer] = s.elements;
    call.sendOffsets[s.peer] = s.offset;
    lastCounters.bytesSent += s.elements * wire.bytes;
  }
  for (const PeerSlice &s : view.recv) {
    call.recvCounts[s.peer] = s.elements;
    call.recvOffsets[s.peer] = s.offset;
    lastCounters.bytesReceived += s.elements * wire.bytes;
  }
  // The scattered matrices are packed: their buffers are free now, which
  // is what the schedule's memory budget assumes.
  if (ex.phase == Exchange::Phase::Scatter)
    for (int64_t k : planRef.rounds[ex.round])
      if (planRef.matrices[k].owner == rank)
        full.erase(k);
  if (!comm.start(call, flight.pending, error)) {
    error = "starting " + describeExchange(index) + ": " + error;
    return false;
  }
  return true;
}

bool StepExecutor::finishExchange(int64_t index, std::string &error) {
  InFlight &flight = inFlight.at(index);
  if (!comm.wait(flight.pending, options.timeoutSeconds, error)) {
    error = "waiting for " + describeExchange(index) + ": " + error;
    return false;
  }
  const Exchange &ex = planRef.exchanges[index];
  const RankExchangeView &view = views[index];
  Wire wire{planRef.wireBytes};
  if (ex.phase == Exchange::Phase::Reduce) {
    // Each AdamW piece's gradient is the sum of its summands, added in
    // summand order (so a replicated holder and the reference agree).
    std::map<int64_t, std::vector<std::pair<int64_t, const char *>>> parts;
    for (const PeerSlice &slice : view.recv) {
      const char *in = flight.recv.data() + slice.offset * wire.bytes;
      for (int64_t ti : slice.transfers) {
        const Reduction &red = ex.reductions[ti];
        parts[red.param].push_back({red.summand, in});
        in += red.elements * wire.bytes;
      }
    }
    for (auto &[param, received] : parts) {
      LocalParam &local = locals[param];
      std::vector<char> own(local.elements * wire.bytes);
      wire.put(local.grad, local.elements, own.data());
      received.push_back({local.summand, own.data()});
      std::sort(received.begin(), received.end(),
                [](auto &a, auto &b) { return a.first < b.first; });
      local.summedGrad.assign(local.elements, 0.0f);
      for (auto &[summand, data] : received)
        for (int64_t e = 0; e < local.elements; ++e)
          local.summedGrad[e] += wire.get(data, e);
    }
  } else {
    for (const PeerSlice &slice : view.recv) {
      const char *in = flight.recv.data() + slice.offset * wire.bytes;
      int64_t at = 0;
      for (int64_t ti : slice.transfers) {
        const Transfer &t = ex.transfers[ti];
        const PlanMatrix &m = planRef.matrices[t.matrix];
        if (ex.phase == Exchange::Phase::Gather) {
          std::vector<float> &matrix = fullMatrix(t.matrix);
          for (int64_t r = t.rows.begin; r < t.rows.end; ++r)
            for (int64_t c = t.cols.begin; c < t.cols.end; ++c)
              matrix[r * m.cols + c] += wire.get(in, at++);
        } else {
          Piece to = piece(t.matrix);
          float *base = locals[m.paramIndex].orthogonalized.data() + to.offset;
          for (int64_t r = t.rows.begin; r < t.rows.end; ++r)
            for (int64_t c = t.cols.begin; c < t.cols.end; ++c)
              base[(r - to.rows.begin) * to.cols.size() + (c - to.cols.begin)] =
                  wire.get(in, at++);
        }
      }
    }
  }
  inFlight.erase(index);
  return true;
}

void StepExecutor::runNewtonSchulz(int64_t round) {
  Wire wire{planRef.wireBytes};
  for (const NsBatch *batch : batchesByRound[round])
    for (int64_t k : batch->matrices) {
      const PlanMatrix &m = planRef.matrices[k];
      std::vector<float> &matrix = fullMatrix(k);
      lastCounters.nsFlops +=
          newtonSchulz(matrix.data(), m.rows, m.cols, planRef.muon.coefficients,
                       planRef.muon.eps, workspace);
      // Keep the exchanges in flight moving between matrices.
      comm.progress();
      // The orthogonalizing rank's own piece, as a holder would receive it.
      Piece own = piece(k);
      if (own.offset < 0)
        continue;
      float *dst = locals[m.paramIndex].orthogonalized.data() + own.offset;
      for (int64_t r = own.rows.begin; r < own.rows.end; ++r)
        for (int64_t c = own.cols.begin; c < own.cols.end; ++c)
          *dst++ = wire.round(matrix[r * m.cols + c]);
    }
}

void StepExecutor::applyRound(int64_t round) {
  for (int64_t k : planRef.rounds[round]) {
    full.erase(k);
    Piece own = piece(k);
    if (own.offset < 0)
      continue;
    const PlanMatrix &m = planRef.matrices[k];
    LocalParam &local = locals[m.paramIndex];
    applyMuonUpdate(local.values + own.offset,
                    local.orthogonalized.data() + own.offset, own.elements(),
                    planRef.muon, adjustedLr(planRef.muon, m.rows, m.cols));
  }
}

void StepExecutor::runAdamW() {
  for (size_t i = 0; i < locals.size(); ++i) {
    LocalParam &local = locals[i];
    if (planRef.params[i].muon || !local.elements)
      continue;
    // Summed by this step's reduce when the gradient has several summands.
    const float *grad =
        local.summedGrad.empty() ? local.grad : local.summedGrad.data();
    ++local.adamwStep;
    adamwUpdate(local.values, grad, local.expAvg.data(), local.expAvgSq.data(),
                local.elements, planRef.adamw, local.adamwStep);
  }
}

bool StepExecutor::step(StepResult &result, std::string &error) {
  lastCounters = {};
  result = {};
  for (LocalParam &local : locals)
    local.summedGrad.clear();
  // Non-finite gradients anywhere skip the step everywhere, before any
  // state changes.
  const int64_t none = std::numeric_limits<int64_t>::max();
  int64_t bad = none;
  for (size_t i = 0; i < locals.size() && bad == none; ++i)
    for (int64_t e = 0; e < locals[i].elements; ++e)
      if (!std::isfinite(locals[i].grad[e])) {
        bad = static_cast<int64_t>(i);
        break;
      }
  int64_t firstBad = none;
  if (!comm.allReduceMin(bad, firstBad, options.timeoutSeconds, error)) {
    error = "checking gradients for NaN/Inf: " + error;
    return false;
  }
  if (firstBad != none) {
    int64_t badRank = none;
    if (!comm.allReduceMin(bad == firstBad ? rank : none, badRank,
                           options.timeoutSeconds, error))
      return false;
    result.nonFiniteParam = firstBad;
    result.nonFiniteRank = badRank;
    return true;
  }

  using Kind = ScheduleStep::Kind;
  for (const ScheduleStep &s : planRef.schedule) {
    switch (s.kind) {
    case Kind::Momentum:
      for (size_t i = 0; i < locals.size(); ++i)
        if (planRef.params[i].muon && locals[i].elements)
          momentumUpdate(locals[i].grad, locals[i].momentum.data(),
                         locals[i].update.data(), locals[i].elements,
                         planRef.muon);
      break;
    case Kind::Start:
      if (!startExchange(s.index, error))
        return false;
      break;
    case Kind::Done:
      if (!finishExchange(s.index, error))
        return false;
      break;
    case Kind::NewtonSchulz:
      runNewtonSchulz(s.index);
      break;
    case Kind::ApplyUpdate:
      applyRound(s.index);
      break;
    case Kind::AdamW:
      runAdamW();
      break;
    }
  }
  full.clear();
  result.applied = true;
  return true;
}

} // namespace muon::runtime
