//===- Worker.cpp - One rank of a real run --------------------------------===//
//
// A rank opens its device and transport (agreeing with every other rank
// that all could), then runs in phases: the optimizer over its part of the
// plan, the synthetic steps (with any injected faults), everything rank 0
// needs gathered there, and rank 0's end of the run (RootReport.h).
//
//===----------------------------------------------------------------------===//
#include "Worker.h"
#include "Backend.h"
#include "Console.h"
#include "RankRun.h"
#include "RootReport.h"

#include "muon/Plan/Trace.h"
#include "muon/Runtime/Backends.h"
#include "muon/Runtime/BuiltBackends.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Runtime/Testing/Synthetic.h"
#include "muon/Support/Format.h"

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <new>
#include <optional>
#include <thread>
#include <unistd.h>

namespace muon::tool {
using namespace muon::runtime;

namespace {

/// "recorded", "replayed", "eager (warm-up before the recording)".
std::string graphUseText(const StepCounters &c) {
  switch (c.graph) {
  case GraphUse::Off:
    return "off";
  case GraphUse::Recorded:
    return c.graphNote.empty() ? "recorded" : "recorded (" + c.graphNote + ")";
  case GraphUse::Replayed:
    return "replayed";
  case GraphUse::Eager:
    return "eager (" + c.graphNote + ")";
  }
  return "";
}

/// What a rank's steps gave.
struct StepsOutcome {
  RankRun run;
  std::vector<TraceEvent> lastTrace; // of the last applied step
  std::vector<int64_t> skipped;      // steps skipped for NaN/Inf
  RankFigures planned;               // what the plan says of this rank
  /// Set when the run ends here with this code (--nonfinite=fail).
  std::optional<int> exitCode;
};

/// One rank's run: its plan, flags, transport and device.
class Rank {
public:
  Rank(Plan &plan, const RunFlags &flags, Communicator &comm, Device &device)
      : plan(plan), flags(flags), comm(comm), device(device),
        rank(comm.rank()) {}

  int run(const std::string &mpiProgress);

private:
  void fail(const std::string &message) const {
    printError(rankError(rank, message));
  }
  /// A collective's failure ends the run on every rank.
  [[noreturn]] void abortRun(const Status &status) {
    printError(rankError(rank, status));
    comm.abort(kRunFailed);
    std::_Exit(kRunFailed); // abort() does not return; this says so
  }
  /// Rank 0 gets every rank's `bytes`, or the run ends with `what` failed.
  std::vector<std::vector<char>> gatherOrAbort(const std::vector<char> &bytes,
                                               const char *what) {
    StatusOr<std::vector<std::vector<char>>> all =
        comm.gatherToRoot(bytes, flags.timeoutSeconds);
    if (!all.ok())
      abortRun(all.status().withContext(std::string(what) + ": "));
    return std::move(all).value();
  }
  /// The injected faults that act on the plan and the gradients.
  std::vector<NonFiniteInjection> applyPlanFaults();
  /// Ends this rank now when a fault says so at step `s`.
  void dieOrStallAt(int64_t s) const;
  StepsOutcome runSteps(Optimizer &optimizer, SyntheticModel &model,
                        const std::vector<NonFiniteInjection> &nonFinite);
  /// Rank 0 gets every rank's record, timeline, owned matrices and (with
  /// --verify) values; other ranks get nothing back.
  Gathered gather(const StepsOutcome &outcome, const SyntheticModel &model);

