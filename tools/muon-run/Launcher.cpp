//===- Launcher.cpp - Start the ranks of a run with mpirun ----------------===//
#include "Launcher.h"

#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Report.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <spawn.h>
#include <string>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

extern char **environ;

namespace muon::tool {

static std::string selfPath() {
  char buffer[4096];
  ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0)
    return "muon-run";
  buffer[n] = 0;
  return buffer;
}

static std::string formatDouble(double v) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.17g", v);
  return text;
}

int launchRanks(const Plan &plan, const RunFlags &flags) {
  // A private directory per run holds the plan the ranks read and OpenMPI's
  // session directory: concurrent mpiruns sharing one session base race
  // when one of them cleans it up.
  llvm::SmallString<128> dir;
  if (std::error_code ec = llvm::sys::fs::createUniqueDirectory("muon-run", dir)) {
    llvm::errs() << "muon-run: cannot create a temporary directory: "
                 << ec.message() << "\n";
    return 2;
  }
  auto cleanUp = [&] { llvm::sys::fs::remove_directories(dir); };
  std::string planPath = (dir + "/plan.json").str();
  std::string error;
  if (!writeFileAtomically(planPath, renderPlan(plan), error)) {
    cleanUp();
    llvm::errs() << "muon-run: " << error << "\n";
    return 2;
  }

  int64_t ranks = flags.ranks ? flags.ranks : plan.worldSize;
  std::vector<std::string> args = {
      flags.mpirun, "-q", "-np", std::to_string(ranks),
      // Root in containers, more ranks than cores on small machines, no
      // pinning (ranks share cores), and shared memory without ptrace (which
      // containers often forbid).
      "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca",
      "btl_vader_single_copy_mechanism", "none", "--mca", "orte_tmpdir_base",
      dir.str().str(), selfPath(), planPath,
      "--steps", std::to_string(flags.steps), "--micro-batches",
      std::to_string(flags.microBatches), "--seed", std::to_string(flags.seed),
      "--timeout", formatDouble(flags.timeoutSeconds), "--blas-threads",
      std::to_string(flags.blasThreads), "--tolerance",
      formatDouble(flags.tolerance),
      std::string("--nonfinite=") + (flags.nonFiniteFatal ? "fail" : "skip")};
  if (flags.verify)
    args.push_back("--verify");
  if (flags.quiet)
    args.push_back("--quiet");
  if (!flags.reportFile.empty())
    args.insert(args.end(), {"--report", flags.reportFile});
  for (const std::string &f : flags.faultSpecs)
    args.push_back("--inject=" + f);
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);

  // Each rank runs BLAS with the requested threads from its first call.
  setenv("OPENBLAS_NUM_THREADS", std::to_string(flags.blasThreads).c_str(), 1);
  pid_t pid;
  int rc = posix_spawnp(&pid, flags.mpirun.c_str(), nullptr, nullptr,
                        argv.data(), environ);
  if (rc != 0) {
    cleanUp();
    llvm::errs() << "muon-run: cannot start '" << flags.mpirun
                 << "': " << std::strerror(rc)
                 << " (install OpenMPI with `make deps`, or pass --mpirun)\n";
    return 2;
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  cleanUp();
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (code == 0 || code == 1 || code == 2 || code == 3)
    return code;
  if (code == 127) {
    llvm::errs() << "muon-run: cannot start '" << flags.mpirun
                 << "' (install OpenMPI with `make deps`, or pass --mpirun)\n";
    return 2;
  }
  llvm::errs() << "muon-run: the run failed: mpirun exited with status "
               << code << " (a rank died; see its message above)\n";
  return 3;
}

} // namespace muon::tool
