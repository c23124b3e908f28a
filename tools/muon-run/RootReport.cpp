//===- RootReport.cpp - Rank 0's end of a real run ------------------------===//
#include "RootReport.h"
#include "Console.h"
#include "PlanInput.h"
#include "RankRun.h"
#include "Simulation.h"
#include "Verify.h"

#include "muon/Plan/Report.h"
#include "muon/Plan/Trace.h"
#include "muon/Runtime/Communicator.h"
#include "muon/Support/Format.h"
#include "muon/Support/OutputFile.h"
#include "muon/Support/Statistics.h"

#include <algorithm>
#include <optional>

namespace muon::tool {
using namespace muon::runtime;

std::string rankError(int64_t rank, const std::string &message) {
  return "rank " + std::to_string(rank) + ": " + message;
}

std::string rankError(int64_t rank, const Status &status) {
  // The runtime names no flag in a timeout (the caller chose the limit);
  // here the caller is muon-run.
  return rankError(rank, status.text()) +
         (status.code() == StatusCode::DeadlineExceeded ? " (see --timeout)"
                                                        : "");
}

namespace {

void fail(const std::string &message) { printError(rankError(0, message)); }

/// The plan's figures as each rank counted them from its own part, and the
/// matrices it owns.
void plannedFigures(const Plan &plan, const std::vector<RankRun> &runs,
                    const std::vector<std::vector<char>> &owned,
                    Report &report) {
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    RankFigures &f = report.perRank[r];
    f.bytesSent = static_cast<int64_t>(runs[r].plannedSent);
    f.bytesReceived = static_cast<int64_t>(runs[r].plannedReceived);
    f.nsFlops = static_cast<int64_t>(runs[r].plannedFlops);
    f.owned.clear();
    std::string text(owned[r].begin(), owned[r].end());
    for (size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos;
         at = end + 1)
      f.owned.push_back(text.substr(at, end - at));
  }
}

/// Puts each rank's measured bytes and flops (when a step ran) and times
/// into the report; returns one line per rank whose measures differ from
/// the plan's (or from one step to the next).
std::vector<std::string> measuredFigures(const Plan &plan,
                                         const std::vector<RankRun> &runs,
                                         const std::vector<RankFigures> &planned,
                                         bool anyApplied, Report &report) {
  std::vector<std::string> mismatches;
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    const RankRun &rr = runs[r];
    RankFigures &f = report.perRank[r]; // owned matrices stay the plan's
    if (anyApplied) {
      f.bytesSent = static_cast<int64_t>(rr.bytesSent);
      f.bytesReceived = static_cast<int64_t>(rr.bytesReceived);
      f.nsFlops = static_cast<int64_t>(rr.nsFlops);
      if (f.bytesSent != planned[r].bytesSent ||
          f.bytesReceived != planned[r].bytesReceived ||
          f.nsFlops != planned[r].nsFlops || !rr.consistent)
        mismatches.push_back(format(
            "rank %lld measured sent %lld / received %lld bytes, %lld flops; "
            "the plan says %lld / %lld, %lld",
            static_cast<long long>(r), static_cast<long long>(f.bytesSent),
            static_cast<long long>(f.bytesReceived),
            static_cast<long long>(f.nsFlops),
            static_cast<long long>(planned[r].bytesSent),
            static_cast<long long>(planned[r].bytesReceived),
            static_cast<long long>(planned[r].nsFlops)));
    }
    // After one warm-up step when there is more than one.
    std::vector<double> measured = rr.stepSeconds;
    if (measured.size() > 1)
      measured.erase(measured.begin());
    report.rankMedianSeconds.push_back(
        measured.empty() ? std::nullopt
                         : std::optional<double>(median(measured)));
    report.rankPeakWorkingBytes.push_back(
        static_cast<int64_t>(rr.peakWorkingBytes));
    report.rankWorkingBytesBound.push_back(
        static_cast<int64_t>(rr.workingBytesBound));
  }
  return mismatches;
}

/// Each step's time is its slowest rank's; after one warm-up step when
/// there is more than one.
std::vector<double> slowestRankSteps(const std::vector<RankRun> &runs) {
  std::vector<double> steps;
  for (size_t s = 0; s < runs[0].stepSeconds.size(); ++s) {
    double m = 0;
    for (const RankRun &rr : runs)
      if (s < rr.stepSeconds.size())
        m = std::max(m, rr.stepSeconds[s]);
    steps.push_back(m);
  }
  if (steps.size() > 1)
    steps.erase(steps.begin());
  return steps;
}

/// The whole plan's simulation on the asked profile, into the report.
bool simulateInto(const Plan &plan, const RunFlags &flags, Report &report) {
  sim::Profile profile;
  std::string file;
  if (Status s = loadProfile(flags.simulate, flags.profilesFile, profile, file);
      !s.ok()) {
    fail(s.message());
    return false;
  }
  // A rank holds only its part of a binary plan; the simulation walks every
  // rank's.
  Plan whole;
  bool isPlanFile = false;
  if (plan.isSlice() &&
      !loadPlan(flags.planFile, CompileFlags(), whole, isPlanFile)) {
    fail("reading the whole plan to simulate it: " + flags.planFile);
    return false;
  }
  addSimulation(plan.isSlice() ? whole : plan, profile, file, report, nullptr);
  return true;
}