  Plan &plan;
  const RunFlags &flags;
  Communicator &comm;
  Device &device;
  const int64_t rank;
};

std::vector<NonFiniteInjection> Rank::applyPlanFaults() {
  std::vector<NonFiniteInjection> nonFinite;
  for (const Fault &f : flags.faults) {
    if (f.kind == Fault::Kind::NonFinite)
      nonFinite.push_back({f.param, f.step});
    // A rank with a different plan: what a stale plan file on one node
    // looks like.
    if (f.kind == Fault::Kind::PlanMismatch && f.rank == rank)
      plan.ns.configs[0].eps *= 2;
  }
  return nonFinite;
}

void Rank::dieOrStallAt(int64_t s) const {
  for (const Fault &f : flags.faults) {
    if (f.rank != rank || f.step != s)
      continue;
    if (f.kind == Fault::Kind::Die) {
      fail("injected fault: dying at step " + std::to_string(s));
      _exit(9);
    }
    if (f.kind == Fault::Kind::Stall) {
      fail("injected fault: stalling at step " + std::to_string(s));
      while (true)
        std::this_thread::sleep_for(std::chrono::seconds(1));
    }
  }
}

StepsOutcome Rank::runSteps(Optimizer &optimizer, SyntheticModel &model,
                            const std::vector<NonFiniteInjection> &nonFinite) {
  StepsOutcome out;
  const bool lead = rank == 0, tracing = !flags.traceFile.empty();
  std::optional<StepCounters> counted;
  int64_t graphSteps[4] = {0, 0, 0, 0}; // by GraphUse
  for (int64_t s = 0; s < flags.steps; ++s) {
    dieOrStallAt(s);
    model.makeGradients(s, flags.microBatches, nonFinite);
    auto start = std::chrono::steady_clock::now();
    StepResult result;
    if (Status status = optimizer.step(result); !status.ok())
      abortRun(status);
    double seconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    if (!result.applied) {
      out.skipped.push_back(s);
      if (lead)
        printLines(format(
            "step %lld/%lld: gradient of '%s' has NaN or Inf (rank %lld); %s",
            static_cast<long long>(s + 1),
            static_cast<long long>(flags.steps),
            plan.params[result.nonFiniteParam].name.c_str(),
            static_cast<long long>(result.nonFiniteRank),
            flags.nonFiniteFatal
                ? "stopping (--nonfinite=fail)"
                : "step skipped, parameters and optimizer state unchanged"));
      if (flags.nonFiniteFatal) {
        out.exitCode = kRunFailed; // every rank took the same decision
        return out;
      }
      continue;
    }
    for (const Fault &f : flags.faults)
      if (f.kind == Fault::Kind::Corrupt && f.rank == rank && f.step == s)
        for (size_t i = 0; i < plan.params.size(); ++i)
          if (optimizer.params()[i].elements) {
            model.perturb(i, 1e-3f); // what a lost update looks like
            break;
          }
    const StepCounters &c = optimizer.counters();
    if (counted && (c.bytesSent != counted->bytesSent ||
                    c.bytesReceived != counted->bytesReceived ||
                    c.nsFlops != counted->nsFlops))
      out.run.consistent = 0;
    counted = c;
    out.run.peakWorkingBytes = std::max(
        out.run.peakWorkingBytes, static_cast<double>(c.peakWorkingBytes));
    out.run.workingBytesBound = static_cast<double>(c.workingBytesBound);
    out.run.stepSeconds.push_back(seconds);
    if (tracing)
      out.lastTrace = optimizer.trace();
    ++graphSteps[static_cast<int>(c.graph)];
    if (lead && !flags.quiet)
      printLines(format("step %lld/%lld: %.2f ms (rank 0)",
                        static_cast<long long>(s + 1),
                        static_cast<long long>(flags.steps), seconds * 1e3) +
                 // Only with QK-clip layers: other runs print as before.
                 (plan.qkClip.empty()
                      ? std::string()
                      : format(", QK-clip: %lld head(s) clipped",
                               static_cast<long long>(result.qkClippedHeads))) +
                 (c.graph == GraphUse::Off ? std::string()
                                           : ", graph: " + graphUseText(c)));
  }
  if (lead && !flags.quiet && flags.graphs)
    printLines(format("step graphs (rank 0): %lld recorded, %lld replayed, "
                      "%lld eager",
                      static_cast<long long>(
                          graphSteps[static_cast<int>(GraphUse::Recorded)]),
                      static_cast<long long>(
                          graphSteps[static_cast<int>(GraphUse::Replayed)]),
                      static_cast<long long>(
                          graphSteps[static_cast<int>(GraphUse::Eager)])));
  out.planned = computeRankFigures(plan)[rank];
  out.run.plannedSent = static_cast<double>(out.planned.bytesSent);
  out.run.plannedReceived = static_cast<double>(out.planned.bytesReceived);
  out.run.plannedFlops = static_cast<double>(out.planned.nsFlops);
  if (counted) {
    out.run.bytesSent = static_cast<double>(counted->bytesSent);
    out.run.bytesReceived = static_cast<double>(counted->bytesReceived);
    out.run.nsFlops = static_cast<double>(counted->nsFlops);
  }
  return out;
}

Gathered Rank::gather(const StepsOutcome &outcome,
                      const SyntheticModel &model) {
  Gathered at;
  at.runs = gatherOrAbort(encode(outcome.run), "collecting figures");
  if (!flags.traceFile.empty())
    at.traces =
        gatherOrAbort(encodeTrace(outcome.lastTrace), "collecting traces");
  std::vector<char> owned;
  for (const std::string &label : outcome.planned.owned) {
    owned.insert(owned.end(), label.begin(), label.end());
    owned.push_back('\n');
  }
  at.owned = gatherOrAbort(owned, "collecting figures");
  if (flags.verify) {
    std::vector<char> mine;
    for (size_t i = 0; i < plan.params.size(); ++i) {
      std::vector<float> piece = model.values(i);
      append(mine, piece.data(), piece.size());
    }
    at.pieces = gatherOrAbort(mine, "collecting parameters to verify");
  }
  return at;
}

int Rank::run(const std::string &mpiProgress) {
  if (comm.size() != plan.worldSize) {
    if (rank == 0)
      fail("the plan is for " + std::to_string(plan.worldSize) +
           " ranks but mpirun started " + std::to_string(comm.size()) +
           " (use -np " + std::to_string(plan.worldSize) + ")");
    return 2;
  }
  RunFacts facts;
  facts.nonFinite = applyPlanFaults();
  facts.mpiProgress = mpiProgress;
  OptimizerOptions options;
  options.timeoutSeconds = flags.timeoutSeconds;
  options.trace = !flags.traceFile.empty();
  options.graphs = flags.graphs;
  std::unique_ptr<Optimizer> optimizer;
  if (Status s = Optimizer::create(plan, comm, device, options, optimizer);
      !s.ok()) {
    // Every rank sees the same start-up result: all leave with 2.
    if (rank == 0)
      fail(s.message());
    return 2;
  }
  SyntheticModel model(*optimizer, device, flags.seed, summandCounts(plan));
  StepsOutcome outcome = runSteps(*optimizer, model, facts.nonFinite);
  if (outcome.exitCode)
    return *outcome.exitCode;
  Gathered gathered = gather(outcome, model);
  for (const Fault &f : flags.faults)
    if (f.kind == Fault::Kind::DieAtEnd && f.rank == rank) {
      // After rank 0 has every figure and piece: the run still failed.
      fail("injected fault: dying after the last step");
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      _exit(9);
    }
  if (rank != 0)
    return 0;
  facts.skippedSteps = outcome.skipped;
  facts.nsDtype = optimizer->nsDtype();
  facts.nsDtypeReason = optimizer->nsDtypeReason();
  return finishAtRoot(plan, flags, facts, gathered);
}

int runRank(Plan &plan, const RunFlags &flags, Communicator &comm,
            Device &device, const std::string &mpiProgress) {
  return Rank(plan, flags, comm, device).run(mpiProgress);
}

} // namespace

int runWorker(Plan plan, const RunFlags &flags, bool planLoaded) {
  // A crash ends the rank at once, so that mpirun notices and ends the run:
  // a crash handler that symbolizes a stack trace can stall a rank for
  // seconds, or deadlock when the crash corrupted the heap.
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT})
    std::signal(sig, SIG_DFL);
  // Running out of memory is a failed run with a message, not a crash.
  std::set_new_handler([] {
    static const char message[] =
        "muon-run: a rank ran out of memory; the run needs more memory than "
        "this machine gives it\n";
    (void)!::write(STDERR_FILENO, message, sizeof(message) - 1);
    std::_Exit(kRunFailed);
  });
  // The launcher's ranks, with progress as --mpi-progress says once there
  // is a plan to run. A failure here is the same on every rank (the same
  // flags and MPI), so each reports it and leaves.
  registerBuiltBackends();
  std::unique_ptr<Communicator> ranks;
  BackendOptions rankOptions;
  if (planLoaded)
    rankOptions["progress"] = flags.mpiProgress;
  if (Status s = createProcessGroup("mpi", rankOptions, ranks); !s.ok()) {
    printError(s.text());
    return kRunFailed;
  }
  RankBackend backend;
  Status openStatus;
  if (planLoaded)
    openStatus = openBackend(flags, *ranks, backend);
  const bool opened = planLoaded && openStatus.ok();
  // Every rank agrees before any runs: one that could not load its part of
  // the plan (exit 2, as a bad plan always is) or open its device ends the
  // run on all of them.
  int64_t mine = !planLoaded ? 0 : opened ? 2 : 1;
  StatusOr<int64_t> agreed = ranks->allReduceMin(mine, flags.timeoutSeconds);
  if (!agreed.ok()) {
    printError(rankError(ranks->rank(),
                         opened || !planLoaded ? agreed.status() : openStatus));
    ranks->abort(kRunFailed);
  }
  const int64_t everyone = *agreed;
  if (everyone < 2) {
    if (planLoaded && !opened)
      printError(rankError(ranks->rank(), openStatus));
    return everyone == 0 ? 2 : kRunFailed;
  }
  Communicator &comm = backend.transport ? *backend.transport : *ranks;
  // NCCL moves its own exchanges; MPI ones advance as --mpi-progress says.
  std::string progress = !backend.viaMpi || comm.size() == 1 ? ""
                         : ranks->progressThread()    ? "thread"
                                                      : "calls";
  return runRank(plan, flags, comm, *backend.device, progress);
}

} // namespace muon::tool
