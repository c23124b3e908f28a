//===- CudaBackend.cpp - GPUs, devices, the NCCL communicator -------------===//
#include "muon/Runtime/Cuda/CudaBackend.h"

#include "muon/Runtime/Backends.h"

#include "CublasLibrary.h"
#include "CudaDevice.h"
#include "CudaSupport.h"
#include "NcclCommunicator.h"

#include <cstdlib>
#include <optional>

namespace muon::runtime::cuda {

static std::string versionText(int version) {
  return std::to_string(version / 1000) + "." +
         std::to_string(version % 1000 / 10);
}

void addLibraryDirectory(const std::string &directory) {
  cublas::addSearchDirectory(directory);
}

StatusOr<int> deviceCount() {
  int count = 0;
  cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaSuccess && count > 0)
    return count;
  std::string error;
  (void)cudaGetLastError();
  int driver = 0, runtime = 0;
  (void)cudaDriverGetVersion(&driver);
  (void)cudaRuntimeGetVersion(&runtime);
  const char *visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (status == cudaSuccess || status == cudaErrorNoDevice) {
    error = "the CUDA driver sees no GPU";
    if (visible)
      error += std::string(" (CUDA_VISIBLE_DEVICES='") + visible + "')";
  } else if (driver == 0) {
    error = "no CUDA driver is installed (libcuda.so.1 was not found)";
  } else if (status == cudaErrorInsufficientDriver) {
    error = "the CUDA driver (" + versionText(driver) +
            ") is older than this build's runtime (" + versionText(runtime) +
            "); update the driver";
  } else {
    error = "cudaGetDeviceCount failed: " + describe(status);
  }
  return unavailable(error);
}

NsForm DeviceOptions::nsFormFromEnvironment() {
  NsForm form = NsForm::Auto;
  if (const char *value = std::getenv(kNsFormVariable))
    parseNsForm(value, form);
  return form;
}

StatusOr<std::unique_ptr<Device>> createDevice(int ordinal,
                                               const DeviceOptions &options) {
  MUON_ASSIGN_OR_RETURN(int count, deviceCount());
  if (ordinal < 0 || ordinal >= count)
    return notFound("there is no GPU " + std::to_string(ordinal) + " (" +
                    std::to_string(count) + " visible)");
  MUON_ASSIGN_OR_RETURN(std::unique_ptr<CudaDevice> device,
                        CudaDevice::create(ordinal, options));
  return std::unique_ptr<Device>(std::move(device));
}

std::string describeDevice(const Device &device) {
  if (auto *gpu = dynamic_cast<const CudaDevice *>(&device))
    return "cuda:" + std::to_string(gpu->ordinal()) + " (" +
           gpu->description() + ")";
  return device.name();
}

std::string describeNewtonSchulz(const Device &device, DType precision,
                                 const std::vector<std::array<double, 3>> &abc) {
  const auto *gpu = dynamic_cast<const CudaDevice *>(&device);
  const NsForm form = gpu ? gpu->nsForm() : NsForm::Standard;
  const bool gram = form == NsForm::Gram ||
                    (form == NsForm::Auto && gramKeepsAccuracy(abc));
  const char *products =
      precision == DType::BF16   ? "bf16 products, f32 accumulation (cuBLAS)"
      : precision == DType::F16 ? "f16 products, f32 accumulation (cuBLAS)"
                                : "f32 products (cuBLAS, no TF32)";
  return std::string(products) +
         (gram ? "; Gram form on wide and tall matrices" : "");
}

std::string lastNewtonSchulzPath(const Device &device) {
  const auto *gpu = dynamic_cast<const CudaDevice *>(&device);
  return gpu ? gpu->lastNewtonSchulzPath() : std::string();
}

/// `order` (CudaDevice::orderAfter or orderBefore) on a device from
/// createDevice.
static Status orderStreams(Device &device, void *stream,
                           Status (CudaDevice::*order)(cudaStream_t)) {
  auto *gpu = dynamic_cast<CudaDevice *>(&device);
  if (!gpu)
    return invalidArgument(std::string("stream order needs a device from "
                                       "cuda::createDevice, not the ") +
                           device.name() + " device");
  return (gpu->*order)(static_cast<cudaStream_t>(stream));
}

Status waitForStream(Device &device, void *stream) {
  return orderStreams(device, stream, &CudaDevice::orderAfter);
}

Status streamWaitsForDevice(Device &device, void *stream) {
  return orderStreams(device, stream, &CudaDevice::orderBefore);
}

StatusOr<std::unique_ptr<Communicator>>
createNcclCommunicator(Communicator &bootstrap, Device &device) {
  StatusOr<const nccl::Library *> loaded = nccl::load();
  const nccl::Library *library = loaded.ok() ? *loaded : nullptr;
  Status local = loaded.status();
  auto *gpu = dynamic_cast<CudaDevice *>(&device);
  if (local.ok() && !gpu)
    local = invalidArgument(
        std::string("NCCL needs a device from cuda::createDevice, not the ") +
        device.name() + " device");
  std::optional<NcclPlacement> placement;
  if (gpu)
    placement.emplace(NcclPlacement{*gpu, gpu->ordinal(), gpu->stream()});
  return setUpNcclCommunicator(bootstrap, placement ? &*placement : nullptr,
                               library, local);
}

void registerBackend() {
  registerDeviceBackend("cuda", [](const std::string &name,
                                   const BackendOptions &options,
                                   std::unique_ptr<Device> &out) {
    int ordinal = 0;
    if (name != "cuda") {
      char *end = nullptr;
      long n = std::strtol(name.c_str() + 5, &end, 10);
      if (name.size() == 5 || *end || n < 0 || n > 4096)
        return Status(StatusCode::NotFound,
                      "unknown device '" + name +
                          "'; expected 'cuda' or 'cuda:N'");
      ordinal = static_cast<int>(n);
    }
    MUON_RETURN_IF_ERROR(checkOptionKeys(name, options, {"ns_form"}));
    DeviceOptions gpuOptions;
    MUON_RETURN_IF_ERROR(nsFormOption(name, options, gpuOptions.nsForm));
    StatusOr<int> gpus = deviceCount();
    if (!gpus.ok())
      return unavailable("device '" + name + "': no usable GPU here (" +
                         gpus.status().message() + ")");
    if (ordinal >= *gpus)
      return unavailable("device '" + name + "': this machine has " +
                         std::to_string(*gpus) + " GPU(s)");
    StatusOr<std::unique_ptr<Device>> made = createDevice(ordinal, gpuOptions);
    if (!made.ok())
      return made.status().withContext("device '" + name + "': ");
    out = std::move(made).value();
    return okStatus();
  });
  registerTransport("nccl", [](Communicator &base, Device &device,
                               std::unique_ptr<Communicator> &out) {
    StatusOr<std::unique_ptr<Communicator>> comm =
        createNcclCommunicator(base, device);
    if (!comm.ok())
      return comm.status().withContext("transport 'nccl': ");
    out = std::move(comm).value();
    return okStatus();
  });
}

} // namespace muon::runtime::cuda
