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

/// Points `slot` at `symbol`; false with `error` naming it.
template <typename F>
static bool resolve(void *handle, const char *symbol, F &slot,
                    const std::string &file, std::string &error) {
  void *address = dlsym(handle, symbol);
  if (!address) {
    error = file + " has no " + symbol + " (the CUDA backend needs NCCL 2.7 " +
            "or newer)";
    return false;
  }
  slot = reinterpret_cast<F>(address);
  return true;
}

std::unique_ptr<Library> open(const std::string &file, bool overridden,
                              std::string &error) {
  void *handle = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char *why = dlerror();
    error = overridden ? "cannot load NCCL from '" + file +
                             "' (MUON_NCCL_LIBRARY, instead of libnccl.so.2): "
                       : "cannot load " + file +
                             " (install NCCL 2 or point MUON_NCCL_LIBRARY at "
                             "it): ";
    error += why ? why : "unknown dlopen error";
    return nullptr;
  }
  auto library = std::make_unique<Library>();
  library->file = file;
  Library &l = *library;
  if (!resolve(handle, "ncclGetUniqueId", l.getUniqueId, file, error) ||
      !resolve(handle, "ncclCommInitRank", l.commInitRank, file, error) ||
      !resolve(handle, "ncclCommDestroy", l.commDestroy, file, error) ||
      !resolve(handle, "ncclCommAbort", l.commAbort, file, error) ||
      !resolve(handle, "ncclCommGetAsyncError", l.commGetAsyncError, file,
               error) ||
      !resolve(handle, "ncclGetErrorString", l.getErrorString, file, error) ||
      !resolve(handle, "ncclGroupStart", l.groupStart, file, error) ||
      !resolve(handle, "ncclGroupEnd", l.groupEnd, file, error) ||
      !resolve(handle, "ncclSend", l.send, file, error) ||
      !resolve(handle, "ncclRecv", l.recv, file, error)) {
    dlclose(handle);
    return nullptr;
  }
  std::string ignored;
  if (!resolve(handle, "ncclGetVersion", l.getVersion, file, ignored))
    l.getVersion = nullptr;
  return library;
}

const Library *load(std::string &error) {
  static std::mutex mutex;
  static std::unique_ptr<Library> loaded; // never unloaded
  std::lock_guard<std::mutex> lock(mutex);
  if (!loaded) {
    const char *chosen = std::getenv("MUON_NCCL_LIBRARY");
    const bool overridden = chosen && *chosen;
    loaded = open(overridden ? chosen : "libnccl.so.2", overridden, error);
  }
  return loaded.get();
}

} // namespace muon::runtime::cuda::nccl
