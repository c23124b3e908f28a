//===- MpiCommunicator.cpp - The CPU transport: MPI -----------------------===//
#include "muon/Runtime/Cpu/MpiCommunicator.h"

#include <mpi.h>

#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

namespace muon::runtime {

struct MpiCommunicator::State {
  MPI_Comm comm = MPI_COMM_WORLD;
  int rank = 0, size = 1;
  bool ownsInit = false;
  bool ownsComm = false; // a duplicate of the caller's communicator
  MPI_Datatype twoBytes = MPI_DATATYPE_NULL;
  int threadLevel = MPI_THREAD_SINGLE; // what MPI provides
  int64_t nextId = 0;
  struct Call {
    MPI_Request request = MPI_REQUEST_NULL;
    bool done = false;
    std::vector<int> sendCounts, sendOffsets, recvCounts, recvOffsets;
  };
  std::map<int64_t, Call> calls;

  // The progress thread. `mpi` serializes every MPI call this communicator
  // makes (MPI_THREAD_SERIALIZED is enough); it also guards `calls`.
  std::mutex mpi;
  std::condition_variable wake;
  std::thread poller;
  bool stopPoller = false;
  int64_t inFlight = 0; // calls not yet seen complete
  std::chrono::microseconds interval{50};

  void pollLoop();
  void stopThread();
  /// Tests `call` once, with `mpi` held; a completed call is marked done
  /// and leaves `inFlight`.
  int test(Call &call, int &done);
};

int MpiCommunicator::State::test(Call &call, int &done) {
  if (call.done) {
    done = 1;
    return MPI_SUCCESS;
  }
  int rc = MPI_Test(&call.request, &done, MPI_STATUS_IGNORE);
  if (rc == MPI_SUCCESS && done) {
    call.done = true;
    --inFlight;
  }
  return rc;
}

/// Tests every exchange in flight every `interval` while there are any and
/// sleeps on `wake` while there are none, so an idle rank pays nothing.
void MpiCommunicator::State::pollLoop() {
  std::unique_lock<std::mutex> lock(mpi);
  while (!stopPoller) {
    if (inFlight == 0) {
      wake.wait(lock, [&] { return stopPoller || inFlight > 0; });
      continue;
    }
    for (auto &[id, call] : calls) {
      int done = 0;
      test(call, done);
    }
    lock.unlock();
    std::this_thread::sleep_for(interval);
    lock.lock();
  }
}

void MpiCommunicator::State::stopThread() {
  if (!poller.joinable())
    return;
  {
    std::lock_guard<std::mutex> lock(mpi);
    stopPoller = true;
  }
  wake.notify_all();
  poller.join();
  stopPoller = false;
}

/// A failed MPI call: a transport failure, with MPI's own words.
static Status mpiError(int code, const char *call = nullptr) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, text, &length);
  std::string message(text, length);
  return unavailable(call ? std::string(call) + " failed: " + message
                          : message);
}

/// Returns errors as codes (reported with the rank, not as MPI's abort) and
/// reads the rank and size of `state.comm`.
static void setUp(MpiCommunicator::State &state) {
  MPI_Comm_set_errhandler(state.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(state.comm, &state.rank);
  MPI_Comm_size(state.comm, &state.size);
  MPI_Type_contiguous(2, MPI_BYTE, &state.twoBytes);
  MPI_Type_commit(&state.twoBytes);
  MPI_Query_thread(&state.threadLevel);
}

MpiCommunicator::MpiCommunicator(int *argc, char ***argv)
    : state(std::make_unique<State>()) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = MPI_THREAD_SINGLE;
    MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided);
    state->ownsInit = true;
  }
  setUp(*state);
  (void)setProgress(MpiProgress::Auto); // Auto never fails
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm)
    : state(std::make_unique<State>()) {
  MPI_Comm_dup(comm, &state->comm);
  state->ownsComm = true;
  setUp(*state);
  (void)setProgress(MpiProgress::Auto); // Auto never fails
}

