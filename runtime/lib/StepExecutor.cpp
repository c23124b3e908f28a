//===- StepExecutor.cpp - One rank's side of a compiled step ----------------===//
//
// The executor's set-up (initialize: the plan agreed on, the local pieces
// and their state), its bindings and its state. The step itself is in
// StepRun.cpp, the agreements around it in StepAgreement.cpp, the
// exchanges in StepExchanges.cpp, step graphs in StepGraphs.cpp.
//
//===----------------------------------------------------------------------===//
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
#include <functional>

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
    device.stepGraphs()->dropRecording();
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

} // namespace muon::runtime
