//===- Worker.cpp - One rank of a real run --------------------------------===//
#include "Worker.h"
#include "Backend.h"
#include "Console.h"
#include "PlanInput.h"
#include "Simulation.h"

#include "muon/Plan/Report.h"
#include "muon/Plan/Trace.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/Cpu/MpiCommunicator.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Runtime/Testing/Synthetic.h"
#include "muon/Support/Format.h"
#include "muon/Support/OutputFile.h"
#include "muon/Support/Statistics.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <new>
#include <thread>
#include <unistd.h>

namespace muon::tool {
using namespace muon::runtime;

namespace {

/// Exit codes beyond the contract's 0/1/2.
constexpr int kRunFailed = 3;

/// "rank R: <error>" as muon-run prints it. The runtime names no flag in
/// a timeout (the caller chose the limit); here the caller is muon-run.
std::string rankError(int64_t rank, const std::string &error) {
  return "rank " + std::to_string(rank) + ": " + error +
         (isTimeoutError(error) ? " (see --timeout)" : "");
}

template <typename T> void append(std::vector<char> &out, const T *data,
                                  size_t count) {
  const char *bytes = reinterpret_cast<const char *>(data);
  out.insert(out.end(), bytes, bytes + count * sizeof(T));
}

template <typename T> std::vector<T> as(const std::vector<char> &bytes) {
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

/// What each rank reports to rank 0 after its steps.
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

struct RankRun {
  double bytesSent = 0, bytesReceived = 0, nsFlops = 0;
  double consistent = 1; // every applied step moved and ran the same
  // What the rank's plan says it moves and computes: each rank counts its
  // own, since with a sliced plan only it knows (rank 0 holds its part).
  double plannedSent = 0, plannedReceived = 0, plannedFlops = 0;
  // The most working memory any step held, and the plan's bound.
  double peakWorkingBytes = 0, workingBytesBound = 0;
  std::vector<double> stepSeconds;
};

std::vector<char> encode(const RankRun &run) {
  std::vector<double> v = {run.bytesSent,     run.bytesReceived,
                           run.nsFlops,       run.consistent,
                           run.plannedSent,   run.plannedReceived,
                           run.plannedFlops,  run.peakWorkingBytes,
                           run.workingBytesBound};
  v.insert(v.end(), run.stepSeconds.begin(), run.stepSeconds.end());
  std::vector<char> out;
  append(out, v.data(), v.size());
  return out;
}

RankRun decode(const std::vector<char> &bytes) {
  std::vector<double> v = as<double>(bytes);
  RankRun run;
  run.bytesSent = v[0];
  run.bytesReceived = v[1];
  run.nsFlops = v[2];
  run.consistent = v[3];
  run.plannedSent = v[4];
  run.plannedReceived = v[5];
  run.plannedFlops = v[6];
  run.peakWorkingBytes = v[7];
  run.workingBytesBound = v[8];
  run.stepSeconds.assign(v.begin() + 9, v.end());
  return run;
}

/// Partial parameters are compared with a relative tolerance: their summands
/// are added in another order than the reference adds them. In f32 that
/// moves the last bits; a bf16 wire rounds the summands, and bf16
/// Newton-Schulz rounds the sum, where a last-bit difference can flip a
/// rounding (2^-8 relative) that the iterations carry on.
double partialRelativeTolerance(const Plan &plan, DType nsDtype) {
  return plan.wireBytes == 4 && nsDtype == DType::F32 ? 1e-6 : 1e-2;
}

/// A GPU does not compute bit for bit what the CPU reference does (other
/// summation orders, fused multiply-adds), so its runs are compared by how
/// far each parameter is from the reference relative to how far the
/// reference moved it: f32 Newton-Schulz (no TF32) within 1e-5; bf16, the
/// same algorithm in bf16 on both sides, within 5e-2, since a product that
/// sums in another order can round to the neighbouring bf16 value (2^-8
/// relative) and five iterations carry that on.
double updateRelativeTolerance(DType nsDtype) {
  return nsDtype == DType::BF16 ? 5e-2 : 1e-5;
}

/// The spacing of `type`'s values at `value`'s magnitude. Each step rounds
/// a parameter to its storage type on the GPU and in the reference alike:
/// updates that differ by far less than the tolerance above can still round
/// to neighbouring values, so a GPU's parameter may also be one spacing per
/// step away.
double storageSpacing(DType type, float value) {
  const float magnitude = std::fabs(value);
  if (!(magnitude > 0) || !std::isfinite(magnitude))
    return 0;
  const int exponent = std::ilogb(magnitude);
  switch (type) {
  case DType::BF16:
    return std::ldexp(1.0, exponent - 7);
  case DType::F16:
    return std::ldexp(1.0, std::max(exponent, -14) - 10);
  case DType::F32:
    break;
  }
  return static_cast<double>(std::nextafter(magnitude, INFINITY)) - magnitude;
}

struct Verification {
  bool verified = true;
  double maxAbsDiff = 0;
  std::vector<std::string> failures;
};

/// Compares every rank's pieces (gathered at rank 0) with the reference:
/// within `tolerance` (absolute), or with `updateRelative` > 0 within that
/// fraction of the largest change the reference made to the parameter
/// (from `initial`) plus, element by element, one storage spacing per step
/// (`steps`).
Verification compare(const Plan &plan,
                     const std::vector<std::vector<float>> &reference,
                     const std::vector<std::vector<float>> &initial,
                     const std::vector<std::vector<char>> &pieces,
                     double tolerance, double updateRelative, int64_t steps,
                     DType nsDtype) {
  Verification v;
  std::vector<double> paramDiff(plan.params.size(), 0.0);
  // How far past the rounding allowance each parameter is (updateRelative).
  std::vector<double> beyondRounding(plan.params.size(), 0.0);
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    std::vector<float> values = as<float>(pieces[r]);
    size_t at = 0;
    std::vector<int64_t> coords = plan.mesh.coordsOfRank(r);
    for (size_t i = 0; i < plan.params.size(); ++i) {
      const ParamLayout &layout = plan.params[i].layout;
      if (!layout.inSubmesh(coords))
        continue;
      const std::vector<float> &ref = reference[i];
      const DType storage =
          parseDType(plan.params[i].dtype).value_or(DType::F32);
      forEachElement(layout.shape, layout.localBox(plan.mesh, coords),
                     [&](int64_t, int64_t global) {
                       double d = std::fabs(static_cast<double>(values[at++]) -
                                            ref[global]);
                       if (std::isnan(d))
                         d = INFINITY;
                       paramDiff[i] = std::max(paramDiff[i], d);
                       if (updateRelative > 0)
                         beyondRounding[i] = std::max(
                             beyondRounding[i],
                             d - static_cast<double>(steps) *
                                     storageSpacing(storage, ref[global]));
                     });
    }
  }
  for (size_t i = 0; i < plan.params.size(); ++i) {
    double allowed = tolerance;
    if (updateRelative > 0) {
      double moved = 0;
      for (size_t e = 0; e < reference[i].size(); ++e)
        moved = std::max(moved, std::fabs(static_cast<double>(reference[i][e]) -
                                          initial[i][e]));
      allowed = updateRelative * moved;
    } else if (plan.params[i].layout.isPartial()) {
      double largest = 0;
      for (float x : reference[i])
        largest = std::max(largest, std::fabs(static_cast<double>(x)));
      allowed = std::max(allowed,
                         partialRelativeTolerance(plan, nsDtype) * largest);
    }
    v.maxAbsDiff = std::max(v.maxAbsDiff, paramDiff[i]);
    if (updateRelative > 0 ? !(beyondRounding[i] <= allowed)
                           : !(paramDiff[i] <= allowed)) {
      v.verified = false;
      v.failures.push_back(
          updateRelative > 0
              ? format("'%s' differs by %e, %e beyond its storage's rounding "
                       "(allowed %e)",
                       plan.params[i].name.c_str(), paramDiff[i],
                       beyondRounding[i], allowed)
              : format("'%s' differs by %e (allowed %e)",
                       plan.params[i].name.c_str(), paramDiff[i], allowed));
    }
  }
  return v;
}

} // namespace

static int runRank(Plan &plan, const RunFlags &flags, Communicator &comm,
                   Device &device, const std::string &mpiProgress);

int runWorker(Plan plan, const RunFlags &flags, int *argc, char ***argv,
              bool planLoaded) {
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
  MpiCommunicator mpi(argc, argv);
  RankBackend backend;
  std::string error;
  bool opened = planLoaded &&
                mpi.setProgress(flags.mpiProgress == "thread"
                                    ? MpiProgress::Thread
                                : flags.mpiProgress == "calls"
                                    ? MpiProgress::Calls
                                    : MpiProgress::Auto,
                                error) &&
                openBackend(flags, mpi, backend, error);
  // Every rank agrees before any runs: one that could not load its part of
  // the plan (exit 2, as a bad plan always is) or open its device ends the
  // run on all of them.
  int64_t mine = !planLoaded ? 0 : opened ? 2 : 1, everyone = 0;
  std::string agreeError;
  if (!mpi.allReduceMin(mine, everyone, flags.timeoutSeconds, agreeError)) {
    printError(
        rankError(mpi.rank(), opened || !planLoaded ? agreeError : error));
    mpi.abort(kRunFailed);
  }
  if (everyone < 2) {
    if (planLoaded && !opened)
      printError(rankError(mpi.rank(), error));
    return everyone == 0 ? 2 : kRunFailed;
  }
  Communicator &comm = backend.transport ? *backend.transport
                                         : static_cast<Communicator &>(mpi);
  // NCCL moves its own exchanges; MPI ones advance as --mpi-progress says.
  std::string progress = !backend.viaMpi || comm.size() == 1 ? ""
                         : mpi.progressThread()       ? "thread"
                                                      : "calls";
  return runRank(plan, flags, comm, *backend.device, progress);
}

static int runRank(Plan &plan, const RunFlags &flags, Communicator &comm,
                   Device &device, const std::string &mpiProgress) {
  const int64_t rank = comm.rank();
  const bool lead = rank == 0;
  auto fail = [&](const std::string &message) {
    printError(rankError(rank, message));
  };
  if (comm.size() != plan.worldSize) {
    if (lead)
      fail("the plan is for " + std::to_string(plan.worldSize) +
           " ranks but mpirun started " + std::to_string(comm.size()) +
           " (use -np " + std::to_string(plan.worldSize) + ")");
    return 2;
  }
  cpu::setBlasThreads(static_cast<int>(flags.blasThreads));
  std::vector<NonFiniteInjection> nonFinite;
  for (const Fault &f : flags.faults) {
    if (f.kind == Fault::Kind::NonFinite)
      nonFinite.push_back({f.param, f.step});
    // A rank with a different plan: what a stale plan file on one node
    // looks like.
    if (f.kind == Fault::Kind::PlanMismatch && f.rank == rank)
      plan.ns.configs[0].eps *= 2;
  }

  OptimizerOptions options;
  options.timeoutSeconds = flags.timeoutSeconds;
  options.trace = !flags.traceFile.empty();
  options.graphs = flags.graphs;
  std::unique_ptr<Optimizer> optimizer;
  if (Status s = Optimizer::create(plan, comm, device, options, optimizer);
      !s.ok()) {
    // Every rank sees the same start-up result: all leave with 2.
    if (lead)
      fail(s.message());
    return 2;
  }
  std::string error;
  std::vector<int64_t> summands = summandCounts(plan);
  SyntheticModel model(*optimizer, device, flags.seed, summands);

  RankRun run;
  std::vector<TraceEvent> lastTrace; // of the last applied step
  std::vector<int64_t> skipped;
  std::optional<StepCounters> counted;
  int64_t graphSteps[4] = {0, 0, 0, 0}; // by GraphUse
  for (int64_t s = 0; s < flags.steps; ++s) {
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
    model.makeGradients(s, flags.microBatches, nonFinite);
    auto start = std::chrono::steady_clock::now();
    StepResult result;
    if (Status s = optimizer->step(result); !s.ok()) {
      fail(s.message());
      comm.abort(kRunFailed);
    }
    double seconds = std::chrono::duration<double>(
                         std::chrono::steady_clock::now() - start)
                         .count();
    if (!result.applied) {
      skipped.push_back(s);
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
      if (flags.nonFiniteFatal)
        return kRunFailed; // every rank took the same decision
      continue;
    }
    for (const Fault &f : flags.faults)
      if (f.kind == Fault::Kind::Corrupt && f.rank == rank && f.step == s)
        for (size_t i = 0; i < plan.params.size(); ++i)
          if (optimizer->params()[i].elements) {
            model.perturb(i, 1e-3f); // what a lost update looks like
            break;
          }
    const StepCounters &c = optimizer->counters();
    if (counted && (c.bytesSent != counted->bytesSent ||
                    c.bytesReceived != counted->bytesReceived ||
                    c.nsFlops != counted->nsFlops))
      run.consistent = 0;
    counted = c;
    run.peakWorkingBytes = std::max(run.peakWorkingBytes,
                                    static_cast<double>(c.peakWorkingBytes));
    run.workingBytesBound = static_cast<double>(c.workingBytesBound);
    run.stepSeconds.push_back(seconds);
    if (options.trace)
      lastTrace = optimizer->trace();
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
  RankFigures plannedMine = computeRankFigures(plan)[rank];
  run.plannedSent = static_cast<double>(plannedMine.bytesSent);
  run.plannedReceived = static_cast<double>(plannedMine.bytesReceived);
  run.plannedFlops = static_cast<double>(plannedMine.nsFlops);
  if (counted) {
    run.bytesSent = static_cast<double>(counted->bytesSent);
    run.bytesReceived = static_cast<double>(counted->bytesReceived);
    run.nsFlops = static_cast<double>(counted->nsFlops);
  }

  std::vector<std::vector<char>> runs;
  if (!comm.gatherToRoot(encode(run), runs, flags.timeoutSeconds, error)) {
    fail("collecting figures: " + error);
    comm.abort(kRunFailed);
  }
  std::vector<std::vector<char>> traces;
  if (options.trace &&
      !comm.gatherToRoot(encodeTrace(lastTrace), traces, flags.timeoutSeconds,
                         error)) {
    fail("collecting traces: " + error);
    comm.abort(kRunFailed);
  }
  std::vector<std::vector<char>> ownedLists;
  {
    std::vector<char> owned;
    for (const std::string &label : plannedMine.owned) {
      owned.insert(owned.end(), label.begin(), label.end());
      owned.push_back('\n');
    }
    if (!comm.gatherToRoot(owned, ownedLists, flags.timeoutSeconds, error)) {
      fail("collecting figures: " + error);
      comm.abort(kRunFailed);
    }
  }
  std::vector<std::vector<char>> pieces;
  if (flags.verify) {
    std::vector<char> mine;
    for (size_t i = 0; i < plan.params.size(); ++i)
    {
      std::vector<float> piece = model.values(i);
      append(mine, piece.data(), piece.size());
    }
    if (!comm.gatherToRoot(mine, pieces, flags.timeoutSeconds, error)) {
      fail("collecting parameters to verify: " + error);
      comm.abort(kRunFailed);
    }
  }
  for (const Fault &f : flags.faults)
    if (f.kind == Fault::Kind::DieAtEnd && f.rank == rank) {
      // After rank 0 has every figure and piece: the run still failed.
      fail("injected fault: dying after the last step");
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      _exit(9);
    }
  if (!lead)
    return 0;

  // Rank 0: measured figures against the plan, the reference, the report.
  int exitCode = 0;
  Report report = reportOf(plan);
  std::vector<RankRun> rankRuns;
  for (const std::vector<char> &bytes : runs)
    rankRuns.push_back(decode(bytes));
  // The plan's figures as each rank counted them from its own part.
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    RankFigures &f = report.perRank[r];
    f.bytesSent = static_cast<int64_t>(rankRuns[r].plannedSent);
    f.bytesReceived = static_cast<int64_t>(rankRuns[r].plannedReceived);
    f.nsFlops = static_cast<int64_t>(rankRuns[r].plannedFlops);
    f.owned.clear();
    std::string text(ownedLists[r].begin(), ownedLists[r].end());
    for (size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos;
         at = end + 1)
      f.owned.push_back(text.substr(at, end - at));
  }
  const std::vector<RankFigures> planned = report.perRank;
  report.steps = flags.steps;
  report.microBatches = flags.microBatches;
  report.skippedSteps = skipped;
  report.nsDtype = dtypeName(optimizer->nsDtype());
  report.backend = flags.backend;
  report.mpiProgress = mpiProgress;
  bool anyApplied = skipped.size() < static_cast<size_t>(flags.steps);
  std::vector<std::string> mismatches;
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    const RankRun &rr = rankRuns[r];
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
        measured.empty() ? std::nullopt : std::optional<double>(median(measured)));
    report.rankPeakWorkingBytes.push_back(
        static_cast<int64_t>(rr.peakWorkingBytes));
    report.rankWorkingBytesBound.push_back(
        static_cast<int64_t>(rr.workingBytesBound));
  }
  // A step lasts until its slowest rank is done.
  std::vector<double> stepMax;
  for (size_t s = 0; s < rankRuns[0].stepSeconds.size(); ++s) {
    double m = 0;
    for (const RankRun &rr : rankRuns)
      if (s < rr.stepSeconds.size())
        m = std::max(m, rr.stepSeconds[s]);
    stepMax.push_back(m);
  }
  if (stepMax.size() > 1)
    stepMax.erase(stepMax.begin());
  if (!stepMax.empty())
    report.stepSeconds = SecondsStats{
        median(stepMax), *std::min_element(stepMax.begin(), stepMax.end()),
        *std::max_element(stepMax.begin(), stepMax.end())};
  for (const std::string &m : mismatches)
    fail("measured figures differ from the plan: " + m);
  if (!mismatches.empty())
    exitCode = 1;

  std::optional<Verification> verification;
  if (flags.verify) {
    // The reference runs on the CPU, with the Newton-Schulz precision the
    // ranks used (a plan's "auto" means the ranks' device's default).
    Plan referenced = plan;
    referenced.ns.nsDtype = dtypeName(optimizer->nsDtype());
    // The form the ranks' devices ran (a GPU's Gram form is the CPU's).
    cpu::CpuDeviceOptions referenceOptions;
    referenceOptions.nsForm = rankNsForm(flags);
    cpu::CpuDevice cpuDevice(referenceOptions);
    std::vector<std::vector<float>> reference, initial;
    if (!runReference(referenced, cpuDevice, flags.seed, flags.steps,
                      flags.microBatches, nonFinite, reference, error) ||
        !runReference(referenced, cpuDevice, flags.seed, 0, 1, {}, initial,
                      error)) {
      fail("single-device reference: " + error);
      return kRunFailed;
    }
    // Bit-exact on the CPU unless a tolerance is given; a GPU's result is
    // compared relative to the reference's update.
    double updateRelative = flags.backend == "cuda" && !flags.toleranceGiven
                                ? updateRelativeTolerance(optimizer->nsDtype())
                                : 0;
    verification = compare(plan, reference, initial, pieces, flags.tolerance,
                           updateRelative, flags.steps, optimizer->nsDtype());
    report.verified = verification->verified;
    report.maxAbsDiff = verification->maxAbsDiff;
    for (const std::string &f : verification->failures)
      fail("not verified: " + f);
    if (!verification->verified)
      exitCode = 1;
  }

  if (!flags.simulate.empty()) {
    sim::Profile profile;
    std::string file;
    if (!loadProfile(flags.simulate, flags.profilesFile, profile, file,
                     error)) {
      fail(error);
      return 2;
    }
    // A rank holds only its part of a binary plan; the simulation walks
    // every rank's.
    Plan whole;
    bool isPlanFile = false;
    if (plan.isSlice() &&
        !loadPlan(flags.planFile, CompileFlags(), whole, isPlanFile)) {
      fail("reading the whole plan to simulate it: " + flags.planFile);
      return 2;
    }
    addSimulation(plan.isSlice() ? whole : plan, profile, file, report,
                  nullptr);
  }
  // Rank 0 stages both in the run's private directory; the launcher
  // publishes them together.
  std::vector<std::pair<std::string, std::string>> outputs;
  if (!flags.reportFile.empty())
    outputs.push_back({flags.reportFile, renderReport(report)});
  if (options.trace) {
    std::vector<TraceEvent> events;
    for (const std::vector<char> &bytes : traces)
      if (!decodeTrace(bytes, events)) {
        fail("collecting traces: a rank sent a damaged timeline");
        return kRunFailed;
      }
    outputs.push_back(
        {flags.traceFile, renderTrace(plan, events, "measured")});
  }
  if (!writeOutputs(outputs, error)) {
    fail(error);
    return 2;
  }
  if (!flags.quiet) {
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
                     report.stepSeconds->max * 1e3, stepMax.size());
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
  return exitCode;
}

} // namespace muon::tool
