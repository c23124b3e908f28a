//===- CudaBackend.h - The CUDA backend: GPUs, devices, NCCL ----*- C++ -*-===//
//
// The entry points of the CUDA backend (MuonRuntimeCuda). Plain C++: a
// trainer compiled without nvcc includes it; CUDA, cuBLAS and NCCL stay
// inside the library. The CUDA runtime is linked statically; cuBLAS is
// loaded at run time (dlopen) with the first device, NCCL with the first
// NCCL communicator, so a program linked with this backend starts, and runs
// on the CPU, on machines without them, and fails only when it asks for a
// GPU device (no cuBLAS) or an NCCL communicator (no NCCL).
//
// A device owns one compute stream on its GPU (ordered with the legacy
// default stream, so a trainer's work there is done before the optimizer's
// starts; another stream of the trainer's is ordered with waitForStream /
// streamWaitsForDevice) and one cuBLAS handle. A CUDA or cuBLAS failure
// inside a Device operation is recorded, and the step that made it fails
// on every rank with its text (Device::takeError); allocate() reports
// running out of memory with nullptr.
//
// Environment, read when a device is created:
//   MUON_CUDA_SYMMETRIC_MIN   Gram side m from which Newton-Schulz computes
//                             only the lower tiles of the symmetric products
//                             (default 2048; 0: always)
//   MUON_CUDA_SYMMETRIC_TILE  the tile side of that path, rounded up to a
//                             multiple of 8 (default: about 1024, a
//                             multiple of 128, chosen per m)
//   MUON_CUDA_GROUPED_GEMM    1: issue the tiles as one grouped GEMM
//                             instead of one batched call per tile shape
//                             (default 0: faster on an H100)
//   MUON_CUDA_NS_FORM         Newton-Schulz's form, as the CPU's
//                             MUON_CPU_NS_FORM: auto (default: the Gram
//                             form on wide and tall matrices where it pays
//                             and the coefficients keep its accuracy),
//                             standard or gram (DeviceOptions::nsForm)
//   MUON_CUBLAS_LIBRARY       the cuBLAS library to load (default: the
//                             libcublas.so.<major> already loaded, else
//                             one in addLibraryDirectory's directories,
//                             dlopen's search, then the toolkit's lib64)
// and when an NCCL communicator is created:
//   MUON_NCCL_LIBRARY         the NCCL library to load (default
//                             libnccl.so.2)
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_CUDABACKEND_H
#define MUON_RUNTIME_CUDA_CUDABACKEND_H

#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/Device.h"
#include "muon/Runtime/NsForm.h"

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace muon::runtime::cuda {

/// Adds a directory searched for cuBLAS (libcublas.so.<major>) after a
/// copy already loaded and before dlopen's own search: muonc gives the lib/
/// folders of NVIDIA's pip wheels (nvidia-cublas, which torch depends on).
/// Takes effect until the first device is made.
void addLibraryDirectory(const std::string &directory);

/// Usable CUDA GPUs (at least 1), or Unavailable saying why there are none
/// (no driver, no device, a driver too old), never a crash.
StatusOr<int> deviceCount();

/// The environment variable that picks Newton-Schulz's form for devices
/// made without DeviceOptions (muon-run's --ns-form sets it for its ranks).
inline constexpr const char *kNsFormVariable = "MUON_CUDA_NS_FORM";

/// What a caller may set on a device instead of the environment.
struct DeviceOptions {
  /// Newton-Schulz's form (muon/Runtime/NsForm.h), with the CPU's meaning;
  /// default: MUON_CUDA_NS_FORM, else auto.
  NsForm nsForm = nsFormFromEnvironment();
  /// MUON_CUDA_NS_FORM's form; auto when unset (an unknown value is refused
  /// by createDevice).
  static NsForm nsFormFromEnvironment();
};

/// A device on GPU `ordinal` with its own compute stream and cuBLAS handle:
/// Unavailable without a usable GPU or cuBLAS, NotFound for an ordinal the
/// machine does not have, InvalidArgument for a MUON_CUDA_* value it
/// cannot read, FailedPrecondition for a GPU older than sm_80.
StatusOr<std::unique_ptr<Device>>
createDevice(int ordinal, const DeviceOptions &options = DeviceOptions());

/// Orders a device from createDevice with a stream of the caller's on its
/// GPU (a `cudaStream_t` as `void *`; torch's
/// `torch.cuda.current_stream().cuda_stream`; 0 is the legacy default
/// stream), through an event and without a host wait. Before a step,
/// `waitForStream(device, s)`: the step's work starts after what `s` holds
/// now (the gradients). After it, `streamWaitsForDevice(device, s)`: what is
/// queued on `s` from then on starts after the step's work (the new
/// parameters, a gradient's memory handed back to a caching allocator).
/// InvalidArgument for another device or a stream CUDA refuses.
Status waitForStream(Device &device, void *stream);
Status streamWaitsForDevice(Device &device, void *stream);

/// "cuda:0 (NVIDIA H100 80GB HBM3, sm_90, 132 SMs, 79.1 GiB)" for a device
/// from createDevice; its name() for any other.
std::string describeDevice(const Device &device);

/// What Newton-Schulz in `precision` with the steps `abc` runs on a device
/// from createDevice, for summaries, as the CPU's describeNewtonSchulz says
/// it: "bf16 products, f32 accumulation (cuBLAS); Gram form on wide and
/// tall matrices", "f16 products, f32 accumulation (cuBLAS)", "f32 products
/// (cuBLAS, no TF32)".
std::string describeNewtonSchulz(const Device &device, DType precision,
                                 const std::vector<std::array<double, 3>> &abc);

/// How the last newtonSchulz call on `device` (from createDevice) ran its
/// products: "full", "grouped" or "batched per tile shape", with ", Gram
/// form" after it when it took the Gram form; empty for another device.
std::string lastNewtonSchulzPath(const Device &device);

/// Seconds of one (m x k) x (k x n) cuBLAS product on `device` (from
/// createDevice) as Newton-Schulz runs its products in `dtype` (BF16, F16:
/// bf16 or f16 operands and result, f32 accumulation; F32 without TF32), on
/// random data: the median of `repeats` runs after one to warm up, timed
/// with events on the device's stream. InvalidArgument for another device
/// or sizes beyond cuBLAS's int range, ResourceExhausted without room on
/// the GPU.
StatusOr<double> gemmSeconds(Device &device, int64_t m, int64_t n, int64_t k,
                             DType dtype, int repeats);

/// Payload exchanges over NCCL (one rank per GPU); control collectives
/// (allGather, allReduceMin, gatherToRoot, abort) go through `bootstrap` (an
/// MPI communicator), which also carries NCCL's unique id from rank 0 to
/// every rank. Loads libnccl.so.2 with dlopen (MUON_NCCL_LIBRARY overrides
/// the file name); Unavailable when it cannot. `device` must come
/// from createDevice and outlive the communicator, as must `bootstrap`.
/// Collective over `bootstrap`: every rank calls it, and every rank fails
/// when one cannot set up. Warms the communicator up (one tiny all-to-all),
/// so that the first exchange of a step does not pay for NCCL's connections.
StatusOr<std::unique_ptr<Communicator>>
createNcclCommunicator(Communicator &bootstrap, Device &device);

/// Registers the device backend "cuda" ("cuda", "cuda:N") and the transport
/// "nccl" with the runtime's registry (muon/Runtime/Backends.h). Whoever
/// links this backend calls it once; calling it again is harmless.
void registerBackend();

} // namespace muon::runtime::cuda

#endif // MUON_RUNTIME_CUDA_CUDABACKEND_H
