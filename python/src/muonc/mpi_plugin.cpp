//===- mpi_plugin.cpp - libmuonc_mpi.so: MPI for muonc's comm="mpi" -------===//
//
// What _core did with MPI when it linked it, behind mpi_plugin.h's table.
//
//===----------------------------------------------------------------------===//
#include "mpi_plugin.h"

#include "muon/Runtime/Cpu/MpiCommunicator.h"

namespace rt = muon::runtime;

namespace {

/// Whether initialize started MPI (and finalize may end it).
bool initializedHere = false;

muon::Status initialize() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (finalized)
    return muon::Status(muon::StatusCode::FailedPrecondition,
                        "MPI is already finalized");
  if (initialized)
    return muon::okStatus();
  // MULTIPLE lets the communicator's progress thread run while the caller
  // (torch, another library) may call MPI too.
  int provided = MPI_THREAD_SINGLE;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) !=
      MPI_SUCCESS)
    return muon::Status(muon::StatusCode::Unavailable,
                        "MPI_Init_thread failed");
  initializedHere = true;
  return muon::okStatus();
}

void world(int &rank, int &size) {
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
}

void finalize() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (initializedHere && !finalized)
    MPI_Finalize();
}

std::unique_ptr<rt::Communicator> worldCommunicator() {
  return std::make_unique<rt::MpiCommunicator>(MPI_COMM_WORLD);
}

const muonc::MpiPlugin plugin = {initialize, world, finalize,
                                 worldCommunicator};

} // namespace

extern "C" __attribute__((visibility("default"))) const muonc::MpiPlugin *
muonc_mpi_plugin_v1() {
  return &plugin;
}
