//===- ExitCheck.cpp - Programs that run on the fake GPU end checked ------===//
//
// Linked into the tools built on the fake GPU (muon-run-fakegpu,
// muon-cuda-check-fakegpu): at their exit, every misuse the fake counted
// and every CUDA, cuBLAS or NCCL object left live is printed, and the exit
// status becomes 86 (FakeGpu.h), so that a test of such a run fails on
// what a GPU would have refused, faulted on or leaked.
//
//===----------------------------------------------------------------------===//
#include "FakeGpu.h"

namespace {
const bool registered = [] {
  muon::fakegpu::checkAtExit();
  return true;
}();
} // namespace
