//===- NewtonSchulz.cpp - Orthogonalization on the CPU --------------------===//
#include "muon/Runtime/NewtonSchulz.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>

namespace muon::runtime {

int64_t newtonSchulz(float *x, int64_t rows, int64_t cols,
                     const std::vector<std::array<double, 3>> &coefficients,
                     double eps, NsWorkspace &ws) {
  const int64_t elements = rows * cols;
  if (elements == 0)
    return 0;
  // Frobenius norm accumulated in double: the same on every rank and in the
  // reference, since they all run this code on the same values.
  double sumSq = 0;
  for (int64_t i = 0; i < elements; ++i)
    sumSq += static_cast<double>(x[i]) * x[i];
  const float norm = static_cast<float>(std::max(std::sqrt(sumSq), eps));
  for (int64_t i = 0; i < elements; ++i)
    x[i] /= norm;

  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows; // Gram side, m <= n
  const int64_t n = tall ? rows : cols;
  ws.a.resize(m * m);
  ws.b.resize(m * m);
  ws.next.resize(elements);
  const int R = static_cast<int>(rows), C = static_cast<int>(cols);
  const int M = static_cast<int>(m);
  int64_t flops = 0;
  for (const std::array<double, 3> &k : coefficients) {
    const float a = static_cast<float>(k[0]), b = static_cast<float>(k[1]),
                c = static_cast<float>(k[2]);
    // A = X X^T (wide) or X^T X (tall), m x m.
    if (tall)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, M, R, 1.0f, x, C,
                  x, C, 0.0f, ws.a.data(), M);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, M, C, 1.0f, x, C,
                  x, C, 0.0f, ws.a.data(), M);
    // B = c A A + b A.
    std::copy(ws.a.begin(), ws.a.end(), ws.b.begin());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, M, M, c,
                ws.a.data(), M, ws.a.data(), M, b, ws.b.data(), M);
    // X = a X + B X (wide) or a X + X B (tall; B is symmetric).
    std::copy(x, x + elements, ws.next.begin());
    if (tall)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, C, C, 1.0f, x,
                  C, ws.b.data(), M, a, ws.next.data(), C);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, C, R, 1.0f,
                  ws.b.data(), M, x, C, a, ws.next.data(), C);
    std::copy(ws.next.begin(), ws.next.end(), x);
    flops += 2 * m * m * n + 2 * m * m * m + 2 * m * m * n;
  }
  return flops;
}

void setBlasThreads(int threads) { openblas_set_num_threads(threads); }

} // namespace muon::runtime
