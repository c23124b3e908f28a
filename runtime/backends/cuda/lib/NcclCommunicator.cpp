//===- NcclCommunicator.cpp - The GPU transport: NCCL ---------------------===//
//
// An exchange is one NCCL group of point-to-point sends and receives on a
// communication stream of its own: it starts after the work queued on the
// device's compute stream (the packing copies), and the compute stream
// waits for its end once wait() has seen it complete, so that unpacking
// reads what arrived. wait() polls an event against the deadline and asks
// NCCL for asynchronous errors; after a timeout or an error the
// communicator refuses further exchanges, and its destructor aborts the
// NCCL communicator, which ends kernels still waiting for a peer that is
// gone. Control collectives go through the bootstrap (MPI) communicator.
// Only the CUDA runtime's stream and event calls and NCCL are used here, so
// that the unit test runs this file on a stand-in for both (FakeGpu).
//
//===----------------------------------------------------------------------===//
#include "NcclCommunicator.h"

#include "CudaSupport.h"

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <thread>

namespace muon::runtime::cuda {

namespace {

/// Start-up collectives have no caller deadline; ranks that are alive
/// answer in well under this.
constexpr double kSetupTimeoutSeconds = 300;

class NcclCommunicator final : public Communicator {
public:
  NcclCommunicator(Communicator &bootstrap, const NcclPlacement &gpu,
                   const nccl::Library &nccl)
      : bootstrap(bootstrap), gpu(gpu), nccl(nccl) {}
  ~NcclCommunicator() override;

  /// Local set-up: the communication stream, and NCCL's id on rank 0.
  bool prepare(std::string &error);
  /// Collective: every rank learns rank 0's id, joins the NCCL
  /// communicator and exchanges a byte with every peer.
  bool connect(std::string &error);

  int64_t rank() const override { return bootstrap.rank(); }
  int64_t size() const override { return bootstrap.size(); }
  bool start(const AllToAllV &exchange, PendingExchange &pending,
             std::string &error) override;
  bool wait(PendingExchange &pending, double timeoutSeconds,
            std::string &error) override;
  void progress() override {} // NCCL moves data on the GPU by itself
  /// NCCL's sends and receives are stream work (NCCL supports capture).
  bool recordable() const override { return true; }
  bool waitForReplay(double timeoutSeconds, std::string &error) override;
  bool allGather(uint64_t value, std::vector<uint64_t> &values,
                 double timeoutSeconds, std::string &error) override {
    return bootstrap.allGather(value, values, timeoutSeconds, error);
  }
  bool allReduceMin(int64_t value, int64_t &result, double timeoutSeconds,
                    std::string &error) override {
    return bootstrap.allReduceMin(value, result, timeoutSeconds, error);
  }
  bool allGatherWords(const std::vector<uint64_t> &mine,
                      std::vector<uint64_t> &all, double timeoutSeconds,
                      std::string &error) override {
    return bootstrap.allGatherWords(mine, all, timeoutSeconds, error);
  }
  bool gatherToRoot(const std::vector<char> &bytes,
                    std::vector<std::vector<char>> &atRoot,
                    double timeoutSeconds, std::string &error) override {
    return bootstrap.gatherToRoot(bytes, atRoot, timeoutSeconds, error);
  }
  bool allGatherBytes(const std::vector<char> &bytes,
                      std::vector<std::vector<char>> &all,
                      double timeoutSeconds, std::string &error) override {
    return bootstrap.allGatherBytes(bytes, all, timeoutSeconds, error);
  }
  [[noreturn]] void abort(int exitCode) override {
    bootstrap.abort(exitCode);
    std::_Exit(exitCode); // not reached: the bootstrap's abort ends us
  }

private:
  /// Marks the communicator broken after a failure: every later exchange
  /// fails with `why`. It does not call ncclCommAbort, which may block until
  /// the node's other ranks abort too (NVIDIA/nccl#863): a failing run goes
  /// on to abort() (MPI_Abort ends every rank), and the destructor aborts
  /// the NCCL communicator for a caller that carries on.
  void abandon(const std::string &why);
  cudaEvent_t takeEvent();
  /// Polls `done` until it completes, NCCL reports an asynchronous error or
  /// `timeoutSeconds` pass; false with `failure`.
  bool pollUntilDone(cudaEvent_t done, double timeoutSeconds,
                     std::string &failure);
  /// Whether the compute stream is being recorded into a graph.
  bool recording() const;
  bool validate(const AllToAllV &x, std::string &error) const;

