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
#include "Backend.h"
#include "Console.h"
#include "Launcher.h"
#include "PlanInput.h"
#include "RunOptions.h"
#include "Simulation.h"
#include "Worker.h"

#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/Placement.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Report.h"
#include "muon/Plan/Validate.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/Cpu/MpiLauncher.h"
#include "muon/Support/CommandLine.h"
#include "muon/Support/Format.h"
#include "muon/Support/Json.h"
#include "muon/Support/Limits.h"
#include "muon/Support/OutputFile.h"

#include <algorithm>
#include <optional>
#include <cmath>
#include <cstdlib>

using ::muon::format;

namespace {

/// Everything on muon-run's command line.
struct Flags {
  std::string inputFilename;
  bool dryRun = false;
  std::string reportFile, planFile, planFormat = "json";
  std::string wireDtype = "f32";
  std::string nsDtype;
  std::string nsForm;
  bool quiet = false, printSchedule = false;
  int64_t gatherBudget = 0, maxRounds = 8;
  int64_t ranks = 0, steps = 3;
  bool verifyRun = false;
  bool graphs = false;
  int64_t microBatches = 1;
  uint64_t seed = 0;
  double timeoutSeconds = 60;
  std::string nonFinite = "skip";
  int64_t blasThreads = 1;
  double tolerance = 0;
  std::vector<std::string> inject;
  std::string mpirunPath = "mpirun";
  std::string backend = "cpu", transport = "auto";
  std::string mpiProgress = "auto";
  std::string simulate, profilesFile, traceFile;
  std::string placement, placementProfile;
};

/// "\n  Newton-Schulz: bf16 products, f32 accumulation (oneDNN ...)": what
/// the ranks' Newton-Schulz runs on, the plan's ns_dtype ("auto" as the
/// CPU backend means it here, and why, on a line of its own). The form may
/// depend on a configuration's coefficients: where the configurations
/// differ in it, each is named.
std::string cpuNewtonSchulz(const ::muon::Plan &plan) {
  using namespace ::muon::runtime;
  const bool autoNs = plan.ns.nsDtype == "auto";
  const ::muon::tool::NsChoice choice = ::muon::tool::cpuAutoNsDtype();
  const DType dtype = autoNs
                          ? choice.dtype
                          : parseDType(plan.ns.nsDtype).value_or(DType::F32);
  std::vector<std::string> products;
  for (const ::muon::NewtonSchulzConfig &c : plan.ns.configs)
    products.push_back(cpu::describeNewtonSchulz(
        dtype, cpu::CpuDeviceOptions().nsForm, c.coefficients));
  std::string described = products[0];
  if (std::count(products.begin(), products.end(), products[0]) !=
      static_cast<std::ptrdiff_t>(products.size())) {
    described.clear();
    for (size_t c = 0; c < products.size(); ++c)
      described += (c ? "; configuration " : "configuration ") +
                   std::to_string(c) + ": " + products[c];
  }
  const std::string advice = cpu::blasKernelAdvice();
  return "\n  Newton-Schulz: " + described +
         (autoNs ? " (ns_dtype auto)\n  ns_dtype auto chose " +
                       choice.reason
                 : "") +
         (advice.empty() ? "" : "\n  note: " + advice);
}

void declare(::muon::cli::Parser &p, Flags &f) {
  p.positional(f.inputFilename, "<spec.json | model.mlir | plan.json>",
               /*required=*/true);
  p.flag("dry-run", f.dryRun, "Compile only; report the plan's figures");
  p.option("report", f.reportFile, "file", "Write the run report here");
  p.option("plan", f.planFile, "file",
           "Write the compiled plan (muon-plan/1) here");
  p.option("plan-format", f.planFormat, "json|binary",
           "Form of the --plan file: json (muon-plan/1, default) or binary "
           "(muon-plan-bin/1: one section per rank, each rank of a run "
           "loads only its own)");
  p.option("wire-dtype", f.wireDtype, "f32|bf16",
           "Element type the exchanges carry (default: the model's "
           "setting, else in a run on cpu Newton-Schulz's element type, "
           "else f32)");
  p.option("ns-dtype", f.nsDtype, "auto|f32|bf16|f16",
           "Element type Newton-Schulz runs in (default: the model's "
           "setting, else the backend's: on cpu the faster here, bf16 where "
           "its products (AVX512_BF16, AMX) run at least 1.3x sgemm's rate, "
           "timed at start-up (or MUON_CPU_PRODUCT_RATES), else f32; bf16 "
           "on cuda); f16 normalizes in f32, then runs f16 products with "
           "f32 accumulation (f32 products rounded to f16 on cpu)");
  p.option("ns-form", f.nsForm, "auto|standard|gram",
           "Form of Newton-Schulz on cpu and cuda: auto (default: wide and "
           "tall matrices in the Gram form, the steps on the Gram matrix "
           "X X^T, where it pays and the coefficients keep its accuracy, "
           "every a <= 4: 0.7-0.9x the time from 2:3 to 1:4 in bf16 on the "
           "CPU), standard (every step as torch.optim.Muon runs it), or gram "
           "(whatever the coefficients); sets MUON_CPU_NS_FORM and "
           "MUON_CUDA_NS_FORM for the ranks and the reference");
  p.flag("quiet", f.quiet, "No summary on the terminal");
  p.flag("print-schedule", f.printSchedule,
         "Print the step's sequence: exchanges, NS batches and the "
         "elementwise updates");
  p.option("gather-budget-bytes", f.gatherBudget, "bytes",
           "Bytes of gathered matrices a rank may hold at once (0: no "
           "limit)");
  p.option("max-rounds", f.maxRounds, "n",
           "Most rounds the exchanges are split into for overlap (default "
           "8)");
  p.option("ranks", f.ranks, "n",
           "MPI ranks to launch (default: the model's world size)");
  p.option("steps", f.steps, "n", "Optimizer steps to run (default 3)");
  p.flag("verify", f.verifyRun,
         "Also run the single-device reference and compare every "
         "parameter");
  p.flag("graphs", f.graphs,
         "Step graphs (cuda): record the step's device work once, after a "
         "warm-up step, into a CUDA graph and replay it, checked call by "
         "call against the recording first; recorded again when the step "
         "changes; eager where the transport reaches the host");
  p.option("micro-batches", f.microBatches, "n",
           "Gradients accumulated before each step (default 1)");
  p.option("seed", f.seed, "n",
           "Seed of the synthetic parameters and gradients (default 0)");
  p.option("timeout", f.timeoutSeconds, "seconds",
           "Seconds a rank waits for any exchange before the run fails "
           "(default 60)");
  p.option("nonfinite", f.nonFinite, "skip|fail",
           "On NaN/Inf in a gradient: skip (the step changes nothing) or "
           "fail (end the run with exit code 3)");
  p.option("blas-threads", f.blasThreads, "n",
           "BLAS threads per rank (default 1; the reference uses the same, "
           "for bit-exact results)");
  p.option("tolerance", f.tolerance, "x",
           "Largest difference from the reference accepted (default 0: "
           "bit-exact on cpu; see the user guide for partial parameters and "
           "cuda)");
  p.list("inject", f.inject, "fault",
         "Fault injection for tests: nan:PARAM:STEP, die:RANK:STEP, "
         "stall:RANK:STEP, corrupt:RANK:STEP, plan-mismatch:RANK, "
         "die-at-end:RANK");
  p.option("mpirun", f.mpirunPath, "path",
           "The mpirun to launch ranks with (default mpirun)");
  p.option("backend", f.backend, "cpu|cuda",
           "Where the ranks compute: cpu (OpenBLAS, MPI) or cuda (cuBLAS, "
           "NCCL or host-staged MPI; one GPU per rank where there are "
           "enough)");
  p.option("mpi-progress", f.mpiProgress, "auto|thread|calls",
           "Who advances MPI exchanges in flight while ranks compute: a "
           "progress thread per rank, or only the runtime's own MPI calls "
           "(default auto: the thread)");
  p.option("transport", f.transport, "auto|nccl|host",
           "How exchanges move with --backend cuda (auto: nccl when every "
           "rank on a node has a GPU of its own, else host: device memory "
           "staged through host memory over MPI)");
  p.option("placement", f.placement, "auto|once|redundant_below=N",
           "Where Newton-Schulz runs for matrices whose whole gradient "
           "several ranks hold (replaces the model's distributed "
           "'placement'): auto (by predicted time on --placement-profile), "
           "once (one owner per matrix), redundant_below=N (once per "
           "replica for matrices of fewer than N elements)");
  p.option("placement-profile", f.placementProfile, "profile",
           "The machine profile placement auto decides on (default: the "
           "--simulate profile; without either, auto keeps one owner per "
           "matrix)");
  p.option("simulate", f.simulate, "profile",
           "Predict the step time on a machine profile (h100, h200, cpu, "
           "...: see --profiles) with the alpha-beta network model, against "
           "the bound max(compute, communication); with a real run, set "
           "against the measured median");
  p.option("profiles", f.profilesFile, "file",
           "The muon-profiles/1 file --simulate reads (default: "
           "share/muon/profiles.json beside muon-run's bin/)");
  p.option("trace", f.traceFile, "file",
           "Write a Chrome/Perfetto trace of one step on every rank: a real "
           "run's last step, or with --dry-run the simulated one (needs "
           "--simulate)");
}

Flags flags;
/// --placement and the machine of --placement-profile (or --simulate).
std::optional<std::string> placementPolicy;
std::optional<int64_t> placementBelow;
::muon::PlacementMachine placementMachine;
std::string placementProfileName;

} // namespace

