//===- Optimizer.cpp - muonc.Optimizer: the runtime's optimizer -------------===//
//
// muon::runtime::Optimizer in Python: a plan (a muonc.Plan, its JSON text
// or a plan file) over a device and the ranks' communicator; arrays (numpy,
// or anything with __dlpack__, such as torch tensors on the CPU or on the
// optimizer's GPU) bound zero-copy; steps, group settings, state dicts and
// views of the state in place.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Runtime/Backends.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/Optimizer.h"

#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdlib>
#include <map>
#include <optional>

namespace muonc {

namespace {

class PyOptimizer {
public:
  /// `comm`: None for one process, "mpi" for MPI_COMM_WORLD (a duplicate),
  /// else a Python communicator object.
  /// `plan`: a Plan (compile_model's, compile_spec's), the plan file's
  /// JSON text, or with `isFile` a plan file's path (JSON or binary).
  /// `gpuTransport` (an optimizer on a GPU): "nccl" (the runtime's NCCL
  /// communicator, bootstrapped over `comm`: exchanges stay on the device),
  /// "host" (staged through host memory over `comm`, for ranks that share a
  /// GPU), or "" for the default: NCCL under MPI, host otherwise;
  /// MUONC_GPU_TRANSPORT overrides either.
  PyOptimizer(nb::object plan, nb::object comm, double timeout, bool isFile,
              const std::string &nsForm, const std::string &deviceName,
              const std::string &gpuTransport) {
    device = openDevice(deviceName, nsForm);
    onGpu = deviceName != "cpu";
    ordinal = !onGpu                ? -1
              : deviceName == "cuda" ? 0
                                     : std::atoi(deviceName.c_str() + 5);
    if (comm.is_none()) {
      base = std::make_unique<rt::SingleRankCommunicator>();
    } else if (nb::isinstance<nb::str>(comm)) {
      if (nb::cast<std::string>(comm) != "mpi")
        throw StatusError(muon::StatusCode::InvalidArgument,
                          "comm '" + nb::cast<std::string>(comm) +
                              "': expected None, \"mpi\" or a communicator");
      base = mpiWorldCommunicator();
      releaseGil = true;
    } else {
      base = pythonCommunicator(comm);
    }
    rt::Communicator *communicator = base.get();
    if (onGpu) {
      // Device memory: NCCL between MPI's processes (one GPU each), else
      // through host memory (a Python communicator moves host bytes).
      std::string kind = !gpuTransport.empty() ? gpuTransport
                         : releaseGil          ? "nccl"
                                               : "host";
      if (const char *forced = std::getenv("MUONC_GPU_TRANSPORT"))
        kind = forced;
      check(rt::createCommunicator(kind, *base, *device, transport));
      communicator = transport.get();
      transportKind = kind;
    }
    timeoutSeconds = timeout;
    rt::OptimizerOptions options;
    options.timeoutSeconds = timeout;
    if (PyPlan *compiled = nullptr; nb::try_cast(plan, compiled) && compiled) {
      check(rt::Optimizer::create(compiled->plan, *communicator, *device,
                                  options, opt));
      return;
    }
    if (!nb::isinstance<nb::str>(plan))
      throw ArgumentTypeError("plan: expected a muonc.Plan, the plan file's "
                              "JSON text or (plan_is_file) its path");
    const std::string text = nb::cast<std::string>(plan);
    if (isFile) {
      check(rt::Optimizer::load(text, *communicator, *device, options, opt));
      return;
    }
    muon::StatusOr<muon::Plan> parsed = muon::parsePlan(text);
    check(parsed.status().withContext("plan: "));
    check(rt::Optimizer::create(std::move(parsed).value(), *communicator,
                                *device, options, opt));
  }

  ~PyOptimizer() {
    // The optimizer's buffers go back to the device before it closes.
    opt.reset();
    transport.reset();
  }

  nb::list params() const {
    nb::list out;
    for (const rt::ParamSlot &s : opt->params()) {
      nb::dict d;
      d["name"] = s.name;
      d["dtype"] = rt::dtypeName(s.dtype);
      d["algorithm"] = muon::algorithmName(s.algorithm);
      d["group"] = opt->groups()[s.group].name;
      d["shape"] = s.shape;
      nb::list box;
      for (const muon::Range &r : s.box)
        box.append(nb::make_tuple(r.begin, r.end));
      d["box"] = box;
      d["elements"] = s.elements;
      d["summand"] = s.summand;
      d["bound"] = s.bound;
      out.append(d);
    }
    return out;
  }

