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
/// The plan of `path`: a spec or IR compiled, a JSON plan file read, or a
/// binary plan file read whole, or with `sliceRank` >= 0 only that rank's
/// part (Plan.h, PlanBinary.h). Prints the error and returns false.
bool loadPlan(const std::string &path, const CompileFlags &flags, Plan &plan,
              bool &isPlanFile, int64_t sliceRank = -1);

/// This process's rank as mpirun announces it in the environment; -1 when
/// none does.
int64_t rankFromEnvironment();

/// Whether this muon-run contains the compiler (a runtime-only build takes
/// plan files only).
bool haveCompiler();

/// Compiles the spec or IR `text` read from `path` (CompileModel.cpp, in
/// builds with the compiler). Errors are printed; returns false then.
bool compileModel(const std::string &path, const std::string &text,
                  const CompileFlags &flags, Plan &plan);

} // namespace muon::tool

#endif // MUON_TOOLS_MUON_RUN_PLANINPUT_H
