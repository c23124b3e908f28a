//===- Optimizer.cpp - The runtime's public API ---------------------------===//
//
// Optimizer's methods forward to its state (OptimizerState.h), where the
// work is; this file is the API's shape only.
//
//===----------------------------------------------------------------------===//
#include "muon/Runtime/Optimizer.h"

#include "OptimizerState.h"

namespace muon::runtime {

Optimizer::Optimizer(std::unique_ptr<OptimizerState> state)
    : state(std::move(state)) {}

Optimizer::~Optimizer() = default;

Status Optimizer::load(const std::string &planPath, Communicator &comm,
                       Device &device, const OptimizerOptions &options,
                       std::unique_ptr<Optimizer> &out) {
  std::unique_ptr<OptimizerState> made;
  MUON_RETURN_IF_ERROR(
      OptimizerState::load(planPath, comm, device, options, made));
  out.reset(new Optimizer(std::move(made)));
  return okStatus();
}

Status Optimizer::create(Plan plan, Communicator &comm, Device &device,
                         const OptimizerOptions &options,
                         std::unique_ptr<Optimizer> &out) {
  std::unique_ptr<OptimizerState> made;
  MUON_RETURN_IF_ERROR(
      OptimizerState::create(std::move(plan), comm, device, options, made));
  out.reset(new Optimizer(std::move(made)));
  return okStatus();
}

int64_t Optimizer::currentRank() const { return state->currentRank(); }
int64_t Optimizer::worldSize() const { return state->worldSize(); }
std::map<int64_t, std::vector<std::string>> Optimizer::assignments() const {
  return state->assignments();
}
const std::vector<ParamSlot> &Optimizer::params() const {
  return state->params();
}
const ParamSlot *Optimizer::param(const std::string &name) const {
  return state->param(name);
}
Status Optimizer::bind(const std::string &name, void *values, DType dtype,
                       const void *grad, DType gradType, int64_t elements) {
  return state->bind(name, values, dtype, grad, gradType, elements);
}
const std::vector<PlanGroup> &Optimizer::groups() const {
  return state->groups();
}
const PlanGroup *Optimizer::group(const std::string &name) const {
  return state->group(name);
}
Status Optimizer::setGroupSettings(const std::string &name,
                                   const PlanGroup &settings) {
  return state->setGroupSettings(name, settings);
}
Status Optimizer::setGroupLr(const std::string &name, double lr) {
  return state->setGroupLr(name, lr);
}
Status Optimizer::setQkMaxLogits(const std::string &layer, const float *logits,
                                 int64_t count) {
  return state->setQkMaxLogits(layer, logits, count);
}
const std::vector<QkClipLayer> &Optimizer::qkClipLayers() const {
  return state->qkClipLayers();
}
Status Optimizer::gatherParameter(const std::string &name, float *whole,
                                  int64_t root) {
  return state->gatherParameter(name, whole, root);
}
void Optimizer::setGradientsReducedToOwners(bool on) {
  state->setGradientsReducedToOwners(on);
}
Status Optimizer::step(StepResult &result) { return state->step(result); }
int64_t Optimizer::stepsTaken() const { return state->stepsTaken(); }
float *Optimizer::stateData(const std::string &name, std::string_view slot) {
  return state->stateData(name, slot);
}
int64_t *Optimizer::stepCountData(const std::string &name) {
  return state->stepCountData(name);
}
Status Optimizer::saveCheckpoint(const std::string &dir, bool withParameters) {
  return state->saveCheckpoint(dir, withParameters);
}
Status Optimizer::loadCheckpoint(const std::string &dir, bool withParameters) {
  return state->loadCheckpoint(dir, withParameters);
}
const CheckpointIoCounters &Optimizer::checkpointIo() const {
  return state->checkpointIo();
}
Status Optimizer::stateDict(bool withParameters, StateDict &dict) const {
  return state->stateDict(withParameters, dict);
}
Status Optimizer::loadStateDict(const StateDict &dict, bool withParameters) {
  return state->loadStateDict(dict, withParameters);
}
const StepCounters &Optimizer::counters() const { return state->counters(); }
const std::vector<TraceEvent> &Optimizer::trace() const {
  return state->trace();
}
const Plan &Optimizer::plan() const { return state->plan(); }
DType Optimizer::nsDtype() const { return state->nsDtype(); }
const std::string &Optimizer::nsDtypeReason() const {
  return state->nsDtypeReason();
}

} // namespace muon::runtime