  /// Binds arrays (numpy, or anything with __dlpack__ such as a torch
  /// tensor: on the CPU, or on the optimizer's GPU) zero-copy; the
  /// optimizer keeps them alive until rebound.
  void bind(const std::string &name, nb::object values, nb::object grad) {
    AnyArray v = bindable(name, "values", values);
    const rt::DType vt = dtypeOf(v, "parameter '" + name + "' values");
    // None: no gradient (torch's grad None), which the step leaves out.
    const void *gradData = nullptr;
    rt::DType gt = vt;
    if (!grad.is_none()) {
      AnyArray g = bindable(name, "grad", grad);
      if (v.size() != g.size())
        throw StatusError(muon::StatusCode::InvalidArgument,
                          "parameter '" + name + "': values hold " +
                              std::to_string(v.size()) + " elements, grad " +
                              std::to_string(g.size()));
      gt = dtypeOf(g, "parameter '" + name + "' grad");
      gradData = g.size() ? g.data() : nullptr;
    }
    check(opt->bind(name, v.size() ? v.data() : nullptr, vt, gradData, gt,
                    static_cast<int64_t>(v.size())));
    keep[name] = nb::make_tuple(values, grad);
  }

  /// Slot `slot` of parameter `name`'s state on this rank in place (no
  /// copy): a 1-D float32 DLPack array over the optimizer's memory, which
  /// keeps the optimizer alive; None where this rank keeps no such state.
  nb::object stateView(const std::string &name, const std::string &slot) {
    float *data = opt->stateData(name, slot);
    const rt::ParamSlot *param = opt->param(name);
    if (!data || !param)
      return nb::none();
    const size_t shape[1] = {static_cast<size_t>(param->elements)};
    int deviceType = nb::device::cpu::value, deviceId = 0;
#if !MUONC_FAKE_GPU // the fake GPU's device memory is host memory
    if (onGpu) {
      deviceType = nb::device::cuda::value;
      deviceId = ordinal;
    }
#endif
    return nb::cast(nb::ndarray<float, nb::ndim<1>>(
        data, 1, shape, nb::find(this), nullptr, nb::dtype<float>(),
        deviceType, deviceId));
  }

  /// The piece's AdamW step count in place: a 0-d int64 array on the host;
  /// None for a Muon parameter or one this rank does not hold.
  nb::object stepCountView(const std::string &name) {
    int64_t *count = opt->stepCountData(name);
    if (!count)
      return nb::none();
    return nb::cast(nb::ndarray<int64_t, nb::ndim<0>>(count, 0, nullptr,
                                                      nb::find(this)));
  }

  /// The group's settings from a dict of them by name (groupDict's
  /// keys); the ones it lacks, and those the plan fixes, stay as they are.
  void setGroup(const std::string &name, nb::dict settings) {
    const muon::PlanGroup *current = opt->group(name);
    if (!current) { // the runtime's error names the groups
      check(opt->setGroupLr(name, 0.0));
      return;
    }
    muon::PlanGroup next = *current;
    applyGroupDict(settings, next, /*strict=*/true);
    check(opt->setGroupSettings(name, next));
  }

  /// `stream`: on a GPU, the caller's stream (torch's current stream, as
  /// its cuda_stream integer) that the step is ordered after and that
  /// waits for the step; None for the legacy default stream's implicit
  /// order.
  nb::dict step(std::optional<uintptr_t> stream) {
    rt::StepResult result;
    muon::Status status;
    if (stream && !onGpu)
      throw StatusError(muon::StatusCode::InvalidArgument,
                        "a stream is for an optimizer on a "
                        "GPU; this one runs on the " +
                            std::string(device->name()));
    orderWithStream(stream, /*before=*/true);
    if (releaseGil) {
      nb::gil_scoped_release unlocked;
      status = opt->step(result);
    } else {
      status = opt->step(result);
    }
    orderWithStream(stream, /*before=*/false);
    check(status);
    nb::dict d;
    d["applied"] = result.applied;
    d["non_finite_param"] =
        result.nonFiniteParam >= 0
            ? nb::cast(opt->plan().params[result.nonFiniteParam].name)
            : nb::none();
    d["non_finite_rank"] = result.nonFiniteRank;
    d["qk_clipped_heads"] = result.qkClippedHeads;
    const rt::StepCounters &c = opt->counters();
    d["bytes_sent"] = c.bytesSent;
    d["bytes_received"] = c.bytesReceived;
    d["ns_flops"] = c.nsFlops;
    d["control_collectives"] = c.controlCollectives;
    d["exchanges"] = c.exchanges;
    d["host_copies"] = c.hostCopies;
    d["host_copy_bytes"] = c.hostCopyBytes;
    return d;
  }

