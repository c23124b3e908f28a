//===- Backend.h - The device and transport of a run's ranks ----*- C++ -*-===//
#ifndef MUON_TOOLS_MUON_RUN_BACKEND_H
#define MUON_TOOLS_MUON_RUN_BACKEND_H

#include "RunOptions.h"

#include "muon/Plan/Plan.h"
#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/Device.h"
#include "muon/Runtime/NsForm.h"

#include <memory>
#include <string>

namespace muon::tool {

/// Whether this muon-run contains the CUDA backend.
bool haveCuda();

/// Launcher side, before any rank starts: whether `flags.backend` can run
/// here (the CUDA backend built in and a GPU visible); fails saying why not.
Status checkBackend(const Plan &plan, const RunFlags &flags);

/// The form of Newton-Schulz the ranks' devices run (what --ns-form set
/// in the environment for `flags.backend`): the single-device reference
/// runs the same one.
runtime::NsForm rankNsForm(const RunFlags &flags);

/// What ns_dtype "auto" is on this machine's CPU, and why (the CPU device
/// opened by name asked; f32 where it cannot be opened).
struct NsChoice {
  runtime::DType dtype = runtime::DType::F32;
  std::string reason;
};
NsChoice cpuAutoNsDtype();

/// A rank's device and the communicator its exchanges go through.
struct RankBackend {
  std::unique_ptr<runtime::Device> device;
  std::unique_ptr<runtime::Communicator> transport; // null: the MPI one
  std::string description; // e.g. "cuda:0, nccl"
  bool viaMpi = true;       // false: NCCL moves the exchanges
};

/// Rank side: opens the backend `flags` names over `mpi`. Collective (NCCL
/// start-up): every rank calls it.
Status openBackend(const RunFlags &flags, runtime::Communicator &mpi,
                   RankBackend &backend);

} // namespace muon::tool

#endif // MUON_TOOLS_MUON_RUN_BACKEND_H
