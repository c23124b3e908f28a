//===- _core.cpp - muonc's extension: the compiler and runtime in Python -===//
//
// nanobind bindings over muon::compiler (compile a model into a plan in
// process) and muon::runtime::Optimizer (bind arrays zero-copy, step, state
// dicts, group settings). A communicator written in Python (PyCommunicator:
// any object with the methods below) carries the exchanges, so the torch
// side runs them through the model's own process group.
//
// With a Python communicator the GIL is held for the whole of every call,
// step included: its callbacks run on the calling thread. With MPI
// (comm="mpi", for processes started by mpirun) a step releases it. MPI is
// not linked: comm="mpi" loads it (mpi_plugin.h).
//
// Built against the CUDA backend (Muon::Cuda, MUONC_HAVE_CUDA), an optimizer
// may run on a GPU (device="cuda:N"; cuBLAS is loaded then, from NVIDIA's
// wheels where pip put them, else the toolkit): arrays are device memory (torch
// CUDA tensors through DLPack), a step is ordered with the caller's stream,
// and exchanges go through NCCL under MPI, else host-staged through the
// Python communicator. MUONC_FAKE_GPU builds the same module as
// _core_fakegpu over the tests' stand-in for CUDA (unittests/FakeGpu), whose
// device memory is host memory.
//
//===----------------------------------------------------------------------===//
#include "muon/Compiler/Compile.h"
#include "muon/Plan/Algorithm.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Support/NsCoefficients.h"
#include "muon/Runtime/Backends.h"
#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/HostStagedCommunicator.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/MatrixStep.h"
#include "muon/Runtime/Optimizer.h"
#if MUONC_HAVE_CUDA
#include "muon/Runtime/Cuda/CudaBackend.h"
#endif
#include "mpi_plugin.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/array.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <type_traits>

namespace nb = nanobind;
using namespace nb::literals;
namespace rt = muon::runtime;
namespace mc = muon::compiler;

namespace {

/// A failed Status, raised in Python as the muonc exception of its code
/// (errorClasses), with the text "invalid argument: ...".
struct StatusError : std::runtime_error {
  StatusError(muon::StatusCode code, const std::string &message)
      : std::runtime_error(std::string(muon::statusCodeName(code)) + ": " +
                           message),
        code(code) {}
  muon::StatusCode code;
};

void check(const muon::Status &status) {
  if (!status.ok())
    throw StatusError(status.code(), status.text());
}

/// A type that is not what the call takes, raised as muonc.MuonTypeError.
struct ArgumentTypeError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

using Bytes = nb::ndarray<uint8_t, nb::numpy, nb::ndim<1>, nb::c_contig>;

/// A view of `n` bytes at `data`, no copy, kept alive by nothing: valid
/// only during the call it is passed to (and, for an exchange, until its
/// wait returns).
/// (rv_policy::reference: an ndarray without an owner is otherwise copied
/// on its way to Python, and what Python writes into it lost.)
nb::object bytesView(const void *data, int64_t n) {
  size_t shape[1] = {static_cast<size_t>(n)};
  static uint8_t empty = 0;
  return nb::cast(
      Bytes(n ? const_cast<void *>(data) : &empty, 1, shape, nb::handle()),
      nb::rv_policy::reference);
}

std::vector<char> toBytes(nb::handle object) {
  nb::bytes b = nb::cast<nb::bytes>(object);
  return std::vector<char>(b.c_str(), b.c_str() + b.size());
}

/// The runtime's Communicator over a Python object with the methods
///   rank() -> int, size() -> int
///   all_to_all_v(send: uint8[], send_counts, send_offsets,
///                recv: uint8[], recv_counts, recv_offsets) -> None
///       (counts and offsets in bytes; the exchange completes in the call,
///       which the runtime's wait() makes)
///   start_all_to_all_v(same arguments) -> handle with wait() -> None
///       (optional: the exchange started in the runtime's start() and
///       finished by handle.wait() in its wait(), so that it moves while
///       the step computes; else all_to_all_v in wait())
///   all_gather_int(value: int) -> list[int]   (uint64 values)
///   all_gather_bytes(data: bytes) -> list[bytes]
///   all_gather_words(words: list[int]) -> list[int]   (optional: every
///       rank's uint64 words, rank after rank; else one all_gather_int
///       per word)
///   abort(code: int) -> None
/// An exception in a callback becomes the call's error.
class PyCommunicator final : public rt::Communicator {
public:
  explicit PyCommunicator(nb::object object) : object(std::move(object)) {
    theRank = nb::cast<int64_t>(this->object.attr("rank")());
    theSize = nb::cast<int64_t>(this->object.attr("size")());
    canStart = nb::hasattr(this->object, "start_all_to_all_v");
  }
  int64_t rank() const override { return theRank; }
  int64_t size() const override { return theSize; }

