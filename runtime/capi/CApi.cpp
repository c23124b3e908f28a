//===- CApi.cpp - The runtime's C API -------------------------------------===//
#include "muon/runtime.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Runtime/Backends.h"
#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/BuiltBackends.h"
#include "muon/Runtime/Optimizer.h"

#include <cstring>
#include <memory>
#include <string>
#include <vector>

using namespace muon::runtime;
using muon::Status;
using muon::StatusCode;

struct muon_optimizer {
  // Destroyed in reverse: the optimizer, then its transport, its device and
  // the communicator the transport borrows.
  std::unique_ptr<Communicator> base;
  std::unique_ptr<Device> device;
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Optimizer> optimizer;
  // What muon_param_info points to.
  std::vector<std::vector<int64_t>> begins, ends;
  std::string assignments;
};

namespace {
thread_local std::string lastError;
/// The code of the calling thread's last failure, for helpers that report
/// one through a null result.
thread_local muon_status lastCode = MUON_OK;

muon_status fail(muon_status status, std::string message) {
  lastError = std::move(message);
  lastCode = status;
  return status;
}

/// The C code of a status: the same canonical number.
muon_status codeOf(muon::StatusCode code) {
  return static_cast<muon_status>(static_cast<int>(code));
}

muon_status report(const Status &status) {
  if (status.ok())
    return MUON_OK;
  return fail(codeOf(status.code()), status.message());
}

/// The options' ranks: MPI's (its process group registered on first use)
/// or this process alone.
Status openRanks(const muon_options &options,
                 std::unique_ptr<Communicator> &out) {
  if (options.mpi_comm < 0)
    return createProcessGroup("single", {}, out);
  registerBuiltBackends();
  return createProcessGroup(
      "mpi", {{"comm", std::to_string(options.mpi_comm)}}, out);
}

muon_status create(const char *planPath, const muon_options &options,
                   muon_optimizer **out) {
  if (!planPath || !out)
    return fail(MUON_INVALID_ARGUMENT,
                "a plan path and an output handle are needed");
  *out = nullptr;
  if (!(options.timeout_seconds > 0))
    return fail(MUON_INVALID_ARGUMENT, "the timeout must be positive");
  auto handle = std::make_unique<muon_optimizer>();
  if (muon_status s = report(openRanks(options, handle->base)); s != MUON_OK)
    return s;
  if (muon_status s = report(createDevice(
          options.device ? options.device : "cpu", handle->device));
      s != MUON_OK)
    return s;
  if (muon_status s = report(
          createCommunicator(options.transport ? options.transport : "mpi",
                             *handle->base, *handle->device, handle->comm));
      s != MUON_OK)
    return s;
  OptimizerOptions opts;
  opts.timeoutSeconds = options.timeout_seconds;
  if (muon_status s = report(Optimizer::load(
          planPath, *handle->comm, *handle->device, opts, handle->optimizer));
      s != MUON_OK)
    return s;
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
  fail(MUON_INVALID_ARGUMENT, "null optimizer handle");
  return false;
}

muon_status checkpoint(muon_optimizer *opt, const char *dir,
                       int withParameters, bool save) {
  if (!checked(opt))
    return MUON_INVALID_ARGUMENT;
  if (!dir)
    return fail(MUON_INVALID_ARGUMENT, "a checkpoint directory is needed");
  return report(save
                    ? opt->optimizer->saveCheckpoint(dir, withParameters != 0)
                    : opt->optimizer->loadCheckpoint(dir, withParameters != 0));
}

bool knownDtype(muon_dtype dtype) {
  return dtype == MUON_F32 || dtype == MUON_BF16 || dtype == MUON_F16;
}
} // namespace

