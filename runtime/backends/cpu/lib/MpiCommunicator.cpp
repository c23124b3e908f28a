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
  std::string ignored;
  setProgress(MpiProgress::Auto, ignored);
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm)
    : state(std::make_unique<State>()) {
  MPI_Comm_dup(comm, &state->comm);
  state->ownsComm = true;
  setUp(*state);
  std::string ignored;
  setProgress(MpiProgress::Auto, ignored);
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

bool MpiCommunicator::setProgress(MpiProgress mode, std::string &error,
                                  int64_t intervalMicroseconds) {
  if (intervalMicroseconds < 1 || intervalMicroseconds > 1000000) {
    error = "the progress interval must be in [1, 1000000] microseconds";
    return false;
  }
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
    if (!serialized) {
      error = "a progress thread needs MPI_THREAD_SERIALIZED or better, and "
              "this MPI was initialized with a lower thread level (initialize "
              "it with MPI_Init_thread, or use progress by calls)";
      return false;
    }
    thread = true;
    break;
  }
  state->stopThread();
  state->interval = std::chrono::microseconds(intervalMicroseconds);
  if (thread)
    state->poller = std::thread([s = state.get()] { s->pollLoop(); });
  return true;
}

bool MpiCommunicator::progressThread() const {
  return state->poller.joinable();
}


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
      error = "MPI_Ialltoallv failed: " + mpiError(rc);
      return false;
    }
    ++state->inFlight;
    pending.id = id;
  }
  state->wake.notify_one();
  return true;
}

/// Polls until `test` (called with `mpi` held) reports completion or the
/// deadline passes. Sleeping between polls keeps oversubscribed ranks from
/// starving the ones that compute.
template <typename Test>
static bool pollUntilDone(std::mutex &mpi, Test test, double timeoutSeconds,
                          std::string &error) {
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
    if (rc != MPI_SUCCESS) {
      error = mpiError(rc);
      return false;
    }
    if (done)
      return true;
    if (std::chrono::steady_clock::now() > deadline) {
      error = timeoutError(timeoutSeconds);
      return false;
    }
    if (++spins > 64)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

/// Starts a small control collective with `start` (called with `mpi` held)
/// and waits for it. The progress thread never sees these requests.
template <typename Start>
static bool runControl(std::mutex &mpi, Start start, double timeoutSeconds,
                       std::string &error) {
  MPI_Request request = MPI_REQUEST_NULL;
  int rc = MPI_SUCCESS;
  {
    std::lock_guard<std::mutex> lock(mpi);
    rc = start(request);
  }
  if (rc != MPI_SUCCESS) {
    error = mpiError(rc);
    return false;
  }
  return pollUntilDone(
      mpi,
      [&](int &done) {
        return MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      },
      timeoutSeconds, error);
}

bool MpiCommunicator::wait(PendingExchange &pending, double timeoutSeconds,
                           std::string &error) {
  State &s = *state;
  State::Call *call = nullptr;
  {
    std::lock_guard<std::mutex> lock(s.mpi);
    auto it = s.calls.find(pending.id);
    if (it != s.calls.end())
      call = &it->second; // map nodes stay put while others come and go
  }
  if (!call) {
    error = "wait on an exchange that was not started";
    return false;
  }
  bool ok = pollUntilDone(
      s.mpi, [&](int &done) { return s.test(*call, done); }, timeoutSeconds,
      error);
  if (ok) {
    std::lock_guard<std::mutex> lock(s.mpi);
    s.calls.erase(pending.id);
  }
  pending.id = -1;
  return ok;
}

void MpiCommunicator::progress() {
  std::lock_guard<std::mutex> lock(state->mpi);
  for (auto &[id, call] : state->calls) {
    int done = 0;
    state->test(call, done);
  }
}

bool MpiCommunicator::allGather(uint64_t value, std::vector<uint64_t> &values,
                                double timeoutSeconds, std::string &error) {
  return allGatherWords({value}, values, timeoutSeconds, error);
}

bool MpiCommunicator::allGatherWords(const std::vector<uint64_t> &mine,
                                     std::vector<uint64_t> &all,
                                     double timeoutSeconds,
                                     std::string &error) {
  const int n = static_cast<int>(mine.size());
  all.assign(mine.size() * state->size, 0);
  return runControl(
      state->mpi,
      [&](MPI_Request &request) {
        return MPI_Iallgather(mine.data(), n, MPI_UINT64_T, all.data(), n,
                              MPI_UINT64_T, state->comm, &request);
      },
      timeoutSeconds, error);
}

bool MpiCommunicator::allReduceMin(int64_t value, int64_t &result,
                                   double timeoutSeconds, std::string &error) {
  return runControl(
      state->mpi,
      [&](MPI_Request &request) {
        return MPI_Iallreduce(&value, &result, 1, MPI_INT64_T, MPI_MIN,
                              state->comm, &request);
      },
      timeoutSeconds, error);
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
  if (!runControl(
          state->mpi,
          [&](MPI_Request &request) {
            return MPI_Igather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT,
                               0, state->comm, &request);
          },
          timeoutSeconds, error))
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
  if (!runControl(
          state->mpi,
          [&](MPI_Request &request) {
            return MPI_Igatherv(bytes.data(), mine, MPI_BYTE, all.data(),
                                counts.data(), offsets.data(), MPI_BYTE, 0,
                                state->comm, &request);
          },
          timeoutSeconds, error))
    return false;
  atRoot.clear();
  if (state->rank == 0)
    for (int r = 0; r < state->size; ++r)
      atRoot.emplace_back(all.begin() + offsets[r],
                          all.begin() + offsets[r] + counts[r]);
  return true;
}

bool MpiCommunicator::allGatherBytes(const std::vector<char> &bytes,
                                     std::vector<std::vector<char>> &all,
                                     double timeoutSeconds,
                                     std::string &error) {
  if (bytes.size() > INT_MAX) {
    error = "more than 2 GiB to gather on every rank";
    return false;
  }
  int mine = static_cast<int>(bytes.size());
  std::vector<int> counts(state->size), offsets(state->size);
  if (!runControl(
          state->mpi,
          [&](MPI_Request &request) {
            return MPI_Iallgather(&mine, 1, MPI_INT, counts.data(), 1, MPI_INT,
                                  state->comm, &request);
          },
          timeoutSeconds, error))
    return false;
  int64_t total = 0;
  for (int r = 0; r < state->size; ++r) {
    offsets[r] = static_cast<int>(total);
    total += counts[r];
    if (total > INT_MAX) {
      error = "more than 2 GiB to gather on every rank";
      return false;
    }
  }
  std::vector<char> gathered(total);
  if (!runControl(
          state->mpi,
          [&](MPI_Request &request) {
            return MPI_Iallgatherv(
                bytes.data(), mine, MPI_BYTE, gathered.data(), counts.data(),
                offsets.data(), MPI_BYTE, state->comm, &request);
          },
          timeoutSeconds, error))
    return false;
  all.clear();
  for (int r = 0; r < state->size; ++r)
    all.emplace_back(gathered.begin() + offsets[r],
                     gathered.begin() + offsets[r] + counts[r]);
  return true;
}

void MpiCommunicator::abort(int exitCode) {
  MPI_Abort(state->comm, exitCode);
  std::_Exit(exitCode);
}

} // namespace muon::runtime
