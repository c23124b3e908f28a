//===- CublasLibrary.h - cuBLAS, loaded at run time -------------*- C++ -*-===//
//
// The cuBLAS entry points the backend calls, resolved with dlopen and dlsym
// when the first GPU device is made, so that nothing links libcublas: a
// program (or muonc's wheel) with the CUDA backend starts and runs on the
// CPU where cuBLAS is missing, never maps its ~600 MB, and shares the copy
// torch already loaded. The types come from cublas_v2.h, so a call through
// the table is checked as a direct call would be. Where the library comes
// from, first found first:
//   1. MUON_CUBLAS_LIBRARY (a path, or a name dlopen searches for);
//   2. a libcublas.so.<major> already in the process (torch's, or one the
//      program links);
//   3. the directories given to addSearchDirectory (muonc: the lib/ folders
//      of NVIDIA's pip wheels, nvidia-cublas, which torch depends on);
//   4. dlopen's own search (LD_LIBRARY_PATH, ld.so.cache);
//   5. the toolkit: $CUDA_HOME/lib64, $CUDA_PATH/lib64, /usr/local/cuda/lib64.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_CUBLASLIBRARY_H
#define MUON_RUNTIME_CUDA_CUBLASLIBRARY_H

#include "muon/Support/Status.h"

#include <cublas_v2.h>

#include <memory>
#include <string>
#include <vector>

namespace muon::runtime::cuda::cublas {

// cublas_api.h adds C++ overloads of three GEMMs (a cudaDataType compute
// type, the CUDA 10 API): their C entry points, by type.
using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t,
                                  cublasOperation_t, int, int, int,
                                  const void *, const void *, cudaDataType,
                                  int, const void *, cudaDataType, int,
                                  const void *, void *, cudaDataType, int,
                                  cublasComputeType_t, cublasGemmAlgo_t);
using GemmStridedBatchedEx = cublasStatus_t (*)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
    const void *, const void *, cudaDataType, int, long long, const void *,
    cudaDataType, int, long long, const void *, void *, cudaDataType, int,
    long long, int, cublasComputeType_t, cublasGemmAlgo_t);
using GemmBatchedEx = cublasStatus_t (*)(
    cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
    const void *, const void *const[], cudaDataType, int, const void *const[],
    cudaDataType, int, const void *, void *const[], cudaDataType, int, int,
    cublasComputeType_t, cublasGemmAlgo_t);

// Every entry point: its exported name and its type (the header's, checked
// in CublasLibrary.cpp). cublas_v2.h maps cublasCreate to cublasCreate_v2
// (and Destroy, SetStream, SetWorkspace): `api().cublasCreate(...)` reads
// as the call it replaces.
#define MUON_CUBLAS_ENTRY_POINTS(X)                                            \
  X(cublasCreate_v2, decltype(&::cublasCreate_v2))                             \
  X(cublasDestroy_v2, decltype(&::cublasDestroy_v2))                           \
  X(cublasSetStream_v2, decltype(&::cublasSetStream_v2))                       \
  X(cublasSetMathMode, decltype(&::cublasSetMathMode))                         \
  X(cublasSetWorkspace_v2, decltype(&::cublasSetWorkspace_v2))                 \
  X(cublasGetStatusName, decltype(&::cublasGetStatusName))                     \
  X(cublasGetStatusString, decltype(&::cublasGetStatusString))                 \
  X(cublasGemmEx, GemmEx)                                                      \
  X(cublasGemmStridedBatchedEx, GemmStridedBatchedEx)                          \
  X(cublasGemmBatchedEx, GemmBatchedEx)                                        \
  X(cublasGemmGroupedBatchedEx, decltype(&::cublasGemmGroupedBatchedEx))

struct Library {
#define MUON_CUBLAS_POINTER(name, type) type name = nullptr;
  MUON_CUBLAS_ENTRY_POINTS(MUON_CUBLAS_POINTER)
#undef MUON_CUBLAS_POINTER
  std::string file; // what was loaded
};

/// cuBLAS found as above, with `directories` for step 3; Unavailable
/// naming what was tried and why it failed. Never unloaded.
StatusOr<std::unique_ptr<Library>>
open(const std::vector<std::string> &directories);

/// Adds a directory searched for libcublas.so.<major> (step 3 above).
/// Takes effect for a load not yet made.
void addSearchDirectory(const std::string &directory);

/// open() with addSearchDirectory's directories, once per process (a
/// failure is tried again at the next call). Thread-safe.
StatusOr<const Library *> load();

/// The library load() returned; only after it succeeded (a CudaDevice
/// exists).
const Library &api();

/// Whether load() has succeeded.
bool loaded();

} // namespace muon::runtime::cuda::cublas

#endif // MUON_RUNTIME_CUDA_CUBLASLIBRARY_H
