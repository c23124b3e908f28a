//===- ElementSteps.h - The registered steps, called as functions -*- C++ -*-===//
//
// The tests' way to run one registered per-element step (ElementStep.h) on
// a device with the operands spelled out, as the executor calls it: by
// name, with the scalars its op derives from a group's settings (or, for
// Muon's update, from an adjusted lr given directly).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_UNITTESTS_ELEMENTSTEPS_H
#define MUON_UNITTESTS_ELEMENTSTEPS_H

#include "muon/Runtime/Device.h"
#include "muon/Runtime/ElementMath.h"
#include "muon/Runtime/ElementStep.h"

#include <cstdlib>

namespace muon::runtime::calls {

/// The registered step called `name` (a test's typo aborts).
inline const ElementStep &stepNamed(const char *name) {
  const ElementStep *step = findElementStep(name);
  if (!step)
    std::abort();
  return *step;
}

/// Muon's momentum: buf in place, the update into `update`.
inline void runMomentum(Device &device, const void *grad, DType gradType,
                        float *buf, float *update, int64_t n,
                        const PlanGroup &group) {
  const ElementStep &step = stepNamed(MomentumOp::kName);
  ElementOperands o;
  o.grad = grad;
  o.gradType = gradType;
  o.output = update;
  o.slots[0] = buf;
  o.n = n;
  device.runElementStep(step, o, step.scalars({group}));
}

/// Muon's update with weight decay, at the adjusted lr `alr`.
inline void runMuonUpdate(Device &device, void *values, DType type,
                          const float *orth, int64_t n, const PlanGroup &group,
                          double alr) {
  const ElementStep &step = stepNamed(MuonUpdateOp::kName);
  ElementOperands o;
  o.values = values;
  o.type = type;
  o.input = orth;
  o.n = n;
  device.runElementStep(step, o,
                        StepScalars::of(updateScalars(group, alr)));
}

/// AdamW's update, `stepCount` counting from 1.
inline void runAdamW(Device &device, void *values, DType type,
                     const void *grad, DType gradType, float *expAvg,
                     float *expAvgSq, int64_t n, const PlanGroup &group,
                     int64_t stepCount) {
  const ElementStep &step = stepNamed(AdamWOp::kName);
  ElementOperands o;
  o.values = values;
  o.type = type;
  o.grad = grad;
  o.gradType = gradType;
  o.slots[0] = expAvg;
  o.slots[1] = expAvgSq;
  o.n = n;
  device.runElementStep(step, o, step.scalars({group, stepCount}));
}

/// QK-clip's rescale of a rows x cols piece: row i times factors[i]
/// (device memory).
inline void runQkClip(Device &device, void *values, DType type, int64_t rows,
                      int64_t cols, const float *factors,
                      const PlanGroup &group) {
  const ElementStep &step = stepNamed(QkClipOp::kName);
  ElementOperands o;
  o.values = values;
  o.type = type;
  o.input = factors;
  o.rowLength = cols;
  o.n = rows * cols;
  device.runElementStep(step, o, step.scalars({group}));
}

} // namespace muon::runtime::calls

#endif // MUON_UNITTESTS_ELEMENTSTEPS_H