MpiCommunicator::~MpiCommunicator() {
  // The poller first: a joinable thread's destructor would terminate the
  // process, and after MPI_Finalize (a Python interpreter exiting before
  // its optimizers are collected) it sleeps with nothing in flight.
  state->stopThread();
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

Status MpiCommunicator::setProgress(MpiProgress mode,
                                    int64_t intervalMicroseconds) {
  if (intervalMicroseconds < 1 || intervalMicroseconds > 1000000)
    return invalidArgument(
        "the progress interval must be in [1, 1000000] microseconds");
  // Our own MPI calls are serialized by `state->mpi`; anyone else's are the
  // caller's business, so an MPI we did not initialize must allow any
  // thread to call it at any time unless Thread is asked for explicitly.
  const bool serialized = state->threadLevel >= MPI_THREAD_SERIALIZED;
  const bool anyThread = state->threadLevel >= MPI_THREAD_MULTIPLE;
  bool thread = false;
  switch (mode) {
  case MpiProgress::Calls:
    break;
  case MpiProgress::Auto:
    thread = anyThread || (state->ownsInit && serialized);
    break;
  case MpiProgress::Thread:
    if (!serialized)
      return failedPrecondition(
          "a progress thread needs MPI_THREAD_SERIALIZED or better, and "
          "this MPI was initialized with a lower thread level (initialize "
          "it with MPI_Init_thread, or use progress by calls)");
    thread = true;
    break;
  }
  state->stopThread();
  state->interval = std::chrono::microseconds(intervalMicroseconds);
  if (thread)
    state->poller = std::thread([s = state.get()] { s->pollLoop(); });
  return okStatus();
}

bool MpiCommunicator::progressThread() const {
  return state->poller.joinable();
}

/// MPI counts are ints: larger exchanges must be split by the planner.
static Status toInts(const std::vector<int64_t> &in, std::vector<int> &out) {
  out.resize(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] < 0 || in[i] > INT_MAX)
      return invalidArgument("an exchange of " + std::to_string(in[i]) +
                             " elements exceeds MPI's int counts; lower "
                             "gather_budget_bytes so that rounds are smaller");
    out[i] = static_cast<int>(in[i]);
  }
  return okStatus();
}

StatusOr<PendingExchange> MpiCommunicator::start(const AllToAllV &x) {
  State::Call call;
  MUON_RETURN_IF_ERROR(toInts(x.sendCounts, call.sendCounts));
  MUON_RETURN_IF_ERROR(toInts(x.sendOffsets, call.sendOffsets));
  MUON_RETURN_IF_ERROR(toInts(x.recvCounts, call.recvCounts));
  MUON_RETURN_IF_ERROR(toInts(x.recvOffsets, call.recvOffsets));
  MPI_Datatype type = x.elementBytes == 4   ? MPI_FLOAT
                      : x.elementBytes == 2 ? state->twoBytes
                                            : MPI_BYTE;
  PendingExchange pending;
  {
    std::lock_guard<std::mutex> lock(state->mpi);
    int64_t id = state->nextId++;
    State::Call &stored = state->calls[id] = std::move(call);
    int rc = MPI_Ialltoallv(x.sendBuffer, stored.sendCounts.data(),
                            stored.sendOffsets.data(), type, x.recvBuffer,
                            stored.recvCounts.data(),
                            stored.recvOffsets.data(), type, state->comm,
                            &stored.request);
    if (rc != MPI_SUCCESS) {
      state->calls.erase(id);
      return mpiError(rc, "MPI_Ialltoallv");
    }
    ++state->inFlight;
    pending.id = id;
  }
  state->wake.notify_one();
  return pending;
}

/// Polls until `test` (called with `mpi` held) reports completion or the
/// deadline passes. Sleeping between polls keeps oversubscribed ranks from
/// starving the ones that compute.
template <typename Test>
static Status pollUntilDone(std::mutex &mpi, Test test, double timeoutSeconds) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration<double>(timeoutSeconds);
  int spins = 0;
  while (true) {
    int done = 0;
    int rc = MPI_SUCCESS;
    {
      std::lock_guard<std::mutex> lock(mpi);
      rc = test(done);
    }
    if (rc != MPI_SUCCESS)
      return mpiError(rc);
    if (done)
      return okStatus();
    if (std::chrono::steady_clock::now() > deadline)
      return deadlineExceeded(timeoutSeconds);
    if (++spins > 64)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

/// Starts a small control collective with `start` (called with `mpi` held)
/// and waits for it. The progress thread never sees these requests.
template <typename Start>
static Status runControl(std::mutex &mpi, Start start, double timeoutSeconds) {
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_SUCCESS;
  {
    std::lock_guard<std::mutex> lock(mpi);
    rc = start(request);
  }
  if (rc != MPI_SUCCESS)
    return mpiError(rc);
  return pollUntilDone(
      mpi,
      [&](int &done) { return MPI_Test(&request, &done, MPI_STATUS_IGNORE); },
      timeoutSeconds);
}

Status MpiCommunicator::wait(PendingExchange &pending, double timeoutSeconds) {
  State &s = *state;
  State::Call *call = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mpi);
    auto it = s.calls.find(pending.id);
    if (it != s.calls.end())
      call = &it->second; // map nodes stay put while others come and go
  }
  if (!call)
    return failedPrecondition("wait on an exchange that was not started");
  Status status = pollUntilDone(
      s.mpi, [&](int &done) { return s.test(*call, done); }, timeoutSeconds);
  if (status.ok()) {
    std::lock_guard<std::mutex> lock(s.mpi);
    s.calls.erase(pending.id);
  }
  pending.id = -1;
  return status;
}

void MpiCommunicator::progress() {
  std::lock_guard<std::mutex> lock(state->mpi);
  for (auto &[id, call] : state->calls) {
    int done = 0;
    state->test(call, done);
  }
}

