//===- Optimizer.cpp - Distributed Muon for a C++ trainer -----------------===//
#include "muon/Runtime/Optimizer.h"

#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Validate.h"

#include <fstream>
#include <sstream>

namespace muon::runtime {

Optimizer::Optimizer(Plan plan, Communicator &comm, Device &device,
                     const OptimizerOptions &options)
    : thePlan(std::move(plan)), comm(comm), device(device), options(options) {}

Optimizer::~Optimizer() = default;

std::unique_ptr<Optimizer> Optimizer::load(const std::string &planPath,
                                           Communicator &comm, Device &device,
                                           const OptimizerOptions &options,
                                           std::string &error) {
  std::ifstream in(planPath, std::ios::binary);
  if (!in) {
    error = "cannot read the plan file '" + planPath + "'";
    return nullptr;
  }
  // A binary plan: this rank reads and checks only its own part.
  char magic[8] = {};
  in.read(magic, sizeof(magic));
  Plan plan;
  if (in.gcount() == sizeof(magic) &&
      isPlanBinary(std::string_view(magic, sizeof(magic)))) {
    if (!loadPlanSlice(planPath, comm.rank(), plan, error))
      return nullptr;
    return create(std::move(plan), comm, device, options, error);
  }
  in.clear();
  in.seekg(0);
  std::ostringstream text;
  text << in.rdbuf();
  if (!parsePlan(text.str(), plan, error)) {
    error = planPath + ": " + error;
    return nullptr;
  }
  return create(std::move(plan), comm, device, options, error);
}

std::unique_ptr<Optimizer> Optimizer::create(Plan plan, Communicator &comm,
                                             Device &device,
                                             const OptimizerOptions &options,
                                             std::string &error) {
  // A plan built in memory gets the checks a plan file gets.
  if (json::Error bad = validatePlan(plan); !bad.empty()) {
    error = "the plan is not sound: " + bad.str();
    return nullptr;
  }
  if (comm.size() != plan.worldSize) {
    error = "the plan is for " + std::to_string(plan.worldSize) +
            " ranks but the communicator has " + std::to_string(comm.size());
    return nullptr;
  }
  std::unique_ptr<Optimizer> opt(
      new Optimizer(std::move(plan), comm, device, options));
  ExecutorOptions executorOptions;
  executorOptions.timeoutSeconds = options.timeoutSeconds;
  executorOptions.trace = options.trace;
  opt->executor = std::make_unique<StepExecutor>(opt->thePlan, comm, device,
                                                 executorOptions);
  if (!opt->executor->initialize(error))
    return nullptr;
  for (size_t i = 0; i < opt->thePlan.params.size(); ++i) {
    const PlanParam &p = opt->thePlan.params[i];
    ParamSlot slot;
    slot.name = p.name;
    slot.dtype = opt->executor->dtype(i);
    slot.muon = p.muon;
    slot.shape = p.layout.shape;
    slot.elements = opt->executor->localElements(i);
    if (slot.elements)
      slot.box = opt->executor->localBox(i);
    slot.summand = opt->executor->localSummand(i);
    opt->slotOf[slot.name] = opt->slots.size();
    opt->slots.push_back(std::move(slot));
  }
  opt->values.assign(opt->slots.size(), nullptr);
  return opt;
}

int64_t Optimizer::currentRank() const { return comm.rank(); }
int64_t Optimizer::worldSize() const { return thePlan.worldSize; }

std::map<int64_t, std::vector<std::string>> Optimizer::assignments() const {
  std::map<int64_t, std::vector<std::string>> byRank;
  for (int64_t r = 0; r < thePlan.worldSize; ++r) {
    std::vector<std::string> &names = byRank[r];
    for (int64_t k : thePlan.nsMatrices[r])
      names.push_back(thePlan.matrices[k].label());
  }
  return byRank;
}

const ParamSlot *Optimizer::param(const std::string &name) const {
  auto it = slotOf.find(name);
  return it == slotOf.end() ? nullptr : &slots[it->second];
}

bool Optimizer::bind(const std::string &name, void *values, const void *grad,
                     DType dtype, int64_t elements, std::string &error) {
  auto it = slotOf.find(name);
  if (it == slotOf.end()) {
    error = "no parameter named '" + name + "' in the plan";
    return false;
  }
  ParamSlot &slot = slots[it->second];
  if (dtype != slot.dtype) {
    error = "parameter '" + name + "' is stored as " +
            dtypeName(slot.dtype) + " in the plan, not " + dtypeName(dtype);
    return false;
  }
  if (elements != slot.elements) {
    error = "parameter '" + name + "': rank " +
            std::to_string(comm.rank()) + " holds " +
            std::to_string(slot.elements) + " elements of it, not " +
            std::to_string(elements);
    return false;
  }
  if (slot.elements && (!values || !grad)) {
    error = "parameter '" + name + "': values and gradient must not be null";
    return false;
  }
  executor->bind(it->second, values, grad);
  this->values[it->second] = values;
  slot.bound = true;
  return true;
}

bool Optimizer::step(StepResult &result, std::string &error) {
  if (!executor->step(result, error)) {
    // Name what this rank lacks when that is the problem.
    for (const ParamSlot &slot : slots)
      if (slot.elements && !slot.bound) {
        error += " (this rank has not bound '" + slot.name + "')";
        break;
      }
    return false;
  }
  if (result.applied)
    ++steps;
  return true;
}

DType Optimizer::nsDtype() const { return executor->nsPrecision(); }

const StepCounters &Optimizer::counters() const { return executor->counters(); }
const std::vector<TraceEvent> &Optimizer::trace() const {
  return executor->trace();
}

} // namespace muon::runtime
