//===- PlanInput.h - The plan of muon-run's input file ----------*- C++ -*-===//
#ifndef MUON_TOOLS_MUON_RUN_PLANINPUT_H
#define MUON_TOOLS_MUON_RUN_PLANINPUT_H

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

/// Whether this muon-run contains the compiler (a runtime-only build takes
/// plan files only).
bool haveCompiler();

/// Compiles the spec or IR `text` read from `path` (CompileModel.cpp, in
/// builds with the compiler). Errors are printed; returns false then.
bool compileModel(const std::string &path, const std::string &text,
                  const CompileFlags &flags, Plan &plan);

} // namespace muon::tool

#endif // MUON_TOOLS_MUON_RUN_PLANINPUT_H
