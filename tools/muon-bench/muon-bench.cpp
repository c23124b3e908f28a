//===- muon-bench.cpp - Measure Newton-Schulz and optimizer steps ---------===//
//
//   muon-bench ns --shapes 1024x1024,1024x4096 [--backend cpu|cuda]
//                 [--ns-dtype f32|bf16|f16|auto] [--floor-dtype f32|bf16|f16]
//                 [--batch B] [--repeats R] [--json]
//                 [--ns-coefficients jordan|polar_express] [--clock wall|cpu]
//     Newton-Schulz seconds per shape (median after a warm-up) against the
//     dense floor: the contract's flop count, ns_steps * (4 m^2 n + 2 m^3)
//     per matrix, at the rate of a plain matrix product of the same size
//     in the same element type (bf16: the CPU's bf16 products where it has
//     them), or in --floor-dtype's (f16 Newton-Schulz against the bf16
//     floor), measured in the same run.
//   muon-bench step PLAN [--backend cpu|cuda] [--steps N] [--json]
//                   [--clock wall|cpu]
//     Optimizer steps of a one-rank plan on synthetic gradients: step time
//     (median after a warm-up) against the Newton-Schulz floor of the
//     precision it ran and the faster floor here, and why it ran that one.
//   muon-bench checkpoint --dir DIR [--mib N] [--repeats R] [--json]
//     One rank's checkpoint save and load of N MiB of optimizer state
//     (CheckpointIo.cpp): best and median seconds, the page cache dropped
//     before each cold load.
//   muon-bench step SPEC --ranks N [--steps N] [--repeats R] [--json]
//                   [--ns-dtype auto|f32|bf16|f16] [--wire-dtype f32|bf16]
//     The compiled plan on N MPI ranks (through muon-run) against the floor
//     of the precision it ran, the faster floor here and the seeds' draft
//     design, interleaved in one sitting (DistributedStep.cpp).
//   muon-bench orthogonalize --rows R --cols C --input F --output G
//                            [--ns-dtype f32|bf16|f16]
//     Newton-Schulz on one matrix (raw f32 in and out), for numerics
//     comparisons (bench/ns-numerics.py).
//
// Built without LLVM (it runs where only the runtime is, such as a GPU
// node). Figures and how they were taken: docs/performance.md.
//
//===----------------------------------------------------------------------===//
#include "BenchCommand.h"
#include "BenchDevice.h"
#include "CheckpointIo.h"
#include "DistributedStep.h"

#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Validate.h"
#include "muon/Runtime/Backends.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Runtime/Testing/Synthetic.h"
#include "muon/Support/CommandLine.h"
#include "muon/Support/Escape.h"
#include "muon/Support/Format.h"
#include "muon/Support/InputFile.h"
#include "muon/Support/Json.h"
#include "muon/Support/JsonWriter.h"
#include "muon/Support/Limits.h"
#include "muon/Support/NsCoefficients.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <malloc.h>
#include <optional>
#include <random>
#include <sstream>

using namespace muon;
using namespace muon::bench;
using runtime::DType;
using runtime::parseDType;

namespace {

struct Shape {
  int64_t rows = 0, cols = 0;
};

/// "1024x1024,1024x4096" -> shapes; false on anything else.
bool parseShapes(const std::string &text, std::vector<Shape> &shapes) {
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    Shape s;
    char x = 0;
    std::istringstream one(item);
    if (!(one >> s.rows >> x >> s.cols) || x != 'x' || !one.eof() ||
        s.rows < 1 || s.cols < 1 || s.rows > (1 << 16) || s.cols > (1 << 16))
      return false;
    shapes.push_back(s);
  }
  return !shapes.empty();
}

double seconds(double since) { return clockSeconds() - since; }

/// a / b, 0 where b is not a time.
double over(double a, double b) { return b > 0 ? a / b : 0; }

/// --clock: "wall" or "cpu" (this process's CPU time; the CPU backend with
/// one BLAS thread only, where it is the time the work itself took).
std::optional<int> chooseClock(const std::string &clock,
                               const std::string &backend, int64_t threads) {
  if (clock != "wall" && clock != "cpu")
    return fail("unknown --clock '" + clock + "'; expected wall or cpu");
  if (clock == "cpu" && (backend != "cpu" || threads != 1))
    return fail("--clock cpu measures the CPU backend with one BLAS thread");
  useCpuClock(clock == "cpu");
  return std::nullopt;
}

