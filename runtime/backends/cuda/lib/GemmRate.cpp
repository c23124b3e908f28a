//===- GemmRate.cpp - How fast cuBLAS multiplies on a device --------------===//
//
// The rate Newton-Schulz's dense floor is measured against (muon-bench):
// one plain product with the types and compute mode of its products.
//
//===----------------------------------------------------------------------===//
#include "muon/Runtime/Cuda/CudaBackend.h"

#include "CublasLibrary.h"
#include "CudaDevice.h"
#include "CudaSupport.h"

#include <algorithm>
#include <climits>
#include <random>

namespace muon::runtime::cuda {

/// `count` values uniform in [-1, 1], stored as `type`, copied to `buffer`.
static void fillRandom(Device &device, const DeviceBuffer &buffer,
                       int64_t count, DType type, unsigned seed) {
  std::minstd_rand rng(seed);
  const float scale = 2.0f / static_cast<float>(std::minstd_rand::max());
  std::vector<uint8_t> host(static_cast<size_t>(count * dtypeBytes(type)));
  for (int64_t i = 0; i < count; ++i)
    storeAs(host.data(), type, i, static_cast<float>(rng()) * scale - 1.0f);
  device.copyToDevice(buffer.data(), host.data(),
                      static_cast<int64_t>(host.size()));
}

StatusOr<double> gemmSeconds(Device &device, int64_t m, int64_t n, int64_t k,
                             DType dtype, int repeats) {
  auto *gpu = dynamic_cast<CudaDevice *>(&device);
  if (!gpu)
    return invalidArgument(
        std::string("gemmSeconds needs a device from cuda::createDevice, "
                    "not the ") +
        device.name() + " device");
  if (m <= 0 || n <= 0 || k <= 0 || m > INT_MAX || n > INT_MAX || k > INT_MAX ||
      repeats < 1)
    return invalidArgument(
        "gemmSeconds: sizes must be in 1..2^31-1 and repeats at least 1");
  const DType precision = dtype;
  const int64_t width = dtypeBytes(precision);
  DeviceBuffer a(device, m * k * width), b(device, k * n * width),
      c(device, m * n * width);
  if (!a.ok() || !b.ok() || !c.ok())
    return Status(StatusCode::ResourceExhausted,
                  "gemmSeconds: no room on the GPU for a " + std::to_string(m) +
                      " x " + std::to_string(k) + " x " + std::to_string(n) +
                      " product");
  fillRandom(device, a, m * k, precision, 1);
  fillRandom(device, b, k * n, precision, 2);

  CurrentDevice current(gpu->ordinal());
  cudaEvent_t start = nullptr, stop = nullptr;
  MUON_CUDA_CHECK(cudaEventCreate(&start));
  MUON_CUDA_CHECK(cudaEventCreate(&stop));
  const cudaDataType_t type = gemmDataType(precision);
  const float alpha = 1.0f, beta = 0.0f;
  std::vector<double> seconds;
  for (int run = 0; run <= repeats; ++run) { // run 0 warms up
    MUON_CUDA_CHECK(cudaEventRecord(start, gpu->stream()));
    MUON_CUDA_CHECK(cublas::api().cublasGemmEx(
        gpu->blasHandle(), CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(m),
        static_cast<int>(n), static_cast<int>(k), &alpha, a.data(), type,
        static_cast<int>(m), b.data(), type, static_cast<int>(k), &beta,
        c.data(), type, static_cast<int>(m), gemmComputeType(precision),
        CUBLAS_GEMM_DEFAULT));
    MUON_CUDA_CHECK(cudaEventRecord(stop, gpu->stream()));
    MUON_CUDA_CHECK(cudaEventSynchronize(stop));
    float milliseconds = 0;
    MUON_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start, stop));
    if (run > 0)
      seconds.push_back(milliseconds / 1000.0);
  }
  MUON_CUDA_CHECK(cudaEventDestroy(start));
  MUON_CUDA_CHECK(cudaEventDestroy(stop));
  std::sort(seconds.begin(), seconds.end());
  const size_t middle = seconds.size() / 2;
  return seconds.size() % 2 ? seconds[middle]
                            : 0.5 * (seconds[middle - 1] + seconds[middle]);
}

} // namespace muon::runtime::cuda