/// The report and the trace, staged in the run's private directory and
/// published together by the launcher.
bool writeReportAndTrace(const Plan &plan, const RunFlags &flags,
                         const Report &report,
                         const std::vector<std::vector<char>> &traces) {
  std::vector<std::pair<std::string, std::string>> outputs;
  if (!flags.reportFile.empty())
    outputs.push_back({flags.reportFile, renderReport(report)});
  if (!flags.traceFile.empty()) {
    std::vector<TraceEvent> events;
    for (const std::vector<char> &bytes : traces)
      if (!decodeTrace(bytes, events)) {
        fail("collecting traces: a rank sent a damaged timeline");
        return false;
      }
    outputs.push_back({flags.traceFile, renderTrace(plan, events, "measured")});
  }
  if (Status bad = writeOutputs(outputs); !bad.ok()) {
    fail(bad.message());
    return false;
  }
  return true;
}

void printSummary(const Plan &plan, const Report &report,
                  const std::vector<RankFigures> &planned, size_t timedSteps,
                  const std::optional<Verification> &verification) {
  int64_t received = 0, plannedReceived = 0;
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    received += report.perRank[r].bytesReceived;
    plannedReceived += planned[r].bytesReceived;
  }
  std::string text;
  for (int64_t r = 0; r < plan.worldSize && r < 64; ++r) {
    const RankFigures &f = report.perRank[r];
    std::optional<double> sec = report.rankMedianSeconds[r];
    text += format("  rank %3lld: owns %4zu  NS %9.3f GFLOP  recv %9.3f MB  "
                   "sent %9.3f MB  step %s\n",
                   static_cast<long long>(r), f.owned.size(), f.nsFlops / 1e9,
                   f.bytesReceived / 1e6, f.bytesSent / 1e6,
                   sec ? format("%.2f ms", *sec * 1e3).c_str() : "-");
  }
  text += format("  bytes received %lld measured (plan %lld, lower bound "
                 "%lld)\n",
                 static_cast<long long>(received),
                 static_cast<long long>(plannedReceived),
                 static_cast<long long>(report.lowerBoundBytesReceived));
  if (report.stepSeconds)
    text += format("  step time median %.2f ms (min %.2f, max %.2f) over "
                   "%zu step(s) after warm-up\n",
                   report.stepSeconds->median * 1e3,
                   report.stepSeconds->min * 1e3,
                   report.stepSeconds->max * 1e3, timedSteps);
  if (report.simulation)
    text += describeSimulation(*report.simulation,
                               report.stepSeconds ? report.stepSeconds->median
                                                  : 0);
  if (verification)
    text += format("  %s against one device: max_abs_diff %e%s\n",
                   verification->verified ? "verified" : "NOT verified",
                   verification->maxAbsDiff,
                   verification->maxAbsDiff == 0 ? " (bit-exact)" : "");
  else
    text += "  not verified (pass --verify to compare with one device)\n";
  printLines(text);
}

} // namespace

int finishAtRoot(const Plan &plan, const RunFlags &flags,
                 const RunFacts &facts, const Gathered &gathered) {
  int exitCode = 0;
  Report report = reportOf(plan);
  std::vector<RankRun> runs;
  for (const std::vector<char> &bytes : gathered.runs)
    runs.push_back(decode(bytes));
  plannedFigures(plan, runs, gathered.owned, report);
  const std::vector<RankFigures> planned = report.perRank;
  report.steps = flags.steps;
  report.microBatches = flags.microBatches;
  report.skippedSteps = facts.skippedSteps;
  report.nsDtype = dtypeName(facts.nsDtype);
  report.nsDtypeReason = facts.nsDtypeReason;
  report.backend = flags.backend;
  report.mpiProgress = facts.mpiProgress;
  const bool anyApplied =
      facts.skippedSteps.size() < static_cast<size_t>(flags.steps);
  std::vector<std::string> mismatches =
      measuredFigures(plan, runs, planned, anyApplied, report);
  std::vector<double> steps = slowestRankSteps(runs);
  if (!steps.empty())
    report.stepSeconds =
        SecondsStats{median(steps), *std::min_element(steps.begin(), steps.end()),
                     *std::max_element(steps.begin(), steps.end())};
  for (const std::string &m : mismatches)
    fail("measured figures differ from the plan: " + m);
  if (!mismatches.empty())
    exitCode = 1;

  std::optional<Verification> verification;
  if (flags.verify) {
    StatusOr<Verification> verified = verifyAgainstReference(
        plan, flags, facts.nsDtype, facts.nonFinite, gathered.pieces);
    if (!verified.ok()) {
      fail("single-device reference: " + verified.status().message());
      return kRunFailed;
    }
    verification = std::move(verified).value();
    report.verified = verification->verified;
    report.maxAbsDiff = verification->maxAbsDiff;
    for (const std::string &f : verification->failures)
      fail("not verified: " + f);
    if (!verification->verified)
      exitCode = 1;
  }
  if (!flags.simulate.empty() && !simulateInto(plan, flags, report))
    return 2;
  if (!writeReportAndTrace(plan, flags, report, gathered.traces))
    return 2;
  if (!flags.quiet)
    printSummary(plan, report, planned, steps.size(), verification);
  return exitCode;
}

} // namespace muon::tool