  void setQkMaxLogits(const std::string &layer,
                      const std::vector<float> &logits) {
    check(opt->setQkMaxLogits(layer, logits.data(),
                              static_cast<int64_t>(logits.size())));
  }

  nb::list qkClipLayers() const {
    nb::list out;
    for (const muon::QkClipLayer &l : opt->qkClipLayers()) {
      nb::dict d;
      d["name"] = l.name;
      d["query"] = l.query;
      d["key"] = l.key;
      d["num_heads"] = l.numHeads;
      d["num_kv_heads"] = l.numKvHeads;
      d["threshold"] = l.threshold;
      out.append(d);
    }
    return out;
  }

  nb::dict stateDict(bool withParameters) const {
    rt::StateDict dict;
    check(opt->stateDict(withParameters, dict));
    nb::dict out;
    out["steps"] = dict.steps;
    nb::list pieces;
    for (rt::StatePiece &p : dict.pieces) {
      nb::dict d;
      d["param"] = p.param;
      nb::list box;
      for (const muon::Range &r : p.box)
        box.append(nb::make_tuple(r.begin, r.end));
      d["box"] = box;
      d["summand"] = p.summand;
      d["summands"] = p.summands;
      d["step"] = p.step;
      nb::dict states;
      for (auto &[key, data] : p.states) {
        auto *copy = new std::vector<float>(std::move(data));
        nb::capsule owner(copy, [](void *q) noexcept {
          delete static_cast<std::vector<float> *>(q);
        });
        size_t shape[1] = {copy->size()};
        states[key.c_str()] = nb::ndarray<float, nb::numpy, nb::ndim<1>>(
            copy->data(), 1, shape, owner);
      }
      d["states"] = states;
      pieces.append(d);
    }
    out["pieces"] = pieces;
    // NorMuon's per-row states of the matrices this rank owns.
    nb::list rows;
    for (rt::RowStatePiece &r : dict.rowStates) {
      nb::dict d;
      d["param"] = r.param;
      d["slice"] = r.slice;
      d["state"] = r.state;
      auto *copy = new std::vector<float>(std::move(r.values));
      nb::capsule owner(copy, [](void *q) noexcept {
        delete static_cast<std::vector<float> *>(q);
      });
      size_t shape[1] = {copy->size()};
      d["values"] = nb::ndarray<float, nb::numpy, nb::ndim<1>>(copy->data(), 1,
                                                               shape, owner);
      rows.append(d);
    }
    out["row_states"] = rows;
    nb::list groups;
    for (const muon::PlanGroup &g : dict.groups)
      groups.append(groupDict(g));
    out["groups"] = groups;
    return out;
  }

  void loadStateDict(nb::dict in, bool withParameters) {
    rt::StateDict dict;
    dict.steps = castNamed<int64_t>(in["steps"], "steps");
    for (nb::handle item : nb::cast<nb::list>(in["pieces"])) {
      nb::dict d = nb::cast<nb::dict>(item);
      rt::StatePiece p;
      p.param = castNamed<std::string>(d["param"], "a piece's param");
      const std::string where = "parameter '" + p.param + "': a piece's ";
      for (nb::handle r : castNamed<nb::list>(d["box"], where + "box")) {
        auto range =
            castNamed<std::pair<int64_t, int64_t>>(r, where + "box range");
        p.box.push_back({range.first, range.second});
      }
      p.summand = get<int64_t>(d, "summand", 0);
      p.summands = get<int64_t>(d, "summands", 1);
      p.step = get<int64_t>(d, "step", 0);
      for (auto [key, value] : nb::cast<nb::dict>(d["states"])) {
        auto a = nb::cast<nb::ndarray<float, nb::device::cpu, nb::c_contig>>(
            value);
        const float *data = static_cast<const float *>(a.data());
        p.states[nb::cast<std::string>(key)] =
            std::vector<float>(data, data + a.size());
      }
      dict.pieces.push_back(std::move(p));
    }
    if (in.contains("row_states"))
      for (nb::handle item : nb::cast<nb::list>(in["row_states"])) {
        nb::dict d = nb::cast<nb::dict>(item);
        rt::RowStatePiece r;
        r.param = castNamed<std::string>(d["param"], "a row state's param");
        r.slice = get<int64_t>(d, "slice", 0);
        r.state = get<std::string>(d, "state", "normuon_v");
        auto a = nb::cast<nb::ndarray<float, nb::device::cpu, nb::c_contig>>(
            d["values"]);
        const float *data = static_cast<const float *>(a.data());
        r.values.assign(data, data + a.size());
        dict.rowStates.push_back(std::move(r));
      }
    if (in.contains("groups"))
      for (nb::handle g : nb::cast<nb::list>(in["groups"]))
        dict.groups.push_back(planGroupOf(nb::cast<nb::dict>(g)));
    check(opt->loadStateDict(dict, withParameters));
  }

