//===- BuiltBackends.h - Every backend a program links, registered -*- C++ -*-===//
//
// The one place that registers the backends (Backends.h) beside those the
// registry always has (the CPU device, the "single" process group, the
// "mpi" and "host" transports), as IREE's drivers/init.c does for its
// drivers: a program calls registerBuiltBackends() once, before it opens a
// device or a process group by name, and gets every backend it links.
// Which ones it links, the libraries say: MuonRuntimeMpi defines
// MUON_RUNTIME_LINKS_MPI for its users, MuonRuntimeCuda
// MUON_RUNTIME_LINKS_CUDA. A new backend is one more library with its own
// definition, and two lines here.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_BUILTBACKENDS_H
#define MUON_RUNTIME_BUILTBACKENDS_H

#include "muon/Runtime/Backends.h"
#if MUON_RUNTIME_LINKS_MPI
#include "muon/Runtime/Cpu/MpiBackend.h"
#endif
#if MUON_RUNTIME_LINKS_CUDA
#include "muon/Runtime/Cuda/CudaBackend.h"
#endif

namespace muon::runtime {

/// Registers every backend this translation unit's program links: MPI's
/// process group ("mpi"), the CUDA devices ("cuda", "cuda:N") and NCCL's
/// transport ("nccl"). Cheap after the first call; thread-safe. (Static:
/// each unit's copy sees its own program's libraries, so two units never
/// disagree about one definition.)
static inline void registerBuiltBackends() {
  static const bool registered = [] {
#if MUON_RUNTIME_LINKS_MPI
    cpu::registerMpiBackend();
#endif
#if MUON_RUNTIME_LINKS_CUDA
    cuda::registerBackend();
#endif
    return true;
  }();
  (void)registered;
}

} // namespace muon::runtime

#endif // MUON_RUNTIME_BUILTBACKENDS_H
