//===- Launcher.cpp - Start the ranks of a run with mpirun ----------------===//
#include "Launcher.h"
#include "Console.h"

#include "muon/Plan/PlanBinary.h"
#include "muon/Runtime/Cpu/MpiLauncher.h"
#include "muon/Support/InputFile.h"
#include "muon/Support/Limits.h"
#include "muon/Support/ModelLimits.h"
#include "muon/Support/OutputFile.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <unistd.h>
#include <vector>

namespace muon::tool {

static std::string formatDouble(double v) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.17g", v);
  return text;
}

/// A report or trace a rank staged (at most limits::kMaxTextFileBytes).
static bool readFile(const std::string &path, std::string &text) {
  StatusOr<std::string> read = readInputFile(path, limits::kMaxTextFileBytes);
  if (read.ok())
    text = std::move(read).value();
  return read.ok();
}

/// Bytes all ranks of a run on this machine hold at most, roughly: every
/// piece (values, gradient, and momentum, update and result for Muon or two
/// moments and a summed gradient for AdamW), every gathered matrix at once,
/// the largest exchange's buffers on every rank, and with --verify rank 0's
/// single-device reference and the gathered pieces it compares.
static double runBytes(const Plan &plan, bool verify) {
  double total = 0, model = 0, pieces = 0;
  for (const PlanParam &p : plan.params) {
    double elements = 1;
    for (int64_t d : p.layout.shape)
      elements *= static_cast<double>(d);
    double held = elements * copiesOf(plan.mesh, p.layout);
    total += held * 5 * 4;
    model += elements * 5 * 4;
    pieces += held * 4;
  }
  for (const PlanMatrix &m : plan.matrices)
    total += static_cast<double>(m.rows) * m.cols * 4;
  double largest = 0;
  for (const Exchange &ex : plan.exchanges) {
    double elements = 0;
    for (const Transfer &t : ex.transfers)
      elements += static_cast<double>(t.elements());
    for (const Reduction &r : ex.reductions)
      elements += static_cast<double>(r.elements);
    largest = std::max(largest, 2 * elements * plan.wireBytes);
  }
  total += largest * (plan.prefetchCount + 1);
  if (verify)
    total += model + 2 * pieces;
  return total;
}

