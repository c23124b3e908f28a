// consumer: links the installed CUDA backend (Muon::Cuda) and asks it for
// GPUs; on a machine without one it must say why, not crash.
#include "muon/Runtime/Cuda/CudaBackend.h"

#include <cstdio>
#include <string>

int main() {
  muon::StatusOr<int> count = muon::runtime::cuda::deviceCount();
  if (!count.ok()) {
    std::printf("cuda consumer: no GPU: %s\n",
                count.status().message().c_str());
    return 0;
  }
  auto device = muon::runtime::cuda::createDevice(0);
  if (!device.ok()) {
    std::printf("cuda consumer: %d GPU(s), device 0 failed: %s\n", *count,
                device.status().message().c_str());
    return 1;
  }
  std::printf("cuda consumer: %d GPU(s), %s\n", *count,
              muon::runtime::cuda::describeDevice(**device).c_str());
  return 0;
}
