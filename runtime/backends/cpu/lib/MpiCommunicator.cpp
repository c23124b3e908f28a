//===- MpiCommunicator.cpp - The CPU transport: MPI -----------------------===//
#include "muon/Runtime/Cpu/MpiCommunicator.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>

namespace muon::runtime {

struct MpiCommunicator::State {
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0, size = 1;
  bool ownsInit = false;
  bool ownsComm = false; // a duplicate of the caller's communicator
  MPI_Datatype twoBytes = MPI_DATATYPE_NULL;
  int64_t nextId = 0;
  struct Call {
    MPI_Request request = MPI_REQUEST_NULL;
    std::vector<int> sendCounts, sendOffsets, recvCounts, recvOffsets;
  };
  std::map<int64_t, Call> calls;
};

static std::string mpiError(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  return std::string(text, length);
}

/// Returns errors as codes (reported with the rank, not as MPI's abort) and
/// reads the rank and size of `state.comm`.
static void setUp(MpiCommunicator::State &state) {
  MPI_Comm_set_errhandler(state.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(state.comm, &state.rank);
  MPI_Comm_size(state.comm, &state.size);
  MPI_Type_contiguous(2, MPI_BYTE, &state.twoBytes);
  MPI_Type_commit(&state.twoBytes);
}

MpiCommunicator::MpiCommunicator(int *argc, char ***argv)
    : state(std::make_unique<State>()) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    MPI_Init(argc, argv);
    state->ownsInit = true;
  }
  setUp(*state);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm)
    : state(std::make_unique<State>()) {
  MPI_Comm_dup(comm, &state->comm);
  state->ownsComm = true;
  setUp(*state);
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized)
    return;
  MPI_Type_free(&state->twoBytes);
  if (state->ownsComm)
    MPI_Comm_free(&state->comm);
  if (state->ownsInit)
    MPI_Finalize();
}

int64_t MpiCommunicator::rank() const { return state->rank; }
int64_t MpiCommunicator::size() const { return state->size; }


/// MPI counts are ints: larger exchanges must be split by the planner.
static bool toInts(const std::vector<int64_t> &in, std::vector<int> &out,
                   std::string &error) {
  out.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] < 0 || in[i] > INT_MAX) {
      error = "an exchange of " + std::to_string(in[i]) +
              " elements exceeds MPI's int counts; lower "
              "gather_budget_bytes so that rounds are smaller";
      return false;
    }
    out[i] = static_cast<int>(in[i]);
  }
  return true;
}

bool MpiCommunicator::start(const AllToAllV &x, PendingExchange &pending,
                            std::string &error) {
  State::Call call;
  if (!toInts(x.sendCounts, call.sendCounts, error) ||
      !toInts(x.sendOffsets, call.sendOffsets, error) ||
      !toInts(x.recvCounts, call.recvCounts, error) ||
      !toInts(x.recvOffsets, call.recvOffsets, error))
    return false;
  MPI_Datatype type = x.elementBytes == 4   ? MPI_FLOAT
                      : x.elementBytes == 2 ? state->twoBytes
                                            : MPI_BYTE;
  int64_t id = state->nextId++;
  State::Call &stored = state->calls[id] = std::move(call);
  int rc = MPI_Ialltoallv(x.sendBuffer, stored.sendCounts.data(),
                          stored.sendOffsets.data(), type, x.recvBuffer,
                          stored.recvCounts.data(), stored.recvOffsets.data(),
                          type, state->comm, &stored.request);
  if (rc != MPI_SUCCESS) {
    state->calls.erase(id);
    error = "MPI_Ialltoallv failed: " + mpiError(rc);
    return false;
  }
  pending.id = id;
  return true;
}