int launchRanks(const Plan &plan, const RunFlags &flags) {
  // Refuse a run this machine cannot hold, instead of ranks dying in an
  // allocation halfway.
  double need = runBytes(plan, flags.verify);
  double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                static_cast<double>(sysconf(_SC_PAGESIZE));
  if (have > 0 && need > 0.8 * have) {
    char text[256];
    std::snprintf(text, sizeof(text),
                  "the run would hold about %.1f GiB across its %lld ranks, "
                  "more than this machine can give it (%.1f GiB of memory)",
                  need / (1 << 30), static_cast<long long>(plan.worldSize),
                  have / (1 << 30));
    printError(text);
    return 2;
  }
  // Signals are taken synchronously from here on: one that asks the run to
  // end is passed to mpirun, and the private directory is removed after it.
  std::optional<runtime::cpu::EndingSignalsBlocked> blocked(std::in_place);
  // A private directory per run holds the plan the ranks read, the report
  // rank 0 stages, and OpenMPI's session directory (concurrent mpiruns
  // sharing one session base race when one of them cleans it up).
  std::optional<runtime::cpu::PrivateDir> dir(std::in_place, "muon-run");
  if (dir->path().empty()) {
    printError(dir->status().message());
    return 2;
  }
  // Binary: each rank reads only its own part (PlanBinary.h).
  std::string planPath = dir->path() + "/plan.bin";
  std::string stagedReport = dir->path() + "/report.json";
  std::string stagedTrace = dir->path() + "/trace.json";
  if (Status bad = writeOutput(planPath, renderPlanBinary(plan)); !bad.ok()) {
    printError(bad.message());
    return 2;
  }

  int64_t ranks = flags.ranks ? flags.ranks : plan.worldSize;
  std::vector<std::string> command = {
      runtime::cpu::selfPath(), planPath,
      "--steps", std::to_string(flags.steps), "--micro-batches",
      std::to_string(flags.microBatches), "--seed", std::to_string(flags.seed),
      "--timeout", formatDouble(flags.timeoutSeconds), "--blas-threads",
      std::to_string(flags.blasThreads),
      std::string("--nonfinite=") + (flags.nonFiniteFatal ? "fail" : "skip")};
  if (flags.verify)
    command.push_back("--verify");
  if (flags.graphs)
    command.push_back("--graphs");
  // Given or not matters (the default depends on the backend).
  if (flags.toleranceGiven)
    command.insert(command.end(),
                   {"--tolerance", formatDouble(flags.tolerance)});
  command.insert(command.end(), {"--backend", flags.backend});
  if (flags.transport != "auto")
    command.insert(command.end(), {"--transport", flags.transport});
  if (flags.mpiProgress != "auto")
    command.insert(command.end(), {"--mpi-progress", flags.mpiProgress});
  if (flags.quiet)
    command.push_back("--quiet");
  // Rank 0 writes the report into the private directory; it reaches the
  // user's path only if every rank finished (mpirun exits 0 or 1).
  if (!flags.reportFile.empty())
    command.insert(command.end(), {"--report", stagedReport});
  if (!flags.traceFile.empty())
    command.insert(command.end(), {"--trace", stagedTrace});
  if (!flags.simulate.empty())
    command.insert(command.end(), {"--simulate", flags.simulate, "--profiles",
                                   flags.profilesFile});
  for (const std::string &f : flags.faultSpecs)
    command.push_back("--inject=" + f);
  // Each rank runs BLAS with the requested threads from its first call.
  runtime::cpu::MpirunResult run = runtime::cpu::runMpirun(
      flags.mpirun, static_cast<int>(ranks), command, dir->path(),
      {"OPENBLAS_NUM_THREADS=" + std::to_string(flags.blasThreads)});
  int code = run.status;
  std::string report;
  bool haveReport = !flags.reportFile.empty() && (code == 0 || code == 1) &&
                    !run.signal && readFile(stagedReport, report);
  std::string trace;
  bool haveTrace = !flags.traceFile.empty() && (code == 0 || code == 1) &&
                   !run.signal && readFile(stagedTrace, trace);
  dir.reset();     // removed before a signal may end the process
  blocked.reset(); // a pending signal is delivered here
  if (code < 0) {
    printError(run.error);
    return 2;
  }
  if (run.signal) {
    printError(std::string("stopped by ") + strsignal(run.signal) +
               "; no report written");
    signal(run.signal, SIG_DFL);
    raise(run.signal);
    return 128 + run.signal;
  }
  if (code == 0 || code == 1) {
    // The report and the trace reach their paths together or not at all.
    std::vector<std::pair<std::string, std::string>> outputs;
    if (!flags.reportFile.empty()) {
      if (!haveReport) {
        printError("the run ended without its report");
        return 3;
      }
      outputs.push_back({flags.reportFile, report});
    }
    if (!flags.traceFile.empty()) {
      if (!haveTrace) {
        printError("the run ended without its trace");
        return 3;
      }
      outputs.push_back({flags.traceFile, trace});
    }
    if (Status bad = writeOutputs(outputs); !bad.ok()) {
      printError(bad.message());
      return 2;
    }
    return code;
  }
  if (code == 2 || code == 3)
    return code;
  if (code == 127) {
    printError("cannot start '" + flags.mpirun +
               "' (install OpenMPI with `make deps`, or pass --mpirun)");
    return 2;
  }
  printError("the run failed: mpirun exited with status " +
             std::to_string(code) + " (a rank died; see its message above)");
  return 3;
}

} // namespace muon::tool
