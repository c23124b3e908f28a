//===- Backend.cpp - The device and transport of a run's ranks ------------===//
#include "Backend.h"

#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/HostStagedCommunicator.h"
#ifdef MUON_HAVE_CUDA
#include "muon/Runtime/Cuda/CudaBackend.h"
#endif

#include <cstdlib>

namespace muon::tool {

bool haveCuda() {
#ifdef MUON_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

bool checkBackend(const Plan &plan, const RunFlags &flags,
                  std::string &error) {
  if (flags.backend != "cuda")
    return true;
#ifdef MUON_HAVE_CUDA
  std::string why;
  int gpus = runtime::cuda::deviceCount(why);
  if (gpus < 1) {
    error = "--backend cuda: no usable GPU here (" + why + ")";
    return false;
  }
  if (flags.transport == "nccl" && plan.worldSize > gpus)
    error = "--transport nccl needs a GPU per rank: " +
            std::to_string(plan.worldSize) + " ranks but " +
            std::to_string(gpus) + " GPU(s) here (use --transport host)";
  return error.empty();
#else
  (void)plan;
  error = "--backend cuda: this muon-run is built without the CUDA backend "
          "(no CUDA toolkit was found when it was configured)";
  return false;
#endif
}

#ifdef MUON_HAVE_CUDA
/// How many ranks mpirun started on this node, and this rank's place among
/// them (OpenMPI's environment; 1 and 0 outside it).
static int localEnv(const char *name, int fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}
#endif

bool openBackend(const RunFlags &flags, runtime::Communicator &mpi,
                 RankBackend &backend, std::string &error) {
  if (flags.backend == "cpu") {
    backend.device = std::make_unique<runtime::cpu::CpuDevice>();
    backend.description = "cpu";
    if (flags.transport == "host") {
      backend.transport = std::make_unique<runtime::HostStagedCommunicator>(
          mpi, *backend.device);
      backend.description += ", host-staged MPI";
    }
    return true;
  }
#ifdef MUON_HAVE_CUDA
  int gpus = runtime::cuda::deviceCount(error);
  if (gpus < 1)
    return false;
  int localRank = localEnv("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  int localSize = localEnv("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  int ordinal = localRank % gpus;
  backend.device = runtime::cuda::createDevice(ordinal, error);
  if (!backend.device)
    return false;
  bool nccl = flags.transport == "nccl" ||
              (flags.transport == "auto" && localSize <= gpus);
  backend.description = "cuda:" + std::to_string(ordinal);
  if (nccl) {
    backend.transport =
        runtime::cuda::createNcclCommunicator(mpi, *backend.device, error);
    if (!backend.transport)
      return false;
    backend.description += ", nccl";
    backend.viaMpi = false;
  } else {
    backend.transport = std::make_unique<runtime::HostStagedCommunicator>(
        mpi, *backend.device);
    backend.description += ", host-staged MPI";
  }
  return true;
#else
  error = "this muon-run is built without the CUDA backend";
  return false;
#endif
}

} // namespace muon::tool
