//===- muon-bench.cpp - Measure Newton-Schulz and optimizer steps ---------===//
//
//   muon-bench ns --shapes 1024x1024,1024x4096 [--backend cpu|cuda]
//                 [--ns-dtype f32|bf16] [--batch B] [--repeats R] [--json]
//     Newton-Schulz seconds per shape (median after a warm-up) against the
//     dense floor: the contract's flop count, ns_steps * (4 m^2 n + 2 m^3)
//     per matrix, at the rate of a plain matrix product of the same size
//     measured in the same run.
//   muon-bench step PLAN [--backend cpu|cuda] [--steps N] [--json]
//     Optimizer steps of a one-rank plan on synthetic gradients: step time
//     (median after a warm-up) against the Newton-Schulz floor.
//
// Built without LLVM (it runs where only the runtime is, such as a GPU
// node). Figures and how they were taken: docs/performance.md.
//
//===----------------------------------------------------------------------===//
#include "BenchDevice.h"

#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Runtime/Testing/Synthetic.h"
#include "muon/Support/CommandLine.h"
#include "muon/Support/Format.h"

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

namespace {

int fail(const std::string &message) {
  std::fprintf(stderr, "muon-bench: %s\n", message.c_str());
  return 2;
}

/// Parses a command's flags; the exit code when there is nothing to run
/// (--help: 0, a bad flag: 2).
std::optional<int> parseFlags(cli::Parser &parser, int argc, char **argv) {
  std::string message;
  switch (parser.parse(argc, argv, message)) {
  case cli::Parser::Outcome::Help:
    std::fputs(message.c_str(), stdout);
    return 0;
  case cli::Parser::Outcome::Error:
    return fail(message);
  case cli::Parser::Outcome::Run:
    break;
  }
  return std::nullopt;
}

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

double seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                       since)
      .count();
}

