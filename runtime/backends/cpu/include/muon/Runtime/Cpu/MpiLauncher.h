//===- MpiLauncher.h - Start the ranks of a program with mpirun -*- C++ -*-===//
//
// What a program does to run itself on N ranks (muon-run, the example
// trainer): a private directory for the run (OpenMPI's session directory,
// files the ranks share), mpirun with the flags containers and small
// machines need, signals passed on to mpirun, and nothing left behind:
// mpirun dies with the launcher (a parent-death signal), the directory is
// removed on every exit path, and directories of launchers killed outright
// are removed by the next launch.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CPU_MPILAUNCHER_H
#define MUON_RUNTIME_CPU_MPILAUNCHER_H

#include "muon/Support/Status.h"

#include <csignal>
#include <string>
#include <vector>

namespace muon::runtime::cpu {

/// A private directory `$TMPDIR/<prefix>-<pid>-XXXXXX`, removed with the
/// object. Creating one first removes those of launchers that are gone.
class PrivateDir {
public:
  explicit PrivateDir(const std::string &prefix);
  ~PrivateDir();
  PrivateDir(const PrivateDir &) = delete;
  PrivateDir &operator=(const PrivateDir &) = delete;
  /// Empty when it could not be created (`status` says why).
  const std::string &path() const { return dir; }
  const Status &status() const { return created; }

private:
  std::string dir;
  Status created;
};

/// Blocks SIGINT, SIGTERM and SIGHUP while alive, so that they are taken
/// synchronously by runMpirun (and are not lost, nor kill the launcher
/// before its directory is removed).
class EndingSignalsBlocked {
public:
  EndingSignalsBlocked();
  ~EndingSignalsBlocked();
  EndingSignalsBlocked(const EndingSignalsBlocked &) = delete;
  EndingSignalsBlocked &operator=(const EndingSignalsBlocked &) = delete;

private:
  sigset_t previous;
};

struct MpirunResult {
  /// mpirun's exit status, 128 + N if a signal N ended it, 127 if it could
  /// not be started, -1 if fork failed (`error`).
  int status = -1;
  /// A signal the launcher received and passed on (0: none).
  int signal = 0;
  std::string error;
};

/// Runs `command` (the program and its arguments, for every rank) on
/// `ranks` ranks: `mpirun -q -np N --allow-run-as-root --oversubscribe
/// --bind-to none` with shared memory that needs no ptrace and OpenMPI's
/// session directory in `sessionDir`. `environment` entries (NAME=VALUE)
/// are added for the ranks. Waits for mpirun; SIGINT, SIGTERM and SIGHUP
/// (blocked by the caller, see EndingSignalsBlocked) are passed to it.
MpirunResult runMpirun(const std::string &mpirun, int ranks,
                       const std::vector<std::string> &command,
                       const std::string &sessionDir,
                       const std::vector<std::string> &environment = {});

/// The path of the running program (for relaunching it under mpirun).
std::string selfPath();

/// Whether this process was started by mpirun (one rank of many).
bool launchedByMpirun();

} // namespace muon::runtime::cpu

#endif // MUON_RUNTIME_CPU_MPILAUNCHER_H
