//===- CudaCublasLibraryTest.cpp - cuBLAS loaded at run time --------------===//
//
// The CUDA backend's cuBLAS loader (CublasLibrary.h) against the real
// cuBLAS where the toolkit has it: every entry point resolves, without a
// GPU (nothing is called). No fake here: this program links no cuBLAS.
//
//===----------------------------------------------------------------------===//
#include "StatusTesting.h"
#include "CublasLibrary.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>

using namespace muon::runtime::cuda;

namespace {

/// Sets an environment variable for a scope.
class ScopedEnv {
public:
  ScopedEnv(const char *name, const char *value) : name(name) {
    if (const char *old = std::getenv(name))
      previous = old;
    if (value)
      setenv(name, value, 1);
    else
      unsetenv(name);
  }
  ~ScopedEnv() {
    if (previous.empty())
      unsetenv(name);
    else
      setenv(name, previous.c_str(), 1);
  }

private:
  const char *name;
  std::string previous;
};

std::string soname() {
  return "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
}

} // namespace

TEST(CublasLibrary, OverrideThatDoesNotLoadIsNamed) {
  ScopedEnv env("MUON_CUBLAS_LIBRARY", "/nonexistent/libcublas.so.13");
  const std::string error = failureText(cublas::open({}));
  EXPECT_NE(error.find("cannot load cuBLAS from '/nonexistent/libcublas.so.13' "
                       "(MUON_CUBLAS_LIBRARY): "),
            std::string::npos)
      << error;
}

TEST(CublasLibrary, ALibraryWithoutTheEntryPointsIsRefused) {
  // libm loads, and has no cuBLAS.
  ScopedEnv env("MUON_CUBLAS_LIBRARY", "libm.so.6");
  const std::string error = failureText(cublas::open({}));
  EXPECT_EQ(error, "libm.so.6 has no cublasCreate_v2 (the CUDA backend needs "
                   "cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) + ")");
}

TEST(CublasLibrary, TheToolkitsResolvesEveryEntryPoint) {
  ScopedEnv env("MUON_CUBLAS_LIBRARY", nullptr);
  // A file that is not a library, first in the search: passed over.
  std::string dir = ::testing::TempDir() + "cublas-search";
  std::system(("mkdir -p " + dir).c_str());
  std::ofstream(dir + "/" + soname()) << "not a library\n";
  muon::StatusOr<std::unique_ptr<cublas::Library>> opened = cublas::open({dir});
  if (!opened.ok() &&
      opened.status().message().find("cannot load " + soname()) == 0)
    GTEST_SKIP() << "no cuBLAS here: " << opened.status().message();
  ASSERT_OK(opened);
  std::unique_ptr<cublas::Library> l = std::move(opened).value();
  EXPECT_NE(l->file.find(soname()), std::string::npos) << l->file;
  EXPECT_EQ(l->file.find(dir), std::string::npos) << l->file;
#define MUON_CUBLAS_EXPECT(name, type) EXPECT_NE(l->name, nullptr) << #name;
  MUON_CUBLAS_ENTRY_POINTS(MUON_CUBLAS_EXPECT)
#undef MUON_CUBLAS_EXPECT
  EXPECT_STREQ(l->cublasGetStatusName(CUBLAS_STATUS_NOT_INITIALIZED),
               "CUBLAS_STATUS_NOT_INITIALIZED");
}
