//===- StepExecutor.cpp - One rank's side of a compiled step --------------===//
#include "muon/Runtime/StepExecutor.h"
#include "Disagreement.h"
#include "StepLayout.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Runtime/ElementStep.h"
#include "muon/Runtime/MatrixStep.h"
#include "muon/Support/Fnv.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>

namespace muon::runtime {

uint64_t planHash(const Plan &plan) {
  // A rank's part differs from every other rank's by design: what they must
  // share is the file and the parts every rank reads whole.
  if (plan.isSlice())
    return planSliceIdentity(plan);
  // Without the groups' hyper-parameters: they are step inputs, compared
  // at every step (groupsHash), not part of the plan ranks share.
  return fnv1a(renderPlan(plan, /*withGroupSettings=*/false));
}

StepExecutor::StepExecutor(const Plan &plan, Communicator &comm, Device &device,
                           ExecutorOptions options)
    : planRef(plan), currentGroups(plan.groups), comm(comm), device(device),
      options(options) {}

StepExecutor::~StepExecutor() = default;

Status StepExecutor::allocate(DeviceBuffer &buffer, int64_t bytes,
                              const char *what) {
  buffer = DeviceBuffer(device, bytes, &liveBytes, &peakBytes);
  if (buffer.ok())
    return okStatus();
  return Status(StatusCode::ResourceExhausted,
                std::string("the ") + device.name() +
                    " device has no room for " + what + " (" +
                    std::to_string(bytes) + " bytes)");
}

Status StepExecutor::initialize() {
  const Plan &plan = planRef;
  myRank = comm.rank();
  if (comm.size() != plan.worldSize)
    return invalidArgument("the plan is for " + std::to_string(plan.worldSize) +
                           " ranks but the run has " +
                           std::to_string(comm.size()));
  wire = parseDType(plan.wireDtype).value_or(DType::F32);
  const bool autoNs = plan.ns.nsDtype == "auto";
  nsDtype = autoNs ? device.defaultNsDtype()
                   : parseDType(plan.ns.nsDtype).value_or(DType::F32);
  // Every rank must execute the same plan: exchanges are collectives, and
  // a rank with another plan would pair wrong buffers or wait forever. The
  // word compared carries the rank's Newton-Schulz precision in its low two
  // bits: "auto" is each rank's device's choice (on the CPU by the rates
  // its products ran at, which two ranks can measure on either side of the
  // threshold), and every rank runs rank 0's, so that the ranks, and the
  // replicas of a matrix orthogonalized on several, compute alike.
  constexpr uint64_t kPrecisionBits = 3;
  StatusOr<std::vector<uint64_t>> gathered = comm.allGather(
      (planHash(plan) & ~kPrecisionBits) | static_cast<uint64_t>(nsDtype),
      options.timeoutSeconds);
  if (!gathered.ok())
    return gathered.status().withContext("start-up: comparing plans: ");
  const std::vector<uint64_t> &hashes = *gathered;
  std::vector<int64_t> differ;
  for (size_t r = 0; r < hashes.size(); ++r)
    if ((hashes[r] | kPrecisionBits) != (hashes[0] | kPrecisionBits))
      differ.push_back(static_cast<int64_t>(r));
  if (!differ.empty()) {
    // Every rank found it: one more collective says what differs (the
    // outline holds what every rank of a binary plan reads whole too).
    std::string what;
    StatusOr<std::string> d = describeDisagreement(
        comm, planOutline(plan), differ, options.timeoutSeconds);
    if (d.ok() && !d->empty())
      what = " (" + *d + ")";
    else if (d.ok())
      what = " (in what the compiler derived from the model: owners, rounds "
             "or exchanges)";
    return invalidArgument("ranks " + formatRanks(differ) +
                           " hold a plan different from rank 0's" + what +
                           "; every rank must load the same plan");
  }
  // A plan that names the precision gives every rank the same one.
  nsReason = std::string(dtypeName(nsDtype)) + ": the plan's ns_dtype";
  if (autoNs) {
    const DType own = nsDtype;
    nsDtype = static_cast<DType>(hashes[0] & kPrecisionBits);
    std::string why = device.defaultNsDtypeReason();
    if (why.empty())
      why = std::string(dtypeName(own)) + ": the " + device.name() +
            " device's default";
    nsReason = nsDtype == own ? why
                              : std::string(dtypeName(nsDtype)) +
                                    ": rank 0's choice for ns_dtype auto "
                                    "(this rank's device chose " +
                                    why + ")";
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
        (p.layout.isSharded() || p.layout.isPartial()))
      return invalidArgument("parameter '" + p.name +
                             "' is sharded but the plan has no distributed "
                             "config");
    if (!local.elements)
      continue;
    local.gradType = local.dtype;
    int64_t bytes = local.elements * 4;
    const std::vector<ElementSlot> &slots = elementSlots();
    local.state.resize(slots.size());
    int taken = 0; // the algorithm's slots, in the order its steps take them
    for (size_t s = 0; s < slots.size(); ++s) {
      if (slots[s].algorithm != p.algorithm)
        continue;
      if (keepsSlot(plan.groups[p.group], slots[s]))
        MUON_RETURN_IF_ERROR(
            allocate(local.state[s], bytes,
                     (std::string(slots[s].name) + " state").c_str()));
      if (taken < kMaxStepSlots)
        local.stepSlots[taken] = local.state[s].floats();
      ++taken;
    }
    MUON_RETURN_IF_ERROR(resolveSteps(p, taken, local));
    if (p.orthogonalized()) {
      MUON_RETURN_IF_ERROR(allocate(local.update, bytes, "updates"));
      MUON_RETURN_IF_ERROR(allocate(local.orthogonalized, bytes, "updates"));
    } else {
      if (p.layout.isPartial())
        MUON_RETURN_IF_ERROR(
            allocate(local.summedGrad, bytes, "summed gradients"));
    }
  }
  wholeLayout = std::make_unique<StepLayout>();
  StepLayout::derive(plan, myRank, *wholeLayout);
  layout = wholeLayout.get();
  partLayout.reset();
  partSkipped.clear();
  // QK-clip's parameters by index (the validator checked that they exist).
  qkLogits.assign(plan.qkClip.size(), {});
  qkParams.clear();
  for (const QkClipLayer &layer : plan.qkClip) {
    auto find = [&](const std::string &name) {
      for (size_t i = 0; i < plan.params.size(); ++i)
        if (plan.params[i].name == name)
          return static_cast<int64_t>(i);
      return int64_t(-1);
    };
    qkParams.push_back({find(layer.query), find(layer.key)});
    if (qkParams.back().first < 0 || qkParams.back().second < 0)
      return invalidArgument("qk_clip layer '" + layer.name +
                             "' names a parameter the plan does not have");
  }
  rowStates.clear();
  const std::vector<MatrixStep> &steps = matrixSteps();
  for (const auto &[k, slot] : wholeLayout->slotOf) {
    const PlanMatrix &m = plan.matrices[k];
    const PlanParam &p = plan.params[m.paramIndex];
    for (size_t s = 0; s < steps.size(); ++s)
      if (p.orthogonalized() && steps[s].enabled(plan.groups[p.group]))
        MUON_RETURN_IF_ERROR(
            allocate(rowStates[{k, static_cast<int>(s)}], m.rows * 4,
                     (std::string(steps[s].title) + "'s per-row state")
                         .c_str()));
  }
  // The plan's, once: after the views and batches it counts.
  workingBytesBound = memoryBound();
  return okStatus();
}

