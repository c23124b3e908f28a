//===- muon-run.cpp - Compile a model, run and verify its step ------------===//
//
// `muon-run SPEC|IR|PLAN --ranks N --steps K --verify --report FILE` compiles
// a spec or IR file (or takes a compiled plan), launches N MPI ranks with
// mpirun (or runs as one rank when mpirun started it), executes K steps of
// synthetic deterministic gradients, checks the traffic and work it measured
// against the plan and, with --verify, the parameters against the
// single-device reference. `--dry-run` compiles only and reports the plan's
// figures.
//
// Exit codes: 0 success, 1 verification failed, 2 invalid input or flags
// (with a message, and no report file), 3 the run failed (a rank died or
// stalled, or a non-finite gradient with --nonfinite=fail).
//
//===----------------------------------------------------------------------===//
#include "CompileModel.h"
#include "Console.h"
#include "Launcher.h"
#include "RunOptions.h"
#include "Worker.h"

#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Report.h"
#include "muon/Runtime/Cpu/MpiLauncher.h"
#include "muon/Support/Limits.h"
#include "muon/Support/OutputFile.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>

namespace cl = llvm::cl;

static cl::OptionCategory toolCategory("muon-run options");

static cl::opt<std::string>
    inputFilename(cl::cat(toolCategory), cl::Positional, cl::Required,
                  cl::desc("<spec.json | model.mlir | plan.json>"));
static cl::opt<bool>
    dryRun(cl::cat(toolCategory), "dry-run",
           cl::desc("Compile only; report the plan's figures"));
static cl::opt<std::string> reportFile(cl::cat(toolCategory), "report",
                                       cl::desc("Write the run report here"),
                                       cl::value_desc("file"));
static cl::opt<std::string>
    planFile("plan", cl::cat(toolCategory),
             cl::desc("Write the compiled plan (muon-plan/1) here"),
             cl::value_desc("file"));
static cl::opt<std::string>
    wireDtype(cl::cat(toolCategory), "wire-dtype", cl::init("f32"),
              cl::desc("Element type the exchanges carry: f32 or bf16 "
                       "(default: the model's setting, else f32)"));
static cl::opt<bool> quiet(cl::cat(toolCategory), "quiet",
                           cl::desc("No summary on the terminal"));
static cl::opt<bool> printSchedule(
    cl::cat(toolCategory), "print-schedule",
    cl::desc("Print the step's sequence: exchanges, NS batches and the "
             "elementwise updates"));
static cl::opt<int64_t> gatherBudget(
    cl::cat(toolCategory), "gather-budget-bytes", cl::init(0),
    cl::desc("Bytes of gathered matrices a rank may hold at once (0: no "
             "limit)"));
static cl::opt<int64_t>
    maxRounds(cl::cat(toolCategory), "max-rounds", cl::init(8),
              cl::desc("Most rounds the exchanges are split into for overlap"));

static cl::opt<int64_t> ranks(
    cl::cat(toolCategory), "ranks", cl::init(0),
    cl::desc("MPI ranks to launch (default: the model's world size)"));
static cl::opt<int64_t> steps(cl::cat(toolCategory), "steps", cl::init(3),
                              cl::desc("Optimizer steps to run (default 3)"));
static cl::opt<bool>
    verifyRun(cl::cat(toolCategory), "verify",
              cl::desc("Also run the single-device reference and compare "
                       "every parameter"));
static cl::opt<int64_t> microBatches(
    cl::cat(toolCategory), "micro-batches", cl::init(1),
    cl::desc("Gradients accumulated before each step (default 1)"));
static cl::opt<uint64_t>
    seed(cl::cat(toolCategory), "seed", cl::init(0),
         cl::desc("Seed of the synthetic parameters and gradients"));
static cl::opt<double> timeoutSeconds(
    cl::cat(toolCategory), "timeout", cl::init(60),
    cl::desc("Seconds a rank waits for any exchange before the run fails "
             "(default 60)"));
static cl::opt<std::string> nonFinite(
    cl::cat(toolCategory), "nonfinite", cl::init("skip"),
    cl::desc("On NaN/Inf in a gradient: skip (the step changes nothing) or "
             "fail (end the run with exit code 3)"));
static cl::opt<int64_t>
    blasThreads(cl::cat(toolCategory), "blas-threads", cl::init(1),
                cl::desc("BLAS threads per rank (default 1; the reference "
                         "uses the same, for bit-exact results)"));
static cl::opt<double> tolerance(
    cl::cat(toolCategory), "tolerance", cl::init(0.0),
    cl::desc("Largest difference from the reference accepted (default 0: "
             "bit-exact; parameters with partial axes get 1e-6 relative)"));