  Communicator &bootstrap;
  NcclPlacement gpu;
  const nccl::Library &nccl;
  nccl::UniqueId id = {};
  nccl::Comm comm = nullptr;
  std::string brokenBy; // set once abandoned: comm is then never used
  cudaStream_t commStream = nullptr;
  cudaEvent_t ready = nullptr; // the compute stream's point a start follows
  std::map<int64_t, cudaEvent_t> inFlight;
  std::vector<cudaEvent_t> spareEvents;
  int64_t nextId = 0;
};

NcclCommunicator::~NcclCommunicator() {
  CurrentDevice current(gpu.ordinal);
  if (comm) {
    // An exchange never waited for, or one that failed, may wait on a peer
    // forever: abort.
    if (inFlight.empty() && brokenBy.empty()) {
      MUON_CUDA_CHECK(cudaStreamSynchronize(commStream));
      nccl.commDestroy(comm);
    } else {
      nccl.commAbort(comm);
    }
  }
  for (auto &entry : inFlight)
    MUON_CUDA_CHECK(cudaEventDestroy(entry.second));
  for (cudaEvent_t event : spareEvents)
    MUON_CUDA_CHECK(cudaEventDestroy(event));
  if (ready)
    MUON_CUDA_CHECK(cudaEventDestroy(ready));
  if (commStream)
    MUON_CUDA_CHECK(cudaStreamDestroy(commStream));
}

bool NcclCommunicator::prepare(std::string &error) {
  CurrentDevice current(gpu.ordinal);
  cudaError_t status =
      cudaStreamCreateWithFlags(&commStream, cudaStreamNonBlocking);
  if (status == cudaSuccess)
    status = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    error = "creating the communication stream: " + describe(status);
    return false;
  }
  if (rank() == 0) {
    nccl::Result result = nccl.getUniqueId(&id);
    if (result != nccl::kSuccess) {
      error = "ncclGetUniqueId: " + nccl.describe(result);
      return false;
    }
  }
  return true;
}

bool NcclCommunicator::connect(std::string &error) {
  // Rank 0's id, 8 bytes per all-gather.
  constexpr int kWords = sizeof(nccl::UniqueId) / sizeof(uint64_t);
  static_assert(kWords * sizeof(uint64_t) == sizeof(nccl::UniqueId));
  uint64_t words[kWords];
  std::memcpy(words, id.internal, sizeof(words));
  for (int w = 0; w < kWords; ++w) {
    std::vector<uint64_t> values;
    if (!bootstrap.allGather(words[w], values, kSetupTimeoutSeconds, error)) {
      error = "sharing NCCL's id: " + error;
      return false;
    }
    words[w] = values.at(0);
  }
  std::memcpy(id.internal, words, sizeof(words));

  {
    CurrentDevice current(gpu.ordinal);
    nccl::Result result = nccl.commInitRank(&comm, static_cast<int>(size()), id,
                                            static_cast<int>(rank()));
    if (result != nccl::kSuccess) {
      comm = nullptr;
      error = "ncclCommInitRank: " + nccl.describe(result);
      return false;
    }
  }

  // Warm-up: a byte to every peer, which makes NCCL connect them now
  // rather than inside the first exchange of a step.
  const int64_t ranks = size();
  DeviceBuffer send(gpu.device, ranks), recv(gpu.device, ranks);
  if (!send.ok() || !recv.ok()) {
    error = "no room on the GPU for the warm-up exchange";
    return false;
  }
  AllToAllV x;
  x.sendBuffer = send.data();
  x.recvBuffer = recv.data();
  x.elementBytes = 1;
  x.sendCounts.assign(ranks, 1);
  x.recvCounts.assign(ranks, 1);
  for (int64_t p = 0; p < ranks; ++p) {
    x.sendOffsets.push_back(p);
    x.recvOffsets.push_back(p);
  }
  PendingExchange pending;
  if (!start(x, pending, error) ||
      !wait(pending, kSetupTimeoutSeconds, error)) {
    error = "the warm-up exchange: " + error;
    return false;
  }
  gpu.device.synchronize(); // before the buffers go
  return true;
}

void NcclCommunicator::abandon(const std::string &why) {
  if (brokenBy.empty())
    brokenBy = why;
}

cudaEvent_t NcclCommunicator::takeEvent() {
  if (!spareEvents.empty()) {
    cudaEvent_t event = spareEvents.back();
    spareEvents.pop_back();
    return event;
  }
  cudaEvent_t event = nullptr;
  MUON_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event;
}

bool NcclCommunicator::validate(const AllToAllV &x, std::string &error) const {
  const size_t ranks = static_cast<size_t>(size());
  if (x.sendCounts.size() != ranks || x.sendOffsets.size() != ranks ||
      x.recvCounts.size() != ranks || x.recvOffsets.size() != ranks ||
      x.elementBytes <= 0) {
    error = "an exchange needs a count and an offset per rank and a positive "
            "element size";
    return false;
  }
  const int64_t limit = std::numeric_limits<int64_t>::max() / x.elementBytes;
  for (const std::vector<int64_t> *values :
       {&x.sendCounts, &x.sendOffsets, &x.recvCounts, &x.recvOffsets})
    for (int64_t v : *values)
      if (v < 0 || v > limit) {
        error = "an exchange count or offset of " + std::to_string(v) +
                " elements is out of range";
        return false;
      }
  const size_t me = static_cast<size_t>(rank());
  if (x.sendCounts[me] != x.recvCounts[me]) {
    error = "an exchange sends " + std::to_string(x.sendCounts[me]) +
            " elements to its own rank but receives " +
            std::to_string(x.recvCounts[me]);
    return false;
  }
  return true;
}

bool NcclCommunicator::start(const AllToAllV &x, PendingExchange &pending,
                             std::string &error) {
  if (!brokenBy.empty()) {
    error = "the NCCL communicator is unusable after an earlier failure: " +
            brokenBy;
    return false;
  }
  if (!validate(x, error))
    return false;
  CurrentDevice current(gpu.ordinal);
  const int64_t width = x.elementBytes, me = rank();
  const char *send = static_cast<const char *>(x.sendBuffer);
  char *recv = static_cast<char *>(x.recvBuffer);

  MUON_CUDA_CHECK(cudaEventRecord(ready, gpu.computeStream));
  MUON_CUDA_CHECK(cudaStreamWaitEvent(commStream, ready, 0));
  if (x.sendCounts[me] > 0)
    MUON_CUDA_CHECK(cudaMemcpyAsync(
        recv + x.recvOffsets[me] * width, send + x.sendOffsets[me] * width,
        static_cast<size_t>(x.sendCounts[me] * width), cudaMemcpyDeviceToDevice,
        commStream));

  std::string failure;
  nccl::Result result = nccl.groupStart();
  if (result != nccl::kSuccess)
    failure = "ncclGroupStart: " + nccl.describe(result);
  for (int64_t p = 0; p < size() && failure.empty(); ++p) {
    if (p == me)
      continue;
    const int peer = static_cast<int>(p);
    if (x.sendCounts[p] > 0) {
      result = nccl.send(send + x.sendOffsets[p] * width,
                         static_cast<size_t>(x.sendCounts[p] * width),
                         nccl::kChar, peer, comm, commStream);
      if (result != nccl::kSuccess)
        failure = "ncclSend to rank " + std::to_string(p) + ": " +
                  nccl.describe(result);
    }
    if (x.recvCounts[p] > 0 && failure.empty()) {
      result = nccl.recv(recv + x.recvOffsets[p] * width,
                         static_cast<size_t>(x.recvCounts[p] * width),
                         nccl::kChar, peer, comm, commStream);
      if (result != nccl::kSuccess)
        failure = "ncclRecv from rank " + std::to_string(p) + ": " +
                  nccl.describe(result);
    }
  }
  // The group is closed even after a failure inside it.
  result = nccl.groupEnd();
  if (result != nccl::kSuccess && failure.empty())
    failure = "ncclGroupEnd: " + nccl.describe(result);
  if (!failure.empty()) {
    abandon(failure);
    error = failure;
    return false;
  }

  cudaEvent_t done = takeEvent();
  MUON_CUDA_CHECK(cudaEventRecord(done, commStream));
  const int64_t handle = nextId++;
  inFlight[handle] = done;
  pending.id = handle;
  return true;
}

bool NcclCommunicator::wait(PendingExchange &pending, double timeoutSeconds,
                            std::string &error) {
  auto it = inFlight.find(pending.id);
  if (it == inFlight.end()) {
    error = "wait on an exchange that was not started";
    return false;
  }
  cudaEvent_t done = it->second;
  inFlight.erase(it);
  pending.id = -1;
  CurrentDevice current(gpu.ordinal);
  if (!brokenBy.empty()) {
    MUON_CUDA_CHECK(cudaEventDestroy(done));
    error = "the NCCL communicator is unusable after an earlier failure: " +
            brokenBy;
    return false;
  }

  // While the device records a step graph, the wait is the graph's
  // dependency on the exchange: nothing to poll (the graph has not run).
  std::string failure;
  if (!recording() && !pollUntilDone(done, timeoutSeconds, failure)) {
    abandon(failure);
    // Released by CUDA once the aborted work completes.
    MUON_CUDA_CHECK(cudaEventDestroy(done));
    error = failure;
    return false;
  }
  // What arrived is read by work queued on the compute stream from now on.
  MUON_CUDA_CHECK(cudaStreamWaitEvent(gpu.computeStream, done, 0));
  spareEvents.push_back(done);
  return true;
}

bool NcclCommunicator::recording() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(gpu.computeStream, &status) == cudaSuccess &&
         status != cudaStreamCaptureStatusNone;
}

