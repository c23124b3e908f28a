//===- StepExecutor.cpp - One rank's side of a compiled step --------------===//
#include "muon/Runtime/StepExecutor.h"

#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Support/Fnv.h"

#include <algorithm>
#include <limits>

namespace muon::runtime {

uint64_t planHash(const Plan &plan) {
  // A rank's part differs from every other rank's by design: what they must
  // share is the file and the parts every rank reads whole.
  if (plan.isSlice())
    return planSliceIdentity(plan);
  return fnv1a(renderPlan(plan));
}

StepExecutor::StepExecutor(const Plan &plan, Communicator &comm,
                           Device &device, ExecutorOptions options)
    : planRef(plan), comm(comm), device(device), options(options) {}

DeviceBuffer StepExecutor::allocate(int64_t bytes, const char *what,
                                    std::string &error) {
  DeviceBuffer buffer(device, bytes);
  if (!buffer.ok() && error.empty())
    error = std::string("the ") + device.name() + " device has no room for " +
            what + " (" + std::to_string(bytes) + " bytes)";
  return buffer;
}

bool StepExecutor::initialize(std::string &error) {
  const Plan &plan = planRef;
  myRank = comm.rank();
  if (comm.size() != plan.worldSize) {
    error = "the plan is for " + std::to_string(plan.worldSize) +
            " ranks but the run has " + std::to_string(comm.size());
    return false;
  }
  wire = parseDType(plan.wireDtype).value_or(DType::F32);
  nsDtype = plan.muon.nsDtype == "auto"
                ? device.defaultNsDtype()
                : parseDType(plan.muon.nsDtype).value_or(DType::F32);
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

  locals.clear();
  locals.resize(plan.params.size());
  std::vector<int64_t> coords = plan.mesh.coordsOfRank(myRank);
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const PlanParam &p = plan.params[i];
    LocalParam &local = locals[i];
    local.dtype = parseDType(p.dtype).value_or(DType::F32);
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
    int64_t bytes = local.elements * 4;
    if (p.muon) {
      local.momentum = allocate(bytes, "momentum", error);
      local.update = allocate(bytes, "updates", error);
      local.orthogonalized = allocate(bytes, "updates", error);
    } else {
      local.expAvg = allocate(bytes, "AdamW moments", error);
      local.expAvgSq = allocate(bytes, "AdamW moments", error);
      if (p.layout.isPartial())
        local.summedGrad = allocate(bytes, "summed gradients", error);
    }
    if (!error.empty())
      return false;
  }
  views.clear();
  for (const Exchange &ex : plan.exchanges)
    views.push_back(rankExchangeView(ex, myRank));
  batchesByRound.assign(plan.rounds.size(), {});
  slotOf.clear();
  if (myRank < static_cast<int64_t>(plan.nsBatches.size()))
    for (const NsBatch &b : plan.nsBatches[myRank]) {
      if (b.round >= 0 && b.round < static_cast<int64_t>(plan.rounds.size()))
        batchesByRound[b.round].push_back(&b);
      for (size_t i = 0; i < b.matrices.size(); ++i)
        slotOf[b.matrices[i]] = {&b, static_cast<int64_t>(i)};
    }
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
DType StepExecutor::dtype(int64_t param) const { return locals[param].dtype; }

void StepExecutor::bind(int64_t param, void *values, const void *grad) {
  locals[param].values = values;
  locals[param].grad = grad;
}

bool StepExecutor::allBound() const {
  for (const LocalParam &local : locals)
    if (local.elements && (!local.values || !local.grad))
      return false;
  return true;
}

StepExecutor::State StepExecutor::state(int64_t param) {
  LocalParam &local = locals[param];
  return {local.momentum.floats(), local.expAvg.floats(),
          local.expAvgSq.floats(), &local.adamwStep};
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

float *StepExecutor::fullMatrix(int64_t k, std::string &error) {
  auto it = full.find(k);
  if (it != full.end())
    return it->second;
  const PlanMatrix &m = planRef.matrices[k];
  auto slot = slotOf.find(k);
  if (slot == slotOf.end()) { // the plan validator rules this out
    error = "matrix " + m.label() + " reaches rank " + std::to_string(myRank) +
            " but is in none of its Newton-Schulz batches";
    return nullptr;
  }
  const NsBatch *batch = slot->second.batch;
  DeviceBuffer &buffer = batchBuffers[batch];
  if (!buffer.data()) {
    buffer = allocate(static_cast<int64_t>(batch->matrices.size()) * m.rows *
                          m.cols * 4,
                      "gathered matrices", error);
    if (!buffer.ok()) {
      batchBuffers.erase(batch);
      return nullptr;
    }
  }
  float *matrix = buffer.floats() + slot->second.index * m.rows * m.cols;
  full[k] = matrix;
  // The owner's own piece enters as if it had crossed the wire, so that the
  // values Newton-Schulz sees do not depend on who holds what.
  Piece own = piece(k);
  if (own.offset >= 0) {
    BoxCopy c;
    c.src = locals[m.paramIndex].update.floats() + own.offset;
    c.srcStride = own.cols.size();
    c.dst = matrix + own.rows.begin * m.cols + own.cols.begin;
    c.dstStride = m.cols;
    c.rows = own.rows.size();
    c.cols = own.cols.size();
    c.through = wire;
    c.accumulate = true;
    device.copyBox(c);
  }
  return matrix;
}

std::string StepExecutor::describeExchange(int64_t index) const {
  const Exchange &ex = planRef.exchanges[index];
  std::string what = "exchange " + std::to_string(index) + " (";
  if (ex.phase == Exchange::Phase::Reduce)
    return what + "AdamW reduce)";
  return what + phaseName(ex.phase) + " of round " + std::to_string(ex.round) +
         ")";
}

bool StepExecutor::startExchange(int64_t index, std::string &error) {
  const Exchange &ex = planRef.exchanges[index];
  const RankExchangeView &view = views[index];
  const int64_t width = dtypeBytes(wire);
  InFlight &flight = inFlight[index];
  flight.send = allocate(view.sendElements * width, "exchange buffers", error);
  flight.recv = allocate(view.recvElements * width, "exchange buffers", error);
  if (!error.empty())
    return false;
  char *sendBytes = static_cast<char *>(flight.send.data());
  for (const PeerSlice &slice : view.send) {
    int64_t at = slice.offset; // in wire elements
    for (int64_t ti : slice.transfers) {
      BoxCopy c;
      c.dst = sendBytes + at * width;
      c.dstType = wire;
      if (ex.phase == Exchange::Phase::Reduce) {
        // This rank's summand of an AdamW piece, for a holder of another.
        const Reduction &red = ex.reductions[ti];
        const LocalParam &local = locals[red.param];
        c.src = local.grad;
        c.srcType = local.dtype;
        c.rows = 1;
        c.cols = red.elements;
        device.copyBox(c);
        at += red.elements;
        continue;
      }
      const Transfer &t = ex.transfers[ti];
      const PlanMatrix &m = planRef.matrices[t.matrix];
      c.rows = t.rows.size();
      c.cols = t.cols.size();
      c.dstStride = c.cols;
      if (ex.phase == Exchange::Phase::Gather) {
        // A box of this rank's momentum-updated piece, for the owner.
        Piece from = piece(t.matrix);
        c.src = locals[m.paramIndex].update.floats() + from.offset +
                (t.rows.begin - from.rows.begin) * from.cols.size() +
                (t.cols.begin - from.cols.begin);
        c.srcStride = from.cols.size();
      } else {
        // A holder's new piece, cut from the orthogonalized matrix.
        c.src = full.at(t.matrix) + t.rows.begin * m.cols +
                t.cols.begin;
        c.srcStride = m.cols;
      }
      device.copyBox(c);
      at += t.elements();
    }
  }
  AllToAllV call;
  int64_t world = planRef.worldSize;
  call.sendBuffer = flight.send.data();
  call.recvBuffer = flight.recv.data();
  call.elementBytes = width;
  call.sendCounts.assign(world, 0);
  call.sendOffsets.assign(world, 0);
  call.recvCounts.assign(world, 0);
  call.recvOffsets.assign(world, 0);
  for (const PeerSlice &s : view.send) {
    call.sendCounts[s.peer] = s.elements;
    call.sendOffsets[s.peer] = s.offset;
    lastCounters.bytesSent += s.elements * width;
  }
  for (const PeerSlice &s : view.recv) {
    call.recvCounts[s.peer] = s.elements;
    call.recvOffsets[s.peer] = s.offset;
    lastCounters.bytesReceived += s.elements * width;
  }
  // The scattered matrices are packed: their buffers are free now, which
  // is what the schedule's memory budget assumes. (The copies may still be
  // queued on the device; its memory is released in queue order.)
  if (ex.phase == Exchange::Phase::Scatter) {
    for (int64_t k : planRef.rounds[ex.round])
      if (planRef.matrices[k].owner == myRank)
        full.erase(k);
    for (const NsBatch *batch : batchesByRound[ex.round])
      batchBuffers.erase(batch);
  }
  // The packing copies are queued on the device, not necessarily done: a
  // transport that reads the buffers from outside the device's queue waits
  // for it (Communicator::start).
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
  const int64_t width = dtypeBytes(wire);
  const char *recvBytes = static_cast<const char *>(flight.recv.data());
  if (ex.phase == Exchange::Phase::Reduce) {
    // Each AdamW piece's gradient is the sum of its summands, added in
    // summand order (so a replicated holder and the reference agree).
    std::map<int64_t, std::vector<std::pair<int64_t, BoxCopy>>> parts;
    for (const PeerSlice &slice : view.recv) {
      int64_t at = slice.offset;
      for (int64_t ti : slice.transfers) {
        const Reduction &red = ex.reductions[ti];
        BoxCopy c;
        c.src = recvBytes + at * width;
        c.srcType = wire;
        c.rows = 1;
        c.cols = red.elements;
        parts[red.param].push_back({red.summand, c});
        at += red.elements;
      }
    }
    for (auto &[param, received] : parts) {
      LocalParam &local = locals[param];
      // The rank's own summand, as if it had crossed the wire.
      BoxCopy own;
      own.src = local.grad;
      own.srcType = local.dtype;
      own.rows = 1;
      own.cols = local.elements;
      own.through = wire;
      received.push_back({local.summand, own});
      std::sort(received.begin(), received.end(),
                [](auto &a, auto &b) { return a.first < b.first; });
      device.zero(local.summedGrad.data(), local.elements * 4);
      for (auto &[summand, c] : received) {
        c.dst = local.summedGrad.data();
        c.accumulate = true;
        device.copyBox(c);
      }
      local.summed = true;
    }
  } else {
    for (const PeerSlice &slice : view.recv) {
      int64_t at = slice.offset;
      for (int64_t ti : slice.transfers) {
        const Transfer &t = ex.transfers[ti];
        const PlanMatrix &m = planRef.matrices[t.matrix];
        BoxCopy c;
        c.src = recvBytes + at * width;
        c.srcType = wire;
        c.srcStride = t.cols.size();
        c.rows = t.rows.size();
        c.cols = t.cols.size();
        if (ex.phase == Exchange::Phase::Gather) {
          float *matrix = fullMatrix(t.matrix, error);
          if (!matrix)
            return false;
          c.dst = matrix + t.rows.begin * m.cols + t.cols.begin;
          c.dstStride = m.cols;
          c.accumulate = true;
        } else {
          Piece to = piece(t.matrix);
          c.dst = locals[m.paramIndex].orthogonalized.floats() + to.offset +
                  (t.rows.begin - to.rows.begin) * to.cols.size() +
                  (t.cols.begin - to.cols.begin);
          c.dstStride = to.cols.size();
        }
        device.copyBox(c);
        at += t.elements();
      }
    }
  }
  inFlight.erase(index);
  return true;
}

double StepExecutor::sinceStep() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       traceZero)
      .count();
}

