//===- ElementStep.cpp - Per-element steps, registered by name ------------===//
//
// The registry of ElementStep.h, made from ElementMath.h's ops: each op's
// host loop runs its `apply` on every element through HostElement, which
// reads and writes the operands in host memory (the types converted as
// DType.h's loadAs and storeAs do, as every device stores them).
//
//===----------------------------------------------------------------------===//
#include "muon/Runtime/ElementStep.h"

#include "muon/Runtime/ElementMath.h"

#include <string_view>

namespace muon::runtime {

namespace {

/// One element of the operands, in host memory.
struct HostElement {
  const ElementOperands &o;
  int64_t i;

  float value() const { return loadAs(o.values, o.type, i); }
  void setValue(float v) const { storeAs(o.values, o.type, i, v); }
  float grad() const { return loadAs(o.grad, o.gradType, i); }
  float input() const { return o.input[i]; }
  float rowInput() const { return o.input[i / o.rowLength]; }
  void setOutput(float v) const { o.output[i] = v; }
  float slot(int k) const { return o.slots[k][i]; }
  void setSlot(int k, float v) const { o.slots[k][i] = v; }
};

template <typename Op>
void hostLoop(const ElementOperands &o, const StepScalars &scalars) {
  const typename Op::Scalars s = scalars.as<typename Op::Scalars>();
  for (int64_t i = 0; i < o.n; ++i) {
    HostElement e{o, i};
    Op::apply(e, s);
  }
}

template <typename Op> ElementStep stepOf() {
  return {Op::kName, Op::kUses, Op::kSlots,
          [](const StepContext &c) { return StepScalars::of(Op::scalars(c)); },
          &hostLoop<Op>};
}

template <typename... Ops>
std::vector<ElementStep> registry(const std::tuple<Ops...> *) {
  return {stepOf<Ops>()...};
}

} // namespace

const std::vector<ElementStep> &elementSteps() {
  static const std::vector<ElementStep> steps =
      registry(static_cast<const ElementOps *>(nullptr));
  return steps;
}

const ElementStep *findElementStep(std::string_view name) {
  for (const ElementStep &step : elementSteps())
    if (name == step.name)
      return &step;
  return nullptr;
}

} // namespace muon::runtime
