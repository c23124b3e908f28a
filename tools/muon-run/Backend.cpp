//===- Backend.cpp - The device and transport of a run's ranks ------------===//
#include "Backend.h"

#include "muon/Runtime/Backends.h"
#include "muon/Runtime/BuiltBackends.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
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

Status checkBackend(const Plan &plan, const RunFlags &flags) {
  if (flags.backend != "cuda")
    return okStatus();
#ifdef MUON_HAVE_CUDA
  StatusOr<int> gpus = runtime::cuda::deviceCount();
  if (!gpus.ok())
    return unavailable("--backend cuda: no usable GPU here (" +
                       gpus.status().message() + ")");
  if (flags.transport == "nccl" && plan.worldSize > *gpus)
    return failedPrecondition(
        "--transport nccl needs a GPU per rank: " +
        std::to_string(plan.worldSize) + " ranks but " +
        std::to_string(*gpus) + " GPU(s) here (use --transport host)");
  return okStatus();
#else
  (void)plan;
  return unimplemented("--backend cuda: this muon-run is built without the "
                       "CUDA backend (no CUDA toolkit was found when it was "
                       "configured)");
#endif
}

NsChoice cpuAutoNsDtype() {
  std::unique_ptr<runtime::Device> cpu;
  if (!runtime::createDevice("cpu", cpu).ok())
    return {};
  return {cpu->defaultNsDtype(), cpu->defaultNsDtypeReason()};
}

runtime::NsForm rankNsForm(const RunFlags &flags) {
#ifdef MUON_HAVE_CUDA
  if (flags.backend == "cuda")
    return runtime::cuda::DeviceOptions::nsFormFromEnvironment();
#endif
  (void)flags;
  return runtime::cpu::CpuDeviceOptions::nsFormFromEnvironment();
}

#ifdef MUON_HAVE_CUDA
/// How many ranks mpirun started on this node, and this rank's place among
/// them (OpenMPI's environment; 1 and 0 outside it).
static int localEnv(const char *name, int fallback) {
  const char *v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}
#endif

Status openBackend(const RunFlags &flags, runtime::Communicator &mpi,
                   RankBackend &backend) {
  // Devices and transports come from the runtime's registry, as for any
  // program that embeds it, with every backend this build links.
  runtime::registerBuiltBackends();
  auto transport = [&](const std::string &kind, const char *description) {
    MUON_RETURN_IF_ERROR(runtime::createCommunicator(kind, mpi, *backend.device,
                                                     backend.transport));
    backend.description += description;
    return okStatus();
  };
  if (flags.backend == "cpu") {
    backend.description = "cpu";
    MUON_RETURN_IF_ERROR(runtime::createDevice(
        "cpu", {{"blas_threads", std::to_string(flags.blasThreads)}},
        backend.device));
    return flags.transport == "host" ? transport("host", ", host-staged MPI")
                                     : okStatus();
  }
#ifdef MUON_HAVE_CUDA
  MUON_ASSIGN_OR_RETURN(const int gpus, runtime::cuda::deviceCount());
  int localRank = localEnv("OMPI_COMM_WORLD_LOCAL_RANK", 0);
  int localSize = localEnv("OMPI_COMM_WORLD_LOCAL_SIZE", 1);
  const std::string device = "cuda:" + std::to_string(localRank % gpus);
  MUON_RETURN_IF_ERROR(runtime::createDevice(device, backend.device));
  backend.description = device;
  bool nccl = flags.transport == "nccl" ||
              (flags.transport == "auto" && localSize <= gpus);
  backend.viaMpi = !nccl;
  return nccl ? transport("nccl", ", nccl")
              : transport("host", ", host-staged MPI");
#else
  return unimplemented("this muon-run is built without the CUDA backend");
#endif
}

} // namespace muon::tool