int runNs(int argc, char **argv) {
  std::string backend = "cpu", nsDtype = "f32", preset = "jordan",
              clock = "wall", floorDtype,
              shapesText = "1024x1024,2048x2048,1024x4096,4096x1024";
  int64_t batch = 1, nsSteps = 5, repeats = 5, threads = 1;
  bool json = false;
  cli::Parser p("muon-bench ns", "Newton-Schulz against its dense floor");
  p.option("backend", backend, "cpu|cuda", "Device to measure (default cpu)");
  p.option("ns-dtype", nsDtype, "f32|bf16|f16|auto",
           "Element type Newton-Schulz runs in (default f32; auto: what "
           "ns_dtype auto is on this device, and why)");
  p.option("floor-dtype", floorDtype, "f32|bf16|f16",
           "Element type of the plain product the floor is timed in "
           "(default: Newton-Schulz's)");
  p.option("shapes", shapesText, "RxC,...",
           "Matrix shapes (default 1024x1024,2048x2048,1024x4096,4096x1024)");
  p.option("batch", batch, "n", "Same-shape matrices per call (default 1)");
  p.option("ns-steps", nsSteps, "n", "Iterations (default 5)");
  p.option("ns-coefficients", preset, "jordan|polar_express",
           "Coefficient preset (default jordan)");
  p.option("repeats", repeats, "n", "Timed runs per shape (default 5)");
  p.option("blas-threads", threads, "n", "CPU BLAS threads (default 1)");
  p.option("clock", clock, "wall|cpu",
           "Time read (default wall; cpu: this process's CPU time)");
  p.flag("json", json, "One JSON object per shape instead of a table");
  if (std::optional<int> done = parseFlags(p, argc, argv))
    return *done;
  if (std::optional<int> bad = chooseClock(clock, backend, threads))
    return *bad;
  std::vector<Shape> shapes;
  if (!parseShapes(shapesText, shapes))
    return fail("bad --shapes '" + shapesText +
                "': expected ROWSxCOLS,... with sizes in [1, 65536]");
  if (nsDtype != "auto" && !parseDType(nsDtype))
    return fail("unknown --ns-dtype '" + nsDtype +
                "'; expected f32, bf16, f16 or auto");
  if (!floorDtype.empty() && !parseDType(floorDtype))
    return fail("unknown --floor-dtype '" + floorDtype +
                "'; expected f32, bf16 or f16");
  if (batch < 1 || batch > 4096 || nsSteps < 1 || nsSteps > 99 ||
      repeats < 1 || repeats > 1000 || threads < 1 || threads > 1024)
    return fail("--batch in [1, 4096], --ns-steps in [1, 99], --repeats in "
                "[1, 1000], --blas-threads in [1, 1024]");
  std::string error;
  StatusOr<std::unique_ptr<BenchDevice>> opened =
      openBenchDevice(backend, static_cast<int>(threads));
  if (!opened.ok())
    return fail(opened.status().message());
  std::unique_ptr<BenchDevice> bench = std::move(opened).value();
  runtime::Device &device = bench->device();
  const bool autoNs = nsDtype == "auto";
  const DType dtype =
      autoNs ? device.defaultNsDtype() : *parseDType(nsDtype);
  nsDtype = runtime::dtypeName(dtype);
  const DType floorType = floorDtype.empty() ? dtype : *parseDType(floorDtype);
  const std::string reason =
      autoNs ? device.defaultNsDtypeReason() : nsDtype + ": as asked";
  std::optional<std::vector<NsTriple>> table = nsPreset(preset, nsSteps);
  if (!table)
    return fail("unknown --ns-coefficients '" + preset + "'; expected " +
                nsPresetList());
  // One triple per iteration, as the plan file holds it.
  std::vector<std::array<double, 3>> abc = *table;
  abc.resize(static_cast<size_t>(nsSteps), abc.back());
  if (Status why = checkNsCoefficients(abc, nsSteps, nsDtype); !why.ok())
    return fail("--ns-coefficients " + preset + " in " + nsDtype + ": " +
                why.message());

  const std::string products = bench->nsProducts(dtype, abc);
  // Only where they decided what runs (asking times the products).
  const std::string rates = autoNs ? bench->productRates() : "";
  if (!json)
    std::printf("Newton-Schulz on %s, %s, %lld step(s), batch %lld, floor "
                "in %s%s%s%s%s\n"
                "%-11s %10s %10s %10s %10s %8s %8s\n",
                bench->describe().c_str(), nsDtype.c_str(),
                static_cast<long long>(nsSteps), static_cast<long long>(batch),
                runtime::dtypeName(floorType),
                products.empty() ? "" : "\n  products: ", products.c_str(),
                autoNs ? "\n  ns_dtype auto chose " : "",
                autoNs ? reason.c_str() : "", "shape", "NS ms", "TFLOP/s",
                "GEMM TF/s", "floor ms", "NS/floor", "best");
  if (const std::string note = bench->note(); !note.empty())
    std::fprintf(stderr, "muon-bench: note: %s\n", note.c_str());
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> u(-1, 1);
  for (const Shape &s : shapes) {
    const int64_t elements = batch * s.rows * s.cols;
    runtime::DeviceBuffer x(device, elements * 4);
    if (!x.ok())
      return fail(format("the %s device has no room for %lldx%lld x %lld",
                         backend.c_str(), static_cast<long long>(s.rows),
                         static_cast<long long>(s.cols),
                         static_cast<long long>(batch)));
    const double m = static_cast<double>(std::min(s.rows, s.cols));
    const double n = static_cast<double>(std::max(s.rows, s.cols));
    const double flops = batch * nsSteps * (4 * m * m * n + 2 * m * m * m);
    std::vector<float> host(elements);
    // Each timed Newton-Schulz run is paired with a timing of the plain
    // product it is set against, taken just before it: on a shared machine
    // the load changes within seconds, and a pair sees the same load. The
    // dense floor of a pair is the contract's flops at that product's rate
    // (an m x m by m x n GEMM, the shape of Newton-Schulz's last product).
    std::vector<double> times, floors, ratios;
    for (int64_t r = 0; r <= repeats; ++r) {
      const double gemm = bench->gemmSeconds(
          static_cast<int64_t>(m), static_cast<int64_t>(n),
          static_cast<int64_t>(m), floorType, 1);
      // Fresh random input every run (never zeros: they run faster).
      for (float &v : host)
        v = u(rng);
      device.copyToDevice(x.data(), host.data(), elements * 4);
      device.synchronize();
      const double start = clockSeconds();
      device.newtonSchulz(x.floats(), batch, s.rows, s.cols, abc, 1e-7,
                          dtype);
      device.synchronize();
      const double ns = seconds(start);
      if (r == 0 || gemm <= 0) // the first is the warm-up
        continue;
      const double floor = flops / (2 * m * m * n / gemm);
      times.push_back(ns);
      floors.push_back(floor);
      ratios.push_back(ns / floor);
    }
    const double ns = median(times);
    const double nsBest = *std::min_element(times.begin(), times.end());
    const double floor = floors.empty() ? 0 : median(floors);
    const double floorBest =
        floors.empty() ? 0 : *std::min_element(floors.begin(), floors.end());
    const double gemmRate = floor > 0 ? flops / floor : 0;
    // ratio: the median of the pairs' ratios; ratio_best: the fastest
    // Newton-Schulz run against the fastest product (the least-disturbed
    // figures of each).
    const double ratio = ratios.empty() ? 0 : median(ratios);
    const double ratioBest = floorBest > 0 ? nsBest / floorBest : 0;
    std::string shape = format("%lldx%lld", static_cast<long long>(s.rows),
                               static_cast<long long>(s.cols));
    const std::string form = bench->lastNsForm(s.rows, s.cols, dtype, abc);
    if (json)
      std::printf("{\"shape\": \"%s\", \"backend\": \"%s\", \"ns_dtype\": "
                  "\"%s\", \"ns_form\": \"%s\", "
                  "\"ns_coefficients\": \"%s\", \"batch\": %lld, "
                  "\"ns_steps\": %lld, "
                  "\"ns_seconds\": %.6e, \"ns_seconds_min\": %.6e, "
                  "\"dense_flops\": %.6e, \"floor_dtype\": \"%s\", "
                  "\"gemm_flops_per_second\": %.6e, "
                  "\"floor_seconds\": %.6e, \"floor_seconds_min\": %.6e, "
                  "\"ratio\": %.4f, \"ratio_best\": %.4f, \"products\": "
                  "\"%s\", \"ns_dtype_reason\": %s, \"product_rates\": "
                  "\"%s\"}\n",
                  shape.c_str(), backend.c_str(), nsDtype.c_str(),
                  form.c_str(), preset.c_str(), static_cast<long long>(batch),
                  static_cast<long long>(nsSteps), ns, nsBest, flops,
                  runtime::dtypeName(floorType), gemmRate, floor, floorBest,
                  ratio, ratioBest, products.c_str(),
                  ::muon::json::quote(reason).c_str(), rates.c_str());
    else
      std::printf("%-11s %10.3f %10.3f %10.3f %10.3f %8.3f %8.3f\n",
                  shape.c_str(), ns * 1e3, flops / ns / 1e12, gemmRate / 1e12,
                  floor * 1e3, ratio, ratioBest);
    std::fflush(stdout);
  }
  return 0;
}

