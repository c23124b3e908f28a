//===- Device.cpp - What the runtime needs from the hardware --------------===//
#include "muon/Runtime/Device.h"
#include "muon/Runtime/ElementMath.h"

#include <algorithm>
#include <cmath>

namespace muon::runtime {

double adjustedLr(const PlanGroup &muon, int64_t rows, int64_t cols) {
  // The plan's reader and setGroupSettings accept only known names.
  return muon.number("lr") *
         adjustLrFactor(muon.text("adjust_lr"), rows, cols) *
         muon.number("extra_scale_factor");
}

void Device::normuon(float *x, int64_t rows, int64_t cols, float *v,
                     const PlanGroup &settings) {
  std::vector<float> matrix(rows * cols), state(rows);
  copyToHost(matrix.data(), x, rows * cols * 4);
  copyToHost(state.data(), v, rows * 4);
  normuonStep(matrix.data(), rows, cols, state.data(),
              normuonScalars(settings));
  copyToDevice(x, matrix.data(), rows * cols * 4);
  copyToDevice(v, state.data(), rows * 4);
}

void Device::scaleRows(void *values, DType type, int64_t rows, int64_t cols,
                       const float *factors) {
  const int64_t bytes = rows * cols * dtypeBytes(type);
  std::vector<char> host(bytes);
  copyToHost(host.data(), values, bytes);
  for (int64_t i = 0; i < rows; ++i) {
    if (factors[i] == 1.0f)
      continue;
    for (int64_t j = i * cols; j < (i + 1) * cols; ++j)
      storeAs(host.data(), type, j,
              qkClipped(loadAs(host.data(), type, j), factors[i]));
  }
  copyToDevice(values, host.data(), bytes);
}

} // namespace muon::runtime
