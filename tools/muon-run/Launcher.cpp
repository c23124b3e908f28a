//===- Launcher.cpp - Start the ranks of a run with mpirun ----------------===//
#include "Launcher.h"
#include "Console.h"

#include "muon/Plan/PlanFile.h"
#include "muon/Support/ModelLimits.h"
#include "muon/Support/OutputFile.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

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

static std::string tempRoot() {
  const char *tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

/// Removes the private directories of earlier runs whose launcher is gone
/// (killed with SIGKILL, which nothing can clean up after): they are named
/// muon-run-<pid>-XXXXXX.
static void sweepStaleDirectories(const std::string &root) {
  DIR *dir = opendir(root.c_str());
  if (!dir)
    return;
  std::vector<std::string> stale;
  while (dirent *entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name.rfind("muon-run-", 0) != 0)
      continue;
    long pid = std::strtol(name.c_str() + 9, nullptr, 10);
    std::string path = root + "/" + name;
    struct stat st;
    if (pid <= 0 || lstat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
        st.st_uid != getuid())
      continue;
    if (kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      stale.push_back(path);
  }
  closedir(dir);
  for (const std::string &path : stale)
    removeTree(path);
}

static bool readFile(const std::string &path, std::string &text) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return false;
  std::ostringstream os;
  os << in.rdbuf();
  text = os.str();
  return static_cast<bool>(in) || in.eof();
}

/// Bytes all ranks of a run on this machine hold at most, roughly: every
/// piece (values, gradient, and momentum, update and result for Muon or two
/// moments and a summed gradient for AdamW), every gathered matrix at once,
/// the largest exchange's buffers on every rank, and with --verify rank 0's
/// single-device reference and the gathered pieces it compares.
static double runBytes(const Plan &plan, bool verify) {
  double total = 0, model = 0, pieces = 0;
  for (const PlanParam &p : plan.params) {
    double elements = 1;
    for (int64_t d : p.layout.shape)
      elements *= static_cast<double>(d);
    double held = elements * copiesOf(plan.mesh, p.layout);
    total += held * 5 * 4;
    model += elements * 5 * 4;
    pieces += held * 4;
  }
  for (const PlanMatrix &m : plan.matrices)
    total += static_cast<double>(m.rows) * m.cols * 4;
  double largest = 0;
  for (const Exchange &ex : plan.exchanges) {
    double elements = 0;
    for (const Transfer &t : ex.transfers)
      elements += static_cast<double>(t.elements());
    for (const Reduction &r : ex.reductions)
      elements += static_cast<double>(r.elements);
    largest = std::max(largest, 2 * elements * plan.wireBytes);
  }
  total += largest * (plan.prefetchCount + 1);
  if (verify)
    total += model + 2 * pieces;
  return total;
}

int launchRanks(const Plan &plan, const RunFlags &flags) {
  // Refuse a run this machine cannot hold, instead of ranks dying in an
  // allocation halfway.
  double need = runBytes(plan, flags.verify);
  double have = static_cast<double>(sysconf(_SC_PHYS_PAGES)) *
                static_cast<double>(sysconf(_SC_PAGESIZE));
  if (have > 0 && need > 0.8 * have) {
    char text[256];
    std::snprintf(text, sizeof(text),
                  "the run would hold about %.1f GiB across its %lld ranks, "
                  "more than this machine can give it (%.1f GiB of memory)",
                  need / (1 << 30), static_cast<long long>(plan.worldSize),
                  have / (1 << 30));
    printError(text);
    return 2;
  }
  // A private directory per run holds the plan the ranks read, the report
  // rank 0 stages, and OpenMPI's session directory (concurrent mpiruns
  // sharing one session base race when one of them cleans it up).
  std::string root = tempRoot();
  sweepStaleDirectories(root);
  // From here on, signals are taken synchronously (sigtimedwait below): one
  // that asks the run to end is passed to mpirun, and the directory is
  // removed after it.
  sigset_t ending, previous;
  sigemptyset(&ending);
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    sigaddset(&ending, sig);
  sigprocmask(SIG_BLOCK, &ending, &previous);
  auto unblock = [&] { sigprocmask(SIG_SETMASK, &previous, nullptr); };
  std::string templ = root + "/muon-run-" + std::to_string(getpid()) + "-XXXXXX";
  std::vector<char> name(templ.begin(), templ.end());
  name.push_back(0);
  if (!mkdtemp(name.data())) {
    unblock();
    printError("cannot create a temporary directory in '" + root +
               "': " + std::strerror(errno));
    return 2;
  }
  std::string dir = name.data();
  std::string planPath = dir + "/plan.json";
  std::string stagedReport = dir + "/report.json";
  std::string error;
  if (!writeOutput(planPath, renderPlan(plan), error)) {
    removeTree(dir);
    unblock();
    printError(error);
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
      dir, selfPath(), planPath,
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
  // Rank 0 writes the report into the private directory; it reaches the
  // user's path only if every rank finished (mpirun exits 0 or 1).
  if (!flags.reportFile.empty())
    args.insert(args.end(), {"--report", stagedReport});
  for (const std::string &f : flags.faultSpecs)
    args.push_back("--inject=" + f);
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);

  // Each rank runs BLAS with the requested threads from its first call.
  setenv("OPENBLAS_NUM_THREADS", std::to_string(flags.blasThreads).c_str(), 1);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    // mpirun ends with this process, even when it is killed outright.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
      _exit(3);
    sigprocmask(SIG_SETMASK, &previous, nullptr);
    execvp(argv[0], argv.data());
    _exit(127);
  }
  if (pid < 0) {
    int code = errno;
    unblock();
    removeTree(dir);
    printError(std::string("cannot start '") + flags.mpirun +
               "': " + std::strerror(code));
    return 2;
  }
  int status = 0, received = 0;
  while (true) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR))
      break;
    timespec tick{0, 50 * 1000 * 1000};
    int sig = sigtimedwait(&ending, nullptr, &tick);
    if (sig > 0) {
      received = sig;
      kill(pid, sig);
    }
  }

  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::string report;
  bool haveReport = !flags.reportFile.empty() && (code == 0 || code == 1) &&
                    !received && readFile(stagedReport, report);
  removeTree(dir);
  unblock();
  if (received) {
    printError(std::string("stopped by ") + strsignal(received) +
               "; no report written");
    signal(received, SIG_DFL);
    raise(received);
    return 128 + received;
  }
  if (code == 0 || code == 1) {
    if (!flags.reportFile.empty()) {
      if (!haveReport) {
        printError("the run ended without its report");
        return 3;
      }
      if (!writeOutput(flags.reportFile, report, error)) {
        printError(error);
        return 2;
      }
    }
    return code;
  }
  if (code == 2 || code == 3)
    return code;
  if (code == 127) {
    printError("cannot start '" + flags.mpirun +
               "' (install OpenMPI with `make deps`, or pass --mpirun)");
    return 2;
  }
  printError("the run failed: mpirun exited with status " +
             std::to_string(code) + " (a rank died; see its message above)");
  return 3;
}

} // namespace muon::tool