StatusOr<std::vector<uint64_t>>
MpiCommunicator::allGather(uint64_t value, double timeoutSeconds) {
  return allGatherWords({value}, timeoutSeconds);
}

StatusOr<std::vector<uint64_t>>
MpiCommunicator::allGatherWords(const std::vector<uint64_t> &mine,
                                double timeoutSeconds) {
  const int n = static_cast<int>(mine.size());
  std::vector<uint64_t> all(mine.size() * state->size, 0);
  MUON_RETURN_IF_ERROR(runControl(
      state->mpi,
      [&](MPI_Request &request) {
        return MPI_Iallgather(mine.data(), n, MPI_UINT64_T, all.data(), n,
                              MPI_UINT64_T, state->comm, &request);
      },
      timeoutSeconds));
  return all;
}

StatusOr<int64_t> MpiCommunicator::allReduceMin(int64_t value,
                                                double timeoutSeconds) {
  int64_t result = value;
  MUON_RETURN_IF_ERROR(runControl(
      state->mpi,
      [&](MPI_Request &request) {
        return MPI_Iallreduce(&value, &result, 1, MPI_INT64_T, MPI_MIN,
                              state->comm, &request);
      },
      timeoutSeconds));
  return result;
}

/// Every rank's byte count and where its bytes land in the concatenation,
/// through `countsOf` (an MPI_Igather or MPI_Iallgather of one int).
/// InvalidArgument past 2 GiB in all (MPI's int displacements).
template <typename Counts>
static Status countsAndOffsets(std::mutex &mpi, Counts countsOf,
                               std::vector<int> &counts,
                               std::vector<int> &offsets, const char *where,
                               double timeoutSeconds) {
  MUON_RETURN_IF_ERROR(runControl(mpi, countsOf, timeoutSeconds));
  int64_t total = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    offsets[r] = static_cast<int>(total);
    total += counts[r];
    if (total > INT_MAX)
      return invalidArgument(std::string("more than 2 GiB to gather ") + where);
  }
  return okStatus();
}

/// The concatenation `gathered` cut back into one piece per rank.
static std::vector<std::vector<char>>
piecesOf(const std::vector<char> &gathered, const std::vector<int> &counts,
         const std::vector<int> &offsets) {
  std::vector<std::vector<char>> pieces;
  for (size_t r = 0; r < counts.size(); ++r)
    pieces.emplace_back(gathered.begin() + offsets[r],
                        gathered.begin() + offsets[r] + counts[r]);
  return pieces;
}

StatusOr<std::vector<std::vector<char>>>
MpiCommunicator::gatherToRoot(const std::vector<char> &bytes,
                              double timeoutSeconds) {
  if (bytes.size() > INT_MAX)
    return invalidArgument("more than 2 GiB to gather at rank 0");
  int mine = static_cast<int>(bytes.size());
  std::vector<int> counts(state->size), offsets(state->size);
  MUON_RETURN_IF_ERROR(countsAndOffsets(
      state->mpi,
      [&](MPI_Request &request) {
        return MPI_Igather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT, 0,
                           state->comm, &request);
      },
      counts, offsets, "at rank 0", timeoutSeconds));
  std::vector<char> all(state->rank == 0 ? offsets.back() + counts.back() : 0);
  MUON_RETURN_IF_ERROR(runControl(
      state->mpi,
      [&](MPI_Request &request) {
        return MPI_Igatherv(bytes.data(), mine, MPI_BYTE, all.data(),
                            counts.data(), offsets.data(), MPI_BYTE, 0,
                            state->comm, &request);
      },
      timeoutSeconds));
  if (state->rank != 0)
    return std::vector<std::vector<char>>{};
  return piecesOf(all, counts, offsets);
}

StatusOr<std::vector<std::vector<char>>>
MpiCommunicator::allGatherBytes(const std::vector<char> &bytes,
                                double timeoutSeconds) {
  if (bytes.size() > INT_MAX)
    return invalidArgument("more than 2 GiB to gather on every rank");
  int mine = static_cast<int>(bytes.size());
  std::vector<int> counts(state->size), offsets(state->size);
  MUON_RETURN_IF_ERROR(countsAndOffsets(
      state->mpi,
      [&](MPI_Request &request) {
        return MPI_Iallgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT,
                              state->comm, &request);
      },
      counts, offsets, "on every rank", timeoutSeconds));
  std::vector<char> gathered(offsets.back() + counts.back());
  MUON_RETURN_IF_ERROR(runControl(
      state->mpi,
      [&](MPI_Request &request) {
        return MPI_Iallgatherv(bytes.data(), mine, MPI_BYTE, gathered.data(),
                               counts.data(), offsets.data(), MPI_BYTE,
                               state->comm, &request);
      },
      timeoutSeconds));
  return piecesOf(gathered, counts, offsets);
}

void MpiCommunicator::abort(int exitCode) {
  MPI_Abort(state->comm, exitCode);
  std::_Exit(exitCode);
}

} // namespace muon::runtime