int runNs(int argc, char **argv) {
  std::string backend = "cpu", nsDtype = "f32",
              shapesText = "1024x1024,2048x2048,1024x4096,4096x1024";
  int64_t batch = 1, nsSteps = 5, repeats = 5, threads = 1;
  bool json = false;
  cli::Parser p("muon-bench ns", "Newton-Schulz against its dense floor");
  p.option("backend", backend, "cpu|cuda", "Device to measure (default cpu)");
  p.option("ns-dtype", nsDtype, "f32|bf16",
           "Element type Newton-Schulz runs in (default f32)");
  p.option("shapes", shapesText, "RxC,...",
           "Matrix shapes (default 1024x1024,2048x2048,1024x4096,4096x1024)");
  p.option("batch", batch, "n", "Same-shape matrices per call (default 1)");
  p.option("ns-steps", nsSteps, "n", "Iterations (default 5, Jordan's)");
  p.option("repeats", repeats, "n", "Timed runs per shape (default 5)");
  p.option("blas-threads", threads, "n", "CPU BLAS threads (default 1)");
  p.flag("json", json, "One JSON object per shape instead of a table");
  if (std::optional<int> done = parseFlags(p, argc, argv))
    return *done;
  std::vector<Shape> shapes;
  if (!parseShapes(shapesText, shapes))
    return fail("bad --shapes '" + shapesText +
                "': expected ROWSxCOLS,... with sizes in [1, 65536]");
  if (nsDtype != "f32" && nsDtype != "bf16")
    return fail("unknown --ns-dtype '" + nsDtype + "'; expected f32 or bf16");
  if (batch < 1 || batch > 4096 || nsSteps < 1 || nsSteps > 99 ||
      repeats < 1 || repeats > 1000 || threads < 1 || threads > 1024)
    return fail("--batch in [1, 4096], --ns-steps in [1, 99], --repeats in "
                "[1, 1000], --blas-threads in [1, 1024]");
  std::string error;
  std::unique_ptr<BenchDevice> bench =
      openBenchDevice(backend, static_cast<int>(threads), error);
  if (!bench)
    return fail(error);
  runtime::Device &device = bench->device();
  const DType dtype = nsDtype == "bf16" ? DType::BF16 : DType::F32;
  const std::vector<std::array<double, 3>> jordan(
      static_cast<size_t>(nsSteps), {3.4445, -4.775, 2.0315});

  if (!json)
    std::printf("Newton-Schulz on %s, %s, %lld step(s), batch %lld\n"
                "%-11s %10s %10s %10s %10s %8s\n",
                bench->describe().c_str(), nsDtype.c_str(),
                static_cast<long long>(nsSteps), static_cast<long long>(batch),
                "shape", "NS ms", "TFLOP/s", "GEMM TF/s", "floor ms",
                "NS/floor");
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
    std::vector<float> host(elements);
    std::vector<double> times;
    for (int64_t r = 0; r <= repeats; ++r) {
      // Fresh random input every run (never zeros: they run faster).
      for (float &v : host)
        v = u(rng);
      device.copyToDevice(x.data(), host.data(), elements * 4);
      device.synchronize();
      auto start = std::chrono::steady_clock::now();
      device.newtonSchulz(x.floats(), batch, s.rows, s.cols, jordan, 1e-7,
                          dtype);
      device.synchronize();
      if (r > 0) // the first is the warm-up
        times.push_back(seconds(start));
    }
    const double m = static_cast<double>(std::min(s.rows, s.cols));
    const double n = static_cast<double>(std::max(s.rows, s.cols));
    const double flops = batch * nsSteps * (4 * m * m * n + 2 * m * m * m);
    // The dense floor: the same flops at the rate of an m x m by m x n
    // product (the shape of Newton-Schulz's last product).
    const double gemm = bench->gemmSeconds(
        static_cast<int64_t>(m), static_cast<int64_t>(n),
        static_cast<int64_t>(m), dtype, static_cast<int>(repeats));
    const double gemmRate = gemm > 0 ? 2 * m * m * n / gemm : 0;
    const double floor = gemmRate > 0 ? flops / gemmRate : 0;
    const double ns = median(times);
    std::string shape = format("%lldx%lld", static_cast<long long>(s.rows),
                               static_cast<long long>(s.cols));
    if (json)
      std::printf("{\"shape\": \"%s\", \"backend\": \"%s\", \"ns_dtype\": "
                  "\"%s\", \"batch\": %lld, \"ns_steps\": %lld, "
                  "\"ns_seconds\": %.6e, \"ns_seconds_min\": %.6e, "
                  "\"dense_flops\": %.6e, \"gemm_flops_per_second\": %.6e, "
                  "\"floor_seconds\": %.6e, \"ratio\": %.4f}\n",
                  shape.c_str(), backend.c_str(), nsDtype.c_str(),
                  static_cast<long long>(batch),
                  static_cast<long long>(nsSteps), ns,
                  *std::min_element(times.begin(), times.end()), flops,
                  gemmRate, floor, floor > 0 ? ns / floor : 0);
    else
      std::printf("%-11s %10.3f %10.3f %10.3f %10.3f %8.3f\n", shape.c_str(),
                  ns * 1e3, flops / ns / 1e12, gemmRate / 1e12, floor * 1e3,
                  floor > 0 ? ns / floor : 0);
    std::fflush(stdout);
  }
  return 0;
}

