//===- MpiBackend.h - MPI's process group, by name --------------*- C++ -*-===//
//
// MPI lives in its own library (MuonRuntimeMpi) so that a program that does
// not run over MPI does not link it; a program that does registers MPI's
// process group with the backends' registry once, then opens it by name
// with options as any backend (muon/Runtime/Backends.h):
//
//   cpu::registerMpiBackend();
//   std::unique_ptr<Communicator> ranks;
//   Status s = createProcessGroup("mpi", {{"progress", "thread"}}, ranks);
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CPU_MPIBACKEND_H
#define MUON_RUNTIME_CPU_MPIBACKEND_H

namespace muon::runtime::cpu {

/// Registers the process group "mpi" (createProcessGroup's options "comm"
/// and "progress"). Idempotent; thread-safe.
void registerMpiBackend();

} // namespace muon::runtime::cpu

#endif // MUON_RUNTIME_CPU_MPIBACKEND_H
