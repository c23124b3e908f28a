//===- MpiCommunicator.h - The CPU transport: MPI ---------------*- C++ -*-===//
//
// Non-blocking MPI collectives (MPI_Ialltoallv and friends) on a
// communicator, waited for by polling MPI_Test against a deadline. OpenMPI
// moves a non-blocking collective's data only inside MPI calls, so while
// exchanges are in flight a progress thread calls MPI_Test every few tens of
// microseconds (MpiProgress::Thread); without it they advance only where the
// executor polls, between Newton-Schulz calls. The only runtime header that
// needs mpi.h is its implementation.
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

/// Who advances in-flight exchanges.
enum class MpiProgress {
  /// A progress thread where MPI's thread level allows it (the communicator
  /// initialized MPI itself, or the caller's MPI provides
  /// MPI_THREAD_MULTIPLE), else Calls.
  Auto,
  /// A thread that polls the exchanges in flight; needs MPI_THREAD_SERIALIZED
  /// or better (the communicator serializes its own MPI calls; a caller that
  /// calls MPI from other threads during a step needs MPI_THREAD_MULTIPLE).
  Thread,
  /// Only the runtime's own calls (start, wait, progress) advance them.
  Calls,
};

class MpiCommunicator final : public Communicator {
public:
  /// Initializes MPI if nobody has (asking for MPI_THREAD_SERIALIZED, for the
  /// progress thread; finalized in the destructor then) and uses
  /// MPI_COMM_WORLD.
  MpiCommunicator(int *argc, char ***argv);
  /// Runs over any communicator of an MPI the caller initialized (a
  /// sub-communicator of the trainer's, not only the world). The optimizer's
  /// traffic goes over a duplicate, so it never matches the trainer's own
  /// messages. Collective over `comm`.
  explicit MpiCommunicator(MPI_Comm comm);
  ~MpiCommunicator() override;

  int64_t rank() const override;
  int64_t size() const override;
  StatusOr<PendingExchange> start(const AllToAllV &exchange) override;
  Status wait(PendingExchange &pending, double timeoutSeconds) override;
  void progress() override;
  StatusOr<std::vector<uint64_t>> allGather(uint64_t value,
                                            double timeoutSeconds) override;
  StatusOr<int64_t> allReduceMin(int64_t value, double timeoutSeconds) override;
  StatusOr<std::vector<std::vector<char>>>
  gatherToRoot(const std::vector<char> &bytes, double timeoutSeconds) override;
  StatusOr<std::vector<uint64_t>>
  allGatherWords(const std::vector<uint64_t> &mine,
                 double timeoutSeconds) override;
  StatusOr<std::vector<std::vector<char>>>
  allGatherBytes(const std::vector<char> &bytes,
                 double timeoutSeconds) override;
  [[noreturn]] void abort(int exitCode) override;

  /// Chooses who advances in-flight exchanges and how often the progress
  /// thread polls (default Auto, 50 us). FailedPrecondition when Thread is
  /// asked for and MPI's thread level does not allow it. Call it with no
  /// exchange in flight.
  Status setProgress(MpiProgress mode, int64_t intervalMicroseconds = 50);
  /// Whether a progress thread is running.
  bool progressThread() const override;

  struct State; // the MPI objects (MpiCommunicator.cpp)

private:
  std::unique_ptr<State> state;
};

} // namespace muon::runtime

#endif // MUON_RUNTIME_MPICOMMUNICATOR_H