int runStep(int argc, char **argv) {
  std::string planPath, backend = "cpu", nsDtype, mpiProgress, clock = "wall";
  int64_t steps = 0, threads = 1, ranks = 0, repeats = 3;
  bool json = false;
  cli::Parser p("muon-bench step",
                "Optimizer steps of a one-rank plan against the "
                "Newton-Schulz floor; with --ranks, a spec's compiled plan "
                "on N MPI ranks against the floor and the seeds' draft "
                "design");
  p.positional(planPath, "<plan.json | spec.json with --ranks>",
               /*required=*/true);
  p.option("ranks", ranks, "n",
           "Run SPEC on n MPI ranks through muon-run, interleaved with the "
           "draft design (round-robin owners, one gather and one scatter "
           "per parameter, no overlap)");
  p.option("repeats", repeats, "n",
           "With --ranks: interleaved runs of each design (default 3)");
  p.option("mpi-progress", mpiProgress, "auto|thread|calls",
           "With --ranks: forwarded to muon-run");
  p.option("backend", backend, "cpu|cuda", "Device to measure (default cpu)");
  p.option("ns-dtype", nsDtype, "auto|f32|bf16|f16",
           "Override the plan's Newton-Schulz element type (with --ranks: "
           "forwarded to muon-run)");
  std::string wireDtype;
  p.option("wire-dtype", wireDtype, "f32|bf16",
           "With --ranks: forwarded to muon-run (default: a spec's wire "
           "follows Newton-Schulz's element type)");
  p.option("steps", steps, "n",
           "Steps; the first is a warm-up (default 10; 4 per run with "
           "--ranks)");
  p.option("blas-threads", threads, "n", "CPU BLAS threads (default 1)");
  p.option("clock", clock, "wall|cpu",
           "Time read (default wall; cpu: this process's CPU time)");
  bool graphs = false;
  p.flag("graphs", graphs,
         "Step graphs (OptimizerOptions::graphs): the step recorded once "
         "and replayed (the first two steps run eagerly and record)");
  p.flag("json", json, "A JSON object instead of text");
  if (std::optional<int> done = parseFlags(p, argc, argv))
    return *done;
  if (steps == 0)
    steps = ranks > 0 ? 4 : 10;
  if (std::optional<int> bad = chooseClock(clock, backend, threads))
    return *bad;
  if (steps < 2 || steps > 100000 || threads < 1 || threads > 1024)
    return fail("--steps in [2, 100000], --blas-threads in [1, 1024]");
  if (ranks < 0 || ranks > 4096 || repeats < 1 || repeats > 1000)
    return fail("--ranks in [1, 4096], --repeats in [1, 1000]");
  if (!mpiProgress.empty() && mpiProgress != "auto" &&
      mpiProgress != "thread" && mpiProgress != "calls")
    return fail("unknown --mpi-progress '" + mpiProgress +
                "'; expected auto, thread or calls");
  if (!nsDtype.empty() && nsDtype != "auto" && !parseDType(nsDtype))
    return fail("unknown --ns-dtype '" + nsDtype +
                "'; expected auto, f32, bf16 or f16");
  if (!wireDtype.empty() && wireDtype != "f32" && wireDtype != "bf16")
    return fail("unknown --wire-dtype '" + wireDtype +
                "'; expected f32 or bf16");
  if (ranks > 0) {
    if (backend != "cpu")
      return fail("--ranks runs on the cpu backend only");
    if (clock != "wall")
      return fail("--ranks times steps by muon-run's wall clock; --clock cpu "
                  "is for one-rank plans");
    std::string error;
    StatusOr<std::unique_ptr<BenchDevice>> opened =
        openBenchDevice(backend, static_cast<int>(threads));
    if (!opened.ok())
      return fail(opened.status().message());
    std::unique_ptr<BenchDevice> bench = std::move(opened).value();
    DistributedStepOptions o;
    o.specPath = planPath;
    o.ranks = ranks;
    o.steps = steps;
    o.repeats = repeats;
    o.blasThreads = threads;
    o.mpiProgress = mpiProgress;
    o.nsDtype = nsDtype;
    o.wireDtype = wireDtype;
    o.json = json;
    return runDistributedStep(o, *bench);
  }
  if (!wireDtype.empty())
    return fail("--wire-dtype is for --ranks (a plan's wire is compiled "
                "in)");
  StatusOr<std::string> read =
      readInputFile(planPath, limits::kMaxBinaryPlanFileBytes, "plan file");
  if (!read.ok())
    return fail(read.status().message());
  const std::string &text = *read;
  std::string error;
  StatusOr<Plan> parsed =
      looksLikePlanBinary(text) ? parsePlanBinary(text) : parsePlan(text);
  if (!parsed.ok())
    return fail(planPath + ": " + escapeBytes(parsed.status().text()));
  Plan plan = std::move(parsed).value();
  if (!nsDtype.empty()) {
    plan.ns.nsDtype = nsDtype;
    // The coefficients again, for this precision (f16 holds up to 65504).
    if (muon::Status s = checkNewtonSchulz(plan); !s.ok())
      return fail(planPath + ": with --ns-dtype " + nsDtype + ": " +
                  ::muon::json::describe(s));
  }
  if (plan.worldSize != 1)
    return fail(format("%s is a plan for %lld ranks; muon-bench step runs "
                       "one-rank plans (give a spec and --ranks N for more)",
                       planPath.c_str(),
                       static_cast<long long>(plan.worldSize)));
  StatusOr<std::unique_ptr<BenchDevice>> opened =
      openBenchDevice(backend, static_cast<int>(threads));
  if (!opened.ok())
    return fail(opened.status().message());
  std::unique_ptr<BenchDevice> bench = std::move(opened).value();
  runtime::Device &device = bench->device();
  std::unique_ptr<runtime::Communicator> self;
  if (muon::Status s = runtime::createProcessGroup("single", {}, self);
      !s.ok())
    return fail(s.message());
  std::unique_ptr<runtime::Optimizer> optimizer;
  runtime::OptimizerOptions options;
  options.graphs = graphs;
  if (muon::Status s =
          runtime::Optimizer::create(plan, *self, device, options, optimizer);
      !s.ok())
    return fail(s.message());
  runtime::SyntheticModel model(*optimizer, device, 1,
                                runtime::summandCounts(plan));
  // One set of gradients for every step: their values do not change the
  // step's work, and making them on the host costs more than a GPU step
  // (1.7e9 values for a Llama-3-8B layer stack).
  model.makeGradients(0, 1, {});
  std::vector<double> times;
  int64_t replayed = 0;
  std::string graphNote;
  // With graphs, the warm-up and the recording are not timed.
  const int64_t untimed = graphs ? 2 : 1;
  if (steps <= untimed)
    return fail("--graphs needs --steps of 3 or more");
  for (int64_t s = 0; s < steps; ++s) {
    device.synchronize();
    const double start = clockSeconds();
    runtime::StepResult result;
    if (muon::Status status = optimizer->step(result); !status.ok())
      return fail("step " + std::to_string(s) + ": " + status.message());
    device.synchronize();
    if (s >= untimed)
      times.push_back(seconds(start));
    if (optimizer->counters().graph == runtime::GraphUse::Replayed)
      ++replayed;
    else if (!optimizer->counters().graphNote.empty())
      graphNote = optimizer->counters().graphNote;
  }
  // The floor: the step's dense Newton-Schulz flops at the GEMM rate of
  // its largest matrix's shape.
  double flops = 0;
  int64_t bigM = 1, bigN = 1;
  for (const PlanMatrix &m : plan.matrices) {
    flops += static_cast<double>(m.nsFlops);
    if (m.rows * m.cols > bigM * bigN) {
      bigM = std::min(m.rows, m.cols);
      bigN = std::max(m.rows, m.cols);
    }
  }
  // Both floors, f32 and bf16 (bf16 products where the device has them);
  // the step is set against its own Newton-Schulz element type's (f16's
  // timed on its own), and against the faster of f32's and bf16's: what
  // the device's best default allows.
  DType nsType = optimizer->nsDtype();
  auto rateIn = [&](DType t) {
    const double gemm = bench->gemmSeconds(bigM, bigN, bigM, t, 3);
    return gemm > 0 ? 2.0 * bigM * bigM * bigN / gemm : 0.0;
  };
  double rates[2] = {0, 0}, floors[2] = {0, 0};
  for (DType t : {DType::F32, DType::BF16}) {
    const int i = t == DType::BF16;
    rates[i] = rateIn(t);
    floors[i] = rates[i] > 0 ? flops / rates[i] : 0;
  }
  const double rate =
      nsType == DType::F16 ? rateIn(DType::F16) : rates[nsType == DType::BF16];
  const double floor = rate > 0 ? flops / rate : 0;
  const int fastest = fasterFloor(floors);
  const DType fastestType = fastest ? DType::BF16 : DType::F32;
  double step = median(times);
  const std::string &reason = optimizer->nsDtypeReason();
  if (json)
    std::printf("{\"plan\": \"%s\", \"backend\": \"%s\", \"ns_dtype\": \"%s\", "
                "\"matrices\": %zu, \"step_seconds\": %.6e, "
                "\"step_seconds_min\": %.6e, \"ns_flops\": %.6e, "
                "\"gemm_flops_per_second\": %.6e, \"floor_seconds\": %.6e, "
                "\"floor_f32_seconds\": %.6e, \"floor_bf16_seconds\": "
                "%.6e, \"graphs\": %s, \"graph_replays\": %lld, "
                "\"step_over_floor\": %.4f, \"fastest_floor_dtype\": \"%s\", "
                "\"step_over_fastest_floor\": %.4f, \"ns_dtype_reason\": "
                "%s}\n",
                planPath.c_str(), backend.c_str(),
                runtime::dtypeName(nsType), plan.matrices.size(), step,
                *std::min_element(times.begin(), times.end()), flops, rate,
                floor, floors[0], floors[1], graphs ? "true" : "false",
                static_cast<long long>(replayed), over(step, floor),
                runtime::dtypeName(fastestType), over(step, floors[fastest]),
                ::muon::json::quote(reason).c_str());
  else
    std::printf("%s on %s, ns_dtype %s: %zu Muon matrices, %.3f TFLOP of "
                "Newton-Schulz per step\n"
                "  ns_dtype %s\n"
                "  step median %.2f ms (min %.2f) over %zu steps after "
                "warm-up\n"
                "  floor %.2f ms (%s GEMM %.2f TFLOP/s at %lldx%lld); "
                "step/floor %.3f\n"
                "  floors: f32 %.2f ms, bf16 %.2f ms; step/fastest floor "
                "%.3f (%s)\n",
                planPath.c_str(), bench->describe().c_str(),
                runtime::dtypeName(nsType), plan.matrices.size(), flops / 1e12,
                reason.c_str(), step * 1e3,
                *std::min_element(times.begin(), times.end()) * 1e3,
                times.size(), floor * 1e3, runtime::dtypeName(nsType),
                rate / 1e12, static_cast<long long>(bigM),
                static_cast<long long>(bigN), over(step, floor),
                floors[0] * 1e3, floors[1] * 1e3, over(step, floors[fastest]),
                runtime::dtypeName(fastestType));
  if (graphs && !json)
    std::printf("  step graphs: %lld of %lld steps replayed%s%s\n",
                static_cast<long long>(replayed),
                static_cast<long long>(steps),
                graphNote.empty() ? "" : "; last note: ", graphNote.c_str());
  return 0;
}