static cl::list<std::string> inject(
    cl::cat(toolCategory), "inject",
    cl::desc("Fault injection for tests: nan:PARAM:STEP, die:RANK:STEP, "
             "stall:RANK:STEP, corrupt:RANK:STEP, plan-mismatch:RANK"));
static cl::opt<std::string>
    mpirunPath(cl::cat(toolCategory), "mpirun", cl::init("mpirun"),
               cl::desc("The mpirun to launch ranks with"));

// Flag maxima (the model's sizes have theirs in Support/Limits.h).
static constexpr int64_t kMaxSteps = 1000000000;
static constexpr int64_t kMaxMicroBatches = 1000000;
static constexpr int64_t kMaxBlasThreads = 1024;
static constexpr double kMaxTimeoutSeconds = 1e7;

static int fail(const llvm::Twine &message) {
  ::muon::tool::printError(message.str());
  return 2;
}

/// The report and summary of --dry-run: the plan's own figures.
static int dryRunReport(const ::muon::Plan &plan) {
  ::muon::Report report = ::muon::tool::reportOf(plan);
  // Both outputs or neither: each is staged in a temporary file beside its
  // target, and only when both are complete do they move into place.
  std::vector<std::pair<std::string, std::string>> outputs;
  if (!planFile.empty())
    outputs.push_back({planFile, ::muon::renderPlan(plan)});
  if (!reportFile.empty())
    outputs.push_back({reportFile, ::muon::renderReport(report)});
  std::string error;
  if (!::muon::writeOutputs(outputs, error))
    return fail(error);
  if (quiet)
    return 0;
  llvm::raw_ostream &os = llvm::outs();
  int64_t received = 0, busiest = 0;
  os << llvm::formatv("dry run: {0} ranks, {1} Muon matri{3}, wire {2}\n",
                      plan.worldSize, plan.matrices.size(), plan.wireDtype,
                      plan.matrices.size() == 1 ? "x" : "ces");
  for (size_t r = 0; r < report.perRank.size(); ++r) {
    const ::muon::RankFigures &f = report.perRank[r];
    received += f.bytesReceived;
    busiest = std::max(busiest, f.nsFlops);
    if (report.perRank.size() <= 64)
      os << llvm::formatv(
          "  rank {0,4}: owns {1,5}  NS {2,10:F3} GFLOP  recv {3,10:F3} MB  "
          "sent {4,10:F3} MB\n",
          r, f.owned.size(), f.nsFlops / 1e9, f.bytesReceived / 1e6,
          f.bytesSent / 1e6);
  }
  os << llvm::formatv("  bytes received {0} (lower bound {1})\n", received,
                      report.lowerBoundBytesReceived);
  os << llvm::formatv("  busiest rank NS {0:F3} GFLOP (lower bound {1:F3})\n",
                      busiest / 1e9, report.lowerBoundMakespanFlops / 1e9);
  os << llvm::formatv("  schedule: {0} rounds, {1} exchanges, {2} steps, "
                      "{3} in flight at most ({4})\n",
                      plan.rounds.size(), plan.exchanges.size(),
                      plan.schedule.size(), plan.inflightLimit,
                      plan.async ? "async" : "sequential debug order");
  return 0;
}

