//===- PythonHooks.cpp - The fake GPU's controls for muonc's tests --------===//
//
// _core_fakegpu (python/src/muonc/_core.cpp built over the fake GPU) adds
// these to its module, for python/tests/test_fake_gpu.py: device memory to
// bind (host memory that the fake counts as a live allocation, as numpy
// bytes) and the fake's misuse counter, which every test checks is zero.
//
//===----------------------------------------------------------------------===//
#include "FakeGpu.h"

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>

#include <cuda_runtime_api.h>

#include <stdexcept>

namespace nb = nanobind;

void defineFakeGpuHooks(nb::module_ &m) {
  m.def(
      "fake_device_bytes",
      [](size_t bytes) {
        void *memory = nullptr;
        if (cudaMalloc(&memory, bytes ? bytes : 1) != cudaSuccess)
          throw std::runtime_error("fake cudaMalloc failed");
        nb::capsule owner(memory, [](void *p) noexcept { (void)cudaFree(p); });
        size_t shape[1] = {bytes};
        return nb::ndarray<nb::numpy, uint8_t, nb::ndim<1>>(memory, 1, shape,
                                                             owner);
      },
      nb::arg("bytes"),
      "`bytes` of the fake GPU's memory, as a numpy uint8 array (freed with "
      "it).");
  m.def(
      "fake_misuses",
      [] {
        muon::fakegpu::Counters c = muon::fakegpu::counters();
        return std::make_pair(c.misuses, c.lastMisuse);
      },
      "(misuses since the start, the latest's text): what a GPU would "
      "have refused, faulted on or left undefined.");
}
