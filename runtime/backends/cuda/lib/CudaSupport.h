//===- CudaSupport.h - CUDA and cuBLAS checks, the current GPU --*- C++ -*-===//
//
// Every CUDA and cuBLAS call of the backend goes through these checks. A
// failure inside a Device operation cannot be returned (the interface has no
// error path there, and a GPU reports many failures later anyway), so the
// first one is recorded with the call, the place and the library's own text;
// the device hands it over at CudaDevice::takeError, after the step's work,
// and every rank fails that step with it. Operations go on after a failure:
// CUDA's errors are sticky, so what follows fails too or computes values
// the failed step discards.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_CUDASUPPORT_H
#define MUON_RUNTIME_CUDA_CUDASUPPORT_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

namespace muon::runtime::cuda {

/// Records "CUDA backend: <what> failed at <file>:<line>: <detail>" as this
/// thread's first failure (a device is driven from one thread; a later
/// failure before takeFailure is a consequence and is dropped).
void recordFailure(const char *what, const std::string &detail,
                   const char *file, int line);
/// This thread's first failure since the last call ("" if none), cleared.
std::string takeFailure();

/// "<name>: <description>" of a CUDA error.
std::string describe(cudaError_t error);
std::string describe(cublasStatus_t status);

/// False (and recorded) on a failure.
inline bool check(cudaError_t error, const char *what, const char *file,
                  int line) {
  if (error == cudaSuccess)
    return true;
  recordFailure(what, describe(error), file, line);
  return false;
}

inline bool check(cublasStatus_t status, const char *what, const char *file,
                  int line) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return true;
  recordFailure(what, describe(status), file, line);
  return false;
}

/// Makes a GPU current for a scope and restores the caller's afterwards
/// (the current device is per thread, and a trainer may drive several).
class CurrentDevice {
public:
  explicit CurrentDevice(int ordinal);
  ~CurrentDevice();
  CurrentDevice(const CurrentDevice &) = delete;
  CurrentDevice &operator=(const CurrentDevice &) = delete;

private:
  int previous = -1; // -1: it already was current
};

} // namespace muon::runtime::cuda

#define MUON_CUDA_CHECK(call)                                                  \
  ::muon::runtime::cuda::check((call), #call, __FILE__, __LINE__)

/// After a kernel launch: a bad configuration or a missing kernel image.
#define MUON_CUDA_CHECK_LAUNCH(kernel)                                         \
  ::muon::runtime::cuda::check(cudaGetLastError(), "launching " kernel,        \
                               __FILE__, __LINE__)

#endif // MUON_RUNTIME_CUDA_CUDASUPPORT_H
