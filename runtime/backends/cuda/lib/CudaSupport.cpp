//===- CudaSupport.cpp - CUDA and cuBLAS error checks, current GPU --------===//
#include "CudaSupport.h"

#include "CublasLibrary.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

namespace muon::runtime::cuda {

namespace {
thread_local std::string firstFailure;
} // namespace

void recordFailure(const char *what, const std::string &detail,
                   const char *file, int line) {
  if (!firstFailure.empty())
    return;
  const char *base = std::strrchr(file, '/');
  // `what` is the call's text (MUON_CUDA_CHECK's #call): its function name
  // says enough, the file and line say where.
  std::string call(what);
  // A call through cuBLAS's table (CublasLibrary.h): the function's name.
  const std::string table = "cublas::api().";
  if (call.compare(0, table.size(), table) == 0)
    call = call.substr(table.size());
  call = call.substr(0, call.find('('));
  firstFailure = "CUDA backend: " + call + " failed at " +
                 (base ? base + 1 : file) + ":" + std::to_string(line) + ": " +
                 detail;
}

std::string takeFailure() { return std::exchange(firstFailure, {}); }

std::string describe(cudaError_t error) {
  return std::string(cudaGetErrorName(error)) + ": " +
         cudaGetErrorString(error);
}

std::string describe(cublasStatus_t status) {
  if (!cublas::loaded()) // a status needs cuBLAS, which made it
    return "cuBLAS status " + std::to_string(static_cast<int>(status));
  const cublas::Library &blas = cublas::api();
  return std::string(blas.cublasGetStatusName(status)) + ": " +
         blas.cublasGetStatusString(status);
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
