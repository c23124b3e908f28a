//===- NcclLibrary.h - NCCL, loaded at run time -----------------*- C++ -*-===//
//
// The few NCCL entry points the communicator uses, resolved with dlopen and
// dlsym, so that the backend neither links libnccl nor needs nccl.h to
// build: programs start where NCCL is missing, and fail only when they ask
// for an NCCL communicator. The types below mirror nccl.h's C ABI (NCCL 2:
// results and data types are C enums, passed as int; the unique id is 128
// bytes passed by value).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_NCCLLIBRARY_H
#define MUON_RUNTIME_CUDA_NCCLLIBRARY_H

#include "muon/Support/Status.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <string>

namespace muon::runtime::cuda::nccl {

using Result = int; // ncclResult_t
constexpr Result kSuccess = 0;
constexpr Result kInProgress = 7;

using DataType = int;         // ncclDataType_t
constexpr DataType kChar = 0; // ncclChar: exchanges move bytes

struct UniqueId {
  char internal[128]; // NCCL_UNIQUE_ID_BYTES
};

struct OpaqueComm;
using Comm = OpaqueComm *; // ncclComm_t

struct Library {
  Result (*getUniqueId)(UniqueId *) = nullptr;
  Result (*commInitRank)(Comm *, int ranks, UniqueId id, int rank) = nullptr;
  Result (*commDestroy)(Comm) = nullptr;
  Result (*commAbort)(Comm) = nullptr;
  Result (*commGetAsyncError)(Comm, Result *) = nullptr;
  const char *(*getErrorString)(Result) = nullptr;
  Result (*groupStart)() = nullptr;
  Result (*groupEnd)() = nullptr;
  Result (*send)(const void *, size_t, DataType, int peer, Comm,
                 cudaStream_t) = nullptr;
  Result (*recv)(void *, size_t, DataType, int peer, Comm,
                 cudaStream_t) = nullptr;
  Result (*getVersion)(int *) = nullptr; // optional
  std::string file;                      // what was loaded

  /// "<NCCL's text> (NCCL error N)".
  std::string describe(Result result) const;
  /// "2.28.9", or "unknown".
  std::string version() const;
};

/// The NCCL library in `file` (a name dlopen searches for, or a path),
/// never unloaded (NCCL keeps threads); Unavailable naming the file and
/// dlerror's text, or the missing entry point. `overridden`: the file came
/// from MUON_NCCL_LIBRARY, which the failure then says.
StatusOr<std::unique_ptr<Library>> open(const std::string &file,
                                        bool overridden);

/// NCCL, loaded once per process and never unloaded (it keeps threads):
/// libnccl.so.2, or the file MUON_NCCL_LIBRARY names. Unavailable as open
/// says it (the file and dlerror's text, or the missing entry point).
StatusOr<const Library *> load();

} // namespace muon::runtime::cuda::nccl

#endif // MUON_RUNTIME_CUDA_NCCLLIBRARY_H
