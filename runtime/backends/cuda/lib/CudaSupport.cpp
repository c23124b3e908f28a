//===- CudaSupport.cpp - CUDA and cuBLAS error checks, current GPU --------===//
#include "CudaSupport.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace muon::runtime::cuda {

void fatal(const char *what, const std::string &detail, const char *file,
           int line) {
  const char *base = std::strrchr(file, '/');
  std::fprintf(stderr, "muon: CUDA backend: %s failed at %s:%d: %s\n", what,
               base ? base + 1 : file, line, detail.c_str());
  std::fflush(stderr);
  std::abort();
}

std::string describe(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " +
         cudaGetErrorString(error);
}

std::string describe(cublasStatus_t status) {
  return std::string(cublasGetStatusName(status)) + ": " +
         cublasGetStatusString(status);
}

CurrentDevice::CurrentDevice(int ordinal) {
  int current = -1;
  MUON_CUDA_CHECK(cudaGetDevice(&current));
  if (current == ordinal)
    return;
  MUON_CUDA_CHECK(cudaSetDevice(ordinal));
  previous = current;
}

CurrentDevice::~CurrentDevice() {
  if (previous >= 0)
    MUON_CUDA_CHECK(cudaSetDevice(previous));
}

} // namespace muon::runtime::cuda