/// Newton-Schulz on one matrix read from a file, written to another: what
/// the device computes, for numerics comparisons with other
/// implementations (bench/ns-numerics.py).
int runOrthogonalize(int argc, char **argv) {
  std::string input, output, nsDtype = "f32", preset = "jordan",
                             backend = "cpu";
  int64_t rows = 0, cols = 0, nsSteps = 5;
  double eps = 1e-7;
  cli::Parser p("muon-bench orthogonalize",
                "Newton-Schulz on one matrix: raw little-endian f32, "
                "row-major, in and out");
  p.option("input", input, "file", "The matrix (rows x cols f32 values)");
  p.option("output", output, "file", "Where the result goes");
  p.option("rows", rows, "n", "Rows");
  p.option("cols", cols, "n", "Columns");
  p.option("backend", backend, "cpu|cuda", "Device (default cpu)");
  p.option("ns-dtype", nsDtype, "f32|bf16|f16", "Element type (default f32)");
  p.option("ns-steps", nsSteps, "n", "Iterations (default 5)");
  p.option("ns-coefficients", preset, "jordan|polar_express",
           "Coefficient preset (default jordan)");
  p.option("eps", eps, "x", "Norm floor (default 1e-7)");
  if (std::optional<int> done = parseFlags(p, argc, argv))
    return *done;
  if (input.empty() || output.empty() || rows < 1 || cols < 1 ||
      rows > (1 << 16) || cols > (1 << 16) || nsSteps < 1 || nsSteps > 99)
    return fail("--input, --output, --rows and --cols in [1, 65536] are "
                "needed, --ns-steps in [1, 99]");
  if (!parseDType(nsDtype))
    return fail("unknown --ns-dtype '" + nsDtype +
                "'; expected f32, bf16 or f16");
  std::optional<std::vector<NsTriple>> table = nsPreset(preset, nsSteps);
  if (!table)
    return fail("unknown --ns-coefficients '" + preset + "'; expected " +
                nsPresetList());
  std::vector<std::array<double, 3>> abc = *table;
  abc.resize(static_cast<size_t>(nsSteps), abc.back());
  if (Status why = checkNsCoefficients(abc, nsSteps, nsDtype); !why.ok())
    return fail("--ns-coefficients " + preset + " in " + nsDtype + ": " +
                why.message());
  const int64_t elements = rows * cols;
  std::vector<float> host(elements);
  std::string error;
  {
    InputFile in;
    if (Status s = in.open(input, "input file"); !s.ok())
      return fail(s.message());
    if (in.size() != elements * 4 ||
        !in.readAt(host.data(), elements * 4, 0).ok())
      return fail(format("'%s' is not %lld f32 values", input.c_str(),
                         static_cast<long long>(elements)));
  }
  StatusOr<std::unique_ptr<BenchDevice>> opened =
      openBenchDevice(backend, 1);
  if (!opened.ok())
    return fail(opened.status().message());
  std::unique_ptr<BenchDevice> bench = std::move(opened).value();
  runtime::Device &device = bench->device();
  runtime::DeviceBuffer x(device, elements * 4);
  if (!x.ok())
    return fail("the device has no room for the matrix");
  const DType dtype = *parseDType(nsDtype);
  device.copyToDevice(x.data(), host.data(), elements * 4);
  device.newtonSchulz(x.floats(), 1, rows, cols, abc, eps, dtype);
  device.copyToHost(host.data(), x.data(), elements * 4);
  if (muon::Status s = device.takeError(); !s.ok())
    return fail(s.message());
  std::ofstream out(output, std::ios::binary);
  if (!out.write(reinterpret_cast<const char *>(host.data()), elements * 4))
    return fail("cannot write '" + output + "'");
  std::printf("{\"rows\": %lld, \"cols\": %lld, \"ns_dtype\": \"%s\", "
              "\"products\": \"%s\"}\n",
              static_cast<long long>(rows), static_cast<long long>(cols),
              nsDtype.c_str(), bench->nsProducts(dtype, abc).c_str());
  return 0;
}

} // namespace