// Flag maxima (the model's sizes have theirs in Support/Limits.h).
static constexpr int64_t kMaxSteps = 1000000000;
static constexpr int64_t kMaxMicroBatches = 1000000;
static constexpr int64_t kMaxBlasThreads = 1024;
static constexpr double kMaxTimeoutSeconds = 1e7;

static int fail(const std::string &message) {
  ::muon::tool::printError(message);
  return 2;
}

/// The plan in the --plan-format form.
static std::string renderPlanAs(const ::muon::Plan &plan) {
  return flags.planFormat == "binary" ? ::muon::renderPlanBinary(plan)
                                      : ::muon::renderPlan(plan);
}

/// The report and summary of --dry-run: the plan's own figures. With
/// `stream` begun, the plan's transfers went to it: the figures come from
/// it, and a binary --plan from `writer` (the same sink, when there is one).
static int dryRunReport(const ::muon::Plan &plan, ::muon::TransferSink *stream,
                        ::muon::PlanBinaryWriter *writer) {
  ::muon::Report report = ::muon::tool::reportOf(plan);
  bool streamed = stream && stream->begun();
  if (streamed)
    report.perRank = stream->figures(plan);
  bool anyRedundant = std::any_of(plan.matrices.begin(), plan.matrices.end(),
                                  [](auto &m) { return m.redundant; });
  if (anyRedundant || placementPolicy || !flags.placementProfile.empty())
    report.placement = ::muon::placementFigures(plan, placementMachine,
                                                placementProfileName);
  std::vector<::muon::TraceEvent> events;
  if (!flags.simulate.empty()) {
    ::muon::sim::Profile profile;
    std::string file;
    if (::muon::Status s = ::muon::tool::loadProfile(
            flags.simulate, flags.profilesFile, profile, file);
        !s.ok())
      return fail(s.message());
    ::muon::tool::addSimulation(plan, profile, file, report,
                                flags.traceFile.empty() ? nullptr : &events);
  }
  // Both outputs or neither: each is staged in a temporary file beside its
  // target, and only when both are complete do they move into place.
  std::vector<std::pair<std::string, std::string>> outputs;
  std::vector<::muon::StreamedOutput> streamedOutputs;
  if (!flags.planFile.empty() && streamed && writer) {
    // Straight into the file as each rank's section is made.
    streamedOutputs.push_back(
        {flags.planFile, [&](int fd, bool seekable) {
           return writer->finishTo(plan, fd, seekable);
         }});
  } else if (!flags.planFile.empty()) {
    outputs.push_back({flags.planFile, renderPlanAs(plan)});
    if (outputs.back().second.empty())
      return fail("internal error: the compiled plan could not be written "
                  "as a binary plan (a transfer names a matrix its rank does "
                  "not hold)");
  }
  if (!flags.reportFile.empty())
    outputs.push_back({flags.reportFile, ::muon::renderReport(report)});
  if (!flags.traceFile.empty())
    outputs.push_back(
        {flags.traceFile,
         ::muon::renderTrace(plan, events,
                             "simulated: " + report.simulation->profile)});
  if (::muon::Status bad = ::muon::writeOutputs(outputs, streamedOutputs);
      !bad.ok())
    return fail(bad.message());
  if (flags.quiet)
    return 0;
  int64_t received = 0, busiest = 0;
  std::string os = format(
      "dry run: %lld ranks, %zu Muon matri%s, wire %s\n",
      static_cast<long long>(plan.worldSize), plan.matrices.size(),
      plan.matrices.size() == 1 ? "x" : "ces", plan.wireDtype.c_str());
  for (size_t r = 0; r < report.perRank.size(); ++r) {
    const ::muon::RankFigures &f = report.perRank[r];
    received += f.bytesReceived;
    busiest = std::max(busiest, f.nsFlops);
    if (report.perRank.size() <= 64)
      os += format("  rank %4zu: owns %5zu  NS %10.3f GFLOP  recv %10.3f MB  "
                   "sent %10.3f MB\n",
                   r, f.owned.size(), f.nsFlops / 1e9, f.bytesReceived / 1e6,
                   f.bytesSent / 1e6);
  }
  os += format("  bytes received %lld (lower bound %lld)\n",
               static_cast<long long>(received),
               static_cast<long long>(report.lowerBoundBytesReceived));
  os += format("  busiest rank NS %.3f GFLOP (lower bound %.3f)\n",
               busiest / 1e9, report.lowerBoundMakespanFlops / 1e9);
  os += format("  schedule: %zu rounds, %zu exchanges, %zu steps, %lld in "
               "flight at most (%s)\n",
               plan.rounds.size(), plan.exchanges.size(),
               plan.schedule.size(),
               static_cast<long long>(plan.inflightLimit),
               plan.async ? "async" : "sequential debug order");
  if (report.simulation)
    os += ::muon::tool::describeSimulation(*report.simulation);
  ::muon::tool::printLines(os);
  return 0;
}