/// Polls `request` until it completes or the deadline passes. Sleeping
/// between polls keeps oversubscribed ranks from starving the ones that
/// compute.
static bool waitRequest(MPI_Request &request, double timeoutSeconds,
                        std::string &error) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration<double>(timeoutSeconds);
  int spins = 0;
  while (true) {
    int done = 0;
    int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc != MPI_SUCCESS) {
      error = mpiError(rc);
      return false;
    }
    if (done)
      return true;
    if (std::chrono::steady_clock::now() > deadline) {
      char limit[32];
      std::snprintf(limit, sizeof(limit), "%g", timeoutSeconds);
      error = std::string("no answer within ") + limit +
              " s (a peer died or stalled; see --timeout)";
      return false;
    }
    if (++spins > 64)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

/// Waits for a request that an MPI_I* call (returning `rc`) started.
static bool finish(int rc, MPI_Request &request, double timeoutSeconds,
                   std::string &error) {
  if (rc != MPI_SUCCESS) {
    error = mpiError(rc);
    return false;
  }
  return waitRequest(request, timeoutSeconds, error);
}

bool MpiCommunicator::wait(PendingExchange &pending, double timeoutSeconds,
                           std::string &error) {
  auto it = state->calls.find(pending.id);
  if (it == state->calls.end()) {
    error = "wait on an exchange that was not started";
    return false;
  }
  bool ok = waitRequest(it->second.request, timeoutSeconds, error);
  if (ok)
    state->calls.erase(it);
  pending.id = -1;
  return ok;
}

void MpiCommunicator::progress() {
  for (auto &[id, call] : state->calls) {
    int done = 0;
    if (call.request != MPI_REQUEST_NULL)
      MPI_Test(&call.request, &done, MPI_STATUS_IGNORE);
  }
}

bool MpiCommunicator::allGather(uint64_t value, std::vector<uint64_t> &values,
                                double timeoutSeconds, std::string &error) {
  values.assign(state->size, 0);
  MPI_Request request;
  int rc = MPI_Iallgather(&value, 1, MPI_UINT64_T, values.data(), 1,
                          MPI_UINT64_T, state->comm, &request);
  return finish(rc, request, timeoutSeconds, error);
}

bool MpiCommunicator::allReduceMin(int64_t value, int64_t &result,
                                   double timeoutSeconds, std::string &error) {
  MPI_Request request;
  int rc = MPI_Iallreduce(&value, &result, 1, MPI_INT64_T, MPI_MIN,
                          state->comm, &request);
  return finish(rc, request, timeoutSeconds, error);
}

bool MpiCommunicator::gatherToRoot(const std::vector<char> &bytes,
                                   std::vector<std::vector<char>> &atRoot,
                                   double timeoutSeconds, std::string &error) {
  if (bytes.size() > INT_MAX) {
    error = "more than 2 GiB to gather at rank 0";
    return false;
  }
  int mine = static_cast<int>(bytes.size());
  std::vector<int> counts(state->size), offsets(state->size);
  MPI_Request request;
  int rc = MPI_Igather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, 0,
                       state->comm, &request);
  if (!finish(rc, request, timeoutSeconds, error))
    return false;
  int64_t total = 0;
  for (int r = 0; r < state->size; ++r) {
    offsets[r] = static_cast<int>(total);
    total += counts[r];
  }
  if (total > INT_MAX) {
    error = "more than 2 GiB to gather at rank 0";
    return false;
  }
  std::vector<char> all(state->rank == 0 ? total : 0);
  rc = MPI_Igatherv(bytes.data(), mine, MPI_BYTE, all.data(), counts.data(),
                    offsets.data(), MPI_BYTE, 0, state->comm, &request);
  if (!finish(rc, request, timeoutSeconds, error))
    return false;
  atRoot.clear();
  if (state->rank == 0)
    for (int r = 0; r < state->size; ++r)
      atRoot.emplace_back(all.begin() + offsets[r],
                          all.begin() + offsets[r] + counts[r]);
  return true;
}

void MpiCommunicator::abort(int exitCode) {
  MPI_Abort(state->comm, exitCode);
  std::_Exit(exitCode);
}

} // namespace muon::runtime
