//===- DistributedStep.cpp - Steps on N ranks against floor and draft -----===//
//
// `muon-bench step SPEC --ranks N` times the compiled plan on N MPI ranks
// (through muon-run, the same runtime a user runs) and, interleaved with it
// in the same sitting, the seeds' draft design run by that same runtime:
// round-robin owners over the Muon parameters in spec order, one gather and
// one scatter per parameter, nothing overlapped (`async: false`, prefetch 0,
// a gather budget of one matrix so that every round holds one parameter).
// Both are set against the floor: the busiest rank's Newton-Schulz flops (the
// contract's dense count) at the best single-thread GEMM rate measured in
// the same run, in the element type the run's Newton-Schulz used (bf16
// products where the CPU has them, else sgemm), and against the faster of
// the two floors (what the best choice of precision here allows); both
// floors are printed, and why the run's precision is what it is (the
// report's ns_dtype_reason: muon-run decides ns_dtype auto with this
// process's product rates).
// The draft runs with the wire of the compiled plan's run (a spec's wire
// follows Newton-Schulz's element type), so that both move the same kind
// of bytes.
//
//===----------------------------------------------------------------------===//
#include "DistributedStep.h"

#include "muon/Runtime/Cpu/NsPrecision.h"
#include "muon/Support/Format.h"
#include "muon/Support/InputFile.h"
#include "muon/Support/JsonWriter.h"
#include "muon/Support/Limits.h"
#include "muon/Support/Statistics.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <sys/wait.h>
#include <unistd.h>

namespace muon::bench {
namespace {

using nlohmann::json;

/// The folder this executable is in (muon-run is installed beside it).
std::string selfDirectory() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0)
    return ".";
  std::string self(path, static_cast<size_t>(n));
  size_t slash = self.rfind('/');
  return slash == std::string::npos ? "." : self.substr(0, slash);
}

/// Runs `argv` and returns its exit status (-1 if it could not start or
/// died of a signal).
int runCommand(const std::vector<std::string> &argv) {
  pid_t pid = ::fork();
  if (pid < 0)
    return -1;
  if (pid == 0) {
    std::vector<char *> args;
    for (const std::string &a : argv)
      args.push_back(const_cast<char *>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::_Exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0)
    if (errno != EINTR)
      return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

StatusOr<json> readJson(const std::string &path) {
  MUON_ASSIGN_OR_RETURN(std::string text,
                        readInputFile(path, limits::kMaxTextFileBytes));
  json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded())
    return invalidArgument("'" + path + "' is not JSON");
  return value;
}

/// A Muon parameter of a spec: its name and the shape of each of its
/// matrices (the last two dims).
struct MuonParam {
  std::string name;
  int64_t rows = 0, cols = 0;
};

/// The spec's Muon parameters in spec order (2-D and more, not AdamW);
/// InvalidArgument when `spec` is not a model spec or has none. Malformed
/// entries are skipped: muon-run names what is wrong with them.
StatusOr<std::vector<MuonParam>> muonParamsOf(const json &spec) {
  if (!spec.is_object() ||
      spec.value("format", std::string()) != "muon-spec/1")
    return invalidArgument("not a muon-spec/1 model (the draft design is "
                           "compiled from a spec, not from a plan)");
  if (!spec.contains("params") || !spec["params"].is_array())
    return invalidArgument("the spec has no 'params' array");
  std::vector<MuonParam> params;
  for (const json &p : spec["params"]) {
    if (!p.is_object() || !p.contains("name") || !p["name"].is_string() ||
        !p.contains("shape") || !p["shape"].is_array())
      continue;
    const json &shape = p["shape"];
    if (shape.size() < 2 || p.value("optimizer", std::string()) == "adamw")
      continue;
    const json &rows = shape[shape.size() - 2], &cols = shape[shape.size() - 1];
    if (!rows.is_number_integer() || !cols.is_number_integer())
      continue;
    params.push_back({p["name"].get<std::string>(), rows.get<int64_t>(),
                      cols.get<int64_t>()});
  }
  if (params.empty())
    return invalidArgument("the spec has no Muon parameters");
  return params;
}

/// The draft design's spec: the same model with round-robin owners and no
/// overlap. Returns the elements of the largest Muon matrix: times the wire's
/// element size, the gather budget that puts one parameter in each round.
int64_t makeDraftSpec(const json &spec, const std::vector<MuonParam> &params,
                      int64_t ranks, json &draft) {
  std::vector<std::vector<std::string>> owned(ranks);
  int64_t largest = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    largest = std::max(largest, params[i].rows * params[i].cols);
    owned[i % ranks].push_back(params[i].name);
  }
  json assignments = json::object();
  for (int64_t r = 0; r < ranks; ++r)
    assignments[std::to_string(r)] = owned[r];
  draft = spec;
  draft["distributed"] = {{"prefetch_count", 0},
                          {"async", false},
                          {"assignments", assignments}};
  return largest;
}