bool StepExecutor::runNewtonSchulz(int64_t round, std::string &error) {
  const int64_t limit = std::max<int64_t>(1, device.nsBatchLimit());
  for (const NsBatch *batch : batchesByRound[round]) {
    const double traceBegin = options.trace ? sinceStep() : 0;
    const int64_t flopsBefore = lastCounters.nsFlops;
    // Every matrix of the batch, in its place in the batch's buffer (a
    // matrix no gather reached starts from this rank's own piece).
    for (int64_t k : batch->matrices)
      if (!fullMatrix(k, error))
        return false;
    const int64_t count = static_cast<int64_t>(batch->matrices.size());
    for (int64_t first = 0; first < count; first += limit) {
      lastCounters.nsFlops += device.newtonSchulz(
          full[batch->matrices[first]], std::min(limit, count - first),
          batch->rows, batch->cols, planRef.muon.coefficients,
          planRef.muon.eps, nsDtype);
      // Keep the exchanges in flight moving between calls.
      comm.progress();
    }
    for (int64_t k : batch->matrices) {
      const PlanMatrix &m = planRef.matrices[k];
      float *matrix = full[k];
      // The orthogonalizing rank's own piece, as a holder would receive it.
      Piece own = piece(k);
      if (own.offset < 0)
        continue;
      BoxCopy c;
      c.src = matrix + own.rows.begin * m.cols + own.cols.begin;
      c.srcStride = m.cols;
      c.dst = locals[m.paramIndex].orthogonalized.floats() + own.offset;
      c.dstStride = own.cols.size();
      c.rows = own.rows.size();
      c.cols = own.cols.size();
      c.through = wire;
      device.copyBox(c);
    }
    if (options.trace) {
      TraceEvent e;
      e.kind = TraceEvent::Kind::NewtonSchulz;
      e.rank = myRank;
      e.index = round;
      e.begin = traceBegin;
      e.end = sinceStep();
      e.rows = batch->rows;
      e.cols = batch->cols;
      e.matrices = static_cast<int64_t>(batch->matrices.size());
      e.flops = lastCounters.nsFlops - flopsBefore;
      traceEvents.push_back(e);
    }
  }
  return true;
}