  muon::StatusOr<rt::PendingExchange> start(const rt::AllToAllV &x) override {
    // Started here when the object can (every rank starts its exchanges in
    // the plan's order, so the process group's collectives match across
    // ranks); else recorded here and run in wait(), which every rank also
    // reaches in the plan's order.
    Call call;
    call.send = x.sendBuffer;
    call.recv = x.recvBuffer;
    call.sc.resize(theSize);
    call.so.resize(theSize);
    call.rc.resize(theSize);
    call.ro.resize(theSize);
    for (int64_t p = 0; p < theSize; ++p) {
      call.sc[p] = x.sendCounts[p] * x.elementBytes;
      call.so[p] = x.sendOffsets[p] * x.elementBytes;
      call.rc[p] = x.recvCounts[p] * x.elementBytes;
      call.ro[p] = x.recvOffsets[p] * x.elementBytes;
      if (call.sc[p])
        call.sendEnd = std::max(call.sendEnd, call.so[p] + call.sc[p]);
      if (call.rc[p])
        call.recvEnd = std::max(call.recvEnd, call.ro[p] + call.rc[p]);
    }
    if (canStart) {
      MUON_RETURN_IF_ERROR(this->call([&] {
        call.handle = object.attr("start_all_to_all_v")(
            bytesView(call.send, call.sendEnd), call.sc, call.so,
            bytesView(call.recv, call.recvEnd), call.rc, call.ro);
      }));
    }
    rt::PendingExchange pending{nextId++};
    calls[pending.id] = std::move(call);
    return pending;
  }
  muon::Status wait(rt::PendingExchange &pending, double) override {
    auto it = calls.find(pending.id);
    if (it == calls.end())
      return muon::failedPrecondition(
          "python communicator: wait for an exchange never started");
    Call c = std::move(it->second);
    calls.erase(it);
    pending.id = -1;
    return call([&] {
      if (c.handle.is_valid())
        c.handle.attr("wait")();
      else
        object.attr("all_to_all_v")(bytesView(c.send, c.sendEnd), c.sc,
                                    c.so, bytesView(c.recv, c.recvEnd), c.rc,
                                    c.ro);
    });
  }
  void progress() override {}

  muon::StatusOr<std::vector<uint64_t>> allGather(uint64_t value,
                                                  double) override {
    std::vector<uint64_t> values;
    MUON_RETURN_IF_ERROR(call([&] {
      values = nb::cast<std::vector<uint64_t>>(
          object.attr("all_gather_int")(value));
    }));
    return values;
  }
  muon::StatusOr<std::vector<uint64_t>>
  allGatherWords(const std::vector<uint64_t> &mine, double timeout) override {
    // A communicator of the user's own may lack it: one all_gather_int
    // per word then.
    if (!nb::hasattr(object, "all_gather_words"))
      return Communicator::allGatherWords(mine, timeout);
    std::vector<uint64_t> all;
    MUON_RETURN_IF_ERROR(call([&] {
      all = nb::cast<std::vector<uint64_t>>(
          object.attr("all_gather_words")(mine));
      if (all.size() != mine.size() * static_cast<size_t>(theSize))
        throw std::runtime_error(
            "all_gather_words returned " + std::to_string(all.size()) +
            " words for " + std::to_string(theSize) + " ranks of " +
            std::to_string(mine.size()));
    }));
    return all;
  }
  muon::StatusOr<int64_t> allReduceMin(int64_t value, double timeout) override {
    // Two's complement keeps the order of signed values after the flip of
    // the sign bit.
    const uint64_t flip = uint64_t(1) << 63;
    MUON_ASSIGN_OR_RETURN(
        std::vector<uint64_t> all,
        allGather(static_cast<uint64_t>(value) ^ flip, timeout));
    uint64_t least = all.empty() ? static_cast<uint64_t>(value) ^ flip : all[0];
    for (uint64_t v : all)
      least = std::min(least, v);
    return static_cast<int64_t>(least ^ flip);
  }
  muon::StatusOr<std::vector<std::vector<char>>>
  gatherToRoot(const std::vector<char> &bytes, double timeout) override {
    MUON_ASSIGN_OR_RETURN(std::vector<std::vector<char>> all,
                          allGatherBytes(bytes, timeout));
    if (theRank != 0)
      all.clear();
    return all;
  }
  muon::StatusOr<std::vector<std::vector<char>>>
  allGatherBytes(const std::vector<char> &bytes, double) override {
    std::vector<std::vector<char>> all;
    MUON_RETURN_IF_ERROR(call([&] {
      nb::object result = object.attr("all_gather_bytes")(
          nb::bytes(bytes.data(), bytes.size()));
      for (nb::handle item : result)
        all.push_back(toBytes(item));
      if (static_cast<int64_t>(all.size()) != theSize)
        throw std::runtime_error("all_gather_bytes returned " +
                                 std::to_string(all.size()) + " items for " +
                                 std::to_string(theSize) + " ranks");
    }));
    return all;
  }
  [[noreturn]] void abort(int exitCode) override {
    try {
      object.attr("abort")(exitCode);
    } catch (...) {
    }
    std::_Exit(exitCode);
  }

private:
  /// Runs a callback: a Python TimeoutError is the peer's deadline, any
  /// other exception the transport's failure.
  template <typename F> muon::Status call(F &&f) {
    try {
      f();
      return muon::okStatus();
    } catch (nb::python_error &e) {
      // "TimeoutError: <its message>", not what() with the whole traceback.
      std::string text;
      try {
        text = nb::cast<std::string>(nb::handle(e.type()).attr("__name__")) +
               ": " + nb::cast<std::string>(nb::str(e.value()));
      } catch (...) {
        text = e.what();
      }
      return muon::Status(e.matches(PyExc_TimeoutError)
                              ? muon::StatusCode::DeadlineExceeded
                              : muon::StatusCode::Unavailable,
                          "python communicator: " + text);
    } catch (std::exception &e) {
      return muon::unavailable(std::string("python communicator: ") + e.what());
    }
  }

