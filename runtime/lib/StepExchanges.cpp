//===- StepExchanges.cpp - A step's packed exchanges ------------------------===//
//
// Starting and finishing one exchange of the plan on this rank: packing
// the send buffer from the local pieces (and the gathered matrices), the
// all-to-all-v over the communicator, and unpacking what arrived into the
// gathered matrices, the orthogonalized pieces or the summed gradients.
//
//===----------------------------------------------------------------------===//
#include "StepLayout.h"
#include "muon/Runtime/StepExecutor.h"

#include <algorithm>
#include <cstring>

namespace muon::runtime {

std::string StepExecutor::describeExchange(int64_t index) const {
  const Exchange &ex = planRef.exchanges[index];
  std::string what = "exchange " + std::to_string(index) + " (";
  if (ex.phase == Exchange::Phase::Reduce)
    return what + "AdamW reduce)";
  return what + phaseName(ex.phase) + " of round " + std::to_string(ex.round) +
         ")";
}

namespace {
/// Whether an exchange sends nothing from any rank to any other, which
/// every rank decides alike from a whole plan. A rank's slice of a plan
/// keeps only its own transfers, so there an empty list says nothing of
/// the other ranks: the exchange runs.
bool movesNothing(const Plan &plan, const Exchange &ex) {
  return !plan.isSlice() && ex.transfers.empty() && ex.reductions.empty();
}
} // namespace

Status StepExecutor::startExchange(int64_t index) {
  const Exchange &ex = planRef.exchanges[index];
  const RankExchangeView &view = layout->views[index];
  const int64_t width = dtypeBytes(wire);
  InFlight &flight = inFlight[index];
  MUON_RETURN_IF_ERROR(
      allocate(flight.send, view.sendElements * width, "exchange buffers"));
  MUON_RETURN_IF_ERROR(
      allocate(flight.recv, view.recvElements * width, "exchange buffers"));
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
        c.srcType = local.gradType;
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
                (t.rows.begin - from.rows.begin) * from.stride +
                (t.cols.begin - from.cols.begin);
        c.srcStride = from.stride;
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
    for (const NsBatch *batch : layout->batchesByRound[ex.round])
      batchBuffers.erase(batch);
  }
  // The packing copies are queued on the device, not necessarily done: a
  // transport that reads the buffers from outside the device's queue waits
  // for it (Communicator::start).
  // A step checked against its graph moves nothing: the replay will. An
  // exchange without transfers (a data-parallel plan's gathers: the whole
  // gradient is already on its owner) moves nothing on any rank, so no rank
  // calls the transport: a collective costs a round trip even when empty.
  if (pass == Pass::Checking || movesNothing(planRef, ex))
    return okStatus();
  ++lastCounters.exchanges;
  StatusOr<PendingExchange> pending = comm.start(call);
  if (!pending.ok())
    return pending.status().withContext("starting " + describeExchange(index) +
                                        ": ");
  flight.pending = *pending;
  return okStatus();
}

Status StepExecutor::finishExchange(int64_t index) {
  InFlight &flight = inFlight.at(index);
  const Exchange &ex = planRef.exchanges[index];
  if (pass != Pass::Checking && !movesNothing(planRef, ex))
    MUON_RETURN_IF_ERROR(
        comm.wait(flight.pending, options.timeoutSeconds)
            .withContext("waiting for " + describeExchange(index) + ": "));
  const RankExchangeView &view = layout->views[index];
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
      own.srcType = local.gradType;
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
          float *matrix = nullptr;
          MUON_RETURN_IF_ERROR(fullMatrix(t.matrix, matrix));
          c.dst = matrix + t.rows.begin * m.cols + t.cols.begin;
          c.dstStride = m.cols;
          c.accumulate = true;
        } else {
          Piece to = piece(t.matrix);
          c.dst = locals[m.paramIndex].orthogonalized.floats() + to.offset +
                  (t.rows.begin - to.rows.begin) * to.stride +
                  (t.cols.begin - to.cols.begin);
          c.dstStride = to.stride;
        }
        device.copyBox(c);
        at += t.elements();
      }
    }
  }
  inFlight.erase(index);
  return okStatus();
}

} // namespace muon::runtime
