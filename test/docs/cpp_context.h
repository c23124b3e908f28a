//===- cpp_context.h - What the docs' C++ fragments speak of ----*- C++ -*-===//
//
// check-doc-blocks.py compiles a C++ block of docs/ that is a fragment (no
// #include, no main) as the body of a function after this header: the
// runtime's API, and the trainer's own names the text around the fragments
// refers to (its plan's path, its storage, its schedule), declared here so
// that a fragment shows only the calls it is about. Only the API is checked
// this way, not the trainer: these names are declared, never defined.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_DOCS_CPP_CONTEXT_H
#define MUON_DOCS_CPP_CONTEXT_H

#include "muon/Runtime/Backends.h"
#include "muon/Runtime/CheckpointFormat.h"
#include "muon/Runtime/BuiltBackends.h"
#include "muon/Runtime/Optimizer.h"

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

using namespace muon;
using namespace muon::runtime;

namespace doc {
/// Reports a failure and ends the program.
[[noreturn]] void die(const std::string &message);
/// The plan file, compiled ahead of time (muon-run --dry-run --plan).
extern std::string planPath;
/// The optimizer a fragment about steps works on, and a second one (another
/// world size) a state dict moves to.
extern std::unique_ptr<Optimizer> opt, other;
/// The trainer's storage of one parameter's piece on this rank.
void *values(const ParamSlot &slot);
void *grads(const ParamSlot &slot);
/// The schedule: the base rate, the factor of a step, the step.
extern double baseLr;
double lrFactor(int64_t step);
extern int64_t step;
/// The forward pass's per-head max attention logits, by layer.
extern std::map<std::string, std::vector<float>> maxLogits;
/// The example trainer's whole copies of the weights, by name, and the
/// piece of one that a slot's box covers (its `cut`).
extern std::map<std::string, std::vector<float>> full;
std::vector<float> cut(const std::vector<float> &whole, const ParamSlot &slot);
/// A checkpoint directory.
extern std::string dir;
} // namespace doc
using namespace doc;

#endif // MUON_DOCS_CPP_CONTEXT_H