void StepExecutor::applyRound(int64_t round) {
  for (const NsBatch *batch : batchesByRound[round])
    batchBuffers.erase(batch);
  for (int64_t k : planRef.rounds[round]) {
    full.erase(k);
    Piece own = piece(k);
    if (own.offset < 0)
      continue;
    const PlanMatrix &m = planRef.matrices[k];
    LocalParam &local = locals[m.paramIndex];
    device.applyUpdate(
        static_cast<char *>(local.values) + own.offset * dtypeBytes(local.dtype),
        local.dtype, local.orthogonalized.floats() + own.offset,
        own.elements(), planRef.muon, adjustedLr(planRef.muon, m.rows, m.cols));
  }
}

void StepExecutor::runAdamW() {
  for (size_t i = 0; i < locals.size(); ++i) {
    LocalParam &local = locals[i];
    if (planRef.params[i].muon || !local.elements)
      continue;
    // Summed by this step's reduce when the gradient has several summands.
    const void *grad = local.summed ? local.summedGrad.data() : local.grad;
    DType gradType = local.summed ? DType::F32 : local.dtype;
    ++local.adamwStep;
    device.adamw(local.values, local.dtype, grad, gradType,
                 local.expAvg.floats(), local.expAvgSq.floats(),
                 local.elements, planRef.adamw, local.adamwStep);
  }
}

