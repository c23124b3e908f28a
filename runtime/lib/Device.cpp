//===- Device.cpp - What the runtime needs from the hardware --------------===//
#include "muon/Runtime/Device.h"

#include "muon/Runtime/MatrixStep.h"

#include <vector>

namespace muon::runtime {

void Device::runElementStep(const ElementStep &step, const ElementOperands &o,
                            const StepScalars &scalars) {
  if (o.n <= 0)
    return;
  // Host copies of what the step touches; the values come in whole even
  // where the step only writes some of them.
  const int64_t n = o.n;
  ElementOperands host = o;
  std::vector<char> values, grad;
  std::vector<float> input, output;
  std::vector<std::vector<float>> slots(step.slots);
  const bool usesValues = step.uses & (kReadsValues | kWritesValues);
  if (usesValues) {
    values.resize(n * dtypeBytes(o.type));
    copyToHost(values.data(), o.values, values.size());
    host.values = values.data();
  }
  if (step.uses & kReadsGrad) {
    grad.resize(n * dtypeBytes(o.gradType));
    copyToHost(grad.data(), o.grad, grad.size());
    host.grad = grad.data();
  }
  if (const int64_t inputs = inputCount(step.uses, o)) {
    input.resize(inputs);
    copyToHost(input.data(), o.input, inputs * 4);
    host.input = input.data();
  }
  if (step.uses & kWritesOutput) {
    output.resize(n);
    host.output = output.data();
  }
  for (int k = 0; k < step.slots; ++k) {
    slots[k].resize(n);
    copyToHost(slots[k].data(), o.slots[k], n * 4);
    host.slots[k] = slots[k].data();
  }
  step.hostLoop(host, scalars);
  if (step.uses & kWritesValues)
    copyToDevice(o.values, values.data(), values.size());
  if (step.uses & kWritesOutput)
    copyToDevice(o.output, output.data(), n * 4);
  for (int k = 0; k < step.slots; ++k)
    copyToDevice(o.slots[k], slots[k].data(), n * 4);
}

void Device::runMatrixStep(const MatrixStep &step, float *x, int64_t rows,
                           int64_t cols, float *state,
                           const StepScalars &scalars) {
  std::vector<float> matrix(rows * cols), rowState(rows);
  copyToHost(matrix.data(), x, rows * cols * 4);
  copyToHost(rowState.data(), state, rows * 4);
  step.hostRun(matrix.data(), rows, cols, rowState.data(), scalars);
  copyToDevice(x, matrix.data(), rows * cols * 4);
  copyToDevice(state, rowState.data(), rows * 4);
}

} // namespace muon::runtime