bool NcclCommunicator::pollUntilDone(cudaEvent_t done, double timeoutSeconds,
                                     std::string &failure) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration<double>(timeoutSeconds);
  int spins = 0;
  while (true) {
    cudaError_t status = cudaEventQuery(done);
    if (status == cudaSuccess)
      return true;
    if (status != cudaErrorNotReady) {
      failure = "the GPU failed during an exchange: " + describe(status);
    } else {
      nccl::Result async = nccl::kSuccess;
      nccl::Result result = nccl.commGetAsyncError(comm, &async);
      if (result != nccl::kSuccess)
        failure = "ncclCommGetAsyncError: " + nccl.describe(result);
      else if (async != nccl::kSuccess && async != nccl::kInProgress)
        failure = "NCCL: " + nccl.describe(async);
      else if (std::chrono::steady_clock::now() > deadline)
        failure = timeoutError(timeoutSeconds);
    }
    if (!failure.empty())
      return false;
    if (++spins > 64)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

bool NcclCommunicator::waitForReplay(double timeoutSeconds,
                                     std::string &error) {
  if (!brokenBy.empty()) {
    error = "the NCCL communicator is unusable after an earlier failure: " +
            brokenBy;
    return false;
  }
  CurrentDevice current(gpu.ordinal);
  // The replayed exchanges end before the compute stream's work queued so
  // far does: its end is theirs.
  cudaEvent_t done = takeEvent();
  MUON_CUDA_CHECK(cudaEventRecord(done, gpu.computeStream));
  std::string failure;
  if (!pollUntilDone(done, timeoutSeconds, failure)) {
    abandon(failure);
    MUON_CUDA_CHECK(cudaEventDestroy(done));
    error = failure;
    return false;
  }
  spareEvents.push_back(done);
  return true;
}

} // namespace

