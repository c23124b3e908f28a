//===- MpiLauncher.cpp - Start the ranks of a program with mpirun ---------===//
#include "muon/Runtime/Cpu/MpiLauncher.h"

#include "muon/Support/OutputFile.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace muon::runtime::cpu {

static std::string tempRoot() {
  const char *tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

/// Removes `<root>/<prefix>-<pid>-*` directories whose launcher is gone.
static void sweepStale(const std::string &root, const std::string &prefix) {
  DIR *dir = opendir(root.c_str());
  if (!dir)
    return;
  std::vector<std::string> stale;
  std::string lead = prefix + "-";
  while (dirent *entry = readdir(dir)) {
    std::string name = entry->d_name;
    if (name.rfind(lead, 0) != 0)
      continue;
    long pid = std::strtol(name.c_str() + lead.size(), nullptr, 10);
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

PrivateDir::PrivateDir(const std::string &prefix) {
  std::string root = tempRoot();
  sweepStale(root, prefix);
  std::string templ =
      root + "/" + prefix + "-" + std::to_string(getpid()) + "-XXXXXX";
  std::vector<char> name(templ.begin(), templ.end());
  name.push_back(0);
  if (mkdtemp(name.data()))
    dir = name.data();
  else
    created = unavailable("cannot create a temporary directory in '" + root +
                          "': " + std::strerror(errno));
}

PrivateDir::~PrivateDir() {
  if (!dir.empty())
    removeTree(dir);
}

static sigset_t endingSignals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    sigaddset(&set, sig);
  return set;
}

EndingSignalsBlocked::EndingSignalsBlocked() {
  sigset_t set = endingSignals();
  sigprocmask(SIG_BLOCK, &set, &previous);
}

EndingSignalsBlocked::~EndingSignalsBlocked() {
  sigprocmask(SIG_SETMASK, &previous, nullptr);
}

/// Whether `name` is an executable file in a directory of PATH.
static bool onPath(const char *name) {
  const char *path = std::getenv("PATH");
  if (!path)
    return false;
  std::string dirs = path;
  size_t begin = 0;
  while (begin <= dirs.size()) {
    size_t end = dirs.find(':', begin);
    if (end == std::string::npos)
      end = dirs.size();
    std::string dir = dirs.substr(begin, end - begin);
    std::string file = (dir.empty() ? std::string(".") : dir) + "/" + name;
    struct stat st;
    if (stat(file.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
        access(file.c_str(), X_OK) == 0)
      return true;
    begin = end + 1;
  }
  return false;
}

/// OpenMPI's default launcher (rsh) refuses to start, even for ranks on
/// this machine alone, where neither ssh nor rsh is installed, as in many
/// GPU containers. Every rank runs here, so the `isolated` launcher, which
/// starts local processes only, does the same job. A launcher the user
/// chose (OMPI_MCA_plm...) is left alone.
static bool needsIsolatedLauncher() {
  for (const char *variable : {"OMPI_MCA_plm", "OMPI_MCA_plm_rsh_agent",
                               "OMPI_MCA_orte_rsh_agent"})
    if (std::getenv(variable))
      return false;
  return !onPath("ssh") && !onPath("rsh");
}

MpirunResult runMpirun(const std::string &mpirun, int ranks,
                       const std::vector<std::string> &command,
                       const std::string &sessionDir,
                       const std::vector<std::string> &environment) {
  std::vector<std::string> args = {
      mpirun, "-q", "-np", std::to_string(ranks),
      // Root in containers, more ranks than cores on small machines, no
      // pinning (ranks share cores), and shared memory without ptrace
      // (which containers often forbid).
      "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "--mca",
      "btl_vader_single_copy_mechanism", "none", "--mca", "orte_tmpdir_base",
      sessionDir};
  if (needsIsolatedLauncher())
    args.insert(args.end(), {"--mca", "plm", "isolated"});
  args.insert(args.end(), command.begin(), command.end());
  std::vector<char *> argv;
  for (std::string &a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);

  MpirunResult result;
  sigset_t ending = endingSignals(), unblocked;
  sigprocmask(SIG_BLOCK, nullptr, &unblocked);
  sigset_t childMask = unblocked;
  for (int sig : {SIGINT, SIGTERM, SIGHUP})
    sigdelset(&childMask, sig);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    // mpirun ends with this process, even when it is killed outright.
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent)
      _exit(3);
    sigprocmask(SIG_SETMASK, &childMask, nullptr);
    for (const std::string &e : environment)
      putenv(const_cast<char *>(e.c_str()));
    execvp(argv[0], argv.data());
    _exit(127);
  }
  if (pid < 0) {
    result.error = std::string("cannot start '") + mpirun +
                   "': " + std::strerror(errno);
    return result;
  }
  int status = 0;
  while (true) {
    pid_t done = waitpid(pid, &status, WNOHANG);
    if (done == pid || (done < 0 && errno != EINTR))
      break;
    timespec tick{0, 50 * 1000 * 1000};
    int sig = sigtimedwait(&ending, nullptr, &tick);
    if (sig > 0) {
      result.signal = sig;
      kill(pid, sig);
    }
  }
  result.status =
      WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

std::string selfPath() {
  char buffer[4096];
  ssize_t n = readlink("/proc/self/exe", buffer, sizeof(buffer) - 1);
  if (n <= 0)
    return "";
  buffer[n] = 0;
  return buffer;
}

bool launchedByMpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_SIZE") ||
         std::getenv("PMIX_RANK");
}

} // namespace muon::runtime::cpu