Status StepExecutor::resolveSteps(const PlanParam &p, int slots,
                                  LocalParam &local) {
  // The registries must agree (AlgorithmTest checks them); a mismatch is
  // the build's fault, reported rather than run.
  const Algorithm &algorithm = algorithmOf(p.algorithm);
  auto find = [&](const char *name, const ElementStep *&step) {
    step = name ? findElementStep(name) : nullptr;
    if (name && !step)
      return Status(StatusCode::Internal,
                    std::string(algorithm.title) + " names the step '" + name +
                        "', which the runtime does not register");
    if (step && step->slots > slots)
      return Status(StatusCode::Internal,
                    std::string("the step '") + name + "' takes " +
                        std::to_string(step->slots) + " slots; " +
                        algorithm.title + " keeps " + std::to_string(slots));
    return okStatus();
  };
  MUON_RETURN_IF_ERROR(find(algorithm.prepareStep, local.prepareStep));
  return find(algorithm.updateStep, local.updateStep);
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

void StepExecutor::bind(int64_t param, void *values, const void *grad,
                        DType gradType) {
  locals[param].values = values;
  locals[param].grad = grad;
  locals[param].gradType = gradType;
}

void StepExecutor::setGradientsReducedToOwners(bool on) {
  zeroHere.assign(on ? locals.size() : 0, false);
  if (on) {
    // A parameter is zero here when it is orthogonalized, held whole (not
    // a partial summand, which the plan gathers itself) and no matrix of it
    // is orthogonalized on this rank.
    for (size_t i = 0; i < locals.size(); ++i)
      zeroHere[i] = planRef.params[i].orthogonalized() &&
                    !planRef.params[i].layout.isPartial() &&
                    locals[i].elements > 0;
    for (const PlanMatrix &m : planRef.matrices)
      if (m.owner < 0 || m.owner == myRank || m.redundant)
        zeroHere[m.paramIndex] = false;
  }
  // A recorded step graph ran the momentum of every parameter.
  if (graphReady) {
    device.dropRecording();
    graphReady = false;
  }
}

void StepExecutor::setGroup(int64_t index, const PlanGroup &group) {
  currentGroups[index] = group;
  // The settings the plan fixes stay the plan's (NorMuon: which matrices
  // carry per-row state, allocated at initialize).
  for (const GroupSetting &s : algorithmOf(group.algorithm).settings)
    if (s.fixed)
      currentGroups[index].settings[s.index] =
          planRef.groups[index].settings[s.index];
}

int64_t StepExecutor::memoryBound() const {
  const Plan &plan = planRef;
  int64_t state = 0;
  for (size_t i = 0; i < locals.size(); ++i) {
    const LocalParam &l = locals[i];
    if (!l.elements)
      continue;
    // The element slots, and the update buffers (orthogonalized
    // parameters) or the summed gradient (element-wise algorithms of a
    // partial gradient).
    int64_t buffers = plan.params[i].orthogonalized()      ? 2
                      : plan.params[i].layout.isPartial() ? 1
                                                          : 0;
    for (const DeviceBuffer &slot : l.state)
      buffers += slot.data() ? 1 : 0;
    state += buffers * l.elements * 4;
  }
  for (const auto &[k, buffer] : rowStates)
    state += buffer.size();
  const int64_t width = dtypeBytes(wire);
  std::vector<int64_t> perRound(plan.rounds.size(), 0);
  int64_t reduce = 0;
  for (size_t e = 0; e < plan.exchanges.size(); ++e) {
    const Exchange &ex = plan.exchanges[e];
    const RankExchangeView &view = wholeLayout->views[e];
    const int64_t bytes = (view.sendElements + view.recvElements) * width;
    if (ex.phase == Exchange::Phase::Reduce)
      reduce += bytes;
    else if (ex.round >= 0 && ex.round < static_cast<int64_t>(perRound.size()))
      perRound[ex.round] += bytes;
  }
  for (size_t r = 0; r < wholeLayout->batchesByRound.size(); ++r)
    for (const NsBatch *b : wholeLayout->batchesByRound[r])
      perRound[r] +=
          static_cast<int64_t>(b->matrices.size()) * b->rows * b->cols * 4;
  // The rounds alive at once: those in flight and the one being
  // orthogonalized; the largest ones, whichever they are.
  std::sort(perRound.begin(), perRound.end(), std::greater<int64_t>());
  int64_t rounds = 0;
  for (size_t r = 0;
       r < perRound.size() && static_cast<int64_t>(r) < plan.inflightLimit + 1;
       ++r)
    rounds += perRound[r];
  return state + rounds + reduce;
}

uint64_t StepExecutor::groupsHash() const {
  uint64_t h = kFnvOffsetBasis;
  // Every group's algorithm and each of its settings (GroupSettings.h).
  for (const PlanGroup &g : currentGroups) {
    const int64_t algorithm = g.algorithm;
    h = fnv1a(&algorithm, sizeof(algorithm), h);
    for (const GroupSetting &s : algorithmOf(g.algorithm).settings) {
      if (s.kind == GroupSetting::Kind::Name) {
        h = fnv1a(settingName(s, g), h);
      } else {
        const double value = settingValue(s, g);
        h = fnv1a(&value, sizeof(value), h);
      }
    }
  }
  return h;
}

bool StepExecutor::allBound() const {
  for (const LocalParam &local : locals)
    if (local.elements && !local.values)
      return false;
  return true;
}

float *StepExecutor::elementState(int64_t param, int slot) {
  const std::vector<DeviceBuffer> &state = locals[param].state;
  return slot >= 0 && static_cast<size_t>(slot) < state.size()
             ? state[slot].floats()
             : nullptr;
}

float *StepExecutor::rowState(int64_t k, int step) {
  auto it = rowStates.find({k, step});
  return it == rowStates.end() ? nullptr : it->second.floats();
}

std::vector<StepExecutor::RowSlot> StepExecutor::rowSlots() const {
  std::vector<RowSlot> slots;
  for (const auto &[key, buffer] : rowStates)
    slots.push_back({key.first, key.second});
  return slots;
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

namespace {
// The agreement before a step: every rank's two words, all-gathered in
// one collective. In the first, the top 24 bits say what stops the rank (0
// nothing, 1 unbound storage, 2 + i a non-finite gradient in parameter i);
// bit 39 says that the rank's list of parameters without a gradient is not
// the one it had at the last agreement on them; the low 39 bits carry its
// group settings' hash (two ranks with different settings collide with
// probability 2^-39). The second is the hash of that list. Lists as before
// keep the last set; changed lists that are the same on every rank (DDP,
// FSDP: every rank holds every parameter) are the set; only lists that
// differ between ranks are exchanged (agreeOnMissingGradients).
constexpr int kStatusShift = 40;
constexpr uint64_t kMissingChanged = uint64_t(1) << 39;
constexpr uint64_t kHashMask = kMissingChanged - 1;
constexpr uint64_t kUnbound = 1, kNonFiniteBase = 2;
constexpr uint64_t kMaxStatus = (uint64_t(1) << (64 - kStatusShift)) - 1;
} // namespace

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
  // One agreement before any state changes: every rank bound its storage,
  // set the same group settings, and no gradient holds NaN or Inf.
  uint64_t stop = 0;
  if (!allBound())
    stop = kUnbound;
  for (size_t i = 0; i < locals.size() && stop == 0; ++i) {
    const LocalParam &local = locals[i];
    if (local.elements && local.grad && !isZeroHere(i) &&
        !device.allFinite(local.grad, local.gradType, local.elements))
      stop = std::min<uint64_t>(kNonFiniteBase + i, kMaxStatus);
  }
  const std::vector<int64_t> mine = missingGradients();
  const bool changed = mine != agreedMine;
  ++lastCounters.controlCollectives;
  StatusOr<std::vector<uint64_t>> gathered = comm.allGatherWords(
      {(stop << kStatusShift) | (changed ? kMissingChanged : 0) |
           (groupsHash() & kHashMask),
       listHash(mine)},
      options.timeoutSeconds);
  if (!gathered.ok())
    return gathered.status().withContext("checking gradients for NaN/Inf: ");
  const std::vector<uint64_t> &all = *gathered;
  std::vector<uint64_t> words(all.size() / 2);
  bool sameLists = true;
  for (size_t r = 0; r < words.size(); ++r) {
    words[r] = all[2 * r];
    sameLists = sameLists && all[2 * r + 1] == all[1];
  }
  std::vector<int64_t> unbound, otherSettings;
  int64_t firstBad = -1, badRank = -1;
  bool anyChanged = false;
  for (size_t r = 0; r < words.size(); ++r) {
    uint64_t w = words[r] >> kStatusShift;
    if ((words[r] & kHashMask) != (words[0] & kHashMask))
      otherSettings.push_back(static_cast<int64_t>(r));
    anyChanged = anyChanged || (words[r] & kMissingChanged);
    if (w == kUnbound)
      unbound.push_back(static_cast<int64_t>(r));
    else if (w >= kNonFiniteBase &&
             (firstBad < 0 ||
              static_cast<int64_t>(w - kNonFiniteBase) < firstBad)) {
      firstBad = static_cast<int64_t>(w - kNonFiniteBase);
      badRank = static_cast<int64_t>(r);
    }
  }
  if (!otherSettings.empty()) {
    StatusOr<std::string> d = describeDisagreement(
        comm, settingsOutline(currentGroups), otherSettings,
        options.timeoutSeconds);
    const std::string what = d.ok() && !d->empty() ? " (" + *d + ")" : "";
    return invalidArgument(
        "ranks " + formatRanks(otherSettings) +
        " set group hyper-parameters different from rank 0's" + what +
        "; every rank must set the same values before a step (nothing was "
        "changed)");
  }
  if (!unbound.empty())
    return failedPrecondition("rank " + std::to_string(unbound[0]) +
                              " has not bound every parameter it holds; "
                              "nothing was changed");
  if (!anyChanged)
    skipped = agreedSkipped;
  else if (sameLists && heldEverywhere(mine))
    adoptMissingGradients(mine);
  else
    MUON_RETURN_IF_ERROR(agreeOnMissingGradients(mine));
  if (firstBad >= 0) {
    // The skipped step's forward pass made the logits: they go with it.
    for (std::vector<float> &logits : qkLogits)
      logits.clear();
    result.nonFiniteParam = firstBad;
    result.nonFiniteRank = badRank;
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

namespace {
/// Whether rank `rank` holds elements of `param` (as the rank itself
/// decides when it builds its LocalParam): in the parameter's submesh, with
/// a non-empty local box.
bool holds(const Plan &plan, const PlanParam &param, int64_t rank) {
  std::vector<int64_t> coords = plan.mesh.coordsOfRank(rank);
  if (!param.layout.inSubmesh(coords))
    return false;
  for (const Range &r : param.layout.localBox(plan.mesh, coords))
    if (r.size() == 0)
      return false;
  return true;
}
} // namespace

std::vector<int64_t> StepExecutor::missingGradients() const {
  std::vector<int64_t> mine;
  for (size_t i = 0; i < locals.size(); ++i)
    if (locals[i].elements && !locals[i].grad)
      mine.push_back(static_cast<int64_t>(i));
  return mine;
}

uint64_t StepExecutor::listHash(const std::vector<int64_t> &list) {
  // FNV-1a over the indices; 0 for an empty list.
  if (list.empty())
    return 0;
  uint64_t h = 14695981039346656037ull;
  for (int64_t i : list)
    for (int b = 0; b < 8; ++b) {
      h ^= (static_cast<uint64_t>(i) >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  return h;
}

bool StepExecutor::heldEverywhere(const std::vector<int64_t> &list) {
  if (heldByAll.empty())
    heldByAll.assign(locals.size(), -1);
  for (int64_t i : list) {
    if (heldByAll[i] < 0) {
      heldByAll[i] = 1;
      for (int64_t r = 0; r < planRef.worldSize && heldByAll[i]; ++r)
        heldByAll[i] = holds(planRef, planRef.params[i], r);
    }
    if (!heldByAll[i])
      return false;
  }
  return true;
}

void StepExecutor::adoptMissingGradients(const std::vector<int64_t> &mine) {
  // The same list on every rank, of parameters every rank holds: every
  // holder of each has no gradient, and every other parameter has one
  // everywhere. The set is the list, with no exchange.
  std::vector<bool> none(locals.size(), false);
  for (int64_t i : mine)
    none[i] = true;
  settleMissingGradients(mine, std::move(none));
}

void StepExecutor::settleMissingGradients(const std::vector<int64_t> &mine,
                                          std::vector<bool> none) {
  // Every rank decides alike from the same words or lists: they all
  // remember this agreement, or (refused) none does.
  if (std::find(none.begin(), none.end(), true) == none.end())
    none.clear();
  skipped = none;
  agreedSkipped = std::move(none);
  agreedMine = mine;
}

Status
StepExecutor::agreeOnMissingGradients(const std::vector<int64_t> &mine) {
  // Every rank's parameters without a gradient (of those it holds): their
  // union is the step's set. The one exchange is enough to check that the
  // holders agree: which ranks hold a parameter is the plan's, so a holder
  // that did not name a parameter of the set has its gradient, and the
  // step fails on every rank, naming both sides.
  std::vector<char> bytes(mine.size() * sizeof(int64_t));
  if (!mine.empty())
    std::memcpy(bytes.data(), mine.data(), bytes.size());
  ++lastCounters.controlCollectives;
  StatusOr<std::vector<std::vector<char>>> gathered =
      comm.allGatherBytes(bytes, options.timeoutSeconds);
  if (!gathered.ok())
    return gathered.status().withContext(
        "agreeing on the parameters without a gradient: ");
  const std::vector<std::vector<char>> &every = *gathered;
  const int64_t count = static_cast<int64_t>(locals.size());
  const int64_t ranks = static_cast<int64_t>(every.size());
  // without[i]: the ranks that named parameter i.
  std::vector<std::vector<int64_t>> without(locals.size());
  for (int64_t r = 0; r < ranks; ++r) {
    std::vector<int64_t> list(every[r].size() / sizeof(int64_t));
    if (!list.empty())
      std::memcpy(list.data(), every[r].data(), list.size() * sizeof(int64_t));
    for (int64_t i : list) {
      if (i < 0 || i >= count)
        return Status(StatusCode::Internal,
                      "rank " + std::to_string(r) + " named parameter " +
                          std::to_string(i) +
                          " as without a gradient; the plan has " +
                          std::to_string(count));
      without[i].push_back(r);
    }
  }
  std::vector<bool> none(locals.size(), false);
  for (int64_t i = 0; i < count; ++i) {
    if (without[i].empty())
      continue;
    none[i] = true;
    std::vector<int64_t> with;
    for (int64_t r = 0; r < ranks; ++r)
      if (!std::binary_search(without[i].begin(), without[i].end(), r) &&
          holds(planRef, planRef.params[i], r))
        with.push_back(r);
    if (!with.empty())
      return failedPrecondition(
          "parameter '" + planRef.params[i].name + "' has a gradient on " +
          "ranks " + formatRanks(with) + " only, and none (grad is None) " +
          "on ranks " + formatRanks(without[i]) +
          "; every rank that holds a piece of it must have a gradient, or "
          "none (nothing was changed)");
  }
  settleMissingGradients(mine, std::move(none));
  return okStatus();
}

const StepLayout &StepExecutor::layoutFor(const std::vector<bool> &skip) {
  if (std::find(skip.begin(), skip.end(), true) == skip.end())
    return *wholeLayout;
  if (!partLayout || partSkipped != skip) {
    auto layout = std::make_unique<StepLayout>();
    StepLayout::filter(planRef, *wholeLayout, skip, *layout);
    partLayout = std::move(layout);
    partSkipped = skip;
  }
  return *partLayout;
}

Status StepExecutor::agreeOnDeviceErrors() {
  Status mine = device.takeError();
  if (mine.ok())
    mine = stepFailure;
  stepFailure = okStatus();
  const int64_t none = std::numeric_limits<int64_t>::max();
  ++lastCounters.controlCollectives;
  StatusOr<int64_t> firstFailed =
      comm.allReduceMin(mine.ok() ? none : myRank, options.timeoutSeconds);
  if (!firstFailed.ok())
    return firstFailed.status().withContext(
        "checking the step's device errors: ");
  const int64_t first = *firstFailed;
  if (first == none)
    return okStatus();
  std::string text =
      shareText(comm, first, mine.message(), options.timeoutSeconds);
  return Status(StatusCode::Internal,
                "the device of rank " + std::to_string(first) +
                    " failed during the step, whose updates may be partly "
                    "applied: " +
                    text);
}

Status StepExecutor::runScheduleOnce() {
  Status status = runSchedule();
  full.clear();
  batchBuffers.clear();
  return status;
}

std::string StepExecutor::graphObstacle() const {
  if (!graphsGivenUp.empty())
    return graphsGivenUp;
  if (options.trace)
    return "tracing times each call on the host";
  if (!comm.recordable())
    return "the transport's exchanges reach the host (NCCL's and a single "
           "rank's can be recorded)";
  return "";
}

StepExecutor::HostSnapshot StepExecutor::snapshot() const {
  HostSnapshot s;
  for (const LocalParam &local : locals)
    s.steps.push_back(local.steps);
  s.counters = lastCounters;
  s.peakBytes = peakBytes;
  return s;
}

void StepExecutor::restore(const HostSnapshot &s) {
  for (size_t i = 0; i < locals.size(); ++i) {
    locals[i].steps = s.steps[i];
    locals[i].summed = false;
  }
  lastCounters = s.counters;
  peakBytes = s.peakBytes;
}

namespace {
/// Recordings that may fail in a row (each costs a pass over the schedule
/// on the host) before a run gives graphs up.
constexpr int kMaxFailedRecordings = 3;
} // namespace

Status StepExecutor::runStepWork() {
  if (!options.graphs)
    return runScheduleOnce();
  lastCounters.graph = GraphUse::Eager;
  if (std::string obstacle = graphObstacle(); !obstacle.empty()) {
    lastCounters.graphNote = obstacle;
    return runScheduleOnce();
  }
  if (graphReady) {
    bool replayed = false;
    MUON_RETURN_IF_ERROR(checkAndReplay(replayed));
    if (replayed)
      return okStatus();
  } else if (!warmedUp) {
    // Workspaces, tile plans and the transport's connections are made by a
    // step that runs: a recording may make none of them.
    warmedUp = true;
    lastCounters.graphNote = "warm-up before the recording";
    return runScheduleOnce();
  }
  return recordAndReplay();
}

Status StepExecutor::checkAndReplay(bool &replayed) {
  // The step's calls against the recording's, none run; then the replay
  // with this step's scalars.
  const HostSnapshot before = snapshot();
  device.beginReplayCheck();
  pass = Pass::Checking;
  Status status = runScheduleOnce();
  pass = Pass::Eager;
  std::string why;
  const bool same = device.endReplayCheck(why);
  if (status.ok() && same) {
    device.replay();
    lastCounters.graph = GraphUse::Replayed;
    replayed = true;
    return okStatus();
  }
  device.dropRecording();
  graphReady = false;
  if (!status.ok())
    return status;
  restore(before);
  lastCounters.graphNote = "recorded again: " + why;
  return okStatus();
}

Status StepExecutor::recordAndReplay() {
  std::string why;
  if (!device.beginRecording(why)) {
    graphsGivenUp = why;
    lastCounters.graphNote = why;
    return runScheduleOnce();
  }
  const HostSnapshot before = snapshot();
  pass = Pass::Recording;
  Status status = runScheduleOnce();
  pass = Pass::Eager;
  const bool recorded = device.endRecording(why);
  if (status.ok() && recorded) {
    device.replay();
    graphReady = true;
    failedRecordings = 0;
    lastCounters.graph = GraphUse::Recorded;
    return okStatus();
  }
  device.dropRecording();
  if (!status.ok())
    return status;
  // Nothing of the recording ran: the step runs as without graphs.
  restore(before);
  lastCounters.graphNote = "not recorded: " + why;
  if (++failedRecordings >= kMaxFailedRecordings)
    graphsGivenUp = "graphs given up after " +
                    std::to_string(kMaxFailedRecordings) +
                    " failed recordings, the last: " + why;
  return runScheduleOnce();
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

} // namespace muon::runtime