  void gather(const std::string &name, nb::object out, int64_t root) {
    float *whole = nullptr;
    if (!out.is_none()) {
      auto a = nb::cast<nb::ndarray<float, nb::device::cpu, nb::c_contig>>(out);
      const rt::ParamSlot *slot = opt->param(name);
      int64_t n = 1;
      if (slot)
        for (int64_t d : slot->shape)
          n *= d;
      if (slot && static_cast<int64_t>(a.size()) != n)
        throw StatusError(muon::StatusCode::InvalidArgument,
                          "gather_parameter '" + name + "': out holds " +
                              std::to_string(a.size()) + " elements, not " +
                              std::to_string(n));
      whole = a.data();
    }
    check(opt->gatherParameter(name, whole, root));
  }

  /// `object` as an array this optimizer can bind: on the CPU for the CPU
  /// device, on its GPU for a GPU (host memory for the fake GPU).
  AnyArray bindable(const std::string &name, const char *which,
                    nb::handle object) const {
    AnyArray a;
    if (!nb::try_cast(object, a))
      throw ArgumentTypeError("parameter '" + name + "' " + which +
                            ": expected a C-contiguous array or tensor");
    const int type = a.device_type();
    bool ok = type == nb::device::cpu::value;
    if (onGpu) {
#if !MUONC_FAKE_GPU // the fake GPU's device memory is host memory
      ok = false;
#endif
      ok = ok || (type == nb::device::cuda::value && a.device_id() == ordinal);
    }
    if (!ok)
      throw StatusError(
          muon::StatusCode::InvalidArgument,
          "parameter '" + name + "' " + which +
              ": on the wrong device (DLPack device type " +
              std::to_string(type) + ", id " + std::to_string(a.device_id()) +
              "); this optimizer runs " +
              (onGpu ? "on cuda:" + std::to_string(ordinal) : "on the CPU"));
    return a;
  }

  /// Orders the device with the caller's stream (a GPU's; Devices.cpp).
  void orderWithStream(std::optional<uintptr_t> stream, bool before) {
    if (stream && onGpu)
      muonc::orderWithStream(*device, *stream, before);
  }

  std::unique_ptr<rt::Device> device;
  bool onGpu = false;
  int ordinal = -1;
  /// Every rank's bytes, in rank order, over the optimizer's own
  /// communicator (the bridge's control messages when it runs over MPI).
  nb::list allGatherBytes(nb::bytes mine) {
    std::vector<char> bytes(mine.c_str(), mine.c_str() + mine.size());
    auto gather = [&] { return base->allGatherBytes(bytes, timeoutSeconds); };
    std::optional<muon::StatusOr<std::vector<std::vector<char>>>> all;
    if (releaseGil) {
      nb::gil_scoped_release release;
      all.emplace(gather());
    } else {
      all.emplace(gather());
    }
    check(all->status());
    nb::list out;
    for (const std::vector<char> &b : **all)
      out.append(nb::bytes(b.data(), b.size()));
    return out;
  }

