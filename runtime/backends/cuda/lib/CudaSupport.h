//===- CudaSupport.h - CUDA and cuBLAS checks, the current GPU --*- C++ -*-===//
//
// Every CUDA and cuBLAS call of the backend goes through these checks. A
// failure inside a Device operation cannot be returned (the interface has no
// error path there), so it ends the process with the call, the place and
// the library's own text.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_CUDASUPPORT_H
#define MUON_RUNTIME_CUDA_CUDASUPPORT_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <string>

namespace muon::runtime::cuda {

/// Prints "muon: CUDA backend: <what> failed at <file>:<line>: <detail>" and
/// aborts.
[[noreturn]] void fatal(const char *what, const std::string &detail,
                        const char *file, int line);

/// "<name>: <description>" of a CUDA error.
std::string describe(cudaError_t error);
std::string describe(cublasStatus_t status);

inline void check(cudaError_t error, const char *what, const char *file,
                  int line) {
  if (error != cudaSuccess)
    fatal(what, describe(error), file, line);
}

inline void check(cublasStatus_t status, const char *what, const char *file,
                  int line) {
  if (status != CUBLAS_STATUS_SUCCESS)
    fatal(what, describe(status), file, line);
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
