//===- Compiler.cpp - muonc.compile_model and compile_spec ------------------===//
//
// The compiler in process (muon/Compiler/Compile.h): a model described by
// Python dicts, or a spec's text, compiled into a Plan that the runtime
// takes as an object.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "muon/Compiler/Compile.h"
#include "muon/Plan/Algorithm.h"
#include "muon/Support/NsCoefficients.h"

#include <nanobind/stl/array.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <optional>

namespace muonc {

namespace mc = muon::compiler;

namespace {

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

/// compile_model(params, groups, mesh, qk_clip) -> Plan. `params`: dicts
/// with name, shape, dtype ("f32"/"bf16"/"f16"), group (a group's name),
/// placements (one "R"/"S(d)"/"P" per mesh axis), optionally split ({dim:
/// [axis names, major first]}, the spec's `split`). `groups`: dicts with
/// name, algorithm and settings. `mesh`: None (no distributed config: every
/// holder runs the single-device algorithm) or a dict with shape, names and
/// optionally assignments {rank: [matrix names]}, wire_dtype ("f32", the
/// default, or "bf16": the exchanges' element type), placement and
/// redundant_below (the spec's distributed settings), placement_machine
/// (placementMachineOf). `qk_clip`: None or the QK-clip layers, dicts with
/// name, query, key (parameter names), num_heads, num_kv_heads (optional)
/// and threshold (the spec's qk_clip.layers).
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
  muon::StatusOr<muon::Plan> plan =
      mc::compile(model, config ? &*config : nullptr);
  check(plan.status());
  return PyPlan{std::move(plan).value()};
}

} // namespace

void defineCompiler(nb::module_ &m) {
  using namespace nb::literals;
  m.def("compile_model", &compileModel, "params"_a, "groups"_a,
        "mesh"_a = nb::none(), "qk_clip"_a = nb::none(),
        "Compiles a model (parameters, groups, mesh) into a Plan.");
  m.def(
      "compile_spec",
      [](const std::string &spec, const std::string &wireDtype) {
        muon::StatusOr<muon::Plan> plan = mc::compileSpec(spec, wireDtype);
        check(plan.status());
        return PyPlan{std::move(plan).value()};
      },
      "spec"_a, "wire_dtype"_a = "",
      "Compiles a spec (muon-spec/1 JSON text) into a Plan.");
  m.def(
      "check_ns_coefficients",
      [](const std::vector<std::array<double, 3>> &table, int64_t steps,
         const std::string &dtype) {
        check(muon::checkNsCoefficients(table, steps, dtype)
                  .withContext("ns_coefficients "));
      },
      "table"_a, "steps"_a, "ns_dtype"_a = "f32",
      "Raises InvalidArgumentError where Newton-Schulz with these "
      "coefficients (one triple, or one per step) could overflow in "
      "ns_dtype or diverge (muon/Support/NsCoefficients.h).");
}

} // namespace muonc
