//===- Compile.cpp - The compiler as a C++ library ------------------------===//
#include "muon/InitAll.h"
#include "muon/Compiler/Compile.h"

#include "muon/Dialect/Muon/Analysis/Figures.h"
#include "muon/Dialect/Muon/IR/ModelLayout.h"
#include "muon/Dialect/Muon/IR/MuonDialect.h"
#include "muon/Dialect/Muon/Transforms/Pipelines.h"
#include "muon/Plan/GroupSettings.h"
#include "muon/Target/Spec/SpecImport.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"

#include <nlohmann/json.hpp>

namespace muon::compiler {
using Json = nlohmann::json;

DistributedConfig createDTensorConfig(DeviceMesh mesh, bool async,
                                      int64_t prefetchCount) {
  DistributedConfig config;
  config.mesh = std::move(mesh);
  config.async = async;
  config.prefetchCount = prefetchCount;
  return config;
}

DistributedConfig createAutoConfig(const AutoConfig &a) {
  DistributedConfig config;
  config.worldSize = a.worldSize;
  for (auto [kind, groups] :
       {std::pair<const char *, const std::vector<std::vector<int64_t>> *>{
            "fsdp", &a.fsdp},
        {"shard", &a.shard},
        {"tp", &a.tp},
        {"ddp", &a.ddp},
        {"replicate", &a.replicate},
        {"cp", &a.cp},
        {"ep", &a.ep},
        {"pp", &a.pp}})
    if (!groups->empty())
      config.groups[kind] = *groups;
  config.tpDim = a.tpDim;
  config.tpDimPerParam = a.tpDimPerParam;
  config.fsdpDim = a.fsdpDim;
  config.numExperts = a.numExperts;
  config.async = a.async;
  config.prefetchCount = a.prefetchCount;
  return config;
}

namespace {

Json specOf(const Model &model, const DistributedConfig *config,
            const std::map<int64_t, std::vector<std::string>> &assignments) {
  bool groupsStyle = config && !config->mesh;
  Json spec = {{"format", "muon-spec/1"}};
  if (!config) {
    spec["mesh"] = {{"shape", {1}}};
  } else if (config->mesh) {
    spec["mesh"] = {{"shape", config->mesh->shape}};
    if (!config->mesh->names.empty())
      spec["mesh"]["names"] = config->mesh->names;
  } else {
    spec["world_size"] = config->worldSize;
    spec["groups"] = Json::object();
    for (const auto &[kind, lists] : config->groups)
      spec["groups"][kind] = lists;
    if (config->tpDim)
      spec["tp_dim_per_param"] = *config->tpDim;
    if (!config->tpDimPerParam.empty()) {
      spec["tp_dim_per_param"] = Json::object();
      for (auto [index, dim] : config->tpDimPerParam)
        spec["tp_dim_per_param"][std::to_string(index)] = dim;
    }
    if (config->fsdpDim)
      spec["fsdp_dim"] = *config->fsdpDim;
    if (config->numExperts)
      spec["num_experts"] = *config->numExperts;
  }
  // A group's settings as the spec writes them: the table's
  // (GroupSettings.h), then Newton-Schulz's for a Muon group.
  auto settingsJson = [](const PlanGroup &g) {
    Json o = Json::object();
    for (const SettingEntry &e : settingEntries(g)) {
      const GroupSetting &s = *e.setting;
      if (std::string_view(s.jsonKey) != s.name)
        o[s.jsonKey] = e.numbers; // "betas"
      else if (s.kind == GroupSetting::Kind::Name)
        o[s.jsonKey] = e.name;
      else if (s.kind == GroupSetting::Kind::Flag)
        o[s.jsonKey] = e.numbers[0] != 0;
      else
        o[s.jsonKey] = e.numbers[0];
    }
    return o;
  };
  auto groupJson = [&](const ParamGroup &g) {
    Json o = settingsJson(g);
    if (!g.orthogonalizes())
      return o;
    const NewtonSchulzOptions &ns = g.ns;
    o["ns_steps"] = ns.nsSteps;
    o["eps"] = ns.eps;
    if (!ns.nsDtype.empty())
      o["ns_dtype"] = ns.nsDtype;
    if (!ns.nsCoefficients.empty())
      o["ns_coefficients"] = ns.nsCoefficients;
    else
      o["ns_coefficients"] = ns.nsPreset;
    return o;
  };
  if (model.groups.empty()) {
    spec["optimizer"] = groupJson(model.muon);
    spec["adamw"] = groupJson(model.adamw);
  } else {
    spec["param_groups"] = Json::array();
    for (const ParamGroup &g : model.groups) {
      Json o = groupJson(g);
      o["name"] = g.name;
      o["algorithm"] = algorithmName(g.algorithm);
      spec["param_groups"].push_back(o);
    }
  }
  if (config) {
    Json d = {{"async", config->async},
              {"prefetch_count", config->prefetchCount}};
    if (!assignments.empty()) {
      d["assignments"] = Json::object();
      for (const auto &[rank, names] : assignments)
        d["assignments"][std::to_string(rank)] = names;
    }
    spec["distributed"] = d;
  }
  // Only with layers: a model without them compiles to the plan it did.
  if (!model.qkClip.empty()) {
    Json layers = Json::array();
    for (const ::muon::QkClipLayer &l : model.qkClip)
      layers.push_back(
          {{"name", l.name},
           {"query", l.query},
           {"key", l.key},
           {"num_heads", l.numHeads},
           {"num_kv_heads", l.numKvHeads ? l.numKvHeads : l.numHeads},
           {"threshold", l.threshold}});
    spec["qk_clip"] = {{"layers", layers}};
  }
  spec["params"] = Json::array();
  for (const Param &p : model.params) {
    Json param = {{"name", p.name}, {"shape", p.shape}, {"dtype", p.dtype}};
    if (!p.optimizer.empty())
      param["optimizer"] = p.optimizer;
    if (!p.groupName.empty())
      param["group"] = p.groupName;
    // Only when on, so that other models give the same spec and plan.
    if (p.numHeads != 1 || p.headSplitDim != 0) {
      param["num_heads"] = p.numHeads;
      param["head_split_dim"] = p.headSplitDim;
    }
    if (groupsStyle) {
      if (p.stage)
        param["stage"] = *p.stage;
      if (p.expert)
        param["expert"] = *p.expert;
    } else {
      size_t axes = config && config->mesh ? config->mesh->shape.size() : 1;
      Json placements = Json::array();
      for (size_t axis = 0; axis < axes; ++axis) {
        Placement pl = axis < p.placements.size() ? p.placements[axis]
                                                  : Placement::replicate();
        placements.push_back(pl.kind == Placement::Kind::Replicate ? "R"
                             : pl.kind == Placement::Kind::Partial
                                 ? "P"
                                 : "S(" + std::to_string(pl.dim) + ")");
      }
      param["placements"] = placements;
      if (!p.only.empty())
        param["only"] = p.only;
      if (!p.split.empty()) {
        Json split = Json::object();
        for (const auto &[dim, axes] : p.split) {
          Json list = Json::array();
          for (const std::string &axis : axes) {
            // An axis by index when it is a number, else by name.
            bool digits = !axis.empty() &&
                          axis.find_first_not_of("0123456789") ==
                              std::string::npos;
            if (digits)
              list.push_back(static_cast<int64_t>(std::stoll(axis)));
            else
              list.push_back(axis);
          }
          split[std::to_string(dim)] = list;
        }
        param["split"] = split;
      }
    }
    spec["params"].push_back(param);
  }
  return spec;
}

/// The first error of an import or compile, its JSON path turned into the
/// parameter's name where it names one.
class FirstError {
public:
  /// `model` null: a spec's own JSON paths are kept ("params[3].shape").
  FirstError(mlir::MLIRContext &context, const Model *model)
      : handler(&context, [this, model](mlir::Diagnostic &diag) {
          if (diag.getSeverity() != mlir::DiagnosticSeverity::Error ||
              !message.empty())
            return mlir::success();
          std::string where;
          if (auto name = mlir::dyn_cast<mlir::NameLoc>(diag.getLocation()))
            where = name.getName().str();
          // "params[3].shape" -> "parameter 'wq': shape".
          if (model && where.rfind("params[", 0) == 0) {
            size_t close = where.find(']');
            size_t index = std::stoul(where.substr(7, close - 7));
            std::string rest = where.substr(close + 1);
            if (!rest.empty() && rest[0] == '.')
              rest = rest.substr(1);
            where = "parameter '" +
                    (index < model->params.size() ? model->params[index].name
                                                  : std::to_string(index)) +
                    "'" + (rest.empty() ? "" : " (" + rest + ")");
          }
          message = (where.empty() || where == "<root>" ? "" : where + ": ") +
                    diag.str();
          return mlir::success();
        }) {}
  std::string message;

private:
  mlir::ScopedDiagnosticHandler handler;
};

std::unique_ptr<mlir::MLIRContext> makeContext() {
  mlir::DialectRegistry registry;
  mlir::muon::registerAllDialects(registry);
  auto context = std::make_unique<mlir::MLIRContext>(registry);
  context->printOpOnDiagnostic(false);
  return context;
}

} // namespace

std::string toSpec(const Model &model, const DistributedConfig *config) {
  return specOf(model, config, config ? config->assignments
                                      : std::map<int64_t,
                                                 std::vector<std::string>>())
             .dump(2) +
         "\n";
}

namespace {

/// The assignments `config`'s callback makes, which sees the matrices and
/// who holds them.
StatusOr<std::map<int64_t, std::vector<std::string>>>
assignmentsOfCallback(const Model &model, const DistributedConfig &config) {
  auto context = makeContext();
  FirstError first(*context, &model);
  auto module =
      mlir::muon::importSpecDocument(specOf(model, &config, {}), context.get());
  if (!module)
    return invalidArgument(first.message);
  auto modelOp = *module->getOps<mlir::muon::ModelOp>().begin();
  mlir::FailureOr<mlir::muon::ModelLayout> layout =
      mlir::muon::computeModelLayout(modelOp);
  if (mlir::failed(layout))
    return invalidArgument(first.message);
  std::vector<MatrixInfo> matrices;
  for (const mlir::muon::MuonMatrix &mm :
       mlir::muon::collectMuonMatrices(modelOp, *layout))
    matrices.push_back(
        {mm.label, mm.rows, mm.cols, mm.nsFlops,
         mlir::muon::matrixHolders(*layout, mm.param, mm.matrix)});
  return config.assignFn(matrices, layout->mesh.numDevices());
}

/// The compiler settings of `config` that a spec does not hold.
mlir::muon::CompileOverrides overridesOf(const DistributedConfig *config) {
  mlir::muon::CompileOverrides overrides;
  if (config) {
    overrides.wireDtype = config->wireDtype;
    overrides.gatherBudgetBytes = config->gatherBudgetBytes;
    overrides.maxRounds = config->maxRounds;
    overrides.placement = config->placement;
    if (config->placement == "redundant_below")
      overrides.redundantBelow = config->redundantBelow;
    overrides.machine = config->placementMachine;
  }
  return overrides;
}

} // namespace

StatusOr<Plan> compile(const Model &model, const DistributedConfig *config) {
  std::map<int64_t, std::vector<std::string>> assignments;
  if (config)
    assignments = config->assignments;
  if (config && config->assignFn) {
    if (!assignments.empty())
      return invalidArgument("a distributed config has assignments or an "
                             "assign function, not both");
    MUON_ASSIGN_OR_RETURN(assignments, assignmentsOfCallback(model, *config));
  }
  auto context = makeContext();
  FirstError first(*context, &model);
  auto module = mlir::muon::importSpecDocument(
      specOf(model, config, assignments), context.get());
  if (!module)
    return invalidArgument(first.message);
  mlir::FailureOr<Plan> compiled =
      mlir::muon::compileModule(*module, overridesOf(config));
  if (mlir::failed(compiled))
    return invalidArgument(first.message.empty() ? "the model does not compile"
                                                 : first.message);
  return std::move(*compiled);
}

StatusOr<Plan> compileSpec(const std::string &spec,
                           const std::string &wireDtype) {
  auto context = makeContext();
  FirstError first(*context, nullptr);
  auto module = mlir::muon::importSpec(spec, context.get());
  if (!module)
    return invalidArgument(first.message.empty() ? "the spec does not import"
                                                 : first.message);
  mlir::muon::CompileOverrides overrides;
  if (!wireDtype.empty())
    overrides.wireDtype = wireDtype;
  mlir::FailureOr<Plan> compiled = mlir::muon::compileModule(*module, overrides);
  if (mlir::failed(compiled))
    return invalidArgument(first.message.empty() ? "the spec does not compile"
                                                 : first.message);
  return std::move(*compiled);
}

} // namespace muon::compiler