struct RunFigures {
  double median = 0, min = 0, busiestFlops = 0;
  std::string nsDtype, wireDtype;
  std::string nsDtypeReason; // "" from a report that has none
};

StatusOr<RunFigures> runFigures(const std::string &path) {
  MUON_ASSIGN_OR_RETURN(const json r, readJson(path));
  RunFigures f;
  try {
    f.median = r.at("step_seconds").at("median").get<double>();
    f.min = r.at("step_seconds").at("min").get<double>();
    f.nsDtype = r.at("ns_dtype").get<std::string>();
    f.wireDtype = r.at("wire_dtype").get<std::string>();
    f.nsDtypeReason = r.value("ns_dtype_reason", std::string());
    for (const json &rank : r.at("per_rank"))
      f.busiestFlops =
          std::max(f.busiestFlops, rank.at("ns_flops").get<double>());
  } catch (const json::exception &e) {
    return invalidArgument("report '" + path +
                           "' lacks step figures: " + e.what());
  }
  return f;
}

double best(const std::vector<double> &v) {
  return *std::min_element(v.begin(), v.end());
}

} // namespace

int runDistributedStep(const DistributedStepOptions &o, BenchDevice &bench) {
  auto fail = [](const std::string &message) {
    std::fprintf(stderr, "muon-bench: %s\n", message.c_str());
    return 2;
  };
  StatusOr<json> read = readJson(o.specPath);
  if (!read.ok())
    return fail(read.status().message());
  const json &spec = *read;
  StatusOr<std::vector<MuonParam>> muonParams = muonParamsOf(spec);
  if (!muonParams.ok())
    return fail(o.specPath + ": " + muonParams.status().message());
  const std::vector<MuonParam> &params = *muonParams;
  json draft;
  const int64_t largest = makeDraftSpec(spec, params, o.ranks, draft);

  const char *tmpdir = std::getenv("TMPDIR");
  std::string pattern = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") +
                        "/muon-bench-XXXXXX";
  if (!::mkdtemp(pattern.data()))
    return fail("cannot create a temporary folder like '" + pattern + "'");
  const std::string tmp = pattern;
  // Removed on every way out.
  struct RemoveOnExit {
    std::string path;
    ~RemoveOnExit() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  } removeOnExit{tmp};
  const std::string draftPath = tmp + "/draft.json";
  {
    std::ofstream out(draftPath);
    out << draft.dump(1) << "\n";
    if (!out)
      return fail("cannot write " + draftPath);
  }
  const std::string muonRun = selfDirectory() + "/muon-run";
  // muon-run (and its ranks) choose ns_dtype auto from this process's
  // product rates: the choice printed below is the one that ran, in every
  // run of the sitting.
  if (o.nsDtype.empty() || o.nsDtype == "auto")
    runtime::cpu::shareProductRates();
  auto common = [&](const std::string &input, const std::string &report) {
    std::vector<std::string> argv = {
        muonRun,       input,
        "--ranks",     std::to_string(o.ranks),
        "--steps",     std::to_string(o.steps),
        "--report",    report,
        "--quiet",     "--blas-threads",
        std::to_string(o.blasThreads)};
    if (!o.mpiProgress.empty())
      argv.insert(argv.end(), {"--mpi-progress", o.mpiProgress});
    if (!o.nsDtype.empty())
      argv.insert(argv.end(), {"--ns-dtype", o.nsDtype});
    return argv;
  };

  std::vector<double> oursMedian, oursMin, draftMedian, draftMin, f32Rates,
      bf16Rates;
  double oursBusiest = 0, draftBusiest = 0;
  std::string nsDtype, wireDtype, nsDtypeReason;
  // The GEMM rate of each Muon shape: an m x m by m x n product (m <= n),
  // Newton-Schulz's last product.
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (const MuonParam &p : params) {
    std::pair<int64_t, int64_t> mn(std::min(p.rows, p.cols),
                                   std::max(p.rows, p.cols));
    if (std::find(shapes.begin(), shapes.end(), mn) == shapes.end())
      shapes.push_back(mn);
  }
  for (int64_t r = 0; r < o.repeats; ++r) {
    // Interleaved, so both see the same machine load.
    const std::string oursReport = tmp + format("/ours-%lld.json", (long long)r);
    const std::string draftReport =
        tmp + format("/draft-%lld.json", (long long)r);
    std::vector<std::string> ours = common(o.specPath, oursReport);
    if (!o.wireDtype.empty())
      ours.insert(ours.end(), {"--wire-dtype", o.wireDtype});
    int rc = runCommand(ours);
    if (rc != 0)
      return fail(format("muon-run on %s exited with %d", o.specPath.c_str(), rc));
    StatusOr<RunFigures> oursFigures = runFigures(oursReport);
    if (!oursFigures.ok())
      return fail(oursFigures.status().message());
    const RunFigures &a = *oursFigures;
    // The draft on the same wire, one parameter per round.
    const int64_t wireBytes = a.wireDtype == "bf16" ? 2 : 4;
    std::vector<std::string> drafted = common(draftPath, draftReport);
    drafted.insert(drafted.end(),
                   {"--wire-dtype", a.wireDtype, "--gather-budget-bytes",
                    std::to_string(largest * wireBytes), "--max-rounds",
                    std::to_string(params.size())});
    rc = runCommand(drafted);
    if (rc != 0)
      return fail(format(
          "muon-run on the draft design exited with %d (its owners are "
          "round-robin over the Muon parameters, so every rank must hold "
          "every one, as under FSDP or TP)",
          rc));
    StatusOr<RunFigures> draftFigures = runFigures(draftReport);
    if (!draftFigures.ok())
      return fail(draftFigures.status().message());
    const RunFigures &b = *draftFigures;
    nsDtype = a.nsDtype;
    wireDtype = a.wireDtype;
    nsDtypeReason = a.nsDtypeReason;
    oursMedian.push_back(a.median);
    oursMin.push_back(a.min);
    draftMedian.push_back(b.median);
    draftMin.push_back(b.min);
    oursBusiest = a.busiestFlops;
    draftBusiest = b.busiestFlops;
    for (runtime::DType dtype : {runtime::DType::F32, runtime::DType::BF16}) {
      double rate = 0;
      for (auto [m, n] : shapes) {
        double s = bench.gemmSeconds(m, n, m, dtype, 3);
        if (s > 0)
          rate = std::max(rate, 2.0 * m * m * n / s);
      }
      (dtype == runtime::DType::F32 ? f32Rates : bf16Rates).push_back(rate);
    }
  }

  const double f32Rate = *std::max_element(f32Rates.begin(), f32Rates.end());
  const double bf16Rate =
      *std::max_element(bf16Rates.begin(), bf16Rates.end());
  const double f32Floor = f32Rate > 0 ? oursBusiest / f32Rate : 0;
  const double bf16Floor = bf16Rate > 0 ? oursBusiest / bf16Rate : 0;
  // The run's own: the element type its Newton-Schulz ran in (f16 runs
  // f32 BLAS products on the CPU: f32's); and the faster of the two, what
  // the best choice on this CPU allows.
  const bool bf16 = nsDtype == "bf16";
  const double rate = bf16 ? bf16Rate : f32Rate;
  const double floor = bf16 ? bf16Floor : f32Floor;
  const double floors[2] = {f32Floor, bf16Floor};
  const int fastest = fasterFloor(floors);
  const char *fastestDtype = fastest ? "bf16" : "f32";
  const double fastestFloor = floors[fastest];
  const double oBest = best(oursMin), oMed = median(oursMedian);
  const double dBest = best(draftMin), dMed = median(draftMedian);
  auto over = [](double a, double b) { return b > 0 ? a / b : 0; };
  if (o.json) {
    std::printf(
        "{\"spec\": \"%s\", \"ranks\": %lld, \"steps\": %lld, \"repeats\": "
        "%lld, \"step_seconds_best\": %.6e, \"step_seconds_median\": %.6e, "
        "\"draft_seconds_best\": %.6e, \"draft_seconds_median\": %.6e, "
        "\"busiest_ns_flops\": %.6e, \"draft_busiest_ns_flops\": %.6e, "
        "\"ns_dtype\": \"%s\", \"wire_dtype\": \"%s\", "
        "\"gemm_flops_per_second\": %.6e, \"floor_seconds\": %.6e, "
        "\"gemm_f32_flops_per_second\": %.6e, \"floor_f32_seconds\": %.6e, "
        "\"gemm_bf16_flops_per_second\": %.6e, \"floor_bf16_seconds\": "
        "%.6e, \"step_over_floor\": %.4f, \"step_over_draft\": %.4f, "
        "\"step_over_floor_median\": %.4f, \"fastest_floor_dtype\": \"%s\", "
        "\"step_over_fastest_floor\": %.4f, "
        "\"step_over_fastest_floor_median\": %.4f, \"ns_dtype_reason\": "
        "%s}\n",
        o.specPath.c_str(), (long long)o.ranks, (long long)o.steps,
        (long long)o.repeats, oBest, oMed, dBest, dMed, oursBusiest,
        draftBusiest, nsDtype.c_str(), wireDtype.c_str(), rate, floor,
        f32Rate, f32Floor, bf16Rate, bf16Floor, over(oBest, floor),
        over(oBest, dBest), over(oMed, floor), fastestDtype,
        over(oBest, fastestFloor), over(oMed, fastestFloor),
        ::muon::json::quote(nsDtypeReason).c_str());
    return 0;
  }
  std::printf(
      "%s on %lld ranks: %lld interleaved runs of %lld steps each (the first "
      "step of a run is a warm-up); Newton-Schulz %s, wire %s\n"
      "  compiled plan  best %8.1f ms  median %8.1f ms  (busiest rank %.1f "
      "GFLOP of NS)\n"
      "  draft design   best %8.1f ms  median %8.1f ms  (busiest rank %.1f "
      "GFLOP; round-robin, one gather and one scatter per parameter, no "
      "overlap)\n"
      "  floor f32      %8.1f ms  (busiest rank's dense NS flops at %.2f "
      "GFLOP/s, the best single-thread sgemm rate of the model's shapes)\n"
      "  floor bf16     %8.1f ms  (the same at %.2f GFLOP/s, the best "
      "single-thread bf16 GEMM rate%s)\n"
      "  step / floor   best %.3f  median %.3f  (the %s floor: what it "
      "ran)\n"
      "  step / fastest best %.3f  median %.3f  (the %s floor: the faster "
      "product here)\n"
      "  step / draft   best %.3f  median %.3f\n"
      "  ns_dtype %s\n",
      o.specPath.c_str(), (long long)o.ranks, (long long)o.repeats,
      (long long)o.steps, nsDtype.c_str(), wireDtype.c_str(), oBest * 1e3,
      oMed * 1e3, oursBusiest / 1e9, dBest * 1e3, dMed * 1e3,
      draftBusiest / 1e9, f32Floor * 1e3, f32Rate / 1e9, bf16Floor * 1e3,
      bf16Rate / 1e9,
      bench.nsProducts(runtime::DType::BF16).rfind("bf16 products", 0) != 0
          ? "; this CPU has no bf16 products: sgemm"
          : "",
      over(oBest, floor), over(oMed, floor), nsDtype.c_str(),
      over(oBest, fastestFloor), over(oMed, fastestFloor), fastestDtype,
      over(oBest, dBest), over(oMed, dMed),
      nsDtypeReason.empty() ? (nsDtype + " (the report says no more)").c_str()
                            : nsDtypeReason.c_str());
  return 0;
}

} // namespace muon::bench
