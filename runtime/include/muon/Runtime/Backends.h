//===- Backends.h - Devices and transports by name --------------*- C++ -*-===//
//
// The runtime's backends, by the names users write (`muon-run --backend`,
// the C API's options): one place that knows which are there, so that the
// tools, the C API and a trainer open them the same way. The CPU device,
// the "single" process group and the "mpi" and "host" transports are always
// registered; another backend is its own folder under runtime/backends/
// that registers its factories (MPI's process group:
// cpu::registerMpiBackend(); the CUDA backend: cuda::registerBackend();
// each called by whoever links it).
//
//   std::unique_ptr<Communicator> ranks;
//   Status s = createProcessGroup("mpi", {{"progress", "thread"}}, ranks);
//   std::unique_ptr<Device> device;
//   s = createDevice("cuda:0", device);             // or "cpu", "cuda"
//   s = createDevice("cpu", {{"ns_form", "gram"}, {"blas_threads", "4"}},
//                    device);                       // with options
//   std::unique_ptr<Communicator> comm;
//   s = createCommunicator("nccl", *ranks, *device, comm); // or "mpi", "host"
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_BACKENDS_H
#define MUON_RUNTIME_BACKENDS_H

#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/Device.h"
#include "muon/Runtime/NsForm.h"
#include "muon/Support/Status.h"

#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace muon::runtime {

/// What a device is opened with besides its name, by key, as text (what a
/// flag, the C API or Python hands over). Each backend reads the keys it
/// knows and refuses any other, naming it:
///   "ns_form"       "auto", "standard" or "gram": Newton-Schulz's form
///                   (muon/Runtime/NsForm.h); default: the backend's
///                   environment variable, else auto      [cpu, cuda]
///   "blas_threads"  N in [1, 4096]: this process's BLAS and oneDNN
///                   threads (process-wide); default: BLAS's own   [cpu]
using BackendOptions = std::map<std::string, std::string>;

/// Makes the device `name` ("cuda", "cuda:1", ...) of a backend.
using DeviceFactory =
    std::function<Status(const std::string &name, const BackendOptions &options,
                         std::unique_ptr<Device> &)>;
/// Makes a transport over `base` for `device`.
using TransportFactory = std::function<Status(
    Communicator &base, Device &device, std::unique_ptr<Communicator> &)>;
/// Makes a process group: the ranks of a run, which transports are built
/// over.
using ProcessGroupFactory = std::function<Status(
    const BackendOptions &options, std::unique_ptr<Communicator> &)>;

/// Registers a device backend for the names `backend` and `backend:N`, a
/// transport, and a process group; a later registration of the same name
/// replaces the earlier. Thread-safe.
void registerDeviceBackend(const std::string &backend, DeviceFactory factory);
void registerTransport(const std::string &name, TransportFactory factory);
void registerProcessGroup(const std::string &name,
                          ProcessGroupFactory factory);

/// The ranks of a run, by name, with options as for devices:
///  - "single": this process alone (no options);
///  - "mpi", once registered (cpu::registerMpiBackend(), in MuonRuntimeMpi):
///    MPI_COMM_WORLD, initializing MPI when nobody has; or with option
///    "comm", the Fortran handle (MPI_Comm_c2f) of a communicator of an MPI
///    the caller initialized (FailedPrecondition when MPI is not); option
///    "progress": "auto" (default), "thread" or "calls" (MpiProgress).
/// NotFound for a name not registered (the message lists those that are).
/// Collective for "mpi".
Status createProcessGroup(const std::string &name,
                          const BackendOptions &options,
                          std::unique_ptr<Communicator> &out);

/// A device by name: "cpu"; "cuda" (the first GPU) or "cuda:N" once the
/// CUDA backend is registered. NotFound for a name no registered backend
/// has (the message lists those that are), Unavailable for a backend that
/// finds no device here (the message says why).
Status createDevice(const std::string &name, std::unique_ptr<Device> &out);
Status createDevice(const std::string &name, const BackendOptions &options,
                    std::unique_ptr<Device> &out);

/// For backends: InvalidArgument naming the first key of `options` not in
/// `known` (and the ones that are), for `kind` ("device", "process group")
/// `name`.
Status checkOptionKeys(const std::string &name, const BackendOptions &options,
                       std::initializer_list<const char *> known,
                       const char *kind = "device");
/// For backends: `options`' "ns_form" into `form`, left as it is when the
/// key is absent; InvalidArgument for a value that is not a form.
Status nsFormOption(const std::string &name, const BackendOptions &options,
                    NsForm &form);

/// The communicator a rank's exchanges go through, made from `base` (the
/// MPI communicator of the run, which the result only borrows):
///  - "mpi": `base` itself (MPI moves the device's buffers; host memory);
///  - "host": host-staged over `base`, for device memory MPI cannot read
///    (HostStagedCommunicator);
///  - "nccl": NCCL on `device` (a CUDA device), bootstrapped through `base`.
/// Collective for "nccl" (every rank calls it).
Status createCommunicator(const std::string &kind, Communicator &base,
                          Device &device, std::unique_ptr<Communicator> &out);

/// What is registered: device backend names ("cpu", "cuda"), transports
/// ("mpi", "host", "nccl") and process groups ("mpi", "single"), sorted.
std::vector<std::string> deviceBackends();
std::vector<std::string> transports();
std::vector<std::string> processGroups();

} // namespace muon::runtime

#endif // MUON_RUNTIME_BACKENDS_H