void StepExecutor::recordTrace(const ScheduleStep &s, double begin) {
  using Kind = ScheduleStep::Kind;
  TraceEvent e;
  e.rank = myRank;
  e.index = s.index;
  e.begin = begin;
  switch (s.kind) {
  case Kind::NewtonSchulz: // one event per batch, in runNewtonSchulz
    return;
  case Kind::Start:
    // The exchange runs from its start call to the end of its done call,
    // on the lowest lane no exchange in flight holds.
    traceStarts[s.index] = {begin, traceLanes.start(s.index)};
    return;
  case Kind::Done: {
    const auto &[started, lane] = traceStarts[s.index];
    const int64_t width = dtypeBytes(wire);
    e.kind = TraceEvent::Kind::Exchange;
    e.begin = started;
    e.lane = lane;
    traceLanes.done(s.index);
    e.bytesSent = views[s.index].sendElements * width;
    e.bytesReceived = views[s.index].recvElements * width;
    break;
  }
  case Kind::Momentum:
    e.kind = TraceEvent::Kind::Momentum;
    break;
  case Kind::ApplyUpdate:
    e.kind = TraceEvent::Kind::ApplyUpdate;
    break;
  case Kind::AdamW:
    e.kind = TraceEvent::Kind::AdamW;
    break;
  }
  e.end = sinceStep();
  traceEvents.push_back(e);
}

