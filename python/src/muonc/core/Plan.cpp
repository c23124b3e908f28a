//===- Plan.cpp - muonc.Plan and the tables of the plan library -------------===//
//
// The compiled plan's class (its file's text, world size, wire type) and
// the registries of muon/Plan and the runtime that muonc.torch reads
// instead of naming fields: group settings, element slots, algorithms,
// per-matrix steps.
//
//===----------------------------------------------------------------------===//
#include "Bindings.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Runtime/MatrixStep.h"

#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

namespace muonc {

void definePlan(nb::module_ &m) {
  using namespace nb::literals;
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
}

} // namespace muonc
