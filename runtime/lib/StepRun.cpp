//===- StepRun.cpp - One optimizer step on this rank ------------------------===//
//
// step(): the agreement, then the plan's schedule in order (momentum,
// exchange starts and finishes, Newton-Schulz batches on the gathered
// matrices, each round's update, the element-wise algorithms' update),
// QK-clip, and the device errors agreed on.
//
//===----------------------------------------------------------------------===//
#include "StepLayout.h"
#include "muon/Runtime/StepExecutor.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Runtime/ElementStep.h"
#include "muon/Runtime/MatrixStep.h"

#include <algorithm>
#include <cstring>

namespace muon::runtime {

Status StepExecutor::step(StepResult &result) {
  lastCounters = {};
  lastCounters.workingBytesBound = workingBytesBound;
  peakBytes = liveBytes;
  result = {};
  // The step's host copies of exchange buffers, however it ends.
  struct CountCopies {
    Communicator &comm;
    StepCounters &counters;
    const Communicator::HostCopies before;
    ~CountCopies() {
      const Communicator::HostCopies after = comm.hostCopies();
      counters.hostCopies = after.copies - before.copies;
      counters.hostCopyBytes = after.bytes - before.bytes;
    }
  } countCopies{comm, lastCounters, comm.hostCopies()};
  skipped.clear();
  layout = wholeLayout.get();
  for (LocalParam &local : locals)
    local.summed = false;
  MUON_RETURN_IF_ERROR(agreeBeforeStep(result));
  if (result.nonFiniteParam >= 0) {
    // The skipped step's forward pass made the logits: they go with it.
    for (std::vector<float> &logits : qkLogits)
      logits.clear();
    return okStatus();
  }
  layout = &layoutFor(skipped);
  std::vector<std::vector<float>> qkMaxima;
  if (!planRef.qkClip.empty())
    MUON_RETURN_IF_ERROR(agreeOnQkLogits(qkMaxima));
  // A failed step leaves its exchanges in flight as they are: a transport
  // may still write into their buffers.
  Status status = runStepWork();
  if (!status.ok())
    return status;
  // After the update (K2's order), before the device errors are agreed on.
  if (!planRef.qkClip.empty())
    result.qkClippedHeads = applyQkClip(qkMaxima);
  if (lastCounters.graph == GraphUse::Recorded ||
      lastCounters.graph == GraphUse::Replayed) {
    // The graph's exchanges have no wait of their own: the transport's
    // deadline and error checks cover the whole replay.
    MUON_RETURN_IF_ERROR(comm.waitForReplay(options.timeoutSeconds)
                             .withContext("waiting for the step graph: "));
  }
  device.synchronize();
  lastCounters.peakWorkingBytes = peakBytes;
  MUON_RETURN_IF_ERROR(agreeOnDeviceErrors());
  result.applied = true;
  return okStatus();
}

Status StepExecutor::runSchedule() {
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
        if (locals[i].prepareStep && locals[i].elements && !isSkipped(i) &&
            !isZeroHere(i))
          prepare(static_cast<int64_t>(i));
      break;
    case Kind::Start:
      MUON_RETURN_IF_ERROR(startExchange(s.index));
      break;
    case Kind::Done:
      MUON_RETURN_IF_ERROR(finishExchange(s.index));
      break;
    case Kind::NewtonSchulz:
      MUON_RETURN_IF_ERROR(runNewtonSchulz(s.index));
      break;
    case Kind::ApplyUpdate:
      applyRound(s.index);
      break;
    case Kind::AdamW:
      runElementUpdates();
      break;
    }
    if (options.trace)
      recordTrace(s, traceBegin);
  }
  return okStatus();
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
  int64_t slice = planRef.params[m.paramIndex].layout.batchSliceOf(
              std::max<int64_t>(m.slice, 0)),
          localSlice = 0;
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
  // A head's block: the local box cut to it, in the block's coordinates.
  const ParamLayout &layout = planRef.params[m.paramIndex].layout;
  const Range &rows = local.box[batchDims], &cols = local.box[batchDims + 1];
  Range headRows = layout.headRowsOf(std::max<int64_t>(m.slice, 0)),
        headCols = layout.headColsOf(std::max<int64_t>(m.slice, 0));
  int64_t rowBegin = std::max(rows.begin, headRows.begin),
          colBegin = std::max(cols.begin, headCols.begin);
  piece.rows = {rowBegin - headRows.begin,
                std::min(rows.end, headRows.end) - headRows.begin};
  piece.cols = {colBegin - headCols.begin,
                std::min(cols.end, headCols.end) - headCols.begin};
  if (piece.rows.size() <= 0 || piece.cols.size() <= 0)
    return Piece();
  piece.stride = cols.size();
  piece.offset = localSlice * rows.size() * cols.size() +
                 (rowBegin - rows.begin) * cols.size() +
                 (colBegin - cols.begin);
  return piece;
}