std::unique_ptr<Communicator>
setUpNcclCommunicator(Communicator &bootstrap, const NcclPlacement *gpu,
                      const nccl::Library *library, std::string local,
                      std::string &error) {
  // Every rank prepares what it can alone, then all agree before the
  // collective part, so that one rank's failure fails every rank at once
  // instead of leaving the others waiting.
  std::unique_ptr<NcclCommunicator> comm;
  if (local.empty()) {
    comm = std::make_unique<NcclCommunicator>(bootstrap, *gpu, *library);
    if (!comm->prepare(local))
      comm.reset();
  }
  const int64_t none = std::numeric_limits<int64_t>::max();
  int64_t firstFailed = none;
  if (!bootstrap.allReduceMin(local.empty() ? none : bootstrap.rank(),
                              firstFailed, kSetupTimeoutSeconds, error)) {
    error = "setting up NCCL: " + error;
    return nullptr;
  }
  if (!local.empty()) {
    error = "setting up NCCL: " + local;
    return nullptr;
  }
  if (firstFailed != none) {
    error = "setting up NCCL: rank " + std::to_string(firstFailed) +
            " could not (see its message)";
    return nullptr;
  }
  if (!comm->connect(error)) {
    error = "setting up NCCL " + library->version() + " (" + library->file +
            "): " + error;
    return nullptr;
  }
  return comm;
}

} // namespace muon::runtime::cuda