  struct Call {
    const void *send = nullptr;
    void *recv = nullptr;
    std::vector<int64_t> sc, so, rc, ro;
    int64_t sendEnd = 0, recvEnd = 0;
    nb::object handle; // start_all_to_all_v's, when the object has it
  };
  nb::object object;
  bool canStart = false;
  int64_t theRank = 0, theSize = 1, nextId = 0;
  std::map<int64_t, Call> calls;
};

// --- Compiling a model --------------------------------------------------

template <typename T> T castNamed(nb::handle value, const std::string &what) {
  try {
    return nb::cast<T>(value);
  } catch (const std::exception &) {
    std::string shown;
    try {
      shown = nb::cast<std::string>(nb::repr(value));
    } catch (...) {
      shown = "a value";
    }
    if (shown.size() > 60)
      shown = shown.substr(0, 57) + "...";
    const char *expected = std::is_same_v<T, int64_t> ? "an integer in int64's range"
                           : std::is_floating_point_v<T> ? "a number"
                           : std::is_same_v<T, std::string> ? "a string"
                                                            : "a value of its kind";
    throw StatusError(muon::StatusCode::InvalidArgument,
                      what + ": " + shown + " is not " + expected);
  }
}

/// d[key] as a T (fallback where it is missing or None); a value that is
/// not one (a string for a number, an integer past int64) is the caller's
/// InvalidArgument naming the key, not nanobind's bare std::bad_cast.
template <typename T> T get(nb::dict d, const char *key, T fallback) {
  if (!d.contains(key) || d[key].is_none())
    return fallback;
  return castNamed<T>(d[key], key);
}

mc::Placement placementOf(nb::handle item) {
  std::string text = nb::cast<std::string>(item);
  if (text == "R")
    return mc::Placement::replicate();
  if (text == "P")
    return mc::Placement::partial();
  if (text.size() > 3 && text.rfind("S(", 0) == 0 && text.back() == ')')
    return mc::Placement::shard(std::stoll(text.substr(2, text.size() - 3)));
  throw StatusError(muon::StatusCode::InvalidArgument,
                    "placement '" + text +
                        "': expected \"R\", \"P\" or \"S(dim)\"");
}

/// The registered algorithm called `name` (muon/Plan/Algorithm.h).
muon::AlgorithmId algorithmOf(const std::string &name) {
  if (std::optional<muon::AlgorithmId> a = muon::findAlgorithm(name))
    return *a;
  throw StatusError(muon::StatusCode::InvalidArgument,
                    "a group's algorithm is " + muon::algorithmNames() +
                        ", not \"" + name + "\"");
}

/// Sets g's settings (muon/Plan/GroupSettings.h) from the dict's entries
/// of the same names, as groupDict writes them (settings that share a JSON
/// key as one sequence under it: "betas"); the others keep their values.
/// With `strict`, a key that is no setting of g's algorithm is refused.
void applyGroupDict(nb::dict d, muon::PlanGroup &g, bool strict) {
  using muon::GroupSetting;
  if (strict)
    for (auto [k, v] : d) {
      const std::string key = nb::cast<std::string>(k);
      bool known = key == "name" || key == "algorithm";
      for (const GroupSetting &s : muon::algorithmOf(g.algorithm).settings)
        known = known || key == s.jsonKey;
      if (!known)
        throw StatusError(muon::StatusCode::InvalidArgument,
                          "'" + key + "' is not a " +
                              muon::algorithmOf(g.algorithm).title +
                              " group setting");
    }
  std::map<std::string, size_t> position; // within a shared JSON key
  for (const GroupSetting &s : muon::algorithmOf(g.algorithm).settings) {
    if (std::string_view(s.jsonKey) != s.name) {
      const size_t i = position[s.jsonKey]++;
      if (d.contains(s.jsonKey) && !d[s.jsonKey].is_none()) {
        auto values = nb::cast<std::vector<double>>(d[s.jsonKey]);
        if (i >= values.size())
          throw StatusError(muon::StatusCode::InvalidArgument,
                            "'" + std::string(s.jsonKey) +
                                "' has too few values");
        muon::setSettingValue(s, g, values[i]);
      }
    } else if (!d.contains(s.name) || d[s.name].is_none()) {
      continue;
    } else if (s.kind == GroupSetting::Kind::Name) {
      muon::setSettingName(s, g, nb::cast<std::string>(d[s.name]));
    } else if (s.kind == GroupSetting::Kind::Flag) {
      muon::setSettingValue(s, g, nb::cast<bool>(d[s.name]) ? 1.0 : 0.0);
    } else {
      muon::setSettingValue(s, g, nb::cast<double>(d[s.name]));
    }
  }
}

/// The inverse of groupDict; a setting the dict lacks keeps its default.
muon::PlanGroup planGroupOf(nb::dict d) {
  muon::PlanGroup g(algorithmOf(get<std::string>(d, "algorithm", "muon")));
  g.name = nb::cast<std::string>(d["name"]);
  applyGroupDict(d, g, /*strict=*/false);
  return g;
}

mc::ParamGroup groupOf(nb::dict d) {
  // The table's settings (GroupSettings.h) by name, then Newton-Schulz's.
  mc::ParamGroup g;
  static_cast<muon::PlanGroup &>(g) = planGroupOf(d);
  if (g.orthogonalizes()) {
    g.ns.eps = get<double>(d, "eps", 1e-7);
    g.ns.nsSteps = get<int64_t>(d, "ns_steps", 5);
    g.ns.nsDtype = get<std::string>(d, "ns_dtype", "");
    if (d.contains("ns_coefficients") && !d["ns_coefficients"].is_none()) {
      auto c = nb::cast<std::vector<double>>(d["ns_coefficients"]);
      if (c.size() != 3)
        throw StatusError(muon::StatusCode::InvalidArgument,
                          "ns_coefficients must be (a, b, c)");
      g.ns.nsCoefficients = {{c[0], c[1], c[2]}};
    }
  }
  return g;
}

/// The machine placement "auto" predicts on, from a dict of a profile's
/// numbers: ns_flops_per_second, bytes_per_second (both > 0),
/// latency_seconds, and for several nodes inter_bytes_per_second,
/// inter_latency_seconds, ranks_per_node (>= 0). Unknown keys and other
/// values raise ValueError naming the key.
muon::PlacementMachine placementMachineOf(nb::handle given) {
  if (!nb::isinstance<nb::dict>(given))
    throw StatusError(muon::StatusCode::InvalidArgument,
                      "placement_machine: expected a dict of numbers");
  muon::PlacementMachine machine;
  const std::pair<const char *, double *> numbers[] = {
      {"ns_flops_per_second", &machine.nsFlopsPerSecond},
      {"bytes_per_second", &machine.bytesPerSecond},
      {"latency_seconds", &machine.latencySeconds},
      {"inter_bytes_per_second", &machine.interBytesPerSecond},
      {"inter_latency_seconds", &machine.interLatencySeconds}};
  for (auto [key, value] : nb::borrow<nb::dict>(given)) {
    std::string name = nb::cast<std::string>(nb::str(key));
    double number = -1;
    if (!nb::isinstance<bool>(value) &&
        (nb::isinstance<nb::int_>(value) || nb::isinstance<nb::float_>(value)))
      number = nb::cast<double>(value);
    if (!std::isfinite(number) || number < 0)
      throw StatusError(muon::StatusCode::InvalidArgument,
                        "placement_machine['" + name +
                            "']: expected a finite number >= 0");
    if (name == "ranks_per_node") {
      machine.ranksPerNode = static_cast<int64_t>(number);
      continue;
    }
    auto it = std::find_if(std::begin(numbers), std::end(numbers),
                           [&](const auto &n) { return name == n.first; });
    if (it == std::end(numbers))
      throw StatusError(muon::StatusCode::InvalidArgument,
                        "placement_machine: unknown key '" + name +
                            "' (expected ns_flops_per_second, "
                            "bytes_per_second, latency_seconds, "
                            "inter_bytes_per_second, inter_latency_seconds, "
                            "ranks_per_node)");
    *it->second = number;
  }
  if (!machine.valid())
    throw StatusError(muon::StatusCode::InvalidArgument,
                      "placement_machine: ns_flops_per_second and "
                      "bytes_per_second must be given and > 0");
  return machine;
}

/// compile(params, groups, mesh) -> plan JSON. `params`: dicts with name,
/// shape, dtype ("f32"/"bf16"/"f16"), group (a group's name), placements
/// (one "R"/"S(d)"/"P" per mesh axis), optionally split ({dim: [axis
/// names, major first]}, the spec's `split`). `groups`: dicts with name,
/// algorithm and settings. `mesh`: None (no distributed config: every
/// holder runs the single-device algorithm) or a dict with shape, names
/// and optionally assignments {rank: [matrix names]}, wire_dtype ("f32",
/// the default, or "bf16": the exchanges' element type), placement and
/// redundant_below (the spec's distributed settings), placement_machine
/// (placementMachineOf). `qk_clip`: None or
/// the QK-clip layers, dicts with name, query, key (parameter names),
/// num_heads, num_kv_heads (optional) and threshold (the spec's
/// qk_clip.layers).
/// A compiled plan held in C++ (muon::Plan): what compile_model and
/// compile_spec return and Optimizer takes, so that a plan goes from the
/// compiler to the runtime as an object, with no text in between; json()
/// writes the plan file's text when one is wanted.
struct PyPlan {
  muon::Plan plan;
};

PyPlan compileModel(nb::list params, nb::list groups, nb::object mesh,
                    nb::object qkClip) {
  mc::Model model;
  if (!qkClip.is_none())
    for (nb::handle item : nb::cast<nb::list>(qkClip)) {
      nb::dict d = nb::cast<nb::dict>(item);
      muon::QkClipLayer l;
      l.name = nb::cast<std::string>(d["name"]);
      l.query = nb::cast<std::string>(d["query"]);
      l.key = nb::cast<std::string>(d["key"]);
      l.numHeads = nb::cast<int64_t>(d["num_heads"]);
      l.numKvHeads = get<int64_t>(d, "num_kv_heads", 0);
      l.threshold = nb::cast<double>(d["threshold"]);
      model.qkClip.push_back(std::move(l));
    }
  for (nb::handle g : groups)
    model.groups.push_back(groupOf(nb::cast<nb::dict>(g)));
  for (nb::handle item : params) {
    nb::dict d = nb::cast<nb::dict>(item);
    mc::Param p;
    p.name = nb::cast<std::string>(d["name"]);
    p.shape = nb::cast<std::vector<int64_t>>(d["shape"]);
    p.dtype = get<std::string>(d, "dtype", "f32");
    p.groupName = get<std::string>(d, "group", "");
    for (const mc::ParamGroup &g : model.groups)
      if (g.name == p.groupName)
        p.optimizer = muon::algorithmName(g.algorithm);
    if (d.contains("placements"))
      for (nb::handle pl : nb::cast<nb::list>(d["placements"]))
        p.placements.push_back(placementOf(pl));
    if (d.contains("split") && !d["split"].is_none())
      for (auto [dim, axes] : nb::cast<nb::dict>(d["split"]))
        p.split[nb::cast<int64_t>(nb::int_(dim))] =
            nb::cast<std::vector<std::string>>(axes);
    // Per-head Newton-Schulz (muonc.torch checked the values' types).
    p.numHeads = get<int64_t>(d, "num_heads", 1);
    p.headSplitDim = get<int64_t>(d, "head_split_dim", 0);
    model.params.push_back(std::move(p));
  }
  std::string error;
  muon::Plan plan;
  std::optional<mc::DistributedConfig> config;
  if (!mesh.is_none()) {
    nb::dict m = nb::cast<nb::dict>(mesh);
    mc::DeviceMesh deviceMesh;
    deviceMesh.shape = nb::cast<std::vector<int64_t>>(m["shape"]);
    deviceMesh.names = get<std::vector<std::string>>(m, "names", {});
    config = mc::createDTensorConfig(deviceMesh, get<bool>(m, "async", true));
    if (m.contains("assignments") && !m["assignments"].is_none())
      config->assignments =
          nb::cast<std::map<int64_t, std::vector<std::string>>>(
              m["assignments"]);
    config->wireDtype = get<std::string>(m, "wire_dtype", "f32");
    config->placement = get<std::string>(m, "placement", "auto");
    config->redundantBelow = get<int64_t>(m, "redundant_below", 0);
    if (m.contains("placement_machine") && !m["placement_machine"].is_none())
      config->placementMachine = placementMachineOf(m["placement_machine"]);
  }
  if (!mc::compile(model, config ? &*config : nullptr, plan, error))
    throw StatusError(muon::StatusCode::InvalidArgument, error);
  return PyPlan{std::move(plan)};
}

// --- The optimizer ------------------------------------------------------

/// A plan group as a dict: its name, algorithm and every setting of its
/// algorithm (muon/Plan/GroupSettings.h) by name, except settings that share
/// a JSON key, which go together as a tuple under it (AdamW's "betas", as
/// torch names them).
nb::dict groupDict(const muon::PlanGroup &g) {
  using muon::GroupSetting;
  nb::dict d;
  d["name"] = g.name;
  d["algorithm"] = muon::algorithmName(g.algorithm);
  std::map<std::string, std::vector<double>> tuples;
  for (const GroupSetting &s : muon::algorithmOf(g.algorithm).settings) {
    if (std::string_view(s.jsonKey) != s.name)
      tuples[s.jsonKey].push_back(muon::settingValue(s, g));
    else if (s.kind == GroupSetting::Kind::Name)
      d[s.name] = muon::settingName(s, g);
    else if (s.kind == GroupSetting::Kind::Flag)
      d[s.name] = muon::settingValue(s, g) != 0;
    else
      d[s.name] = muon::settingValue(s, g);
  }
  for (const auto &[key, values] : tuples)
    d[key.c_str()] =
        nb::steal<nb::tuple>(PySequence_Tuple(nb::cast(values).ptr()));
  return d;
}

using Array = nb::ndarray<nb::device::cpu, nb::c_contig>;
/// An array on any device (a bound parameter of a GPU optimizer).
using AnyArray = nb::ndarray<nb::c_contig>;

template <typename A> rt::DType dtypeOf(const A &a, const std::string &what) {
  nb::dlpack::dtype t = a.dtype();
  if (t == nb::dtype<float>())
    return rt::DType::F32;
  if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bfloat) &&
      t.bits == 16)
    return rt::DType::BF16;
  if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Float) &&
      t.bits == 16)
    return rt::DType::F16;
  throw ArgumentTypeError(what + ": expected float32, bfloat16 or float16 "
                               "elements");
}

