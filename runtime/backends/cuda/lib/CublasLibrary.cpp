//===- CublasLibrary.cpp - cuBLAS, loaded at run time ---------------------===//
#include "CublasLibrary.h"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <type_traits>
#include <vector>

namespace muon::runtime::cuda::cublas {

// Each type is the header's declaration of the C entry point (an overloaded
// name resolves to the one of that type, or fails to compile). Unevaluated:
// nothing here links cuBLAS.
#define MUON_CUBLAS_CHECK(name, type)                                          \
  static_assert(std::is_same_v<decltype(static_cast<type>(&::name)), type>);
MUON_CUBLAS_ENTRY_POINTS(MUON_CUBLAS_CHECK)
#undef MUON_CUBLAS_CHECK

namespace {

std::mutex mutex;
std::vector<std::string> searchDirectories; // addSearchDirectory's
std::unique_ptr<Library> library;     // never unloaded
std::atomic<const Library *> ready{nullptr};

/// The file name of the cuBLAS this backend was compiled against: its ABI.
std::string soname() {
  return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
}

/// Points every entry of `l` into `handle`; Unavailable naming the first
/// one missing.
Status resolve(void *handle, Library &l) {
#define MUON_CUBLAS_RESOLVE(name, type)                                        \
  l.name = reinterpret_cast<type>(dlsym(handle, #name));                       \
  if (!l.name)                                                                 \
    return unavailable(l.file + " has no " #name                               \
                                " (the CUDA backend needs cuBLAS " +           \
                       std::to_string(CUBLAS_VER_MAJOR) + ")");
  MUON_CUBLAS_ENTRY_POINTS(MUON_CUBLAS_RESOLVE)
#undef MUON_CUBLAS_RESOLVE
  return okStatus();
}

std::string dlopenMessage() {
  const char *why = dlerror();
  return why ? why : "unknown dlopen error";
}

/// The steps of CublasLibrary.h after the override: a handle, with `file`
/// set, or Unavailable saying what was tried.
StatusOr<void *> search(const std::vector<std::string> &directories,
                        std::string &file) {
  const std::string name = soname();
  // 2. Already in the process: load nothing, share it.
  if (void *handle = dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD)) {
    file = name;
    return handle;
  }
  // 3 and 5: files in directories; 4: dlopen's search, between them.
  std::vector<std::string> toolkit;
  for (const char *variable : {"CUDA_HOME", "CUDA_PATH"})
    if (const char *root = std::getenv(variable); root && *root)
      toolkit.push_back(std::string(root) + "/lib64");
  toolkit.push_back("/usr/local/cuda/lib64");
  std::vector<std::string> candidates;
  for (const std::string &directory : directories)
    candidates.push_back(directory + "/" + name);
  candidates.push_back(name);
  for (const std::string &directory : toolkit)
    candidates.push_back(directory + "/" + name);
  std::string searched, nameWhy, fileWhy;
  for (const std::string &candidate : candidates) {
    const bool isPath = candidate.find('/') != std::string::npos;
    if (isPath) {
      searched += (searched.empty() ? "" : ", ") +
                  candidate.substr(0, candidate.rfind('/'));
      if (access(candidate.c_str(), F_OK) != 0)
        continue;
    }
    if (void *handle = dlopen(candidate.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      file = candidate;
      return handle;
    }
    // A file that is there but does not load (no libcublasLt beside it)
    // says more than dlopen's search missing the name.
    if (!isPath)
      nameWhy = dlopenMessage();
    else if (fileWhy.empty())
      fileWhy = dlopenMessage();
  }
  return unavailable(
      "cannot load " + name + " (cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) +
      "; install the nvidia-cublas wheel or the CUDA toolkit, or point "
      "MUON_CUBLAS_LIBRARY at it): " +
      (fileWhy.empty() ? nameWhy : fileWhy) + "; also looked in " + searched);
}

} // namespace

void addSearchDirectory(const std::string &directory) {
  std::lock_guard<std::mutex> lock(mutex);
  for (const std::string &known : searchDirectories)
    if (known == directory)
      return;
  searchDirectories.push_back(directory);
}

StatusOr<std::unique_ptr<Library>>
open(const std::vector<std::string> &directories) {
  std::string file;
  void *handle = nullptr;
  const char *chosen = std::getenv("MUON_CUBLAS_LIBRARY");
  if (chosen && *chosen) {
    handle = dlopen(chosen, RTLD_NOW | RTLD_LOCAL);
    if (!handle)
      return unavailable(std::string("cannot load cuBLAS from '") + chosen +
                         "' (MUON_CUBLAS_LIBRARY): " + dlopenMessage());
    file = chosen;
  } else {
    MUON_ASSIGN_OR_RETURN(handle, search(directories, file));
  }
  auto loaded = std::make_unique<Library>();
  loaded->file = file;
  if (Status resolved = resolve(handle, *loaded); !resolved.ok()) {
    dlclose(handle);
    return resolved;
  }
  // Where it really came from, for messages and reports.
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(loaded->cublasCreate_v2), &info) &&
      info.dli_fname)
    loaded->file = info.dli_fname;
  return loaded;
}

StatusOr<const Library *> load() {
  if (const Library *l = ready.load(std::memory_order_acquire))
    return l;
  std::lock_guard<std::mutex> lock(mutex);
  if (!library) {
    MUON_ASSIGN_OR_RETURN(library, open(searchDirectories));
  }
  ready.store(library.get(), std::memory_order_release);
  return static_cast<const Library *>(library.get());
}

const Library &api() { return *ready.load(std::memory_order_acquire); }

bool loaded() { return ready.load(std::memory_order_acquire) != nullptr; }

} // namespace muon::runtime::cuda::cublas
