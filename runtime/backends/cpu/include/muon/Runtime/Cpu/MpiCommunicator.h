//===- MpiCommunicator.h - The CPU transport: MPI ---------------*- C++ -*-===//
//
// Non-blocking MPI collectives (MPI_Ialltoallv and friends) on a
// communicator, waited for by polling MPI_Test against a deadline. The only
// runtime header that needs mpi.h is its implementation.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_MPICOMMUNICATOR_H
#define MUON_RUNTIME_MPICOMMUNICATOR_H

#include "muon/Runtime/Communicator.h"

// The C API of MPI only (OpenMPI and MPICH would pull in their deprecated
// C++ bindings, which need a library of their own).
#ifndef OMPI_SKIP_MPICXX
#define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <memory>

namespace muon::runtime {

class MpiCommunicator final : public Communicator {
public:
  /// Initializes MPI if nobody has (and finalizes it in the destructor then)
  /// and uses MPI_COMM_WORLD.
  MpiCommunicator(int *argc, char ***argv);
  /// Runs over any communicator of an MPI the caller initialized (a
  /// sub-communicator of the trainer's, not only the world). The optimizer's
  /// traffic goes over a duplicate, so it never matches the trainer's own
  /// messages. Collective over `comm`.
  explicit MpiCommunicator(MPI_Comm comm);
  ~MpiCommunicator() override;

  int64_t rank() const override;
  int64_t size() const override;
  bool start(const AllToAllV &exchange, PendingExchange &pending,
             std::string &error) override;
  bool wait(PendingExchange &pending, double timeoutSeconds,
            std::string &error) override;
  void progress() override;
  bool allGather(uint64_t value, std::vector<uint64_t> &values,
                 double timeoutSeconds, std::string &error) override;
  bool allReduceMin(int64_t value, int64_t &result, double timeoutSeconds,
                    std::string &error) override;
  bool gatherToRoot(const std::vector<char> &bytes,
                    std::vector<std::vector<char>> &atRoot,
                    double timeoutSeconds, std::string &error) override;
  [[noreturn]] void abort(int exitCode) override;

  struct State; // the MPI objects (MpiCommunicator.cpp)

private:
  std::unique_ptr<State> state;
};

} // namespace muon::runtime

#endif // MUON_RUNTIME_MPICOMMUNICATOR_H