static void printPlanSchedule(const ::muon::Plan &plan) {
  std::string os;
  using Kind = ::muon::ScheduleStep::Kind;
  for (const ::muon::ScheduleStep &s : plan.schedule) {
    std::string index = std::to_string(s.index);
    switch (s.kind) {
    case Kind::NewtonSchulz:
      os += "ns round " + index + "\n";
      continue;
    case Kind::Momentum:
    case Kind::AdamW:
      os += std::string(::muon::stepName(s.kind)) + "\n";
      continue;
    case Kind::ApplyUpdate:
      os += std::string(::muon::stepName(s.kind)) + " round " + index + "\n";
      continue;
    case Kind::Start:
    case Kind::Done:
      break;
    }
    const ::muon::Exchange &ex = plan.exchanges[s.index];
    os += std::string(::muon::stepName(s.kind)) + " " +
          ::muon::phaseName(ex.phase);
    if (ex.phase == ::muon::Exchange::Phase::Reduce)
      os += " (" + std::to_string(ex.reductions.size()) + " reductions)\n";
    else
      os += " round " + std::to_string(ex.round) + " (" +
            std::to_string(ex.transfers.size()) + " transfers)\n";
  }
  if (!os.empty())
    ::muon::tool::printLines(os);
}

int main(int argc, char **argv) {
  // OpenBLAS's fast kernels on a CPU newer than it, here and in the ranks.
  ::muon::runtime::cpu::restartWithPreferredBlasKernels(argv);
  ::muon::cli::Parser parser(
      "muon-run", "muon-run: compile a Muon model, run its optimizer step on "
                  "MPI ranks and verify it against one device");
  declare(parser, flags);
  {
    std::string message;
    switch (parser.parse(argc, argv, message)) {
    case ::muon::cli::Parser::Outcome::Help:
      ::muon::tool::printLines(message);
      return 0;
    case ::muon::cli::Parser::Outcome::Error:
      return fail(message);
    case ::muon::cli::Parser::Outcome::Run:
      break;
    }
  }
  if (parser.given("placement")) {
    std::string policy = flags.placement;
    size_t eq = policy.find('=');
    if (eq != std::string::npos)
      policy = policy.substr(0, eq);
    bool below = policy == "redundant_below";
    char *end = nullptr;
    const std::string number =
        eq == std::string::npos ? std::string() : flags.placement.substr(eq + 1);
    long long n = number.empty() ? -1 : std::strtoll(number.c_str(), &end, 10);
    if (!::muon::parsePlacement(policy) || below != (eq != std::string::npos) ||
        (below && (n < 0 || !end || *end)))
      return fail("unknown --placement '" + flags.placement +
                  "'; expected auto, once or redundant_below=N (N >= 0 "
                  "elements)");
    placementPolicy = policy;
    if (below)
      placementBelow = n;
  }
  {
    const std::string &name = flags.placementProfile.empty()
                                  ? flags.simulate
                                  : flags.placementProfile;
    if (!name.empty()) {
      ::muon::sim::Profile profile;
      std::string file;
      if (::muon::Status s = ::muon::tool::loadProfile(
              name, flags.profilesFile, profile, file);
          !s.ok())
        return fail(s.message());
      std::string dtype = parser.given("ns-dtype") && flags.nsDtype != "auto"
                              ? flags.nsDtype
                              : profile.defaultNsDtype;
      placementMachine.nsFlopsPerSecond = profile.flopsPerSecond(dtype);
      placementMachine.latencySeconds = profile.intraNode.latencySeconds;
      placementMachine.bytesPerSecond = profile.intraNode.bytesPerSecond;
      placementMachine.interLatencySeconds = profile.interNode.latencySeconds;
      placementMachine.interBytesPerSecond = profile.interNode.bytesPerSecond;
      placementMachine.ranksPerNode = profile.ranksPerNode;
      placementProfileName = profile.name.empty() ? name : profile.name;
    }
  }
  if (!::muon::wireDtypeBytes(flags.wireDtype))
    return fail("unknown --wire-dtype '" + flags.wireDtype +
                "'; expected f32 or bf16");
  if (parser.given("ns-dtype") && flags.nsDtype != "auto" &&
      flags.nsDtype != "f32" && flags.nsDtype != "bf16" &&
      flags.nsDtype != "f16")
    return fail("unknown --ns-dtype '" + flags.nsDtype +
                "'; expected auto, f32, bf16 or f16");
  {
    // Given, the flag sets the environment every rank and the reference
    // read (CpuDeviceOptions); else a value already there must be known.
    namespace cpu = ::muon::runtime::cpu;
    const char *inherited = std::getenv(cpu::kNsFormVariable);
    const std::string form =
        parser.given("ns-form") ? flags.nsForm : inherited ? inherited : "";
    cpu::NsForm parsed = cpu::NsForm::Auto;
    if (!form.empty() && !cpu::parseNsForm(form, parsed))
      return fail((parser.given("ns-form")
                       ? "unknown --ns-form '"
                       : std::string("unknown ") + cpu::kNsFormVariable +
                             " '") +
                  form + "'; expected auto, standard or gram");
    // Both backends' variables (cuda::kNsFormVariable is the GPU's): the
    // form means the same on either.
    if (parser.given("ns-form")) {
      setenv(cpu::kNsFormVariable, form.c_str(), 1);
      setenv("MUON_CUDA_NS_FORM", form.c_str(), 1);
    }
    // Rates given for ns_dtype auto's choice must be rates.
    if (const char *rates = std::getenv(cpu::kProductRatesVariable))
      if (::muon::StatusOr<cpu::ProductRates> parsed =
              cpu::parseProductRates(rates);
          !parsed.ok())
        return fail(parsed.status().message());
  }
  if (flags.planFormat != "json" && flags.planFormat != "binary")
    return fail("unknown --plan-format '" + flags.planFormat +
                "'; expected json or binary");
  if (flags.backend != "cpu" && flags.backend != "cuda")
    return fail("unknown --backend '" + flags.backend +
                "'; expected cpu or cuda");
  if (flags.transport != "auto" && flags.transport != "nccl" &&
      flags.transport != "host")
    return fail("unknown --transport '" + flags.transport +
                "'; expected auto, nccl or host");
  // `host` on the CPU stages through a second host buffer: it tests the
  // staging path where no GPU is.
  if (flags.mpiProgress != "auto" && flags.mpiProgress != "thread" &&
      flags.mpiProgress != "calls")
    return fail("unknown --mpi-progress '" + flags.mpiProgress +
                "'; expected auto, thread or calls");
  if (flags.transport == "nccl" && flags.backend != "cuda")
    return fail("--transport nccl needs --backend cuda");
  namespace limits = ::muon::limits;
  if (flags.gatherBudget < 0)
    return fail("--gather-budget-bytes must be >= 0");
  if (flags.maxRounds < 1 || flags.maxRounds > limits::kMaxRounds)
    return fail("--max-rounds must be in [1, " +
                limits::describe(limits::kMaxRounds) + "]");
  if (flags.ranks < 0 || flags.ranks > limits::kMaxWorldSize)
    return fail("--ranks must be in [0, " +
                limits::describe(limits::kMaxWorldSize) +
                "] (0: the model's world size)");
  if (flags.steps < 1 || flags.steps > kMaxSteps || flags.microBatches < 1 ||
      flags.microBatches > kMaxMicroBatches)
    return fail(format("--steps must be in [1, %lld] and --micro-batches in "
                       "[1, %lld]",
                       static_cast<long long>(kMaxSteps),
                       static_cast<long long>(kMaxMicroBatches)));
  if (flags.blasThreads < 1 || flags.blasThreads > kMaxBlasThreads)
    return fail(format("--blas-threads must be in [1, %lld]",
                       static_cast<long long>(kMaxBlasThreads)));
  if (!(flags.timeoutSeconds > 0) ||
      !(flags.timeoutSeconds <= kMaxTimeoutSeconds))
    return fail(format("--timeout must be > 0 and at most %.0e seconds",
                       kMaxTimeoutSeconds));
  if (!(flags.tolerance >= 0) || !std::isfinite(flags.tolerance))
    return fail("--tolerance must be a finite number >= 0");
  if (flags.nonFinite != "skip" && flags.nonFinite != "fail")
    return fail("unknown --nonfinite '" + flags.nonFinite +
                "'; expected skip or fail");
  // Outputs are checked before any work: never over the input or each
  // other, and only into a directory that exists.
  {
    const std::vector<::muon::OutputTarget> outputs = {
        {"--report", flags.reportFile},
        {"--plan", flags.planFile},
        {"--trace", flags.traceFile}};
    if (::muon::Status bad =
            ::muon::checkOutputs({flags.inputFilename}, outputs);
        !bad.ok())
      return fail(bad.message());
    if (!flags.profilesFile.empty())
      if (::muon::Status bad =
              ::muon::checkOutputs({flags.profilesFile}, outputs);
          !bad.ok())
        return fail(bad.message());
  }
  if (flags.dryRun && !flags.traceFile.empty() && flags.simulate.empty())
    return fail("--trace with --dry-run writes the simulated step: it needs "
                "--simulate PROFILE");
  ::muon::installSignalCleanup();

  ::muon::tool::RunFlags run;
  run.ranks = flags.ranks;
  run.steps = flags.steps;
  run.microBatches = flags.microBatches;
  run.seed = flags.seed;
  run.verify = flags.verifyRun;
  run.graphs = flags.graphs;
  run.timeoutSeconds = flags.timeoutSeconds;
  run.nonFiniteFatal = flags.nonFinite == "fail";
  run.blasThreads = flags.blasThreads;
  run.tolerance = flags.tolerance;
  run.toleranceGiven = parser.given("tolerance");
  run.reportFile = flags.reportFile;
  run.quiet = flags.quiet;
  run.mpirun = flags.mpirunPath;
  run.backend = flags.backend;
  run.transport = flags.transport;
  run.mpiProgress = flags.mpiProgress;
  run.traceFile = flags.traceFile;
  run.simulate = flags.simulate;
  run.planFile = flags.inputFilename;
  run.profilesFile = flags.profilesFile;
  for (const std::string &text : flags.inject) {
    ::muon::StatusOr<::muon::tool::Fault> fault =
        ::muon::tool::parseFault(text);
    if (!fault.ok())
      return fail(fault.status().message());
    run.faults.push_back(*fault);
    run.faultSpecs.push_back(text);
  }

  ::muon::tool::CompileFlags compile;
  compile.wireDtype = flags.wireDtype;
  compile.wireDtypeGiven = parser.given("wire-dtype");
  compile.gatherBudgetBytes = flags.gatherBudget;
  compile.gatherBudgetGiven = parser.given("gather-budget-bytes");
  compile.maxRounds = flags.maxRounds;
  compile.maxRoundsGiven = parser.given("max-rounds");
  compile.placement = placementPolicy;
  compile.redundantBelow = placementBelow;
  compile.machine = placementMachine;
  // A run on the CPU: the wire follows Newton-Schulz's element type, which
  // "auto" makes the faster precision here (NsPrecision.h). The ranks take
  // the rates this choice was made from, so that they choose alike (the
  // executor runs rank 0's choice on every rank in any case).
  if (!flags.dryRun && flags.backend == "cpu") {
    compile.autoNsDtype =
        ::muon::runtime::dtypeName(::muon::tool::cpuAutoNsDtype().dtype);
    ::muon::runtime::cpu::shareProductRates();
    if (parser.given("ns-dtype"))
      compile.nsDtypeFlag = flags.nsDtype;
  }
  // A dry run streams the transfers as they are made, so the whole plan's
  // transfer list (1.2 GB at 16,384 ranks) never exists: into the writer of
  // a binary --plan, or, with no plan to write, into a counter of each
  // rank's bytes (all the report needs). Not with --print-schedule, which
  // counts each exchange's transfers, with --simulate, which walks them, nor
  // with a JSON --plan, which lists them.
  std::unique_ptr<::muon::PlanBinaryWriter> writer;
  std::unique_ptr<::muon::TransferCounter> counter;
  if (flags.dryRun && !flags.printSchedule && flags.simulate.empty() &&
      !::muon::runtime::cpu::launchedByMpirun()) {
    if (flags.planFile.empty()) {
      counter = std::make_unique<::muon::TransferCounter>();
      compile.stream = counter.get();
    } else if (flags.planFormat == "binary") {
      writer = std::make_unique<::muon::PlanBinaryWriter>();
      compile.stream = writer.get();
    }
  }
  ::muon::Plan plan;
  bool isPlanFile = false;
  // A rank of a run loads only its part of a binary plan; it reports a
  // failure to the other ranks (runWorker) instead of leaving them waiting.
  const bool worker = ::muon::runtime::cpu::launchedByMpirun();
  if (!::muon::tool::loadPlan(flags.inputFilename, compile, plan, isPlanFile,
                              worker ? ::muon::tool::rankFromEnvironment()
                                     : -1)) {
    if (!worker || flags.dryRun)
      return 2;
    return ::muon::tool::runWorker(std::move(plan), run, /*planLoaded=*/false);
  }
  // A run setting, not a compile one: it changes no exchange. The
  // coefficients are checked again for it (f16 holds up to 65504 only).
  if (parser.given("ns-dtype")) {
    plan.ns.nsDtype = flags.nsDtype;
    if (::muon::Status s = ::muon::checkNewtonSchulz(plan); !s.ok())
      return fail(flags.inputFilename + ": with --ns-dtype " + flags.nsDtype +
                  ": " + ::muon::json::describe(s));
  }
  for (const ::muon::tool::Fault &f : run.faults)
    if (f.rank >= plan.worldSize)
      return fail(format("--inject names rank %lld but the plan has %lld "
                         "ranks",
                         static_cast<long long>(f.rank),
                         static_cast<long long>(plan.worldSize)));

  // Started by mpirun: this process is one rank of the run.
  if (worker) {
    if (flags.dryRun)
      return fail("--dry-run compiles only; run it without mpirun");
    return ::muon::tool::runWorker(std::move(plan), run);
  }
  if (flags.dryRun) {
    int rc = dryRunReport(plan, compile.stream, writer.get());
    if (rc == 0 && flags.printSchedule)
      printPlanSchedule(plan);
    return rc;
  }
  if (flags.ranks && flags.ranks != plan.worldSize)
    return fail(format("--ranks %lld but the model's mesh has %lld devices",
                       static_cast<long long>(flags.ranks),
                       static_cast<long long>(plan.worldSize)));
  if (::muon::Status usable = ::muon::tool::checkBackend(plan, run);
      !usable.ok())
    return fail(usable.message());
  // A bad profile fails before any rank starts; the ranks read the same
  // file (rank 0 sets its prediction against the measured step).
  if (!run.simulate.empty()) {
    ::muon::sim::Profile profile;
    if (::muon::Status s = ::muon::tool::loadProfile(
            run.simulate, run.profilesFile, profile, run.profilesFile);
        !s.ok())
      return fail(s.message());
  }
  if (!flags.planFile.empty()) {
    if (::muon::Status bad =
            ::muon::writeOutput(flags.planFile, renderPlanAs(plan));
        !bad.ok())
      return fail(bad.message());
  }
  if (flags.printSchedule)
    printPlanSchedule(plan);
  if (!flags.quiet)
    ::muon::tool::printLines(format(
        "run: %lld ranks, %zu Muon matri%s, %lld step(s)%s, wire %s%s%s%s",
        static_cast<long long>(plan.worldSize), plan.matrices.size(),
        plan.matrices.size() == 1 ? "x" : "ces",
        static_cast<long long>(flags.steps),
        flags.microBatches > 1
            ? format(" of %lld micro-batches",
                     static_cast<long long>(flags.microBatches))
                  .c_str()
            : "",
        plan.wireDtype.c_str(),
        flags.backend == "cuda" ? ", on cuda" : "",
        flags.verifyRun ? ", verified against one device" : "",
        flags.backend == "cpu" ? cpuNewtonSchulz(plan).c_str() : ""));
  return ::muon::tool::launchRanks(plan, run);
}