Status StepExecutor::fullMatrix(int64_t k, float *&matrix) {
  auto it = full.find(k);
  if (it != full.end()) {
    matrix = it->second;
    return okStatus();
  }
  const PlanMatrix &m = planRef.matrices[k];
  auto slot = layout->slotOf.find(k);
  if (slot == layout->slotOf.end()) // the plan validator rules this out
    return invalidArgument("matrix " + m.label() + " reaches rank " +
                           std::to_string(myRank) +
                           " but is in none of its Newton-Schulz batches");
  const NsBatch *batch = slot->second.batch;
  DeviceBuffer &buffer = batchBuffers[batch];
  if (!buffer.data()) {
    Status status = allocate(buffer,
                             static_cast<int64_t>(batch->matrices.size()) *
                                 m.rows * m.cols * 4,
                             "gathered matrices");
    if (!status.ok()) {
      batchBuffers.erase(batch);
      return status;
    }
  }
  matrix = buffer.floats() + slot->second.index * m.rows * m.cols;
  full[k] = matrix;
  // The owner's own piece enters as if it had crossed the wire, so that the
  // values Newton-Schulz sees do not depend on who holds what.
  Piece own = piece(k);
  if (own.offset >= 0) {
    BoxCopy c;
    c.src = locals[m.paramIndex].update.floats() + own.offset;
    c.srcStride = own.stride;
    c.dst = matrix + own.rows.begin * m.cols + own.cols.begin;
    c.dstStride = m.cols;
    c.rows = own.rows.size();
    c.cols = own.cols.size();
    c.through = wire;
    c.accumulate = true;
    device.copyBox(c);
  }
  return okStatus();
}

double StepExecutor::sinceStep() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       traceZero)
      .count();
}

Status StepExecutor::runNewtonSchulz(int64_t round) {
  const int64_t limit = std::max<int64_t>(1, device.nsBatchLimit());
  for (const NsBatch *batch : layout->batchesByRound[round]) {
    const double traceBegin = options.trace ? sinceStep() : 0;
    const int64_t flopsBefore = lastCounters.nsFlops;
    // Every matrix of the batch, in its place in the batch's buffer (a
    // matrix no gather reached starts from this rank's own piece).
    for (int64_t k : batch->matrices) {
      float *matrix = nullptr;
      MUON_RETURN_IF_ERROR(fullMatrix(k, matrix));
    }
    // The batch's own configuration: its matrices' groups all run it.
    const NewtonSchulzConfig &config = planRef.ns.configs[batch->config];
    const int64_t count = static_cast<int64_t>(batch->matrices.size());
    for (int64_t first = 0; first < count; first += limit) {
      lastCounters.nsFlops += device.newtonSchulz(
          full[batch->matrices[first]], std::min(limit, count - first),
          batch->rows, batch->cols, config.coefficients, config.eps, nsDtype);
      // Keep the exchanges in flight moving between calls.
      if (pass == Pass::Eager)
        comm.progress();
    }
    // The per-matrix steps after Newton-Schulz (MatrixStep.h: NorMuon),
    // on the whole matrix, before any piece of it leaves.
    const std::vector<MatrixStep> &steps = matrixSteps();
    for (int64_t k : batch->matrices)
      for (size_t s = 0; s < steps.size(); ++s)
        if (float *state = rowState(k, static_cast<int>(s))) {
          const PlanMatrix &m = planRef.matrices[k];
          device.runMatrixStep(
              steps[s], full[k], m.rows, m.cols, state,
              steps[s].scalars(
                  currentGroups[planRef.params[m.paramIndex].group]));
          if (pass == Pass::Eager)
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
      c.dstStride = own.stride;
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
  return okStatus();
}

void StepExecutor::applyRound(int64_t round) {
  for (const NsBatch *batch : layout->batchesByRound[round])
    batchBuffers.erase(batch);
  for (int64_t k : planRef.rounds[round]) {
    full.erase(k);
    const PlanMatrix &m = planRef.matrices[k];
    if (isSkipped(m.paramIndex))
      continue;
    Piece own = piece(k);
    if (own.offset < 0)
      continue;
    LocalParam &local = locals[m.paramIndex];
    // The algorithm's update step (Muon's weight decay and adjusted-lr
    // update); adjust_lr takes the matrix's shape: a head's block for
    // per-head Newton-Schulz, as dion and torchtitan scale each head's
    // update.
    const ElementStep &update = *local.updateStep;
    const StepScalars scalars = update.scalars(
        {currentGroups[planRef.params[m.paramIndex].group], 0, m.rows,
         m.cols});
    // A head's block of columns is one run per row; anything else one run.
    int64_t runs = own.contiguous() ? 1 : own.rows.size();
    int64_t length = own.contiguous() ? own.elements() : own.cols.size();
    for (int64_t r = 0; r < runs; ++r) {
      int64_t at = own.offset + r * own.stride;
      ElementOperands o;
      o.values = static_cast<char *>(local.values) + at * dtypeBytes(local.dtype);
      o.type = local.dtype;
      o.input = local.orthogonalized.floats() + at;
      o.n = length;
      device.runElementStep(update, o, scalars);
    }
  }
}

void StepExecutor::prepare(int64_t i) {
  LocalParam &local = locals[i];
  ElementOperands o;
  o.grad = local.grad;
  o.gradType = local.gradType;
  o.output = local.update.floats();
  o.slots = local.stepSlots;
  o.n = local.elements;
  device.runElementStep(
      *local.prepareStep, o,
      local.prepareStep->scalars({currentGroups[planRef.params[i].group]}));
}

void StepExecutor::runElementUpdates() {
  for (size_t i = 0; i < locals.size(); ++i) {
    LocalParam &local = locals[i];
    if (planRef.params[i].orthogonalized() || !local.elements ||
        isSkipped(i))
      continue;
    ElementOperands o;
    o.values = local.values;
    o.type = local.dtype;
    // Summed by this step's reduce when the gradient has several summands.
    o.grad = local.summed ? local.summedGrad.data() : local.grad;
    o.gradType = local.summed ? DType::F32 : local.gradType;
    o.slots = local.stepSlots;
    o.n = local.elements;
    ++local.steps;
    device.runElementStep(
        *local.updateStep, o,
        local.updateStep->scalars(
            {currentGroups[planRef.params[i].group], local.steps}));
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
    e.bytesSent = layout->views[s.index].sendElements * width;
    e.bytesReceived = layout->views[s.index].recvElements * width;
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

} // namespace muon::runtime