static void printPlanSchedule(const ::muon::Plan &plan) {
  llvm::raw_ostream &os = llvm::outs();
  using Kind = ::muon::ScheduleStep::Kind;
  for (const ::muon::ScheduleStep &s : plan.schedule) {
    switch (s.kind) {
    case Kind::NewtonSchulz:
      os << "ns round " << s.index << "\n";
      continue;
    case Kind::Momentum:
    case Kind::AdamW:
      os << ::muon::stepName(s.kind) << "\n";
      continue;
    case Kind::ApplyUpdate:
      os << ::muon::stepName(s.kind) << " round " << s.index << "\n";
      continue;
    case Kind::Start:
    case Kind::Done:
      break;
    }
    const ::muon::Exchange &ex = plan.exchanges[s.index];
    os << ::muon::stepName(s.kind) << " " << ::muon::phaseName(ex.phase);
    if (ex.phase == ::muon::Exchange::Phase::Reduce)
      os << " (" << ex.reductions.size() << " reductions)\n";
    else
      os << " round " << ex.round << " (" << ex.transfers.size()
         << " transfers)\n";
  }
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(toolCategory);
  if (!cl::ParseCommandLineOptions(
          argc, argv,
          "muon-run: compile a Muon model, run its optimizer step on MPI "
          "ranks and verify it against one device\n",
          &llvm::errs()))
    return 2;
  if (!::muon::wireDtypeBytes(wireDtype))
    return fail("unknown --wire-dtype '" + wireDtype +
                "'; expected f32 or bf16");
  namespace limits = ::muon::limits;
  if (gatherBudget < 0)
    return fail("--gather-budget-bytes must be >= 0");
  if (maxRounds < 1 || maxRounds > limits::kMaxRounds)
    return fail("--max-rounds must be in [1, " +
                limits::describe(limits::kMaxRounds) + "]");
  if (ranks < 0 || ranks > limits::kMaxWorldSize)
    return fail("--ranks must be in [0, " +
                limits::describe(limits::kMaxWorldSize) +
                "] (0: the model's world size)");
  if (steps < 1 || steps > kMaxSteps || microBatches < 1 ||
      microBatches > kMaxMicroBatches)
    return fail("--steps must be in [1, " + llvm::Twine(kMaxSteps) +
                "] and --micro-batches in [1, " +
                llvm::Twine(kMaxMicroBatches) + "]");
  if (blasThreads < 1 || blasThreads > kMaxBlasThreads)
    return fail("--blas-threads must be in [1, " +
                llvm::Twine(kMaxBlasThreads) + "]");
  if (!(timeoutSeconds > 0) || !(timeoutSeconds <= kMaxTimeoutSeconds))
    return fail("--timeout must be > 0 and at most " +
                llvm::formatv("{0:e0}", kMaxTimeoutSeconds).str() +
                " seconds");
  if (!(tolerance >= 0) || !std::isfinite(tolerance))
    return fail("--tolerance must be a finite number >= 0");
  if (nonFinite != "skip" && nonFinite != "fail")
    return fail("unknown --nonfinite '" + nonFinite +
                "'; expected skip or fail");
  // Outputs are checked before any work: never over the input or each
  // other, and only into a directory that exists.
  {
    std::string error;
    if (!::muon::checkOutputs({inputFilename},
                              {{"--report", reportFile}, {"--plan", planFile}},
                              error))
      return fail(error);
  }
  ::muon::installSignalCleanup();

  ::muon::tool::RunFlags run;
  run.ranks = ranks;
  run.steps = steps;
  run.microBatches = microBatches;
  run.seed = seed;
  run.verify = verifyRun;
  run.timeoutSeconds = timeoutSeconds;
  run.nonFiniteFatal = nonFinite == "fail";
  run.blasThreads = blasThreads;
  run.tolerance = tolerance;
  run.reportFile = reportFile;
  run.quiet = quiet;
  run.mpirun = mpirunPath;
  for (const std::string &text : inject) {
    ::muon::tool::Fault fault;
    std::string error;
    if (!::muon::tool::parseFault(text, fault, error))
      return fail(error);
    run.faults.push_back(fault);
    run.faultSpecs.push_back(text);
  }

  ::muon::tool::CompileFlags compile;
  compile.wireDtype = wireDtype;
  compile.wireDtypeGiven = wireDtype.getNumOccurrences() > 0;
  compile.gatherBudgetBytes = gatherBudget;
  compile.gatherBudgetGiven = gatherBudget.getNumOccurrences() > 0;
  compile.maxRounds = maxRounds;
  compile.maxRoundsGiven = maxRounds.getNumOccurrences() > 0;
  ::muon::Plan plan;
  bool isPlanFile = false;
  if (!::muon::tool::loadPlan(inputFilename, compile, plan, isPlanFile))
    return 2;
  for (const ::muon::tool::Fault &f : run.faults)
    if (f.rank >= plan.worldSize)
      return fail("--inject names rank " + llvm::Twine(f.rank) +
                  " but the plan has " + llvm::Twine(plan.worldSize) +
                  " ranks");

  // Started by mpirun: this process is one rank of the run.
  if (::muon::runtime::cpu::launchedByMpirun()) {
    if (dryRun)
      return fail("--dry-run compiles only; run it without mpirun");
    return ::muon::tool::runWorker(std::move(plan), run, &argc, &argv);
  }
  if (dryRun) {
    int rc = dryRunReport(plan);
    if (rc == 0 && printSchedule)
      printPlanSchedule(plan);
    return rc;
  }
  if (ranks && ranks != plan.worldSize)
    return fail("--ranks " + llvm::Twine(ranks) + " but the model's mesh has " +
                llvm::Twine(plan.worldSize) + " devices");
  if (!planFile.empty()) {
    std::string error;
    if (!::muon::writeOutput(planFile, ::muon::renderPlan(plan), error))
      return fail(error);
  }
  if (printSchedule)
    printPlanSchedule(plan);
  if (!quiet)
    llvm::outs() << llvm::formatv(
        "run: {0} ranks, {1} Muon matri{2}, {3} step(s){4}, wire {5}{6}\n",
        plan.worldSize, plan.matrices.size(),
        plan.matrices.size() == 1 ? "x" : "ces", steps,
        microBatches > 1
            ? llvm::formatv(" of {0} micro-batches", microBatches).str()
            : std::string(),
        plan.wireDtype, verifyRun ? ", verified against one device" : "");
  llvm::outs().flush();
  return ::muon::tool::launchRanks(plan, run);
}
