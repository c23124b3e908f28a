//===- blas-compare.cpp - Single-threaded sgemm/ssyrk of several BLASes ---===//
//
//   blas-compare LIBRARY.so [REPEATS]
//
// Loads a CBLAS shared library at run time (so one binary measures every
// library with the same code and inputs) and prints, one JSON object a line,
// the best and median GFLOP/s (CPU time) of the products Newton-Schulz runs: square
// sgemm and ssyrk at 768..2048, and the shapes of the 1024x4096 case
// (ssyrk 1024 x 4096, the m x m by m x n sgemm, the m^3 ssyrk). The caller
// pins the thread count (run.sh sets OPENBLAS_NUM_THREADS, BLIS_NUM_THREADS,
// OMP_NUM_THREADS to 1). Used by bench/blas-compare/run.sh;
// the figures are in docs/performance.md.
//
//===----------------------------------------------------------------------===//
#include <dlfcn.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <time.h>
#include <vector>

namespace {

// The CBLAS enum values every implementation shares (the reference cblas.h).
enum { RowMajor = 101, NoTrans = 111, Trans = 112, Lower = 122 };

using Sgemm = void (*)(int, int, int, int, int, int, float, const float *,
                       int, const float *, int, float, float *, int);
using Ssyrk = void (*)(int, int, int, int, int, float, const float *, int,
                       float, float *, int);

/// This process's CPU time: every library runs on one thread, and on a
/// shared machine CPU time leaves out the time spent waiting for a core.
double now() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct Result {
  double best = 0, median = 0; // GFLOP/s
};

template <typename F> Result measure(double flops, int repeats, F run) {
  run(); // warm-up (first-touch, library set-up)
  std::vector<double> rates;
  for (int r = 0; r < repeats; ++r) {
    double start = now();
    run();
    rates.push_back(flops / (now() - start) / 1e9);
  }
  std::sort(rates.begin(), rates.end());
  return {rates.back(), rates[rates.size() / 2]};
}

void print(const char *lib, const char *op, int m, int n, int k, Result r) {
  std::printf("{\"library\": \"%s\", \"op\": \"%s\", \"m\": %d, \"n\": %d, "
              "\"k\": %d, \"gflops_best\": %.2f, \"gflops_median\": %.2f}\n",
              lib, op, m, n, k, r.best, r.median);
  std::fflush(stdout);
}

} // namespace

int main(int argc, char **argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: blas-compare LIBRARY.so [REPEATS]\n");
    return 2;
  }
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 5;
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    std::fprintf(stderr, "blas-compare: %s\n", dlerror());
    return 2;
  }
  auto sgemm = reinterpret_cast<Sgemm>(dlsym(lib, "cblas_sgemm"));
  auto ssyrk = reinterpret_cast<Ssyrk>(dlsym(lib, "cblas_ssyrk"));
  if (!sgemm || !ssyrk) {
    std::fprintf(stderr, "blas-compare: %s lacks cblas_sgemm/cblas_ssyrk\n",
                 argv[1]);
    return 2;
  }
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1, 1);
  auto random = [&](size_t n) {
    std::vector<float> v(n);
    for (float &x : v)
      x = u(rng);
    return v;
  };
  const char *name = argv[1];
  // Square: C (n x n) = A B, and C = A A^T (lower) with A n x n.
  for (int n : {768, 1024, 1536, 2048}) {
    std::vector<float> a = random(size_t(n) * n), b = random(size_t(n) * n),
                       c(size_t(n) * n);
    print(name, "sgemm", n, n, n,
          measure(2.0 * n * n * n, repeats, [&] {
            sgemm(RowMajor, NoTrans, NoTrans, n, n, n, 1.0f, a.data(), n,
                  b.data(), n, 0.0f, c.data(), n);
          }));
    print(name, "ssyrk", n, n, n,
          measure(1.0 * n * n * n, repeats, [&] {
            ssyrk(RowMajor, Lower, NoTrans, n, n, 1.0f, a.data(), n, 0.0f,
                  c.data(), n);
          }));
  }
  // The 1:4 shape's products (m = 1024, n = 4096): the Gram ssyrk of a wide
  // matrix, the same of a tall one (transpose flag), and B X.
  const int m = 1024, n = 4096;
  std::vector<float> x = random(size_t(m) * n), g = random(size_t(m) * m),
                     y(size_t(m) * n), gram(size_t(m) * m);
  print(name, "ssyrk", m, m, n, measure(1.0 * m * m * n, repeats, [&] {
          ssyrk(RowMajor, Lower, NoTrans, m, n, 1.0f, x.data(), n, 0.0f,
                gram.data(), m);
        }));
  print(name, "ssyrk_trans", m, m, n, measure(1.0 * m * m * n, repeats, [&] {
          ssyrk(RowMajor, Lower, Trans, m, n, 1.0f, x.data(), m, 0.0f,
                gram.data(), m);
        }));
  print(name, "sgemm", m, n, m, measure(2.0 * m * m * n, repeats, [&] {
          sgemm(RowMajor, NoTrans, NoTrans, m, n, m, 1.0f, g.data(), m,
                x.data(), n, 0.0f, y.data(), n);
        }));
  print(name, "sgemm_tall", n, m, m, measure(2.0 * m * m * n, repeats, [&] {
          sgemm(RowMajor, NoTrans, NoTrans, n, m, m, 1.0f, x.data(), m,
                g.data(), m, 0.0f, y.data(), m);
        }));
  return 0;
}