int runStep(int argc, char **argv) {
  std::string planPath, backend = "cpu", nsDtype;
  int64_t steps = 10, threads = 1;
  bool json = false;
  cli::Parser p("muon-bench step",
                "Optimizer steps of a one-rank plan against the "
                "Newton-Schulz floor");
  p.positional(planPath, "<plan.json>", /*required=*/true);
  p.option("backend", backend, "cpu|cuda", "Device to measure (default cpu)");
  p.option("ns-dtype", nsDtype, "auto|f32|bf16",
           "Override the plan's Newton-Schulz element type");
  p.option("steps", steps, "n", "Steps; the first is a warm-up (default 10)");
  p.option("blas-threads", threads, "n", "CPU BLAS threads (default 1)");
  p.flag("json", json, "A JSON object instead of text");
  if (std::optional<int> done = parseFlags(p, argc, argv))
    return *done;
  if (steps < 2 || steps > 100000 || threads < 1 || threads > 1024)
    return fail("--steps in [2, 100000], --blas-threads in [1, 1024]");
  if (!nsDtype.empty() && nsDtype != "auto" && nsDtype != "f32" &&
      nsDtype != "bf16")
    return fail("unknown --ns-dtype '" + nsDtype +
                "'; expected auto, f32 or bf16");
  std::ifstream in(planPath, std::ios::binary);
  if (!in)
    return fail("cannot open plan file '" + planPath + "'");
  std::stringstream text;
  text << in.rdbuf();
  Plan plan;
  std::string error;
  if (isPlanBinary(text.str()) ? !parsePlanBinary(text.str(), plan, error)
                               : !parsePlan(text.str(), plan, error))
    return fail(planPath + ": " + error);
  if (plan.worldSize != 1)
    return fail(format("%s is a plan for %lld ranks; muon-bench step runs "
                       "one-rank plans (use muon-run for more)",
                       planPath.c_str(),
                       static_cast<long long>(plan.worldSize)));
  if (!nsDtype.empty())
    plan.muon.nsDtype = nsDtype;
  std::unique_ptr<BenchDevice> bench =
      openBenchDevice(backend, static_cast<int>(threads), error);
  if (!bench)
    return fail(error);
  runtime::Device &device = bench->device();
  runtime::SingleRankCommunicator self;
  auto optimizer = runtime::Optimizer::create(plan, self, device, {}, error);
  if (!optimizer)
    return fail(error);
  runtime::SyntheticModel model(*optimizer, device, 1,
                                runtime::summandCounts(plan));
  std::vector<double> times;
  for (int64_t s = 0; s < steps; ++s) {
    model.makeGradients(s, 1, {});
    device.synchronize();
    auto start = std::chrono::steady_clock::now();
    runtime::StepResult result;
    if (!optimizer->step(result, error))
      return fail("step " + std::to_string(s) + ": " + error);
    device.synchronize();
    if (s > 0)
      times.push_back(seconds(start));
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
  DType nsType = optimizer->nsDtype();
  double gemm = bench->gemmSeconds(bigM, bigN, bigM, nsType, 3);
  double rate = gemm > 0 ? 2.0 * bigM * bigM * bigN / gemm : 0;
  double floor = rate > 0 ? flops / rate : 0;
  double step = median(times);
  if (json)
    std::printf("{\"plan\": \"%s\", \"backend\": \"%s\", \"ns_dtype\": \"%s\", "
                "\"matrices\": %zu, \"step_seconds\": %.6e, "
                "\"step_seconds_min\": %.6e, \"ns_flops\": %.6e, "
                "\"gemm_flops_per_second\": %.6e, \"floor_seconds\": %.6e}\n",
                planPath.c_str(), backend.c_str(),
                runtime::dtypeName(nsType), plan.matrices.size(), step,
                *std::min_element(times.begin(), times.end()), flops, rate,
                floor);
  else
    std::printf("%s on %s, ns_dtype %s: %zu Muon matrices, %.3f TFLOP of "
                "Newton-Schulz per step\n"
                "  step median %.2f ms (min %.2f) over %zu steps after "
                "warm-up\n"
                "  floor %.2f ms (GEMM %.2f TFLOP/s at %lldx%lld); step/floor "
                "%.3f\n",
                planPath.c_str(), bench->describe().c_str(),
                runtime::dtypeName(nsType), plan.matrices.size(), flops / 1e12,
                step * 1e3, *std::min_element(times.begin(), times.end()) * 1e3,
                times.size(), floor * 1e3, rate / 1e12,
                static_cast<long long>(bigM), static_cast<long long>(bigN),
                floor > 0 ? step / floor : 0);
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
    std::string error;
    auto start = std::chrono::steady_clock::now();
    bool ok = loadPlanSlice(planPath, rank, slice, error, &stats, readLimit);
    times.push_back(seconds(start));
    if (!ok)
      return fail(error);
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
  const char *usage =
      "usage: muon-bench ns [options]     Newton-Schulz against its floor\n"
      "       muon-bench step PLAN [options]  optimizer steps of a plan\n"
      "       muon-bench plan-load PLAN.bin --rank R  one rank's part of a "
      "binary plan\n"
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
  std::fprintf(stderr, "muon-bench: unknown command '%s'\n%s",
               command.c_str(), usage);
  return 2;
}
