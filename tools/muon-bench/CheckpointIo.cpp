//===- CheckpointIo.cpp - One rank's checkpoint round trip ----------------===//
//
// `muon-bench checkpoint` times Optimizer::saveCheckpoint and
// loadCheckpoint of N MiB of optimizer state on one rank (CpuDevice): half
// Muon momentum (4096 x 4096 matrices), half AdamW moments (vectors of 8 Mi
// elements), filled with pseudo-random values through loadStateDict.
//
// Each repeat: a save (the state copied to the host, hashed in 4 KiB
// chunks, written, flushed with fsync, renamed, then the manifest); then
// the checkpoint's files dropped from the page cache (posix_fadvise
// DONTNEED on the flushed, so clean, pages; the share still resident is
// measured with mincore and printed), a cold load, and a warm load from the
// cache the cold one filled. The loaded state is checked against the saved
// one. bench/checkpoint-io.sh runs it beside dd on the same disk.
//
//===----------------------------------------------------------------------===//
#include "CheckpointIo.h"

#include "BenchCommand.h"

#include "muon/Runtime/Backends.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Runtime/Testing/Synthetic.h"
#include "muon/Support/CommandLine.h"
#include "muon/Support/Fnv.h"
#include "muon/Support/OutputFile.h"
#include "muon/Support/Statistics.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace muon::bench {
namespace {

using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The files of the checkpoint in `dir`.
std::vector<std::string> filesIn(const std::string &dir) {
  std::vector<std::string> files;
  if (DIR *d = opendir(dir.c_str())) {
    while (dirent *e = readdir(d))
      if (e->d_name[0] != '.')
        files.push_back(dir + "/" + e->d_name);
    closedir(d);
  }
  return files;
}

/// Asks the kernel to drop `dir`'s files from the page cache (they were
/// flushed, so their pages are clean and can go); returns the share of
/// their bytes still resident, measured with mincore.
double dropFromCache(const std::string &dir) {
  int64_t total = 0, resident = 0;
  const int64_t page = ::sysconf(_SC_PAGESIZE);
  for (const std::string &path : filesIn(dir)) {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    struct stat st;
    if (::fstat(fd, &st) == 0 && st.st_size > 0) {
      void *map = ::mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
      if (map != MAP_FAILED) {
        std::vector<unsigned char> in((st.st_size + page - 1) / page);
        if (::mincore(map, st.st_size, in.data()) == 0)
          for (unsigned char c : in)
            resident += (c & 1) ? page : 0;
        ::munmap(map, st.st_size);
      }
      total += st.st_size;
    }
    ::close(fd);
  }
  return total ? static_cast<double>(std::min(resident, total)) / total : 0;
}

/// One FNV-1a over every state of `dict`, in order.
uint64_t digest(const runtime::StateDict &dict) {
  uint64_t h = kFnvOffsetBasis;
  for (const runtime::StatePiece &p : dict.pieces)
    for (const auto &[name, data] : p.states)
      h = fnv1a(data.data(), data.size() * 4, h);
  return h;
}

} // namespace

