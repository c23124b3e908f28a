// consumer: links the installed CUDA backend (Muon::Cuda) and asks it for
// GPUs; on a machine without one it must say why, not crash.
#include "muon/Runtime/Cuda/CudaBackend.h"

#include <cstdio>
#include <string>

int main() {
  std::string error;
  int count = muon::runtime::cuda::deviceCount(error);
  if (count == 0) {
    std::printf("cuda consumer: no GPU: %s\n", error.c_str());
    return 0;
  }
  auto device = muon::runtime::cuda::createDevice(0, error);
  if (!device) {
    std::printf("cuda consumer: %d GPU(s), device 0 failed: %s\n", count,
                error.c_str());
    return 1;
  }
  std::printf("cuda consumer: %d GPU(s), %s\n", count,
              muon::runtime::cuda::describeDevice(*device).c_str());
  return 0;
}
