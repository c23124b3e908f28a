//===- Backends.h - Devices and transports by name --------------*- C++ -*-===//
//
// The runtime's backends, by the names users write (`muon-run --backend`,
// the C API's options): one place that knows which are there, so that the
// tools, the C API and a trainer open them the same way. The CPU device and
// the "mpi" and "host" transports are always registered; another backend is
// its own folder under runtime/backends/ that registers its factories (the
// CUDA backend: cuda::registerBackend(), called by whoever links it).
//
//   std::unique_ptr<Device> device;
//   Status s = createDevice("cuda:0", device);      // or "cpu", "cuda"
//   std::unique_ptr<Communicator> comm;
//   s = createCommunicator("nccl", mpi, *device, comm); // or "mpi", "host"
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_BACKENDS_H
#define MUON_RUNTIME_BACKENDS_H

#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/Device.h"
#include "muon/Support/Status.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace muon::runtime {

/// Makes the device `name` ("cuda", "cuda:1", ...) of a backend.
using DeviceFactory =
    std::function<Status(const std::string &name, std::unique_ptr<Device> &)>;
/// Makes a transport over `base` for `device`.
using TransportFactory = std::function<Status(
    Communicator &base, Device &device, std::unique_ptr<Communicator> &)>;

/// Registers a device backend for the names `backend` and `backend:N`, and
/// a transport; a later registration of the same name replaces the
/// earlier. Thread-safe.
void registerDeviceBackend(const std::string &backend, DeviceFactory factory);
void registerTransport(const std::string &name, TransportFactory factory);

/// A device by name: "cpu"; "cuda" (the first GPU) or "cuda:N" once the
/// CUDA backend is registered. NotFound for a name no registered backend
/// has (the message lists those that are), Unavailable for a backend that
/// finds no device here (the message says why).
Status createDevice(const std::string &name, std::unique_ptr<Device> &out);

/// The communicator a rank's exchanges go through, made from `base` (the
/// MPI communicator of the run, which the result only borrows):
///  - "mpi": `base` itself (MPI moves the device's buffers; host memory);
///  - "host": host-staged over `base`, for device memory MPI cannot read
///    (HostStagedCommunicator);
///  - "nccl": NCCL on `device` (a CUDA device), bootstrapped through `base`.
/// Collective for "nccl" (every rank calls it).
Status createCommunicator(const std::string &kind, Communicator &base,
                          Device &device, std::unique_ptr<Communicator> &out);

/// What is registered: device backend names ("cpu", "cuda") and transports
/// ("mpi", "host", "nccl"), sorted.
std::vector<std::string> deviceBackends();
std::vector<std::string> transports();

} // namespace muon::runtime

#endif // MUON_RUNTIME_BACKENDS_H
