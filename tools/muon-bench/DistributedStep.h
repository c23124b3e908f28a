//===- DistributedStep.h - Steps on N ranks against floor and draft -*- C++ -*-===//
#ifndef MUON_TOOLS_MUON_BENCH_DISTRIBUTEDSTEP_H
#define MUON_TOOLS_MUON_BENCH_DISTRIBUTEDSTEP_H

#include "BenchDevice.h"

#include <cstdint>
#include <string>

namespace muon::bench {

struct DistributedStepOptions {
  std::string specPath;
  int64_t ranks = 2;
  int64_t steps = 4;   // per muon-run; its first step is a warm-up
  int64_t repeats = 3; // interleaved runs of each design
  int64_t blasThreads = 1;
  std::string mpiProgress; // forwarded to muon-run when set
  std::string nsDtype;     // forwarded to muon-run when set
  std::string wireDtype;   // forwarded to muon-run when set
  bool json = false;
};

/// Runs the compiled plan of `specPath` and the seeds' draft design on
/// `ranks` ranks through muon-run (found beside this executable), measures
/// the GEMM rate on `bench`, and prints the comparison. Returns the exit
/// code.
int runDistributedStep(const DistributedStepOptions &options,
                       BenchDevice &bench);

} // namespace muon::bench

#endif // MUON_TOOLS_MUON_BENCH_DISTRIBUTEDSTEP_H
