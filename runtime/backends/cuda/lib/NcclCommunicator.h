//===- NcclCommunicator.h - The NCCL transport's set-up ---------*- C++ -*-===//
//
// The collective set-up behind createNcclCommunicator (CudaBackend.h), on a
// GPU named by its ordinal and compute stream rather than by a CudaDevice:
// the NCCL transport needs nothing else of the device, and the unit test
// drives it on a host-memory stand-in for the CUDA runtime and NCCL.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_NCCLCOMMUNICATOR_H
#define MUON_RUNTIME_CUDA_NCCLCOMMUNICATOR_H

#include "NcclLibrary.h"

#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/Device.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

namespace muon::runtime::cuda {

/// Where the exchanges run: GPU `ordinal`, after the work queued on
/// `computeStream` and before what is queued there after wait();
/// `device` allocates the warm-up buffers on that GPU.
struct NcclPlacement {
  Device &device;
  int ordinal = 0;
  cudaStream_t computeStream = nullptr;
};

/// Collective over `bootstrap`. `local` is this rank's failure so far (ok
/// when none; `gpu` and `library` are then non-null): every rank prepares,
/// all agree, then they join one NCCL communicator and warm it up. A
/// failure on every rank when any rank fails.
StatusOr<std::unique_ptr<Communicator>>
setUpNcclCommunicator(Communicator &bootstrap, const NcclPlacement *gpu,
                      const nccl::Library *library, Status local);

} // namespace muon::runtime::cuda

#endif // MUON_RUNTIME_CUDA_NCCLCOMMUNICATOR_H
