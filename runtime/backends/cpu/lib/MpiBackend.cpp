//===- MpiBackend.cpp - MPI's process group, by name ----------------------===//
#include "muon/Runtime/Cpu/MpiBackend.h"

#include "muon/Runtime/Backends.h"
#include "muon/Runtime/Cpu/MpiCommunicator.h"

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <memory>

namespace muon::runtime::cpu {
namespace {

/// The "progress" option as an MpiProgress.
Status progressOption(const BackendOptions &options, MpiProgress &mode) {
  auto it = options.find("progress");
  if (it == options.end() || it->second == "auto")
    mode = MpiProgress::Auto;
  else if (it->second == "thread")
    mode = MpiProgress::Thread;
  else if (it->second == "calls")
    mode = MpiProgress::Calls;
  else
    return invalidArgument("process group 'mpi': progress '" + it->second +
                           "': expected 'auto', 'thread' or 'calls'");
  return okStatus();
}

/// The communicator of the "comm" option (a Fortran handle), or the world.
StatusOr<std::unique_ptr<MpiCommunicator>>
openCommunicator(const BackendOptions &options) {
  auto it = options.find("comm");
  if (it == options.end())
    return std::make_unique<MpiCommunicator>(nullptr, nullptr);
  char *end = nullptr;
  errno = 0;
  const long long handle = std::strtoll(it->second.c_str(), &end, 10);
  if (it->second.empty() || *end || errno || handle < 0 ||
      handle > std::numeric_limits<MPI_Fint>::max())
    return invalidArgument("process group 'mpi': comm '" + it->second +
                           "': expected an MPI communicator's Fortran "
                           "handle (MPI_Comm_c2f)");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return failedPrecondition("MPI is not initialized; call MPI_Init first");
  return std::make_unique<MpiCommunicator>(
      MPI_Comm_f2c(static_cast<MPI_Fint>(handle)));
}

Status openMpi(const BackendOptions &options,
               std::unique_ptr<Communicator> &out) {
  MUON_RETURN_IF_ERROR(
      checkOptionKeys("mpi", options, {"comm", "progress"}, "process group"));
  MpiProgress mode = MpiProgress::Auto;
  MUON_RETURN_IF_ERROR(progressOption(options, mode));
  MUON_ASSIGN_OR_RETURN(std::unique_ptr<MpiCommunicator> mpi,
                        openCommunicator(options));
  MUON_RETURN_IF_ERROR(mpi->setProgress(mode));
  out = std::move(mpi);
  return okStatus();
}

} // namespace

void registerMpiBackend() { registerProcessGroup("mpi", openMpi); }

} // namespace muon::runtime::cpu
