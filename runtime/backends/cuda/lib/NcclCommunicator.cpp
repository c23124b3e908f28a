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

#include "muon/Runtime/LayeredCommunicator.h"

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

/// The exchanges on NCCL; everything else through the bootstrap (MPI)
/// communicator it is layered over (`inner`).
class NcclCommunicator final : public LayeredCommunicator {
public:
  NcclCommunicator(Communicator &bootstrap, const NcclPlacement &gpu,
                   const nccl::Library &nccl)
      : LayeredCommunicator(bootstrap), gpu(gpu), nccl(nccl) {}
  ~NcclCommunicator() override;

  /// Local set-up: the communication stream, and NCCL's id on rank 0.
  Status prepare();
  /// Collective: every rank learns rank 0's id, joins the NCCL
  /// communicator and exchanges a byte with every peer.
  Status connect();

  StatusOr<PendingExchange> start(const AllToAllV &exchange) override;
  Status wait(PendingExchange &pending, double timeoutSeconds) override;
  void progress() override {} // NCCL moves data on the GPU by itself
  /// NCCL's sends and receives are stream work (NCCL supports capture).
  bool recordable() const override { return true; }
  Status waitForReplay(double timeoutSeconds) override;

private:
  /// Marks the communicator broken after a failure: every later exchange
  /// fails with `why`. It does not call ncclCommAbort, which may block until
  /// the node's other ranks abort too (NVIDIA/nccl#863): a failing run goes
  /// on to abort() (MPI_Abort ends every rank), and the destructor aborts
  /// the NCCL communicator for a caller that carries on. Returns `why`.
  Status abandon(Status why);
  /// FailedPrecondition naming the earlier failure, once abandoned.
  Status usable() const;
  cudaEvent_t takeEvent();
  /// Polls `done` until it completes, NCCL reports an asynchronous error or
  /// `timeoutSeconds` pass.
  Status pollUntilDone(cudaEvent_t done, double timeoutSeconds);
  /// Whether the compute stream is being recorded into a graph.
  bool recording() const;
  Status validate(const AllToAllV &x) const;