int runCheckpointIo(int argc, char **argv) {
  std::string dir;
  int64_t mib = 1024, repeats = 3;
  bool json = false;
  cli::Parser p("muon-bench checkpoint",
                "Save and load a checkpoint of one rank's optimizer state: "
                "seconds and GB/s, the page cache dropped before each cold "
                "load");
  p.option("dir", dir, "path",
           "The checkpoint directory (replaced; removed at the end)");
  p.option("mib", mib, "n",
           "MiB of optimizer state, a multiple of 128 (default 1024)");
  p.option("repeats", repeats, "n", "Round trips (default 3)");
  p.flag("json", json, "A JSON object instead of text");
  if (std::optional<int> done = parseFlags(p, argc, argv))
    return *done;
  if (dir.empty() || mib < 128 || mib % 128 || repeats < 1)
    return fail("--dir is required, --mib a multiple of 128, --repeats >= 1");

  // The model: every 128 MiB of state is one 4096 x 4096 Muon matrix
  // (64 MiB of momentum) and one AdamW vector of 8 Mi elements (64 MiB of
  // moments).
  Plan plan;
  for (int64_t k = 0; k < mib / 128; ++k) {
    PlanParam muon, adamw;
    muon.name = "w" + std::to_string(k);
    muon.layout.shape = {4096, 4096};
    adamw.name = "v" + std::to_string(k);
    adamw.algorithm = kAdamW;
    adamw.group = 1; // the default "adamw" group
    adamw.layout.shape = {int64_t(8) << 20};
    for (PlanParam *q : {&muon, &adamw}) {
      q->layout.splitAxes.assign(q->layout.shape.size(), {});
      plan.params.push_back(*q);
    }
  }
  NewtonSchulzConfig &ns = plan.ns.configs[0];
  ns.coefficients.assign(ns.nsSteps, {3.4445, -4.775, 2.0315});
  plan = runtime::referencePlan(plan);
  // One rank on the CPU, opened by name as a trainer does.
  std::unique_ptr<runtime::Communicator> comm;
  std::unique_ptr<runtime::Device> device;
  std::unique_ptr<runtime::Optimizer> opt;
  if (Status s = runtime::createProcessGroup("single", {}, comm); !s.ok())
    return fail(s.message());
  if (Status s = runtime::createDevice("cpu", device); !s.ok())
    return fail(s.message());
  if (Status s = runtime::Optimizer::create(plan, *comm, *device, {}, opt);
      !s.ok())
    return fail(s.message());
  std::string error;
  // Pseudo-random state (not zeros, which a disk or file system may store
  // specially), through the state dict.
  uint64_t stateBytes = 0, digestSaved = 0;
  {
    runtime::StateDict dict;
    if (!(error = opt->stateDict(false, dict).message()).empty())
      return fail(error);
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (runtime::StatePiece &piece : dict.pieces)
      for (auto &[name, data] : piece.states) {
        // In [-1, 1), and [0, 1) for a second moment (a load refuses a
        // negative one).
        const bool nonNegative = name == "exp_avg_sq";
        for (float &v : data) {
          x ^= x << 13, x ^= x >> 7, x ^= x << 17;
          v = static_cast<float>(static_cast<int64_t>(x >> 40) - (1 << 23)) /
              (1 << 23);
          if (nonNegative)
            v = std::fabs(v);
        }
        stateBytes += data.size() * 4;
      }
    dict.steps = 7;
    if (!(error = opt->loadStateDict(dict, false).message()).empty())
      return fail(error);
    digestSaved = digest(dict);
  }
  // The hashing's own rate (every byte saved or loaded is hashed, in the
  // checkpoints' 4 KiB chunks).
  double hashSeconds;
  {
    std::vector<char> buffer(256 << 20, 1);
    std::vector<uint64_t> hashes(buffer.size() / 4096);
    auto start = Clock::now();
    fnv1aChunks(buffer.data(), buffer.size(), 4096, hashes.data());
    hashSeconds = secondsSince(start) * (stateBytes / double(buffer.size()));
    if (hashes[0] != fnv1a(buffer.data(), 4096))
      return fail("fnv1aChunks disagrees with fnv1a");
  }
  std::vector<double> saves, cold, warm, resident;
  runtime::CheckpointIoCounters io;
  removeTree(dir);
  for (int64_t r = 0; r < repeats; ++r) {
    auto start = Clock::now();
    if (!(error = opt->saveCheckpoint(dir, false).message()).empty())
      return fail(error);
    saves.push_back(secondsSince(start));
    resident.push_back(dropFromCache(dir));
    start = Clock::now();
    if (!(error = opt->loadCheckpoint(dir, false).message()).empty())
      return fail(error);
    cold.push_back(secondsSince(start));
    io = opt->checkpointIo();
    start = Clock::now();
    if (!(error = opt->loadCheckpoint(dir, false).message()).empty())
      return fail(error);
    warm.push_back(secondsSince(start));
  }
  runtime::StateDict loaded;
  if (!(error = opt->stateDict(false, loaded).message()).empty())
    return fail(error);
  if (digest(loaded) != digestSaved || loaded.steps != 7)
    return fail("the loaded state differs from the saved one");
  removeTree(dir);

  auto best = [](const std::vector<double> &v) {
    return *std::min_element(v.begin(), v.end());
  };
  double gb = stateBytes / 1e9;
  double maxResident = *std::max_element(resident.begin(), resident.end());
  if (json) {
    std::printf(
        "{\"state_bytes\": %llu, \"repeats\": %lld, \"save_s\": {\"best\": "
        "%.3f, \"median\": %.3f}, \"cold_load_s\": {\"best\": %.3f, "
        "\"median\": %.3f}, \"warm_load_s\": {\"best\": %.3f, \"median\": "
        "%.3f}, \"resident_before_cold_load\": %.4f, \"bytes_read\": %lld, "
        "\"manifest_bytes\": %lld, \"files_opened\": %lld, "
        "\"fnv1a_s\": %.3f}\n",
        static_cast<unsigned long long>(stateBytes),
        static_cast<long long>(repeats), best(saves), median(saves), best(cold),
        median(cold), best(warm), median(warm), maxResident,
        static_cast<long long>(io.rankFileBytes),
        static_cast<long long>(io.manifestBytes),
        static_cast<long long>(io.filesOpened), hashSeconds);
    return 0;
  }
  std::printf("checkpoint of %.3f GB of optimizer state on one rank, %lld "
              "round trips (best / median):\n",
              gb, static_cast<long long>(repeats));
  std::printf("  save       %.3f / %.3f s  (%.2f / %.2f GB/s)\n", best(saves),
              median(saves), gb / best(saves), gb / median(saves));
  std::printf("  cold load  %.3f / %.3f s  (%.2f / %.2f GB/s), at most "
              "%.1f%% of the files resident before it\n",
              best(cold), median(cold), gb / best(cold), gb / median(cold),
              100 * maxResident);
  std::printf("  warm load  %.3f / %.3f s  (%.2f / %.2f GB/s)\n", best(warm),
              median(warm), gb / best(warm), gb / median(warm));
  std::printf("  a load read %lld bytes of rank files (%lld opened) and "
              "%lld of manifest; FNV-1a of the state alone: %.3f s\n",
              static_cast<long long>(io.rankFileBytes),
              static_cast<long long>(io.filesOpened),
              static_cast<long long>(io.manifestBytes), hashSeconds);
  return 0;
}

} // namespace muon::bench