extern "C" {

const char *muon_last_error(void) { return lastError.c_str(); }

const char *muon_status_name(muon_status status) {
  return muon::statusCodeName(static_cast<muon::StatusCode>(status));
}

const char *muon_runtime_version(void) { return MUON_RUNTIME_VERSION_STRING; }

void muon_options_init(muon_options *options) {
  if (!options)
    return;
  options->mpi_comm = -1;
  options->device = "cpu";
  options->transport = "mpi";
  options->timeout_seconds = 120;
}

muon_status muon_optimizer_create(const char *planPath,
                                  const muon_options *options,
                                  muon_optimizer **out) {
  muon_options defaults;
  muon_options_init(&defaults);
  return create(planPath, options ? *options : defaults, out);
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
    return MUON_INVALID_ARGUMENT;
  const std::vector<ParamSlot> &slots = opt->optimizer->params();
  if (!out || index < 0 || index >= static_cast<int64_t>(slots.size()))
    return fail(MUON_INVALID_ARGUMENT, "parameter index " +
                                           std::to_string(index) +
                                           " is out of range [0, " +
                                           std::to_string(slots.size()) + ")");
  const ParamSlot &slot = slots[index];
  out->name = slot.name.c_str();
  out->dtype = static_cast<muon_dtype>(slot.dtype);
  out->dims = static_cast<int64_t>(slot.shape.size());
  out->shape = slot.shape.data();
  out->box_begin = opt->begins[index].data();
  out->box_end = opt->ends[index].data();
  out->elements = slot.elements;
  out->summand = slot.summand;
  out->group = slot.group;
  return MUON_OK;
}

muon_status muon_optimizer_bind(muon_optimizer *opt, const char *name,
                                void *values, const void *grad,
                                muon_dtype dtype, int64_t elements) {
  if (!checked(opt))
    return MUON_INVALID_ARGUMENT;
  if (!name)
    return fail(MUON_INVALID_ARGUMENT, "a parameter name is needed");
  return muon_optimizer_bind_typed(opt, name, values, dtype, grad, dtype,
                                   elements);
}

muon_status muon_optimizer_bind_typed(muon_optimizer *opt, const char *name,
                                      void *values, muon_dtype value_dtype,
                                      const void *grad, muon_dtype grad_dtype,
                                      int64_t elements) {
  if (!checked(opt))
    return MUON_INVALID_ARGUMENT;
  if (!name)
    return fail(MUON_INVALID_ARGUMENT, "a parameter name is needed");
  for (muon_dtype dtype : {value_dtype, grad_dtype})
    if (!knownDtype(dtype))
      return fail(MUON_INVALID_ARGUMENT,
                  "unknown dtype " + std::to_string(dtype));
  return report(opt->optimizer->bind(name, values,
                                     static_cast<DType>(value_dtype), grad,
                                     static_cast<DType>(grad_dtype), elements));
}

muon_status muon_optimizer_step(muon_optimizer *opt, int *applied) {
  if (!checked(opt))
    return MUON_INVALID_ARGUMENT;
  StepResult result;
  if (muon_status s = report(opt->optimizer->step(result)); s != MUON_OK)
    return s;
  if (applied)
    *applied = result.applied;
  return MUON_OK;
}

int64_t muon_optimizer_qk_clip_count(const muon_optimizer *opt) {
  return checked(opt)
             ? static_cast<int64_t>(opt->optimizer->qkClipLayers().size())
             : -1;
}

muon_status muon_optimizer_qk_clip(const muon_optimizer *opt, int64_t index,
                                   muon_qk_clip_info *out) {
  if (!checked(opt))
    return MUON_INVALID_ARGUMENT;
  const std::vector<muon::QkClipLayer> &layers = opt->optimizer->qkClipLayers();
  if (!out || index < 0 || index >= static_cast<int64_t>(layers.size()))
    return fail(MUON_INVALID_ARGUMENT, "QK-clip layer index " +
                                           std::to_string(index) +
                                           " is out of range [0, " +
                                           std::to_string(layers.size()) + ")");
  const muon::QkClipLayer &l = layers[index];
  out->name = l.name.c_str();
  out->query = l.query.c_str();
  out->key = l.key.c_str();
  out->num_heads = l.numHeads;
  out->num_kv_heads = l.numKvHeads;
  out->threshold = l.threshold;
  return MUON_OK;
}

muon_status muon_optimizer_set_qk_max_logits(muon_optimizer *opt,
                                             const char *layer,
                                             const float *logits,
                                             int64_t count) {
  if (!checked(opt))
    return MUON_INVALID_ARGUMENT;
  if (!layer)
    return fail(MUON_INVALID_ARGUMENT, "a QK-clip layer name is needed");
  return report(opt->optimizer->setQkMaxLogits(layer, logits, count));
}

muon_status muon_optimizer_set_gradients_reduced_to_owners(muon_optimizer *opt,
                                                           int on) {
  if (!checked(opt))
    return MUON_INVALID_ARGUMENT;
  opt->optimizer->setGradientsReducedToOwners(on != 0);
  return MUON_OK;
}

int64_t muon_optimizer_group_count(const muon_optimizer *opt) {
  return checked(opt) ? static_cast<int64_t>(opt->optimizer->groups().size())
                      : -1;
}

muon_status muon_optimizer_group(const muon_optimizer *opt, int64_t index,
                                 muon_group_info *out) {
  if (!checked(opt))
    return MUON_INVALID_ARGUMENT;
  const std::vector<muon::PlanGroup> &groups = opt->optimizer->groups();
  if (!out || index < 0 || index >= static_cast<int64_t>(groups.size()))
    return fail(MUON_INVALID_ARGUMENT, "group index " + std::to_string(index) +
                                           " is out of range [0, " +
                                           std::to_string(groups.size()) + ")");
  const muon::PlanGroup &g = groups[index];
  out->name = g.name.c_str();
  out->algorithm = muon::algorithmName(g.algorithm);
  out->orthogonalizes = g.orthogonalizes();
  return MUON_OK;
}

namespace {

using muon::GroupSetting;

/// The group `group` of a valid `opt` and its setting `name` of the kind
/// asked for (text or number), or null with the error set.
const GroupSetting *findSetting(const muon_optimizer *opt, const char *group,
                                const char *name, bool text,
                                const muon::PlanGroup *&found) {
  if (!checked(opt))
    return nullptr;
  if (!group || !name) {
    fail(MUON_INVALID_ARGUMENT, "a group name and a setting name are needed");
    return nullptr;
  }
  found = opt->optimizer->group(group);
  if (!found) {
    std::string names;
    for (const muon::PlanGroup &g : opt->optimizer->groups())
      names += std::string(names.empty() ? "" : ", ") + "'" + g.name + "'";
    fail(MUON_NOT_FOUND, std::string("no group named '") + group +
                             "' (the plan's groups: " + names + ")");
    return nullptr;
  }
  // The settings described once (muon/Plan/GroupSettings.h).
  std::string mine;
  for (const GroupSetting &s : muon::algorithmOf(found->algorithm).settings) {
    const bool isText = s.kind == GroupSetting::Kind::Name;
    if (std::strcmp(s.name, name) == 0 && isText == text)
      return &s;
    mine += std::string(mine.empty() ? "" : ", ") + s.name +
            (isText ? " (text)" : "");
  }
  fail(MUON_INVALID_ARGUMENT, std::string("group '") + group + "' (" +
                                  muon::algorithmName(found->algorithm) +
                                  ") has no " + (text ? "text" : "number") +
                                  " setting '" + name +
                                  "'; its settings: " + mine);
  return nullptr;
}

} // namespace

muon_status muon_optimizer_group_setting(const muon_optimizer *opt,
                                         const char *group, const char *name,
                                         double *value) {
  const muon::PlanGroup *g = nullptr;
  const GroupSetting *s = findSetting(opt, group, name, false, g);
  if (!s)
    return lastCode;
  if (!value)
    return fail(MUON_INVALID_ARGUMENT, "a place for the value is needed");
  *value = muon::settingValue(*s, *g);
  return MUON_OK;
}

muon_status muon_optimizer_set_group_setting(muon_optimizer *opt,
                                             const char *group,
                                             const char *name, double value) {
  const muon::PlanGroup *g = nullptr;
  const GroupSetting *s = findSetting(opt, group, name, false, g);
  if (!s)
    return lastCode;
  if (s->kind == GroupSetting::Kind::Flag && value != 0.0 && value != 1.0)
    return fail(MUON_INVALID_ARGUMENT,
                std::string("group '") + group + "': " + name +
                    " is a boolean: 0 or 1, not " + std::to_string(value));
  muon::PlanGroup updated = *g;
  muon::setSettingValue(*s, updated, value);
  return report(opt->optimizer->setGroupSettings(group, updated));
}

muon_status muon_optimizer_group_setting_text(const muon_optimizer *opt,
                                              const char *group,
                                              const char *name,
                                              const char **value) {
  const muon::PlanGroup *g = nullptr;
  const GroupSetting *s = findSetting(opt, group, name, true, g);
  if (!s)
    return lastCode;
  if (!value)
    return fail(MUON_INVALID_ARGUMENT, "a place for the value is needed");
  *value = muon::settingName(*s, *g).c_str();
  return MUON_OK;
}

muon_status muon_optimizer_set_group_setting_text(muon_optimizer *opt,
                                                  const char *group,
                                                  const char *name,
                                                  const char *value) {
  const muon::PlanGroup *g = nullptr;
  const GroupSetting *s = findSetting(opt, group, name, true, g);
  if (!s)
    return lastCode;
  if (!value)
    return fail(MUON_INVALID_ARGUMENT, "a value is needed");
  muon::PlanGroup updated = *g;
  muon::setSettingName(*s, updated, value);
  return report(opt->optimizer->setGroupSettings(group, updated));
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
