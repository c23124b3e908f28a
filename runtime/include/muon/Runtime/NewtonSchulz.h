//===- NewtonSchulz.h - Orthogonalization on the CPU ------------*- C++ -*-===//
//
// torch.optim.Muon's Newton-Schulz iteration in fp32 with BLAS: normalize by
// max(||X||_F, eps), then per step A = X X^T, B = b A + c A A, X = a X + B X.
// A tall matrix (rows > cols) is iterated as its transpose through the BLAS
// transpose flags (A = X^T X, X = a X + X B), never copied transposed.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_NEWTONSCHULZ_H
#define MUON_RUNTIME_NEWTONSCHULZ_H

#include <array>
#include <cstdint>
#include <vector>

namespace muon::runtime {

/// Scratch buffers reused across calls (sized to the largest matrix seen).
struct NsWorkspace {
  std::vector<float> a, b, next;
};

/// Orthogonalizes the row-major `rows` x `cols` matrix `x` in place with one
/// (a, b, c) per step. Returns the flops it ran (the contract's count,
/// steps * (4 m^2 n + 2 m^3) with m <= n: every product is a full GEMM).
int64_t newtonSchulz(float *x, int64_t rows, int64_t cols,
                     const std::vector<std::array<double, 3>> &coefficients,
                     double eps, NsWorkspace &workspace);

/// Sets the BLAS library's thread count (results are bit-identical only
/// between runs with the same count).
void setBlasThreads(int threads);

} // namespace muon::runtime

#endif // MUON_RUNTIME_NEWTONSCHULZ_H