/// MPI, loaded on first use (mpi_plugin.h): the MPI library with
/// RTLD_GLOBAL (the plugin's MPI symbols bind to it), then the plugin
/// beside this module. Unavailable, naming the library, where MPI is
/// missing. Called with the GIL held.
const muonc::MpiPlugin *mpiPlugin = nullptr;

const muonc::MpiPlugin &loadMpi() {
  if (mpiPlugin)
    return *mpiPlugin;
  const char *chosen = std::getenv("MUON_MPI_LIBRARY");
  const bool overridden = chosen && *chosen;
  const std::string library = overridden ? chosen : MUONC_MPI_LIBRARY;
  if (!dlopen(library.c_str(), RTLD_NOW | RTLD_GLOBAL)) {
    const char *why = dlerror();
    throw StatusError(muon::StatusCode::Unavailable,
                      "comm=\"mpi\" needs MPI: cannot load " + library +
                          (overridden
                               ? " (MUON_MPI_LIBRARY)"
                               : " (Open MPI's library: install Open MPI, e.g. "
                                 "`apt install openmpi-bin`, or point "
                                 "MUON_MPI_LIBRARY at a compatible libmpi)") +
                          ": " + (why ? why : "unknown dlopen error"));
  }
  Dl_info self;
  std::string plugin = "libmuonc_mpi.so";
  if (dladdr(reinterpret_cast<void *>(&loadMpi), &self) && self.dli_fname) {
    std::string here = self.dli_fname;
    plugin = here.substr(0, here.rfind('/') + 1) + plugin;
  }
  void *handle = dlopen(plugin.c_str(), RTLD_NOW | RTLD_LOCAL);
  using Entry = const muonc::MpiPlugin *(*)();
  Entry entry = handle ? reinterpret_cast<Entry>(
                             dlsym(handle, MUONC_MPI_PLUGIN_ENTRY))
                       : nullptr;
  if (!entry) {
    const char *why = dlerror();
    throw StatusError(muon::StatusCode::Unavailable,
                      "comm=\"mpi\": cannot load muonc's MPI plugin " + plugin +
                          " over " + library + ": " +
                          (why ? why : "unknown dlopen error"));
  }
  mpiPlugin = entry();
  return *mpiPlugin;
}

