//===- CApi.cpp - The runtime's C API -------------------------------------===//
#include "muon/runtime.h"

#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/Cpu/MpiCommunicator.h"
#include "muon/Runtime/Optimizer.h"

#include <memory>
#include <string>
#include <vector>

using namespace muon::runtime;

struct muon_optimizer {
  std::unique_ptr<Communicator> comm;
  cpu::CpuDevice device;
  std::unique_ptr<Optimizer> optimizer;
  // What muon_param_info points to.
  std::vector<std::vector<int64_t>> begins, ends;
  std::string assignments;
};

namespace {
thread_local std::string lastError;

muon_status fail(muon_status status, std::string message) {
  lastError = std::move(message);
  return status;
}

muon_status create(const char *planPath, std::unique_ptr<Communicator> comm,
                   double timeout, muon_optimizer **out) {
  if (!planPath || !out)
    return fail(MUON_INVALID, "a plan path and an output handle are needed");
  *out = nullptr;
  auto handle = std::make_unique<muon_optimizer>();
  handle->comm = std::move(comm);
  OptimizerOptions options;
  options.timeoutSeconds = timeout;
  std::string error;
  handle->optimizer = Optimizer::load(planPath, *handle->comm, handle->device,
                                      options, error);
  if (!handle->optimizer)
    return fail(MUON_INVALID, error);
  for (const ParamSlot &slot : handle->optimizer->params()) {
    std::vector<int64_t> b, e;
    for (const muon::Range &r : slot.box) {
      b.push_back(r.begin);
      e.push_back(r.end);
    }
    if (slot.box.empty()) { // holds nothing: empty ranges
      b.assign(slot.shape.size(), 0);
      e.assign(slot.shape.size(), 0);
    }
    handle->begins.push_back(std::move(b));
    handle->ends.push_back(std::move(e));
  }
  *out = handle.release();
  lastError.clear();
  return MUON_OK;
}

bool checked(const muon_optimizer *opt) {
  if (opt && opt->optimizer)
    return true;
  lastError = "null optimizer handle";
  return false;
}

/// Saving fails as a run (the disk); loading as input (the checkpoint).
muon_status checkpoint(muon_optimizer *opt, const char *dir,
                       int withParameters, bool save) {
  if (!checked(opt))
    return MUON_INVALID;
  if (!dir)
    return fail(MUON_INVALID, "a checkpoint directory is needed");
  std::string error;
  bool ok = save ? opt->optimizer->saveCheckpoint(dir, withParameters != 0,
                                                  error)
                 : opt->optimizer->loadCheckpoint(dir, withParameters != 0,
                                                  error);
  if (!ok)
    return fail(save ? MUON_FAILED : MUON_INVALID, error);
  return MUON_OK;
}
} // namespace

extern "C" {

const char *muon_last_error(void) { return lastError.c_str(); }

muon_status muon_optimizer_create_mpi(const char *planPath,
                                      int64_t mpiCommFortran,
                                      double timeoutSeconds,
                                      muon_optimizer **out) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return fail(MUON_INVALID, "MPI is not initialized; call MPI_Init first");
  if (!(timeoutSeconds > 0))
    return fail(MUON_INVALID, "the timeout must be positive");
  MPI_Comm comm = MPI_Comm_f2c(static_cast<MPI_Fint>(mpiCommFortran));
  return create(planPath, std::make_unique<MpiCommunicator>(comm),
                timeoutSeconds, out);
}

muon_status muon_optimizer_create_single(const char *planPath,
                                         muon_optimizer **out) {
  return create(planPath, std::make_unique<SingleRankCommunicator>(), 120,
                out);
}

void muon_optimizer_destroy(muon_optimizer *opt) { delete opt; }

int64_t muon_optimizer_rank(const muon_optimizer *opt) {
  return checked(opt) ? opt->optimizer->currentRank() : -1;
}

int64_t muon_optimizer_world_size(const muon_optimizer *opt) {
  return checked(opt) ? opt->optimizer->worldSize() : -1;
}

int64_t muon_optimizer_param_count(const muon_optimizer *opt) {
  return checked(opt) ? static_cast<int64_t>(opt->optimizer->params().size())
                      : -1;
}

int64_t muon_optimizer_steps(const muon_optimizer *opt) {
  return checked(opt) ? opt->optimizer->stepsTaken() : -1;
}

muon_status muon_optimizer_param(const muon_optimizer *opt, int64_t index,
                                 muon_param_info *out) {
  if (!checked(opt))
    return MUON_INVALID;
  const std::vector<ParamSlot> &slots = opt->optimizer->params();
  if (!out || index < 0 || index >= static_cast<int64_t>(slots.size()))
    return fail(MUON_INVALID, "parameter index " + std::to_string(index) +
                                  " is out of range [0, " +
                                  std::to_string(slots.size()) + ")");
  const ParamSlot &slot = slots[index];
  out->name = slot.name.c_str();
  out->dtype = static_cast<muon_dtype>(slot.dtype);
  out->is_muon = slot.muon;
  out->dims = static_cast<int64_t>(slot.shape.size());
  out->shape = slot.shape.data();
  out->box_begin = opt->begins[index].data();
  out->box_end = opt->ends[index].data();
  out->elements = slot.elements;
  return MUON_OK;
}

muon_status muon_optimizer_bind(muon_optimizer *opt, const char *name,
                                void *values, const void *grad,
                                muon_dtype dtype, int64_t elements) {
  if (!checked(opt))
    return MUON_INVALID;
  if (!name)
    return fail(MUON_INVALID, "a parameter name is needed");
  if (dtype != MUON_F32 && dtype != MUON_BF16 && dtype != MUON_F16)
    return fail(MUON_INVALID, "unknown dtype " + std::to_string(dtype));
  std::string error;
  if (!opt->optimizer->bind(name, values, grad, static_cast<DType>(dtype),
                            elements, error))
    return fail(MUON_INVALID, error);
  return MUON_OK;
}

muon_status muon_optimizer_step(muon_optimizer *opt, int *applied) {
  if (!checked(opt))
    return MUON_INVALID;
  StepResult result;
  std::string error;
  if (!opt->optimizer->step(result, error))
    return fail(error.find("has not bound") != std::string::npos
                    ? MUON_INVALID
                    : MUON_FAILED,
                error);
  if (applied)
    *applied = result.applied;
  return MUON_OK;
}

muon_status muon_optimizer_save_checkpoint(muon_optimizer *opt,
                                           const char *dir,
                                           int withParameters) {
  return checkpoint(opt, dir, withParameters, /*save=*/true);
}

muon_status muon_optimizer_load_checkpoint(muon_optimizer *opt,
                                           const char *dir,
                                           int withParameters) {
  return checkpoint(opt, dir, withParameters, /*save=*/false);
}

const char *muon_optimizer_assignments(muon_optimizer *opt, int64_t rank) {
  if (!checked(opt))
    return "";
  opt->assignments.clear();
  auto all = opt->optimizer->assignments();
  auto it = all.find(rank);
  if (it != all.end())
    for (const std::string &name : it->second)
      opt->assignments += name + "\n";
  return opt->assignments.c_str();
}

} // extern "C"
