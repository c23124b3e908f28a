//===- Simulation.h - muon-run --simulate and --trace -----------*- C++ -*-===//
#ifndef MUON_TOOLS_MUON_RUN_SIMULATION_H
#define MUON_TOOLS_MUON_RUN_SIMULATION_H

#include "muon/Plan/Report.h"
#include "muon/Simulate/Profile.h"
#include "muon/Simulate/Simulate.h"

#include <string>

namespace muon::tool {

/// The profiles file muon-run reads when --profiles is not given: the one
/// installed beside it (<bin>/../share/muon/profiles.json; the build tree
/// has the same layout).
std::string defaultProfilesFile();

/// Reads profile `name` from `file` (empty: the default file) into
/// `profile`, the file read into `fileUsed`; fails naming the file and the
/// JSON path.
Status loadProfile(const std::string &name, std::string file,
                   sim::Profile &profile, std::string &fileUsed);

/// Simulates the plan on the profile and puts the prediction into
/// `report` (the lower bounds must be there already). With `events`, the
/// simulated timeline goes there too.
void addSimulation(const Plan &plan, const sim::Profile &profile,
                   const std::string &profileFile, Report &report,
                   std::vector<TraceEvent> *events);

/// The console lines of the prediction; with `measuredSeconds` > 0, set
/// against a real run's median step.
std::string describeSimulation(const SimulationFigures &s,
                               double measuredSeconds = 0);

} // namespace muon::tool

#endif // MUON_TOOLS_MUON_RUN_SIMULATION_H
