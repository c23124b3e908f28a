//===- Worker.h - One rank of a real run ------------------------*- C++ -*-===//
#ifndef MUON_TOOLS_MUON_RUN_WORKER_H
#define MUON_TOOLS_MUON_RUN_WORKER_H

#include "RunOptions.h"

#include "muon/Plan/Plan.h"

namespace muon::tool {

/// Runs as one MPI rank: executes `flags.steps` synthetic steps of the plan,
/// then (rank 0) checks the measured figures against the plan, runs the
/// single-device reference when asked, prints the summary and writes the
/// report. Returns the process's exit code.
/// One rank of a run. `planLoaded` false: this rank could not load its part
/// of the plan (it printed why); every rank then leaves with exit code 2.
int runWorker(Plan plan, const RunFlags &flags, bool planLoaded = true);

} // namespace muon::tool

#endif // MUON_TOOLS_MUON_RUN_WORKER_H