bool StepExecutor::step(StepResult &result, std::string &error) {
  lastCounters = {};
  result = {};
  for (LocalParam &local : locals)
    local.summed = false;
  // One agreement before any state changes: every rank bound its storage
  // (-1 anywhere: not), and no gradient holds NaN or Inf (the first bad
  // parameter anywhere).
  const int64_t none = std::numeric_limits<int64_t>::max();
  int64_t mine = allBound() ? none : -1;
  for (size_t i = 0; i < locals.size() && mine == none; ++i)
    if (locals[i].elements &&
        !device.allFinite(locals[i].grad, locals[i].dtype, locals[i].elements))
      mine = static_cast<int64_t>(i);
  int64_t first = none;
  if (!comm.allReduceMin(mine, first, options.timeoutSeconds, error)) {
    error = "checking gradients for NaN/Inf: " + error;
    return false;
  }
  if (first == -1) {
    int64_t unbound = none;
    if (!comm.allReduceMin(mine == -1 ? myRank : none, unbound,
                           options.timeoutSeconds, error))
      return false;
    error = "rank " + std::to_string(unbound) +
            " has not bound every parameter it holds; nothing was changed";
    return false;
  }
  if (first != none) {
    int64_t badRank = none;
    if (!comm.allReduceMin(mine == first ? myRank : none, badRank,
                           options.timeoutSeconds, error))
      return false;
    result.nonFiniteParam = first;
    result.nonFiniteRank = badRank;
    return true;
  }

  using Kind = ScheduleStep::Kind;
  if (options.trace) {
    traceZero = std::chrono::steady_clock::now();
    traceEvents.clear();
    traceStarts.clear();
    traceLanes = {};
  }
  for (const ScheduleStep &s : planRef.schedule) {
    const double traceBegin = options.trace ? sinceStep() : 0;
    switch (s.kind) {
    case Kind::Momentum:
      for (size_t i = 0; i < locals.size(); ++i)
        if (planRef.params[i].muon && locals[i].elements)
          device.momentum(locals[i].grad, locals[i].dtype,
                          locals[i].momentum.floats(),
                          locals[i].update.floats(), locals[i].elements,
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
      if (!runNewtonSchulz(s.index, error))
        return false;
      break;
    case Kind::ApplyUpdate:
      applyRound(s.index);
      break;
    case Kind::AdamW:
      runAdamW();
      break;
    }
    if (options.trace)
      recordTrace(s, traceBegin);
  }
  full.clear();
  batchBuffers.clear();
  device.synchronize();
  result.applied = true;
  return true;
}

} // namespace muon::runtime
