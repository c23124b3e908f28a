//===- GramNewtonSchulz.cpp - Newton-Schulz on the Gram matrix, BLAS -----===//
#include "GramNewtonSchulz.h"
#include "MirrorLower.h"
#include "RoundHalf.h"

#include "muon/Runtime/NsForm.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

namespace muon::runtime::cpu {
namespace {

/// Rows of a block of the lower products below: wide enough for sgemm to
/// run at its rate, narrow enough that the upper triangle it also computes
/// (block / m of the work) stays small.
constexpr int64_t kBlockRows = 64;

/// c = a b for m x m a and b whose product is known to be symmetric (both
/// are polynomials in the same R, so they commute): only the lower block
/// triangle is multiplied (about m^3 flops instead of 2 m^3), rounded to
/// `rounding` (bf16 or f16 runs), then mirrored, so c is exactly symmetric.
void symmetricProduct(const float *a, const float *b, float *c, int64_t m,
                      DType rounding) {
  const int M = static_cast<int>(m);
  for (int64_t i0 = 0; i0 < m; i0 += kBlockRows) {
    const int64_t i1 = std::min(m, i0 + kBlockRows);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans,
                static_cast<int>(i1 - i0), static_cast<int>(i1), M, 1.0f,
                a + i0 * m, M, b, M, 0.0f, c + i0 * m, M);
  }
  mirrorLower(c, m, nullptr, rounding);
}

} // namespace

bool GramNewtonSchulz::pays(DType precision, int64_t m, int64_t n,
                            int64_t steps) {
  if (m <= 0)
    return false;
  // f32: syrk and symm do half a full product's flops (the lower products'
  // 64-row blocks a little more, which f32's margin covers). bf16 and
  // f16: the lower products' blocks counted, as oneDNN's block columns of
  // the same width are, so that both bf16 kernels choose alike (and f16,
  // whose products are the same BLAS calls, with them).
  return gramPays(precision, m, n, steps,
                  roundsToHalf(precision) ? blockedHalf(m, kBlockRows) : 0.5);
}

bool GramNewtonSchulz::keepsAccuracy(
    const std::vector<std::array<double, 3>> &abc) {
  return gramKeepsAccuracy(abc);
}

int64_t GramNewtonSchulz::run(float *x, int64_t rows, int64_t cols,
                              const std::vector<std::array<double, 3>> &abc,
                              DType precision) {
  // X is m x n with m <= n; a tall matrix is the transpose of one, read
  // through the BLAS side and transpose flags, as the standard form does.
  const bool tall = rows > cols;
  const bool half = roundsToHalf(precision);
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;
  const int64_t elements = rows * cols;
  const int R = static_cast<int>(rows), C = static_cast<int>(cols);
  const int M = static_cast<int>(m), N = static_cast<int>(n);
  gram.resize(m * m);
  poly.resize(m * m);
  product.resize(m * m);
  scratch.resize(m * m);
  next.resize(elements);
  float *r = gram.data(), *h = poly.data(), *q = product.data(),
        *t = scratch.data();
  float *cur = x, *out = next.data();
  int64_t start = 0;
  for (int64_t length : gramPhases(precision,
                                   static_cast<int64_t>(abc.size()))) {
    // bf16's and f16's odd last step is a standard one: the caller's.
    if (length == 1 && half)
      break;
    const int64_t end = start + length;
    // R = X X^T from the current X: the restart that drops R's errors.
    cblas_ssyrk(CblasRowMajor, CblasLower, tall ? CblasTrans : CblasNoTrans,
                M, N, 1.0f, cur, C, 0.0f, r, M);
    mirrorLower(r, m, nullptr, precision);
    for (int64_t step = start; step < end; ++step) {
      const float a = static_cast<float>(abc[step][0]),
                  b = static_cast<float>(abc[step][1]),
                  c = static_cast<float>(abc[step][2]);
      // H = a I + b R + c R^2 in f32, R^2 = R R^T by syrk (lower
      // triangle). bf16 and f16 sum (b R + a I) + c R^2 and round once, as
      // oneDNN and the GPU do; f32 keeps (c R^2 + b R) + a, b R through syrk's beta
      // term (after 10 steps of test_torch_single's model 9.1e-7 from
      // torch.optim.Muon's f32 iteration; the other order measured 1.01e-6).
      if (half) {
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j <= i; ++j)
            t[i * m + j] = b * r[i * m + j];
          t[i * m + i] += a;
        }
        cblas_ssyrk(CblasRowMajor, CblasLower, CblasNoTrans, M, M, c, r, M,
                    1.0f, t, M);
      } else {
        std::memcpy(t, r, static_cast<size_t>(m * m) * sizeof(float));
        cblas_ssyrk(CblasRowMajor, CblasLower, CblasNoTrans, M, M, c, r, M, b,
                    t, M);
        for (int64_t i = 0; i < m; ++i)
          t[i * m + i] += a;
      }
      for (int64_t i = 0; i < m; ++i)
        std::memcpy(h + i * m, t + i * m,
                    static_cast<size_t>(i + 1) * sizeof(float));
      mirrorLower(h, m, nullptr, precision);
      // Q <- H Q (Q = H on a phase's first step).
      if (step == start) {
        std::memcpy(q, h, static_cast<size_t>(m * m) * sizeof(float));
      } else {
        symmetricProduct(h, q, t, m, precision);
        std::swap(q, t);
      }
      // R <- H R H, the next step's Gram matrix (not after the phase's
      // last step: the restart recomputes it from X).
      if (step + 1 < end) {
        symmetricProduct(h, r, t, m, precision);
        symmetricProduct(h, t, r, m, precision);
      }
    }
    // X <- Q X (X Q for tall): ssymm reads Q's lower triangle.
    cblas_ssymm(CblasRowMajor, tall ? CblasRight : CblasLeft, CblasLower, R,
                C, 1.0f, q, M, cur, C, 0.0f, out, C);
    roundValues(out, elements, precision);
    std::swap(cur, out);
    start = end;
  }
  if (cur != x)
    std::memcpy(x, cur, static_cast<size_t>(elements) * sizeof(float));
  return start;
}

} // namespace muon::runtime::cpu
