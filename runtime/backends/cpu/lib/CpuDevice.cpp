//===- CpuDevice.cpp - The CPU backend's device ---------------------------===//
#include "muon/Runtime/Cpu/CpuDevice.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

namespace muon::runtime::cpu {

/// torch.lerp's formula (exact at both ends), in f32.
static inline float lerp(float start, float end, float weight) {
  return weight < 0.5f ? start + weight * (end - start)
                       : end - (end - start) * (1.0f - weight);
}

void *CpuDevice::allocate(int64_t bytes) {
  void *memory = std::calloc(static_cast<size_t>(bytes), 1);
  return memory;
}

void CpuDevice::release(void *memory) { std::free(memory); }

void CpuDevice::zero(void *memory, int64_t bytes) {
  std::memset(memory, 0, static_cast<size_t>(bytes));
}

void CpuDevice::copyToDevice(void *dst, const void *src, int64_t bytes) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

void CpuDevice::copyToHost(void *dst, const void *src, int64_t bytes) {
  std::memcpy(dst, src, static_cast<size_t>(bytes));
}

bool CpuDevice::allFinite(const void *x, DType type, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(loadAs(x, type, i)))
      return false;
  return true;
}

void CpuDevice::momentum(const void *grad, DType gradType, float *buf,
                         float *update, int64_t n, const MuonSettings &s) {
  const float m = static_cast<float>(s.momentum);
  const float oneMinusM = static_cast<float>(1.0 - s.momentum);
  for (int64_t i = 0; i < n; ++i) {
    float g = loadAs(grad, gradType, i);
    buf[i] = lerp(buf[i], g, oneMinusM);
    update[i] = s.nesterov ? lerp(g, buf[i], m) : buf[i];
  }
}

void CpuDevice::applyUpdate(void *values, DType type, const float *orth,
                            int64_t n, const MuonSettings &s, double alr) {
  const float decay = static_cast<float>(1.0 - s.lr * s.weightDecay);
  const float step = static_cast<float>(alr);
  for (int64_t i = 0; i < n; ++i)
    storeAs(values, type, i, loadAs(values, type, i) * decay - step * orth[i]);
}

void CpuDevice::adamw(void *values, DType type, const void *grad,
                      DType gradType, float *expAvg, float *expAvgSq,
                      int64_t n, const AdamWSettings &s, int64_t step) {
  const float decay = static_cast<float>(1.0 - s.lr * s.weightDecay);
  const float oneMinusB1 = static_cast<float>(1.0 - s.beta1);
  const float b2 = static_cast<float>(s.beta2);
  const float oneMinusB2 = static_cast<float>(1.0 - s.beta2);
  const double bc1 = 1.0 - std::pow(s.beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(s.beta2, static_cast<double>(step));
  const float stepSize = static_cast<float>(s.lr / bc1);
  const float bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  const float eps = static_cast<float>(s.eps);
  for (int64_t i = 0; i < n; ++i) {
    float g = loadAs(grad, gradType, i);
    float p = loadAs(values, type, i) * decay;
    expAvg[i] = lerp(expAvg[i], g, oneMinusB1);
    expAvgSq[i] = expAvgSq[i] * b2 + oneMinusB2 * g * g;
    float denom = std::sqrt(expAvgSq[i]) / bc2Sqrt + eps;
    storeAs(values, type, i, p - stepSize * (expAvg[i] / denom));
  }
}

void CpuDevice::copyBox(const BoxCopy &c) {
  for (int64_t r = 0; r < c.rows; ++r) {
    int64_t from = r * c.srcStride, to = r * c.dstStride;
    if (c.srcType == c.dstType && c.through == DType::F32 && !c.accumulate) {
      int64_t width = dtypeBytes(c.srcType);
      std::memcpy(static_cast<char *>(c.dst) + to * width,
                  static_cast<const char *>(c.src) + from * width,
                  static_cast<size_t>(c.cols * width));
      continue;
    }
    for (int64_t col = 0; col < c.cols; ++col) {
      float v = roundTo(c.through, loadAs(c.src, c.srcType, from + col));
      if (c.accumulate)
        static_cast<float *>(c.dst)[to + col] += v;
      else
        storeAs(c.dst, c.dstType, to + col, v);
    }
  }
}

int64_t CpuDevice::newtonSchulz(float *x, int64_t count, int64_t rows,
                                int64_t cols,
                                const std::vector<std::array<double, 3>> &abc,
                                double eps, DType precision) {
  int64_t flops = 0;
  for (int64_t i = 0; i < count; ++i)
    flops += newtonSchulzOne(x + i * rows * cols, rows, cols, abc, eps,
                             precision == DType::BF16);
  return flops;
}

/// Rounds every value to bf16 (a no-op for f32 runs).
static void roundAll(float *x, int64_t n, bool bf16) {
  if (bf16)
    for (int64_t i = 0; i < n; ++i)
      x[i] = roundToBf16(x[i]);
}

int64_t CpuDevice::newtonSchulzOne(
    float *x, int64_t rows, int64_t cols,
    const std::vector<std::array<double, 3>> &abc, double eps, bool bf16) {
  const int64_t elements = rows * cols;
  if (elements == 0)
    return 0;
  roundAll(x, elements, bf16);
  // Frobenius norm accumulated in double: the same on every rank and in the
  // reference, since they all run this code on the same values.
  double sumSq = 0;
  for (int64_t i = 0; i < elements; ++i)
    sumSq += static_cast<double>(x[i]) * x[i];
  float norm = static_cast<float>(std::sqrt(sumSq));
  if (bf16)
    norm = roundToBf16(norm);
  norm = std::max(norm, static_cast<float>(eps));
  for (int64_t i = 0; i < elements; ++i)
    x[i] /= norm;
  roundAll(x, elements, bf16);

  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows; // Gram side, m <= n
  const int64_t n = tall ? rows : cols;
  gram.resize(m * m);
  poly.resize(m * m);
  next.resize(elements);
  const int R = static_cast<int>(rows), C = static_cast<int>(cols);
  const int M = static_cast<int>(m);
  int64_t flops = 0;
  for (const std::array<double, 3> &k : abc) {
    const float a = static_cast<float>(k[0]), b = static_cast<float>(k[1]),
                c = static_cast<float>(k[2]);
    // A = X X^T (wide) or X^T X (tall), m x m.
    if (tall)
      cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, M, M, R, 1.0f, x, C,
                  x, C, 0.0f, gram.data(), M);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, M, M, C, 1.0f, x, C,
                  x, C, 0.0f, gram.data(), M);
    roundAll(gram.data(), m * m, bf16);
    // B = c A A + b A.
    std::copy(gram.begin(), gram.end(), poly.begin());
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, M, M, M, c,
                gram.data(), M, gram.data(), M, b, poly.data(), M);
    roundAll(poly.data(), m * m, bf16);
    // X = a X + B X (wide) or a X + X B (tall; B is symmetric).
    std::copy(x, x + elements, next.begin());
    if (tall)
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, C, C, 1.0f, x,
                  C, poly.data(), M, a, next.data(), C);
    else
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, R, C, R, 1.0f,
                  poly.data(), M, x, C, a, next.data(), C);
    std::copy(next.begin(), next.end(), x);
    roundAll(x, elements, bf16);
    flops += 2 * m * m * n + 2 * m * m * m + 2 * m * m * n;
  }
  return flops;
}

void setBlasThreads(int threads) { openblas_set_num_threads(threads); }

} // namespace muon::runtime::cpu
