//===- NcclLibrary.cpp - NCCL, loaded at run time -------------------------===//
#include "NcclLibrary.h"

#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#include <mutex>

namespace muon::runtime::cuda::nccl {

std::string Library::describe(Result result) const {
  const char *text = getErrorString ? getErrorString(result) : nullptr;
  return std::string(text ? text : "unknown error") + " (NCCL error " +
         std::to_string(result) + ")";
}

std::string Library::version() const {
  int code = 0;
  if (!getVersion || getVersion(&code) != kSuccess || code <= 0)
    return "unknown";
  // NCCL_VERSION(X, Y, Z): X * 10000 + Y * 100 + Z since 2.9, before that
  // X * 1000 + Y * 100 + Z (2.7.8 is 2708).
  if (code < 10000)
    return std::to_string(code / 1000) + "." + std::to_string(code / 100 % 10) +
           "." + std::to_string(code % 100);
  return std::to_string(code / 10000) + "." + std::to_string(code / 100 % 100) +
         "." + std::to_string(code % 100);
}

/// Points `slot` at `symbol`; Unavailable naming it.
template <typename F>
static Status resolve(void *handle, const char *symbol, F &slot,
                      const std::string &file) {
  void *address = dlsym(handle, symbol);
  if (!address)
    return unavailable(file + " has no " + symbol +
                       " (the CUDA backend needs NCCL 2.7 or newer)");
  slot = reinterpret_cast<F>(address);
  return okStatus();
}

/// Every entry point the transport calls, into `l`.
static Status resolveAll(void *handle, Library &l, const std::string &file) {
  MUON_RETURN_IF_ERROR(resolve(handle, "ncclGetUniqueId", l.getUniqueId, file));
  MUON_RETURN_IF_ERROR(
      resolve(handle, "ncclCommInitRank", l.commInitRank, file));
  MUON_RETURN_IF_ERROR(resolve(handle, "ncclCommDestroy", l.commDestroy, file));
  MUON_RETURN_IF_ERROR(resolve(handle, "ncclCommAbort", l.commAbort, file));
  MUON_RETURN_IF_ERROR(
      resolve(handle, "ncclCommGetAsyncError", l.commGetAsyncError, file));
  MUON_RETURN_IF_ERROR(
      resolve(handle, "ncclGetErrorString", l.getErrorString, file));
  MUON_RETURN_IF_ERROR(resolve(handle, "ncclGroupStart", l.groupStart, file));
  MUON_RETURN_IF_ERROR(resolve(handle, "ncclGroupEnd", l.groupEnd, file));
  MUON_RETURN_IF_ERROR(resolve(handle, "ncclSend", l.send, file));
  return resolve(handle, "ncclRecv", l.recv, file);
}

StatusOr<std::unique_ptr<Library>> open(const std::string &file,
                                        bool overridden) {
  void *handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    return unavailable(
        (overridden ? "cannot load NCCL from '" + file +
                          "' (MUON_NCCL_LIBRARY, instead of libnccl.so.2): "
                    : "cannot load " + file +
                          " (install NCCL 2 or point MUON_NCCL_LIBRARY at "
                          "it): ") +
        (why ? why : "unknown dlopen error"));
  }
  auto library = std::make_unique<Library>();
  library->file = file;
  if (Status resolved = resolveAll(handle, *library, file); !resolved.ok()) {
    dlclose(handle);
    return resolved;
  }
  if (!resolve(handle, "ncclGetVersion", library->getVersion, file).ok())
    library->getVersion = nullptr;
  return library;
}

StatusOr<const Library *> load() {
  static std::mutex mutex;
  static std::unique_ptr<Library> loaded; // never unloaded
  std::lock_guard<std::mutex> lock(mutex);
  if (!loaded) {
    const char *chosen = std::getenv("MUON_NCCL_LIBRARY");
    const bool overridden = chosen && *chosen;
    MUON_ASSIGN_OR_RETURN(
        loaded, open(overridden ? chosen : "libnccl.so.2", overridden));
  }
  return static_cast<const Library *>(loaded.get());
}

} // namespace muon::runtime::cuda::nccl
