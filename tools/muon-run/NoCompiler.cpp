//===- NoCompiler.cpp - muon-run without the compiler ---------------------===//
//
// A runtime-only build (MUON_RUNTIME_ONLY, no MLIR or LLVM) takes compiled
// plan files only; PlanInput.cpp says so before it would compile.
//
//===----------------------------------------------------------------------===//
#include "PlanInput.h"

namespace muon::tool {

bool haveCompiler() { return false; }

bool compileModel(const std::string &, const std::string &,
                  const CompileFlags &, Plan &) {
  return false;
}

} // namespace muon::tool