  /// The ranks' transport: `base` (MPI, the Python communicator), or on a
  /// GPU `transport` over it.
  std::unique_ptr<rt::Communicator> base, transport;
  std::string transportKind; // "nccl" or "host" on a GPU, "" on the CPU
  std::unique_ptr<rt::Optimizer> opt;
  double timeoutSeconds = 120.0;
  std::map<std::string, nb::object> keep;
  bool releaseGil = false; // no Python callbacks during a step
};

} // namespace

void defineOptimizer(nb::module_ &m) {
  using namespace nb::literals;
  m.def("bind_check_dtype", [](nb::object a) {
    return std::string(rt::dtypeName(dtypeOf(nb::cast<Array>(a), "array")));
  });

  nb::class_<PyOptimizer>(m, "Optimizer")
      .def(nb::init<nb::object, nb::object, double, bool,
                    const std::string &, const std::string &,
                    const std::string &>(),
           "plan"_a, "comm"_a = nb::none(), "timeout"_a = 120.0,
           "plan_is_file"_a = false, "ns_form"_a = "", "device"_a = "cpu",
           "gpu_transport"_a = "",
           "An optimizer over a plan (a Plan, its JSON text, or a plan "
           "file's path with plan_is_file); comm: None for one process, else a Python "
           "communicator (muonc.torch.TorchCommunicator); ns_form: "
           "Newton-Schulz's form, 'auto', 'standard' or 'gram' "
           "(default: MUON_CPU_NS_FORM, else auto); device: 'cpu', or 'cuda:N' "
           "where the CUDA backend is built (cuda_built()); gpu_transport: "
           "on a GPU, 'nccl' (exchanges on the device, NCCL bootstrapped "
           "over comm) or 'host' (staged through host memory), default "
           "NCCL under MPI, else host; MUONC_GPU_TRANSPORT overrides it.")
      .def_prop_ro("transport",
                   [](PyOptimizer &o) { return o.transportKind; },
                   "What the exchanges go through on a GPU: 'nccl' or "
                   "'host'; '' on the CPU.")
      .def_prop_ro("rank", [](PyOptimizer &o) { return o.opt->currentRank(); })
      .def_prop_ro("world_size",
                   [](PyOptimizer &o) { return o.opt->worldSize(); })
      .def_prop_ro("steps_taken",
                   [](PyOptimizer &o) { return o.opt->stepsTaken(); })
      .def_prop_ro("ns_dtype",
                   [](PyOptimizer &o) {
                     return std::string(rt::dtypeName(o.opt->nsDtype()));
                   })
      .def_prop_ro(
          "ns_dtype_reason",
          [](PyOptimizer &o) { return o.opt->nsDtypeReason(); },
          "Why Newton-Schulz runs in ns_dtype: 'f32: the plan's ns_dtype', "
          "or for ns_dtype 'auto' the device's reason ('bf16: its products "
          "run at 2.14x f32's here (...)').")
      .def("params", &PyOptimizer::params)
      .def("groups",
           [](PyOptimizer &o) {
             nb::list out;
             for (const muon::PlanGroup &g : o.opt->groups())
               out.append(groupDict(g));
             return out;
           })
      .def("assignments", [](PyOptimizer &o) { return o.opt->assignments(); })
      .def("plan_json",
           [](PyOptimizer &o) { return muon::renderPlan(o.opt->plan()); })
      .def("bind", &PyOptimizer::bind, "name"_a, "values"_a, "grad"_a.none(),
           "Binds a parameter's values and gradient (arrays or tensors, "
           "zero-copy); grad None: no gradient, the step leaves it out.")
      .def("state_view", &PyOptimizer::stateView, "name"_a, "slot"_a,
           "A parameter's state slot ('momentum', 'exp_avg', 'exp_avg_sq') "
           "on this rank in place: a 1-D float32 DLPack array, or None.")
      .def("step_count_view", &PyOptimizer::stepCountView, "name"_a,
           "An AdamW parameter's step count on this rank in place: a 0-d "
           "int64 array, or None.")
      .def("set_group", &PyOptimizer::setGroup, "name"_a, "settings"_a,
           "Sets a group's settings from a dict by name (as groups() "
           "gives them); those the dict lacks and those the plan fixes "
           "stay.")
      .def("set_group_lr",
           [](PyOptimizer &o, const std::string &name, double lr) {
             check(o.opt->setGroupLr(name, lr));
           })
      .def_prop_ro("device",
                   [](PyOptimizer &o) {
                     return o.onGpu ? "cuda:" + std::to_string(o.ordinal)
                                    : std::string("cpu");
                   })
      .def("step", &PyOptimizer::step, "stream"_a = nb::none())
      .def(
          "set_gradients_reduced_to_owners",
          [](PyOptimizer &o, bool on) {
            o.opt->setGradientsReducedToOwners(on);
          },
          "on"_a,
          "Says each matrix's gradient is reduced to its owner (zero on the "
          "other ranks): the steps skip its momentum and NaN check there.")
      .def("set_qk_max_logits", &PyOptimizer::setQkMaxLogits, "layer"_a,
           "logits"_a,
           "QK-clip's step input: layer's per-query-head max logits for the "
           "next step (the largest over ranks is used).")
      .def("qk_clip_layers", &PyOptimizer::qkClipLayers,
           "The plan's QK-clip layers (dicts as compile_model takes).")
      .def("all_gather_bytes", &PyOptimizer::allGatherBytes, "mine"_a,
           "Every rank's bytes (a list, in rank order) over the optimizer's "
           "communicator; collective.")
      .def("state_dict", &PyOptimizer::stateDict, "with_parameters"_a = false)
      .def("load_state_dict", &PyOptimizer::loadStateDict, "state"_a,
           "with_parameters"_a = false)
      .def("gather_parameter", &PyOptimizer::gather, "name"_a,
           "out"_a = nb::none(), "root"_a = -1);
}

} // namespace muonc