/// MPI for processes started by mpirun: initialized on first use (unless
/// the program did, e.g. mpi4py), finalized by mpiFinalize at interpreter
/// exit (muonc's atexit hook) when initialized here.
const muonc::MpiPlugin &ensureMpi() {
  const muonc::MpiPlugin &mpi = loadMpi();
  check(mpi.initialize());
  return mpi;
}

nb::tuple mpiWorld() {
  int rank = 0, size = 0;
  ensureMpi().world(rank, size);
  return nb::make_tuple(rank, size);
}

void mpiFinalize() {
  if (mpiPlugin) // never loaded: nothing to finalize
    mpiPlugin->finalize();
}

/// ns_form's value ("auto", "standard", "gram"; "" for MUON_CPU_NS_FORM's,
/// else auto); an unknown one raises.
rt::cpu::NsForm nsFormOrDefault(const std::string &nsForm) {
  rt::cpu::NsForm form = rt::cpu::CpuDeviceOptions::nsFormFromEnvironment();
  if (!nsForm.empty() && !rt::cpu::parseNsForm(nsForm, form))
    throw StatusError(muon::StatusCode::InvalidArgument,
                      "ns_form '" + nsForm +
                          "': expected 'auto', 'standard' or 'gram'");
  return form;
}

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
    createDevice(deviceName, nsForm);
    if (comm.is_none()) {
      base = std::make_unique<rt::SingleRankCommunicator>();
    } else if (nb::isinstance<nb::str>(comm)) {
      if (nb::cast<std::string>(comm) != "mpi")
        throw StatusError(muon::StatusCode::InvalidArgument,
                          "comm '" + nb::cast<std::string>(comm) +
                              "': expected None, \"mpi\" or a communicator");
      base = ensureMpi().worldCommunicator();
      releaseGil = true;
    } else {
      base = std::make_unique<PyCommunicator>(comm);
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

  /// The CPU device, or a GPU ("cuda" or "cuda:N", where the CUDA backend
  /// is built), with `nsForm` "auto", "standard" or "gram" (Newton-Schulz's
  /// form, muon/Runtime/NsForm.h) or "" for MUON_CPU_NS_FORM's (auto
  /// unset).
  void createDevice(const std::string &name, const std::string &nsForm) {
    if (name != "cpu" && name != "cuda" && name.rfind("cuda:", 0) != 0)
      throw StatusError(muon::StatusCode::InvalidArgument,
                        "device '" + name +
                            "': expected 'cpu', 'cuda' or 'cuda:N'");
    if (name != "cpu" && !cudaBuilt())
      throw StatusError(
          muon::StatusCode::Unavailable,
          "device '" + name +
              "': muonc was built without the CUDA backend "
              "(Muon::Cuda); GPU tensors need a build where CMake "
              "found nvcc and cuBLAS");
    // Opened through the registry, as a trainer does. The GPU's ns_form
    // means the CPU's: "" is MUON_CPU_NS_FORM's on either device.
    rt::BackendOptions options;
    options["ns_form"] = rt::nsFormName(nsFormOrDefault(nsForm));
    if (name != "cpu")
      // cuBLAS is searched for first where pip put NVIDIA's wheels.
      addCudaLibraryDirectories();
    check(rt::createDevice(name, options, device));
    onGpu = name != "cpu";
    ordinal = !onGpu ? -1 : name == "cuda" ? 0 : std::atoi(name.c_str() + 5);
  }

  /// Where pip put NVIDIA's CUDA wheels (torch's nvidia-cublas): searched
  /// for cuBLAS before the system's (muonc._nvidia_library_dirs).
  static void addCudaLibraryDirectories() {
#if MUONC_HAVE_CUDA
    static bool added = false;
    if (added)
      return;
    nb::object dirs =
        nb::module_::import_("muonc").attr("_nvidia_library_dirs")();
    for (const std::string &dir : nb::cast<std::vector<std::string>>(dirs))
      rt::cuda::addLibraryDirectory(dir);
    added = true;
#endif
  }

  static bool cudaBuilt() {
#if MUONC_HAVE_CUDA
    static bool registered = (rt::cuda::registerBackend(), true);
    return registered;
#else
    return false;
#endif
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

  /// Orders the device with the caller's stream (CudaBackend.h).
  void orderWithStream(std::optional<uintptr_t> stream, bool before) {
#if MUONC_HAVE_CUDA
    if (!stream || !onGpu)
      return;
    void *handle = reinterpret_cast<void *>(*stream);
    check((before ? rt::cuda::waitForStream(*device, handle)
                  : rt::cuda::streamWaitsForDevice(*device, handle))
              .withContext("stream: "));
#else
    (void)stream;
    (void)before;
#endif
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

/// muonc's exceptions: MuonError, and per status code a class that is
/// both a MuonError and the builtin exception torch raises for that kind
/// of failure, so that code written for torch.optim catches them.
struct ErrorClass {
  muon::StatusCode code;
  const char *name;
  PyObject *builtin;
  const char *doc;
};

/// The class of each status code, by the code's number; 0 is MuonError.
PyObject *statusErrors[muon::kStatusCodeCount] = {};
PyObject *typeErrorClass = nullptr;

PyObject *newErrorClass(nb::module_ &m, const char *name, PyObject *bases,
                        const char *doc) {
  const std::string qualified = std::string("muonc.") + name;
  PyObject *cls = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases,
                                            nullptr);
  if (!cls)
    throw nb::python_error();
  m.attr(name) = nb::handle(cls); // the module holds a reference too
  return cls;                     // and this one lives as long as the process
}

void defineErrors(nb::module_ &m) {
  PyObject *base = newErrorClass(
      m, "MuonError", PyExc_Exception,
      "Every error muonc raises; each is also the builtin exception torch "
      "raises for its kind (ValueError for bad input, ...).");
  const ErrorClass classes[] = {
      {muon::StatusCode::InvalidArgument, "InvalidArgumentError",
       PyExc_ValueError, "Bad input: nothing was changed."},
      {muon::StatusCode::FailedPrecondition, "FailedPreconditionError",
       PyExc_RuntimeError,
       "A call not possible in the present state: nothing was changed."},
      {muon::StatusCode::NotFound, "NotFoundError", PyExc_LookupError,
       "A parameter, group or file that is not there."},
      {muon::StatusCode::DataLoss, "DataLossError", PyExc_RuntimeError,
       "Data that fails its checks (a damaged checkpoint or plan)."},
      {muon::StatusCode::ResourceExhausted, "ResourceExhaustedError",
       PyExc_RuntimeError, "The device has no room."},
      {muon::StatusCode::Unavailable, "UnavailableError", PyExc_RuntimeError,
       "A peer, a transport or a file outside the process failed."},
      {muon::StatusCode::Internal, "InternalError", PyExc_RuntimeError,
       "The device reported an error."},
      {muon::StatusCode::DeadlineExceeded, "DeadlineExceededError",
       PyExc_RuntimeError,
       "A peer did not answer within the timeout: it died or stalled "
       "(a RuntimeError, as torch.distributed's timeouts are)."},
      {muon::StatusCode::Cancelled, "CancelledError", PyExc_RuntimeError,
       "The work was stopped by its caller."},
      {muon::StatusCode::Unimplemented, "UnimplementedError",
       PyExc_NotImplementedError,
       "Something this build or this backend does not do."},
  };
  for (const ErrorClass &c : classes) {
    nb::tuple bases = nb::make_tuple(nb::handle(base), nb::handle(c.builtin));
    statusErrors[static_cast<int>(c.code)] =
        newErrorClass(m, c.name, bases.ptr(), c.doc);
  }
  nb::tuple typeBases =
      nb::make_tuple(nb::handle(base), nb::handle(PyExc_TypeError));
  typeErrorClass = newErrorClass(m, "MuonTypeError", typeBases.ptr(),
                                 "An argument of a type muonc does not take.");
  statusErrors[0] = base;
  nb::register_exception_translator([](const std::exception_ptr &p, void *) {
    try {
      std::rethrow_exception(p);
    } catch (const StatusError &e) {
      const int code = static_cast<int>(e.code);
      PyObject *cls =
          code > 0 && code < muon::kStatusCodeCount && statusErrors[code]
              ? statusErrors[code]
              : statusErrors[0];
      PyErr_SetString(cls, e.what());
    } catch (const ArgumentTypeError &e) {
      PyErr_SetString(typeErrorClass, e.what());
    }
  });
}

} // namespace

static void defineModule(nb::module_ &m) {
  m.doc() = "muonc's extension: the distributed Muon compiler and runtime";
  m.attr("__version__") = MUONC_VERSION;
  // opt.state's tensors are views that keep their optimizer alive, and an
  // optimizer in a script's globals may outlive the module's teardown at
  // interpreter exit: nanobind would report those as leaks, which they are
  // not.
  nb::set_leak_warnings(false);
  defineErrors(m);

  nb::class_<PyPlan>(m, "Plan",
                     "A compiled plan (compile_model, compile_spec), which "
                     "Optimizer takes as it is.")
      .def(
          "json", [](const PyPlan &p) { return muon::renderPlan(p.plan); },
          "The plan file's text (muon-plan/1 JSON).")
      .def_static(
          "from_json",
          [](const std::string &text) {
            muon::StatusOr<muon::Plan> parsed = muon::parsePlan(text);
            check(parsed.status().withContext("plan: "));
            PyPlan p;
            p.plan = std::move(parsed).value();
            return p;
          },
          "text"_a, "A plan from its file's text, checked.")
      .def_prop_ro("world_size",
                   [](const PyPlan &p) { return p.plan.worldSize; })
      .def_prop_ro("wire_dtype",
                   [](const PyPlan &p) { return p.plan.wireDtype; })
      .def("__repr__", [](const PyPlan &p) {
        return "<muonc.Plan: " + std::to_string(p.plan.params.size()) +
               " parameters, " + std::to_string(p.plan.matrices.size()) +
               " Muon matrices, " + std::to_string(p.plan.worldSize) +
               " rank(s)>";
      });
  m.def("compile_model", &compileModel, "params"_a, "groups"_a,
        "mesh"_a = nb::none(), "qk_clip"_a = nb::none(),
        "Compiles a model (parameters, groups, mesh) into a Plan.");
  m.def(
      "compile_spec",
      [](const std::string &spec, const std::string &wireDtype) {
        std::string error;
        PyPlan p;
        if (!mc::compileSpec(spec, wireDtype, p.plan, error))
          throw StatusError(muon::StatusCode::InvalidArgument, error);
        return p;
      },
      "spec"_a, "wire_dtype"_a = "",
      "Compiles a spec (muon-spec/1 JSON text) into a Plan.");
  m.def(
      "group_settings",
      [] {
        nb::list out;
        for (const muon::GroupSetting &s : muon::groupSettings()) {
          nb::dict d;
          d["name"] = s.name;
          d["json_key"] = s.jsonKey;
          d["algorithm"] = muon::algorithmName(s.algorithm);
          d["kind"] = s.kind == muon::GroupSetting::Kind::Number ? "number"
                      : s.kind == muon::GroupSetting::Kind::Flag ? "flag"
                                                                 : "name";
          nb::list names;
          for (size_t i = 0; i < s.nameCount; ++i)
            names.append(std::string(s.names[i]));
          d["names"] = names;
          if (s.kind == muon::GroupSetting::Kind::Name)
            d["default"] = s.defaultText;
          else if (s.kind == muon::GroupSetting::Kind::Flag)
            d["default"] = s.defaultNumber != 0;
          else
            d["default"] = s.defaultNumber;
          d["fixed"] = s.fixed;
          d["only_with"] =
              s.onlyWith ? nb::object(nb::str(s.onlyWith)) : nb::none();
          out.append(d);
        }
        return out;
      },
      "The group settings table (muon/Plan/GroupSettings.h), one dict per "
      "setting: name, json_key, algorithm, kind (number, flag, name), "
      "names, default, fixed, only_with.");
  m.def(
      "element_slots",
      [] {
        nb::list out;
        for (const muon::ElementSlot &s : muon::elementSlots()) {
          nb::dict d;
          d["name"] = s.name;
          d["algorithm"] = muon::algorithmName(s.algorithm);
          d["enabled_by"] =
              s.enabledBy ? nb::object(nb::str(s.enabledBy)) : nb::none();
          d["per_summand"] = s.perSummand;
          d["carries_step"] = s.carriesStep;
          out.append(d);
        }
        return out;
      },
      "The per-element state slots (muon/Plan/ElementState.h), one dict "
      "per slot: name, algorithm (whose parameters keep it), enabled_by (the "
      "flag that turns it on, or None), per_summand, carries_step.");
  m.def(
      "algorithms",
      [] {
        nb::list out;
        for (const muon::Algorithm &a : muon::algorithms()) {
          nb::dict d;
          d["name"] = a.name;
          d["title"] = a.title;
          d["orthogonalizes"] = a.orthogonalizes;
          out.append(d);
        }
        return out;
      },
      "The registered algorithms (muon/Plan/Algorithm.h), one dict each: "
      "name, title, orthogonalizes (Muon: its matrices run Newton-Schulz).");
  m.def(
      "matrix_steps",
      [] {
        nb::list out;
        for (const rt::MatrixStep &s : rt::matrixSteps()) {
          nb::dict d;
          d["setting"] = s.setting;
          d["title"] = s.title;
          d["state"] = s.state;
          out.append(d);
        }
        return out;
      },
      "The per-matrix steps (muon/Runtime/MatrixStep.h), one dict per step: "
      "setting (the Muon group flag that turns it on), title, state (its "
      "per-row state slot's name).");
  m.def(
      "check_ns_coefficients",
      [](const std::vector<std::array<double, 3>> &table, int64_t steps,
         const std::string &dtype) {
        if (std::string why = muon::nsCoefficientsProblem(table, steps, dtype);
            !why.empty())
          throw StatusError(muon::StatusCode::InvalidArgument,
                            "ns_coefficients " + why);
      },
      "table"_a, "steps"_a, "ns_dtype"_a = "f32",
      "Raises InvalidArgumentError where Newton-Schulz with these "
      "coefficients (one triple, or one per step) could overflow in "
      "ns_dtype or diverge (muon/Support/NsCoefficients.h).");
  m.def("mpi_world", &mpiWorld,
        "(rank, size) of MPI_COMM_WORLD, initializing MPI if needed.");
  m.def("mpi_finalize", &mpiFinalize,
        "Finalizes MPI if muonc initialized it (at interpreter exit).");
  m.def("bind_check_dtype", [](nb::object a) {
    return std::string(rt::dtypeName(dtypeOf(nb::cast<Array>(a), "array")));
  });

  m.def(
      "cpu_newton_schulz",
      [](const std::string &nsDtype, const std::string &nsForm) {
        const rt::cpu::NsForm form = nsFormOrDefault(nsForm);
        rt::DType dtype;
        if (nsDtype == "auto")
          dtype = rt::cpu::CpuDevice().defaultNsDtype();
        else if (std::optional<rt::DType> d = rt::parseDType(nsDtype))
          dtype = *d;
        else
          throw StatusError(muon::StatusCode::InvalidArgument,
                            "ns_dtype '" + nsDtype +
                                "': expected 'auto', 'f32', 'bf16' or 'f16'");
        return rt::cpu::describeNewtonSchulz(dtype, form);
      },
      "ns_dtype"_a, "ns_form"_a = "auto",
      "What the CPU's Newton-Schulz in ns_dtype ('auto', 'f32', 'bf16', "
      "'f16') runs on with ns_form, as muon-run's summary says it: 'bf16 "
      "products, f32 accumulation (oneDNN ...); Gram form on wide and tall "
      "matrices', 'f32 products (OpenBLAS)', ...");

  m.def(
      "cpu_auto_ns_dtype",
      [] {
        const rt::cpu::CpuDevice device;
        return nb::make_tuple(
            std::string(rt::dtypeName(device.defaultNsDtype())),
            device.defaultNsDtypeReason());
      },
      "(ns_dtype, reason): what ns_dtype 'auto' is on this CPU and why, by "
      "the rates of the products each precision runs on, timed once per "
      "process (or MUON_CPU_PRODUCT_RATES): ('bf16', 'bf16: its products "
      "run at 2.14x f32's here (...)'), ('f32', 'f32: no bf16 products "
      "here (...)'). muonc.torch runs it with ns_dtype='auto'; its default "
      "on the CPU stays f32.");

  m.def("preferred_blas_kernels", &rt::cpu::preferredBlasKernels,
        "The OpenBLAS kernels this CPU's features call for ('SkylakeX', "
        "'Haswell', '' for none): the runtime's rule, which muonc._blas "
        "applies before OpenBLAS loads.");

  m.def("cuda_built", &PyOptimizer::cudaBuilt,
        "Whether this build has the CUDA backend (Optimizer(device='cuda:N')).");
  m.def(
      "cuda_device_count",
      [] {
#if MUONC_HAVE_CUDA
        muon::StatusOr<int> count = rt::cuda::deviceCount();
        if (count.ok())
          return nb::make_tuple(*count, std::string());
        return nb::make_tuple(0, count.status().message());
#else
        return nb::make_tuple(0, std::string("muonc was built without the "
                                             "CUDA backend"));
#endif
      },
      "(GPUs the CUDA backend sees, why none) -- (0, reason) without them.");

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

#if MUONC_FAKE_GPU
void defineFakeGpuHooks(nb::module_ &m); // unittests/FakeGpu/PythonHooks.cpp
NB_MODULE(_core_fakegpu, m) {
  defineModule(m);
  defineFakeGpuHooks(m);
}
#else
NB_MODULE(_core, m) { defineModule(m); }
#endif
