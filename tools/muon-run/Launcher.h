//===- Launcher.h - Start the ranks of a run with mpirun --------*- C++ -*-===//
#ifndef MUON_TOOLS_MUON_RUN_LAUNCHER_H
#define MUON_TOOLS_MUON_RUN_LAUNCHER_H

#include "RunOptions.h"

#include "muon/Plan/Plan.h"

namespace muon::tool {

/// Writes the plan to a temporary file and runs `mpirun -np N muon-run
/// PLAN ...` with the flags root and oversubscription need; returns the
/// run's exit code (0, 1 verification failed, 2 invalid input, 3 the run
/// failed: a rank died, stalled or hit a fatal non-finite gradient).
int launchRanks(const Plan &plan, const RunFlags &flags);

} // namespace muon::tool

#endif // MUON_TOOLS_MUON_RUN_LAUNCHER_H
