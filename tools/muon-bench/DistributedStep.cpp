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
// the same run.
//
//===----------------------------------------------------------------------===//
#include "DistributedStep.h"

#include "muon/Support/Format.h"
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

bool readJson(const std::string &path, json &value, std::string &error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    error = "cannot open '" + path + "'";
    return false;
  }
  std::stringstream text;
  text << in.rdbuf();
  value = json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    error = "'" + path + "' is not JSON";
    return false;
  }
  return true;
}

/// A Muon parameter of a spec: its name and the shape of each of its
/// matrices (the last two dims).
struct MuonParam {
  std::string name;
  int64_t rows = 0, cols = 0;
};

/// The spec's Muon parameters in spec order (2-D and more, not AdamW), or
/// an empty list with `error` set when `spec` is not a model spec.
/// Malformed entries are skipped: muon-run names what is wrong with them.
std::vector<MuonParam> muonParamsOf(const json &spec, std::string &error) {
  if (!spec.is_object() ||
      spec.value("format", std::string()) != "muon-spec/1") {
    error = "not a muon-spec/1 model (the draft design is compiled from a "
            "spec, not from a plan)";
    return {};
  }
  if (!spec.contains("params") || !spec["params"].is_array()) {
    error = "the spec has no 'params' array";
    return {};
  }
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
    error = "the spec has no Muon parameters";
  return params;
}

/// The draft design's spec: the same model with round-robin owners and no
/// overlap. Returns the bytes of the largest Muon matrix: the gather budget
/// that puts one parameter in each round.
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
  // f32 on the wire: 4 bytes an element.
  return largest * 4;
}

struct RunFigures {
  double median = 0, min = 0, busiestFlops = 0;
};

bool runFigures(const std::string &path, RunFigures &f, std::string &error) {
  json r;
  if (!readJson(path, r, error))
    return false;
  try {
    f.median = r.at("step_seconds").at("median").get<double>();
    f.min = r.at("step_seconds").at("min").get<double>();
    for (const json &rank : r.at("per_rank"))
      f.busiestFlops =
          std::max(f.busiestFlops, rank.at("ns_flops").get<double>());
  } catch (const json::exception &e) {
    error = "report '" + path + "' lacks step figures: " + e.what();
    return false;
  }
  return true;
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
  std::string error;
  json spec;
  if (!readJson(o.specPath, spec, error))
    return fail(error);
  std::vector<MuonParam> params = muonParamsOf(spec, error);
  if (params.empty())
    return fail(o.specPath + ": " + error);
  json draft;
  const int64_t budget = makeDraftSpec(spec, params, o.ranks, draft);

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
    return argv;
  };

  std::vector<double> oursMedian, oursMin, draftMedian, draftMin, gemmRates;
  double oursBusiest = 0, draftBusiest = 0;
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
    std::vector<std::string> drafted = common(draftPath, draftReport);
    drafted.insert(drafted.end(),
                   {"--gather-budget-bytes", std::to_string(budget),
                    "--max-rounds",
                    std::to_string(params.size())});
    int rc = runCommand(ours);
    if (rc != 0)
      return fail(format("muon-run on %s exited with %d", o.specPath.c_str(), rc));
    rc = runCommand(drafted);
    if (rc != 0)
      return fail(format(
          "muon-run on the draft design exited with %d (its owners are "
          "round-robin over the Muon parameters, so every rank must hold "
          "every one, as under FSDP or TP)",
          rc));
    RunFigures a, b;
    if (!runFigures(oursReport, a, error) || !runFigures(draftReport, b, error))
      return fail(error);
    oursMedian.push_back(a.median);
    oursMin.push_back(a.min);
    draftMedian.push_back(b.median);
    draftMin.push_back(b.min);
    oursBusiest = a.busiestFlops;
    draftBusiest = b.busiestFlops;
    double rate = 0;
    for (auto [m, n] : shapes) {
      double s = bench.gemmSeconds(m, n, m, runtime::DType::F32, 3);
      if (s > 0)
        rate = std::max(rate, 2.0 * m * m * n / s);
    }
    gemmRates.push_back(rate);
  }

  const double rate = *std::max_element(gemmRates.begin(), gemmRates.end());
  const double floor = rate > 0 ? oursBusiest / rate : 0;
  const double oBest = best(oursMin), oMed = median(oursMedian);
  const double dBest = best(draftMin), dMed = median(draftMedian);
  if (o.json) {
    std::printf(
        "{\"spec\": \"%s\", \"ranks\": %lld, \"steps\": %lld, \"repeats\": "
        "%lld, \"step_seconds_best\": %.6e, \"step_seconds_median\": %.6e, "
        "\"draft_seconds_best\": %.6e, \"draft_seconds_median\": %.6e, "
        "\"busiest_ns_flops\": %.6e, \"draft_busiest_ns_flops\": %.6e, "
        "\"gemm_flops_per_second\": %.6e, \"floor_seconds\": %.6e, "
        "\"step_over_floor\": %.4f, \"step_over_draft\": %.4f}\n",
        o.specPath.c_str(), (long long)o.ranks, (long long)o.steps,
        (long long)o.repeats, oBest, oMed, dBest, dMed, oursBusiest,
        draftBusiest, rate, floor, floor > 0 ? oBest / floor : 0,
        dBest > 0 ? oBest / dBest : 0);
    return 0;
  }
  std::printf(
      "%s on %lld ranks: %lld interleaved runs of %lld steps each (the first "
      "step of a run is a warm-up)\n"
      "  compiled plan  best %8.1f ms  median %8.1f ms  (busiest rank %.1f "
      "GFLOP of NS)\n"
      "  draft design   best %8.1f ms  median %8.1f ms  (busiest rank %.1f "
      "GFLOP; round-robin, one gather and one scatter per parameter, no "
      "overlap)\n"
      "  floor          %8.1f ms  (busiest rank's dense NS flops at %.2f "
      "GFLOP/s, the best single-thread GEMM rate of the model's shapes)\n"
      "  step / floor   best %.3f  median %.3f\n"
      "  step / draft   best %.3f  median %.3f\n",
      o.specPath.c_str(), (long long)o.ranks, (long long)o.repeats,
      (long long)o.steps, oBest * 1e3, oMed * 1e3, oursBusiest / 1e9,
      dBest * 1e3, dMed * 1e3, draftBusiest / 1e9, floor * 1e3, rate / 1e9,
      floor > 0 ? oBest / floor : 0, floor > 0 ? oMed / floor : 0,
      dBest > 0 ? oBest / dBest : 0, dMed > 0 ? oMed / dMed : 0);
  return 0;
}

} // namespace muon::bench
