//===- ElementStep.h - Per-element steps, registered by name ----*- C++ -*-===//
//
// The optimizers' per-element steps (Muon's momentum and update, AdamW's
// update, QK-clip's rescale, ...), each described once: its name (what an
// algorithm's registry entry names, muon/Plan/Algorithm.h), the operands it
// touches, the scalars it derives from its group's settings on the host,
// and one host loop over its arithmetic (ElementMath.h), the default on
// every device. A backend may run a step its own way: Device::runElementStep
// decides (the CUDA backend launches a kernel made from the same arithmetic
// for every registered step, KernelBodies.h). A new step is an op in
// ElementMath.h and its entry in ElementOps there; nothing else changes.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_ELEMENTSTEP_H
#define MUON_RUNTIME_ELEMENTSTEP_H

#include "muon/Plan/Plan.h"
#include "muon/Runtime/DType.h"
#include "muon/Runtime/HostDevice.h"

#include <cstdint>
#include <cstring>
#include <string_view>
#include <type_traits>
#include <vector>

namespace muon::runtime {

/// The most per-element slots one algorithm's step takes.
inline constexpr int kMaxStepSlots = 4;

/// A step's slot pointers, by index (a plain array: kernels index it in
/// device code, where std::array's operators are host functions).
struct StepSlots {
  float *at[kMaxStepSlots] = {};
  MUON_HOST_DEVICE float *&operator[](int k) { return at[k]; }
  MUON_HOST_DEVICE float *operator[](int k) const { return at[k]; }
};

/// What one call of a step reads and writes: `n` elements of one
/// parameter's piece (or of a run of it), in device memory.
struct ElementOperands {
  /// The parameter's stored values.
  void *values = nullptr;
  DType type = DType::F32;
  /// Its gradient (the summed one where a reduction ran).
  const void *grad = nullptr;
  DType gradType = DType::F32;
  /// An f32 input: one per element (Muon's orthogonalized update), or,
  /// for a step that reads a row input, one per row of `rowLength`
  /// elements (QK-clip's factors).
  const float *input = nullptr;
  int64_t rowLength = 0;
  /// An f32 output, one per element (Muon's update, which the gathers
  /// carry).
  float *output = nullptr;
  /// The parameter's slots of its algorithm, in the registry's order
  /// (ElementState.h).
  StepSlots slots;
  int64_t n = 0;
};

/// The operands a step touches (ElementStep::uses, an op's kUses).
enum ElementUse : unsigned {
  kReadsValues = 1,
  kWritesValues = 2,
  kReadsGrad = 4,
  kReadsInput = 8,
  kReadsRowInput = 16,
  kWritesOutput = 32,
};

/// How many f32 inputs a step reads for `o`: one per element, one per row,
/// or none.
inline int64_t inputCount(unsigned uses, const ElementOperands &o) {
  if (uses & kReadsRowInput)
    return o.rowLength > 0 ? (o.n + o.rowLength - 1) / o.rowLength : 0;
  return uses & kReadsInput ? o.n : 0;
}

/// The scalars a step derives from its group's settings, on the host, once
/// per call: the op's own struct (trivially copyable) in these bytes.
struct StepScalars {
  alignas(8) unsigned char bytes[64] = {};

  template <typename S> static StepScalars of(const S &scalars) {
    static_assert(std::is_trivially_copyable_v<S> && sizeof(S) <= 64 &&
                  alignof(S) <= 8);
    StepScalars s;
    std::memcpy(s.bytes, &scalars, sizeof(S));
    return s;
  }
  template <typename S> S as() const {
    static_assert(std::is_trivially_copyable_v<S> && sizeof(S) <= 64);
    S scalars;
    std::memcpy(&scalars, bytes, sizeof(S));
    return scalars;
  }
};

/// What a step's scalars derive from.
struct StepContext {
  /// The parameter's group, with the settings of this step.
  const PlanGroup &group;
  /// The piece's step count, from 1 (AdamW's bias correction).
  int64_t step = 0;
  /// The shape of the matrix the elements belong to (Muon's adjust_lr).
  int64_t rows = 0, cols = 0;
};

struct ElementStep {
  /// Its name: the algorithms' registry and messages use it.
  const char *name;
  /// The operands it touches (ElementUse bits) and how many slots it takes.
  unsigned uses;
  int slots;
  /// The scalars of one call.
  StepScalars (*scalars)(const StepContext &context);
  /// The step on host memory: every device's default.
  void (*hostLoop)(const ElementOperands &operands,
                   const StepScalars &scalars);
};

/// Every registered step, in ElementOps' order.
const std::vector<ElementStep> &elementSteps();
/// The step called `name`, or null.
const ElementStep *findElementStep(std::string_view name);

} // namespace muon::runtime

#endif // MUON_RUNTIME_ELEMENTSTEP_H