/// One rank's part of a binary plan: how long it takes to load and check,
/// how many bytes of the file it reads and how many it holds.
int runPlanLoad(int argc, char **argv) {
  std::string planPath;
  int64_t rank = 0, repeats = 5, readLimit = kDefaultSliceReadLimit;
  bool json = false;
  cli::Parser p("muon-bench plan-load",
                "Load one rank's part of a binary plan (muon-plan-bin/1) as "
                "a rank of a run does: read, decode, check");
  p.positional(planPath, "<plan.bin>", /*required=*/true);
  p.option("rank", rank, "r", "The rank whose part to load (default 0)");
  p.option("repeats", repeats, "n",
           "Loads to time; the median is reported (default 5)");
  p.option("read-limit", readLimit, "bytes",
           "Most bytes a rank may read for its part (default 256 MiB)");
  p.flag("json", json, "A JSON object instead of text");
  if (std::optional<int> done = parseFlags(p, argc, argv))
    return *done;
  if (repeats < 1 || repeats > 100000 || readLimit < 1)
    return fail("--repeats in [1, 100000], --read-limit >= 1");
  std::vector<double> times;
  SliceLoadStats stats;
  int64_t heapBytes = 0;
  Plan slice;
  for (int64_t i = 0; i < repeats; ++i) {
    slice = Plan();
    // The heap the loaded part occupies: malloc's bytes in use after the
    // load (the part alive, the loader's temporaries freed) minus before.
    struct mallinfo2 before = mallinfo2();
    auto start = std::chrono::steady_clock::now();
    StatusOr<Plan> loaded = loadPlanSlice(planPath, rank, &stats, readLimit);
    // Wall time: a load waits for the file, which CPU time would not see.
    times.push_back(std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - start)
                        .count());
    if (!loaded.ok())
      return fail(loaded.status().text());
    slice = std::move(loaded).value();
    heapBytes = static_cast<int64_t>(mallinfo2().uordblks) -
                static_cast<int64_t>(before.uordblks);
  }
  std::sort(times.begin(), times.end());
  double medianMs = times[times.size() / 2] * 1e3, minMs = times[0] * 1e3;
  size_t transfers = 0;
  for (const Exchange &ex : slice.exchanges)
    transfers += ex.transfers.size() + ex.reductions.size();
  if (json)
    std::printf("{\"rank\": %lld, \"world_size\": %lld, \"median_ms\": %.3f, "
                "\"min_ms\": %.3f, \"bytes_read\": %lld, \"held_bytes\": "
                "%lld, \"heap_bytes\": %lld, \"matrices\": %zu, "
                "\"transfers\": %zu}\n",
                static_cast<long long>(rank),
                static_cast<long long>(slice.worldSize), medianMs, minMs,
                static_cast<long long>(stats.bytesRead),
                static_cast<long long>(stats.heldBytes),
                static_cast<long long>(heapBytes), slice.matrices.size(),
                transfers);
  else
    std::printf("rank %lld of %lld: load %.3f ms (median of %lld, min %.3f), "
                "read %lld bytes, holds %lld bytes (heap in use %lld), %zu "
                "matrices, %zu transfers and reductions\n",
                static_cast<long long>(rank),
                static_cast<long long>(slice.worldSize), medianMs,
                static_cast<long long>(repeats), minMs,
                static_cast<long long>(stats.bytesRead),
                static_cast<long long>(stats.heldBytes),
                static_cast<long long>(heapBytes), slice.matrices.size(),
                transfers);
  return 0;
}

