//===- CompileModel.h - Spec or IR to plan, for muon-run --------*- C++ -*-===//
#ifndef MUON_TOOLS_MUON_RUN_COMPILEMODEL_H
#define MUON_TOOLS_MUON_RUN_COMPILEMODEL_H

#include "RunOptions.h"

#include "muon/Plan/Plan.h"

#include <string>

namespace muon::tool {

/// Loads `path`, a model spec (JSON), a model in IR or a plan file
/// (muon-plan/1), and yields its plan: specs and IR go through the compile
/// pipeline with `flags` overriding the model's settings; a plan file is
/// taken as compiled (compile flags are refused). Errors are printed with
/// the place they refer to; returns false then.
bool loadPlan(const std::string &path, const CompileFlags &flags, Plan &plan,
              bool &isPlanFile);

} // namespace muon::tool

#endif // MUON_TOOLS_MUON_RUN_COMPILEMODEL_H
