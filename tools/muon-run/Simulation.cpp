//===- Simulation.cpp - muon-run --simulate and --trace -------------------===//
#include "Simulation.h"

#include "muon/Runtime/Cpu/MpiLauncher.h"
#include "muon/Support/Format.h"
#include "muon/Support/InputFile.h"
#include "muon/Support/Limits.h"

namespace muon::tool {

std::string defaultProfilesFile() {
  std::string self = runtime::cpu::selfPath();
  size_t slash = self.rfind('/');
  std::string bin = slash == std::string::npos ? "." : self.substr(0, slash);
  return bin + "/../share/muon/profiles.json";
}

Status loadProfile(const std::string &name, std::string file,
                   sim::Profile &profile, std::string &fileUsed) {
  fileUsed = file.empty() ? defaultProfilesFile() : file;
  StatusOr<std::string> text =
      readInputFile(fileUsed, limits::kMaxTextFileBytes, "the profiles file");
  if (!text.ok())
    return Status(text.status().code(),
                  text.status().message() +
                      (file.empty()
                           ? " (installed with muon-run; pass --profiles FILE)"
                           : ""));
  return sim::parseProfile(*text, fileUsed, name, profile);
}

void addSimulation(const Plan &plan, const sim::Profile &profile,
                   const std::string &profileFile, Report &report,
                   std::vector<TraceEvent> *events) {
  sim::Bounds bounds{report.lowerBoundMakespanFlops,
                     report.lowerBoundBytesReceived};
  sim::Result r = sim::simulate(plan, profile, bounds, events != nullptr);
  SimulationFigures s;
  s.profile = profile.name;
  s.profileFile = profileFile;
  s.nsDtype =
      plan.ns.nsDtype == "auto" ? profile.defaultNsDtype : plan.ns.nsDtype;
  s.ranksPerNode = profile.ranksPerNode;
  s.nodes = r.nodes;
  s.nsFlopsPerSecond = sim::nsFlopsPerSecond(plan, profile);
  s.stepSeconds = r.stepSeconds;
  s.computeBoundSeconds = r.computeBoundSeconds;
  s.commBoundSeconds = r.commBoundSeconds;
  s.boundSeconds = r.boundSeconds();
  for (const sim::RankTimes &t : r.ranks)
    s.perRank.push_back(
        {t.finishSeconds, t.nsSeconds, t.elementwiseSeconds, t.waitSeconds});
  report.simulation = std::move(s);
  if (events)
    *events = std::move(r.events);
}

std::string describeSimulation(const SimulationFigures &s,
                               double measuredSeconds) {
  size_t slowest = 0;
  for (size_t r = 0; r < s.perRank.size(); ++r)
    if (s.perRank[r].finishSeconds > s.perRank[slowest].finishSeconds)
      slowest = r;
  std::string os = format(
      "  simulated on '%s' (%lld node%s, %lld ranks per node, NS in %s at %.3g "
      "TFLOP/s): step %.3f ms\n",
      s.profile.c_str(), static_cast<long long>(s.nodes),
      s.nodes == 1 ? "" : "s", static_cast<long long>(s.ranksPerNode),
      s.nsDtype.c_str(), s.nsFlopsPerSecond / 1e12, s.stepSeconds * 1e3);
  if (!s.perRank.empty()) {
    const SimulationFigures::Rank &r = s.perRank[slowest];
    os += format("    slowest rank %zu: NS %.3f ms, elementwise %.3f ms, "
                 "waiting on exchanges %.3f ms\n",
                 slowest, r.nsSeconds * 1e3, r.elementwiseSeconds * 1e3,
                 r.waitSeconds * 1e3);
  }
  os += format("    bound %.3f ms = max(compute %.3f ms, communication %.3f "
               "ms); step / bound %.3f\n",
               s.boundSeconds * 1e3, s.computeBoundSeconds * 1e3,
               s.commBoundSeconds * 1e3,
               s.boundSeconds > 0 ? s.stepSeconds / s.boundSeconds : 0.0);
  if (measuredSeconds > 0)
    os += format("    measured median step %.3f ms; predicted / measured "
                 "%.3f\n",
                 measuredSeconds * 1e3, s.stepSeconds / measuredSeconds);
  return os;
}

} // namespace muon::tool