int main(int argc, char **argv) {
  // OpenBLAS's fast kernels on a CPU newer than it (its floors measure
  // what the tools run).
  ::muon::runtime::cpu::restartWithPreferredBlasKernels(argv);
  // Rates given for ns_dtype auto's choice must be rates (muon-run, which
  // step --ranks starts, refuses them too).
  if (const char *rates =
          std::getenv(::muon::runtime::cpu::kProductRatesVariable))
    if (StatusOr<runtime::cpu::ProductRates> parsed =
            runtime::cpu::parseProductRates(rates);
        !parsed.ok())
      return fail(parsed.status().message());
  const char *usage =
      "usage: muon-bench ns [options]     Newton-Schulz against its floor\n"
      "       muon-bench step PLAN [options]  optimizer steps of a plan\n"
      "       muon-bench plan-load PLAN.bin --rank R  one rank's part of a "
      "binary plan\n"
      "       muon-bench checkpoint --dir DIR  one rank's checkpoint save "
      "and load\n"
      "       muon-bench orthogonalize --rows R --cols C --input F --output "
      "G  Newton-Schulz on one matrix\n"
      "       muon-bench COMMAND --help   the options of a command\n";
  if (argc < 2) {
    std::fputs(usage, stderr);
    return 2;
  }
  std::string command = argv[1];
  if (command == "--help" || command == "-h") {
    std::fputs(usage, stdout);
    return 0;
  }
  if (command == "ns")
    return runNs(argc - 1, argv + 1);
  if (command == "step")
    return runStep(argc - 1, argv + 1);
  if (command == "plan-load")
    return runPlanLoad(argc - 1, argv + 1);
  if (command == "checkpoint")
    return runCheckpointIo(argc - 1, argv + 1);
  if (command == "orthogonalize")
    return runOrthogonalize(argc - 1, argv + 1);
  std::fprintf(stderr, "muon-bench: unknown command '%s'\n%s",
               command.c_str(), usage);
  return 2;
}
