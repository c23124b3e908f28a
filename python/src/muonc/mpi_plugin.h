//===- mpi_plugin.h - muonc's MPI, loaded when a run asks for it -*- C++ -*-===//
//
// _core does not link MPI: `import muonc`, one-process runs and runs over
// torch.distributed work on machines without it. comm="mpi" (and
// mpi_world) load it then: first Open MPI's library (libmpi.so.40, or the
// file MUON_MPI_LIBRARY names) with RTLD_GLOBAL, then this plugin,
// libmuonc_mpi.so beside _core, which holds the runtime's MpiCommunicator
// and leaves its MPI symbols to that library (it names no MPI library
// itself, so a wheel's auditwheel neither vendors one nor asks for one).
// Both sides are built together from one source tree: the interface is
// C++, checked by the entry point's version.
//
//===----------------------------------------------------------------------===//
#ifndef MUONC_MPI_PLUGIN_H
#define MUONC_MPI_PLUGIN_H

#include "muon/Runtime/Communicator.h"
#include "muon/Support/Status.h"

#include <memory>

namespace muonc {

struct MpiPlugin {
  /// Initializes MPI (MPI_THREAD_MULTIPLE) unless the program did (mpi4py);
  /// FailedPrecondition once MPI is finalized, Unavailable when it cannot
  /// start.
  muon::Status (*initialize)();
  /// The rank and size of MPI_COMM_WORLD (after initialize).
  void (*world)(int &rank, int &size);
  /// Finalizes MPI if initialize started it and nobody finalized it.
  void (*finalize)();
  /// The runtime's communicator over a duplicate of MPI_COMM_WORLD (after
  /// initialize).
  std::unique_ptr<muon::runtime::Communicator> (*worldCommunicator)();
};

} // namespace muonc

/// The plugin's one exported symbol.
#define MUONC_MPI_PLUGIN_ENTRY "muonc_mpi_plugin_v1"
extern "C" const muonc::MpiPlugin *muonc_mpi_plugin_v1();

#endif // MUONC_MPI_PLUGIN_H