  NcclPlacement gpu;
  const nccl::Library &nccl;
  nccl::UniqueId id = {};
  nccl::Comm comm = nullptr;
  Status brokenBy; // not ok once abandoned: comm is then never used
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
    if (inFlight.empty() && brokenBy.ok()) {
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

Status NcclCommunicator::prepare() {
  CurrentDevice current(gpu.ordinal);
  cudaError_t status =
      cudaStreamCreateWithFlags(&commStream, cudaStreamNonBlocking);
  if (status == cudaSuccess)
    status = cudaEventCreateWithFlags(&ready, cudaEventDisableTiming);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return internalError("creating the communication stream: " +
                         describe(status));
  }
  if (rank() == 0) {
    nccl::Result result = nccl.getUniqueId(&id);
    if (result != nccl::kSuccess)
      return unavailable("ncclGetUniqueId: " + nccl.describe(result));
  }
  return okStatus();
}

Status NcclCommunicator::connect() {
  // Rank 0's id, 8 bytes per all-gather.
  constexpr int kWords = sizeof(nccl::UniqueId) / sizeof(uint64_t);
  static_assert(kWords * sizeof(uint64_t) == sizeof(nccl::UniqueId));
  uint64_t words[kWords];
  std::memcpy(words, id.internal, sizeof(words));
  for (int w = 0; w < kWords; ++w) {
    StatusOr<std::vector<uint64_t>> values =
        inner.allGather(words[w], kSetupTimeoutSeconds);
    if (!values.ok())
      return values.status().withContext("sharing NCCL's id: ");
    words[w] = values->at(0);
  }
  std::memcpy(id.internal, words, sizeof(words));

  {
    CurrentDevice current(gpu.ordinal);
    nccl::Result result = nccl.commInitRank(&comm, static_cast<int>(size()), id,
                                            static_cast<int>(rank()));
    if (result != nccl::kSuccess) {
      comm = nullptr;
      return unavailable("ncclCommInitRank: " + nccl.describe(result));
    }
  }

  // Warm-up: a byte to every peer, which makes NCCL connect them now
  // rather than inside the first exchange of a step.
  const int64_t ranks = size();
  DeviceBuffer send(gpu.device, ranks), recv(gpu.device, ranks);
  if (!send.ok() || !recv.ok())
    return Status(StatusCode::ResourceExhausted,
                  "no room on the GPU for the warm-up exchange");
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
  StatusOr<PendingExchange> pending = start(x);
  Status status =
      pending.ok() ? wait(*pending, kSetupTimeoutSeconds) : pending.status();
  if (!status.ok())
    return status.withContext("the warm-up exchange: ");
  gpu.device.synchronize(); // before the buffers go
  return okStatus();
}

Status NcclCommunicator::abandon(Status why) {
  if (brokenBy.ok())
    brokenBy = why;
  return why;
}

Status NcclCommunicator::usable() const {
  if (brokenBy.ok())
    return okStatus();
  return failedPrecondition(
      "the NCCL communicator is unusable after an earlier failure: " +
      brokenBy.message());
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

Status NcclCommunicator::validate(const AllToAllV &x) const {
  const size_t ranks = static_cast<size_t>(size());
  if (x.sendCounts.size() != ranks || x.sendOffsets.size() != ranks ||
      x.recvCounts.size() != ranks || x.recvOffsets.size() != ranks ||
      x.elementBytes <= 0)
    return invalidArgument("an exchange needs a count and an offset per rank "
                           "and a positive element size");
  const int64_t limit = std::numeric_limits<int64_t>::max() / x.elementBytes;
  for (const std::vector<int64_t> *values :
       {&x.sendCounts, &x.sendOffsets, &x.recvCounts, &x.recvOffsets})
    for (int64_t v : *values)
      if (v < 0 || v > limit)
        return invalidArgument("an exchange count or offset of " +
                               std::to_string(v) + " elements is out of range");
  const size_t me = static_cast<size_t>(rank());
  if (x.sendCounts[me] != x.recvCounts[me])
    return invalidArgument("an exchange sends " +
                           std::to_string(x.sendCounts[me]) +
                           " elements to its own rank but receives " +
                           std::to_string(x.recvCounts[me]));
  return okStatus();
}

StatusOr<PendingExchange> NcclCommunicator::start(const AllToAllV &x) {
  MUON_RETURN_IF_ERROR(usable());
  MUON_RETURN_IF_ERROR(validate(x));
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
  if (!failure.empty())
    return abandon(unavailable(failure));

  cudaEvent_t done = takeEvent();
  MUON_CUDA_CHECK(cudaEventRecord(done, commStream));
  const int64_t handle = nextId++;
  inFlight[handle] = done;
  return PendingExchange{handle};
}

Status NcclCommunicator::wait(PendingExchange &pending, double timeoutSeconds) {
  auto it = inFlight.find(pending.id);
  if (it == inFlight.end())
    return failedPrecondition("wait on an exchange that was not started");
  cudaEvent_t done = it->second;
  inFlight.erase(it);
  pending.id = -1;
  CurrentDevice current(gpu.ordinal);
  if (Status broken = usable(); !broken.ok()) {
    MUON_CUDA_CHECK(cudaEventDestroy(done));
    return broken;
  }

  // While the device records a step graph, the wait is the graph's
  // dependency on the exchange: nothing to poll (the graph has not run).
  if (!recording()) {
    Status status = pollUntilDone(done, timeoutSeconds);
    if (!status.ok()) {
      // Released by CUDA once the aborted work completes.
      MUON_CUDA_CHECK(cudaEventDestroy(done));
      return abandon(status);
    }
  }
  // What arrived is read by work queued on the compute stream from now on.
  MUON_CUDA_CHECK(cudaStreamWaitEvent(gpu.computeStream, done, 0));
  spareEvents.push_back(done);
  return okStatus();
}

bool NcclCommunicator::recording() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(gpu.computeStream, &status) == cudaSuccess &&
         status != cudaStreamCaptureStatusNone;
}

Status NcclCommunicator::pollUntilDone(cudaEvent_t done,
                                       double timeoutSeconds) {
  auto deadline = std::chrono::steady_clock::now() +
                  std::chrono::duration<double>(timeoutSeconds);
  int spins = 0;
  while (true) {
    cudaError_t status = cudaEventQuery(done);
    if (status == cudaSuccess)
      return okStatus();
    if (status != cudaErrorNotReady)
      return internalError("the GPU failed during an exchange: " +
                           describe(status));
    nccl::Result async = nccl::kSuccess;
    nccl::Result result = nccl.commGetAsyncError(comm, &async);
    if (result != nccl::kSuccess)
      return unavailable("ncclCommGetAsyncError: " + nccl.describe(result));
    if (async != nccl::kSuccess && async != nccl::kInProgress)
      return unavailable("NCCL: " + nccl.describe(async));
    if (std::chrono::steady_clock::now() > deadline)
      return deadlineExceeded(timeoutSeconds);
    if (++spins > 64)
      std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

Status NcclCommunicator::waitForReplay(double timeoutSeconds) {
  MUON_RETURN_IF_ERROR(usable());
  CurrentDevice current(gpu.ordinal);
  // The replayed exchanges end before the compute stream's work queued so
  // far does: its end is theirs.
  cudaEvent_t done = takeEvent();
  MUON_CUDA_CHECK(cudaEventRecord(done, gpu.computeStream));
  Status status = pollUntilDone(done, timeoutSeconds);
  if (!status.ok()) {
    MUON_CUDA_CHECK(cudaEventDestroy(done));
    return abandon(status);
  }
  spareEvents.push_back(done);
  return okStatus();
}

} // namespace

StatusOr<std::unique_ptr<Communicator>>
setUpNcclCommunicator(Communicator &bootstrap, const NcclPlacement *gpu,
                      const nccl::Library *library, Status local) {
  // Every rank prepares what it can alone, then all agree before the
  // collective part, so that one rank's failure fails every rank at once
  // instead of leaving the others waiting.
  std::unique_ptr<NcclCommunicator> comm;
  if (local.ok()) {
    comm = std::make_unique<NcclCommunicator>(bootstrap, *gpu, *library);
    local = comm->prepare();
    if (!local.ok())
      comm.reset();
  }
  const int64_t none = std::numeric_limits<int64_t>::max();
  StatusOr<int64_t> firstFailed = bootstrap.allReduceMin(
      local.ok() ? none : bootstrap.rank(), kSetupTimeoutSeconds);
  if (!firstFailed.ok())
    return firstFailed.status().withContext("setting up NCCL: ");
  if (!local.ok())
    return local.withContext("setting up NCCL: ");
  if (*firstFailed != none)
    return unavailable("setting up NCCL: rank " + std::to_string(*firstFailed) +
                       " could not (see its message)");
  if (Status status = comm->connect(); !status.ok())
    return status.withContext("setting up NCCL " + library->version() + " (" +
                              library->file + "): ");
  return std::unique_ptr<Communicator>(std::move(comm));
}

} // namespace muon::runtime::cuda
