//===- OptimizerState.cpp - The optimizer's work
//---------------------------===//
#include "OptimizerState.h"
#include "muon/Runtime/MatrixStep.h"

#include "ApiBoundary.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Validate.h"
#include "muon/Support/Escape.h"
#include "muon/Support/InputFile.h"
#include "muon/Support/Limits.h"

#include <cmath>
#include <map>
#include <unistd.h>

namespace muon::runtime {

OptimizerState::OptimizerState(Plan plan, Communicator &comm, Device &device,
                               const OptimizerOptions &options)
    : thePlan(std::move(plan)), comm(comm), device(device), options(options) {}

OptimizerState::~OptimizerState() = default;

Status OptimizerState::load(const std::string &planPath, Communicator &comm,
                            Device &device, const OptimizerOptions &options,
                            std::unique_ptr<OptimizerState> &out) {
  return guardedCall("loading a plan", [&]() -> Status {
    // A binary plan: this rank reads and checks only its own part.
    std::string text;
    if (looksLikePlanBinary(readInputPrefix(planPath, kPlanBinaryProbeSize))) {
      StatusOr<Plan> slice = loadPlanSlice(planPath, comm.rank());
      if (!slice.ok())
        return Status(slice.status().code(),
                      escapeBytes(slice.status().text()));
      return create(std::move(slice).value(), comm, device, options, out);
    }
    MUON_ASSIGN_OR_RETURN(
        text, readInputFile(planPath, limits::kMaxTextFileBytes,
                            "the plan file"));
    StatusOr<Plan> plan = parsePlan(text);
    if (!plan.ok())
      return invalidArgument(
          escapeBytes(planPath + ": " + plan.status().text()));
    return create(std::move(plan).value(), comm, device, options, out);
  });
}

Status OptimizerState::create(Plan plan, Communicator &comm, Device &device,
                              const OptimizerOptions &options,
                              std::unique_ptr<OptimizerState> &out) {
  return guardedCall("creating the optimizer", [&] {
    return createImpl(std::move(plan), comm, device, options, out);
  });
}

Status OptimizerState::createImpl(Plan plan, Communicator &comm, Device &device,
                                  const OptimizerOptions &options,
                                  std::unique_ptr<OptimizerState> &out) {
  // A plan built in memory gets the checks a plan file gets.
  if (Status bad = validatePlan(plan); !bad.ok())
    return invalidArgument("the plan is not sound: " + json::describe(bad));
  if (comm.size() != plan.worldSize)
    return invalidArgument("the plan is for " + std::to_string(plan.worldSize) +
                           " ranks but the communicator has " +
                           std::to_string(comm.size()));
  std::unique_ptr<OptimizerState> opt(
      new OptimizerState(std::move(plan), comm, device, options));
  ExecutorOptions executorOptions;
  executorOptions.timeoutSeconds = options.timeoutSeconds;
  executorOptions.trace = options.trace;
  executorOptions.graphs = options.graphs;
  opt->executor = std::make_unique<StepExecutor>(opt->thePlan, comm, device,
                                                 executorOptions);
  MUON_RETURN_IF_ERROR(opt->executor->initialize());
  for (size_t i = 0; i < opt->thePlan.params.size(); ++i) {
    const PlanParam &p = opt->thePlan.params[i];
    ParamSlot slot;
    slot.name = p.name;
    slot.dtype = opt->executor->dtype(i);
    slot.gradType = slot.dtype;
    slot.algorithm = p.algorithm;
    slot.group = p.group;
    slot.shape = p.layout.shape;
    slot.elements = opt->executor->localElements(i);
    if (slot.elements)
      slot.box = opt->executor->localBox(i);
    slot.summand = opt->executor->localSummand(i);
    opt->slotOf[slot.name] = opt->slots.size();
    opt->slots.push_back(std::move(slot));
  }
  opt->values.assign(opt->slots.size(), nullptr);
  out = std::move(opt);
  return okStatus();
}

int64_t OptimizerState::currentRank() const { return comm.rank(); }
int64_t OptimizerState::worldSize() const { return thePlan.worldSize; }

std::map<int64_t, std::vector<std::string>>
OptimizerState::assignments() const {
  std::map<int64_t, std::vector<std::string>> byRank;
  for (int64_t r = 0; r < thePlan.worldSize; ++r) {
    std::vector<std::string> &names = byRank[r];
    for (int64_t k : thePlan.nsMatrices[r])
      names.push_back(thePlan.matrices[k].label());
  }
  return byRank;
}

const ParamSlot *OptimizerState::param(const std::string &name) const {
  auto it = slotOf.find(name);
  return it == slotOf.end() ? nullptr : &slots[it->second];
}

Status OptimizerState::bind(const std::string &name, void *values, DType dtype,
                            const void *grad, DType gradType,
                            int64_t elements) {
  auto it = slotOf.find(name);
  if (it == slotOf.end())
    return Status(StatusCode::NotFound,
                  "no parameter named '" + name + "' in the plan");
  ParamSlot &slot = slots[it->second];
  if (dtype != slot.dtype)
    return invalidArgument("parameter '" + name + "' is stored as " +
                           dtypeName(slot.dtype) + " in the plan, not " +
                           dtypeName(dtype));
  if (elements != slot.elements)
    return invalidArgument("parameter '" + name + "': rank " +
                           std::to_string(comm.rank()) + " holds " +
                           std::to_string(slot.elements) +
                           " elements of it, not " + std::to_string(elements));
  if (slot.elements && !values)
    return invalidArgument("parameter '" + name +
                           "': its values must not be null");
  executor->bind(it->second, values, grad, gradType);
  this->values[it->second] = values;
  slot.gradType = gradType;
  slot.bound = true;
  return okStatus();
}

const PlanGroup *OptimizerState::group(const std::string &name) const {
  int64_t index = findGroup(executor->groups(), name);
  return index < 0 ? nullptr : &executor->groups()[index];
}

Status OptimizerState::setGroupSettings(const std::string &name,
                                        const PlanGroup &group) {
  int64_t index = findGroup(executor->groups(), name);
  if (index < 0) {
    std::string names;
    for (const PlanGroup &g : executor->groups())
      names += (names.empty() ? "'" : ", '") + g.name + "'";
    return Status(StatusCode::NotFound, "no parameter group named '" + name +
                                            "' (the groups are " + names + ")");
  }
  const PlanGroup &current = executor->groups()[index];
  if (current.algorithm != group.algorithm)
    return invalidArgument(
        "group '" + name + "' is " + algorithmName(current.algorithm) +
        ", not " +
        (validAlgorithm(group.algorithm) ? algorithmName(group.algorithm)
                                         : "an unknown algorithm") +
        "; give it " + algorithmName(current.algorithm) + " settings");
  for (const MatrixStep &step : matrixSteps())
    if (step.enabled(group) != step.enabled(current))
      return invalidArgument(
          "group '" + name + "' is " + (step.enabled(current) ? "" : "not ") +
          step.title + " in the plan; " + step.setting +
          " cannot change between steps (it decides which matrices keep "
          "per-row state: compile the plan with it)");
  PlanGroup updated = current;
  updated.settings = group.settings;
  if (Status bad = checkGroupSettings(updated); !bad.ok())
    return invalidArgument("group '" + name + "': " + bad.location() + ": " +
                           bad.message() + " (nothing was changed)");
  executor->setGroup(index, updated);
  return okStatus();
}

Status OptimizerState::setGroupLr(const std::string &name, double lr) {
  const PlanGroup *current = group(name);
  if (!current)
    return setGroupSettings(name, PlanGroup()); // names the groups
  PlanGroup g = *current;
  g.setNumber("lr", lr); // every algorithm has one (AlgorithmTest)
  return setGroupSettings(name, g);
}

Status OptimizerState::gatherParameter(const std::string &name, float *whole,
                                       int64_t root) {
  auto it = slotOf.find(name);
  if (it == slotOf.end())
    return Status(StatusCode::NotFound,
                  "no parameter named '" + name + "' in the plan");
  const int64_t world = thePlan.worldSize, me = comm.rank();
  if (root < -1 || root >= world)
    return invalidArgument("gathering '" + name + "': root " +
                           std::to_string(root) + " is not a rank of " +
                           std::to_string(world));
  const bool receive = root == -1 || root == me;
  if (receive && !whole)
    return invalidArgument("gathering '" + name +
                           "': the destination must not be null");
  const ParamSlot &slot = slots[it->second];
  if (slot.elements && !slot.bound)
    return failedPrecondition("gathering '" + name + "': rank " +
                              std::to_string(me) + " has not bound it");
  // Every rank's box, from the layout; each distinct box is sent by its
  // lowest holder (replicas hold the same values).
  const PlanParam &p = thePlan.params[it->second];
  std::vector<std::vector<Range>> boxes(world);
  std::vector<int64_t> sender(world, -1);
  std::map<std::vector<std::pair<int64_t, int64_t>>, int64_t> firstHolder;
  for (int64_t r = 0; r < world; ++r) {
    std::vector<int64_t> coords = thePlan.mesh.coordsOfRank(r);
    if (!p.layout.inSubmesh(coords))
      continue;
    boxes[r] = p.layout.localBox(thePlan.mesh, coords);
    std::vector<std::pair<int64_t, int64_t>> key;
    int64_t n = 1;
    for (const Range &range : boxes[r]) {
      key.push_back({range.begin, range.end});
      n *= range.size();
    }
    if (n && firstHolder.emplace(key, r).second)
      sender[r] = r;
  }
  auto elementsOf = [&](int64_t r) {
    int64_t n = sender[r] < 0 ? 0 : 1;
    for (const Range &range : boxes[r])
      n *= range.size();
    return n;
  };
  AllToAllV call;
  call.elementBytes = 4;
  call.sendCounts.assign(world, 0);
  call.sendOffsets.assign(world, 0);
  call.recvCounts.assign(world, 0);
  call.recvOffsets.assign(world, 0);
  int64_t recvTotal = 0;
  for (int64_t r = 0; r < world; ++r) {
    if (elementsOf(me) && (root == -1 || root == r))
      call.sendCounts[r] = elementsOf(me); // one piece, at offset 0
    if (receive) {
      call.recvOffsets[r] = recvTotal;
      call.recvCounts[r] = elementsOf(r);
      recvTotal += call.recvCounts[r];
    }
  }
  // The piece as f32, in device memory as a transport expects it.
  std::vector<float> mine(elementsOf(me));
  if (!mine.empty()) {
    const int64_t width = dtypeBytes(slot.dtype);
    std::vector<char> raw(mine.size() * width);
    device.copyToHost(raw.data(), values[it->second], raw.size());
    for (size_t e = 0; e < mine.size(); ++e)
      mine[e] = loadAs(raw.data(), slot.dtype, static_cast<int64_t>(e));
  }
  DeviceBuffer send(device, static_cast<int64_t>(mine.size()) * 4),
      recv(device, recvTotal * 4);
  if (!send.ok() || !recv.ok())
    return Status(StatusCode::ResourceExhausted,
                  "gathering '" + name + "': the device has no room for " +
                      std::to_string((mine.size() + recvTotal) * 4) + " bytes");
  if (!mine.empty())
    device.copyToDevice(send.data(), mine.data(), mine.size() * 4);
  call.sendBuffer = send.data();
  call.recvBuffer = recv.data();
  StatusOr<PendingExchange> pending = comm.start(call);
  Status moved = pending.ok() ? comm.wait(*pending, options.timeoutSeconds)
                              : pending.status();
  if (!moved.ok())
    return moved.withContext("gathering '" + name + "': ");
  if (!receive)
    return okStatus();
  std::vector<float> pieces(recvTotal);
  if (recvTotal)
    device.copyToHost(pieces.data(), recv.data(), recvTotal * 4);
  // Paste each piece into place, row-major over the whole shape.
  const std::vector<int64_t> &shape = p.layout.shape;
  for (int64_t r = 0; r < world; ++r) {
    const int64_t n = elementsOf(r);
    if (!n)
      continue;
    const float *piece = pieces.data() + call.recvOffsets[r];
    forEachElement(shape, boxes[r], [&](int64_t local, int64_t global) {
      whole[global] = piece[local];
    });
  }
  return okStatus();
}

Status OptimizerState::setQkMaxLogits(const std::string &layer,
                                      const float *logits, int64_t count) {
  const std::vector<QkClipLayer> &layers = thePlan.qkClip;
  size_t l = 0;
  while (l < layers.size() && layers[l].name != layer)
    ++l;
  if (l == layers.size()) {
    std::string known;
    for (const QkClipLayer &q : layers)
      known += (known.empty() ? "'" : ", '") + q.name + "'";
    return invalidArgument(
        "QK-clip: no layer named '" + layer + "'" +
        (known.empty() ? std::string("; the plan has no qk_clip layers")
                       : "; the plan's layers are " + known));
  }
  if (count != layers[l].numHeads)
    return invalidArgument("QK-clip: layer '" + layer + "' has " +
                           std::to_string(layers[l].numHeads) +
                           " query heads but " + std::to_string(count) +
                           " logits were given");
  if (count && !logits)
    return invalidArgument("QK-clip: layer '" + layer + "': no logits");
  for (int64_t h = 0; h < count; ++h)
    if (!std::isfinite(logits[h]))
      return invalidArgument("QK-clip: layer '" + layer + "': the logit of " +
                             "head " + std::to_string(h) + " is not finite");
  executor->setQkMaxLogits(static_cast<int64_t>(l),
                           std::vector<float>(logits, logits + count));
  return okStatus();
}

Status OptimizerState::step(StepResult &result) {
  Status status = executor->step(result);
  if (!status.ok()) {
    // Name what this rank lacks when that is the problem.
    if (status.code() == StatusCode::FailedPrecondition)
      for (const ParamSlot &slot : slots)
        if (slot.elements && !slot.bound)
          return Status(status.code(), status.message() +
                                           " (this rank has not bound '" +
                                           slot.name + "')");
    return status;
  }
  if (result.applied)
    ++steps;
  return okStatus();
}

Status OptimizerState::saveCheckpoint(const std::string &dir,
                                      bool withParameters) {
  // The checks and the save are collective: every rank fails alike.
  return guardedCall("saving a checkpoint",
                     [&] { return saveCheckpointFiles(dir, withParameters); });
}

Status OptimizerState::loadCheckpoint(const std::string &dir,
                                      bool withParameters) {
  return guardedCall("loading a checkpoint",
                     [&] { return loadCheckpointFiles(dir, withParameters); });
}

DType OptimizerState::nsDtype() const { return executor->nsPrecision(); }

const std::string &OptimizerState::nsDtypeReason() const {
  return executor->nsPrecisionReason();
}

float *OptimizerState::stateData(const std::string &name,
                                 std::string_view slot) {
  auto it = slotOf.find(name);
  if (it == slotOf.end())
    return nullptr;
  const int index = elementSlotOf(slots[it->second].algorithm, slot);
  if (index < 0)
    return nullptr;
  return executor->elementState(static_cast<int64_t>(it->second), index);
}

int64_t *OptimizerState::stepCountData(const std::string &name) {
  auto it = slotOf.find(name);
  if (it == slotOf.end() || !slots[it->second].elements ||
      !countsSteps(executor->groups()[slots[it->second].group]))
    return nullptr;
  return &executor->stepCount(static_cast<int64_t>(it->second));
}

const StepCounters &OptimizerState::counters() const {
  return executor->counters();
}
const std::vector<TraceEvent> &OptimizerState::trace() const {
  return executor->trace();
}

} // namespace muon::runtime
