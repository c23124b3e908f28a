//===- OneDnnNewtonSchulz.cpp - bf16 Newton-Schulz on oneDNN --------------===//
//
// X (m x n, m <= n; a tall matrix is transposed once on the way in and
// out, in bf16, 16 x 16 blocks at a time) lives in bf16 from the start to
// the end. Per (a, b, c):
//   A = bf16(X X^T)        lower block columns: A[j0:m, j0:j0+w] =
//                          X[j0:m, :] X[j0:j0+w, :]^T, mirrored
//   B = bf16(c A A + b A)  the same block columns (A A = A A^T), each
//                          block's A (kept from the first product) in its
//                          destination for the sum epilogue, mirrored
//   X = bf16(a X + B X)    one product, X's copy in its destination
// Each product is a oneDNN matmul with bf16 operands, f32 accumulation and
// its scale and sum in f32 before the one rounding to bf16: the contract's
// BF16 semantics (Device.h), as torch.optim.Muon's addmm runs them. With
// block columns of width T the two symmetric products cost (1 + T/m) / 2
// of a full one (T = 64: 0.53 at m = 1024). Block columns rather than
// block rows: oneDNN packs a product's right operand (here
// X[j0:j0+w, :]^T, n x w) into its own layout, and a block column's is
// small. Its brgemm kernels take dense operands only (a strided result
// falls back to its gemm:jit kernel, 60-155 against 220 GFLOP/s measured
// here), so each block column's result
// is a dense (m - j0) x w matrix in S, copied into the triangle and its
// mirror from there (O(m^2) per product, 16 x 16 AVX2 transposes).
//
// The Gram form (wide and tall matrices, where gramPays): steps in phases
// of two, every m x m product over the same lower block columns:
//   R = bf16(X X^T)
//   H1 = bf16(a1 I + b1 R + c1 R R)    the product in f32 on top of b R +
//                                      a I, rounded once (polynomialInto)
//   T = bf16(H1 R), R = bf16(H1 T)     the second step's Gram matrix
//   H2 = bf16(a2 I + b2 R + c2 R R), Q = bf16(H2 H1)
//   X = bf16(Q X)
// With h = (1 + T/m) / 2 for a product over block columns, a phase costs
// h (2 m^2 n + 10 m^3) + 2 m^2 n flops against two standard steps'
// 2 (h (2 m^2 n + 2 m^3) + 2 m^2 n): measured 0.72-0.77x the time at
// 1:3-1:4, 0.85-0.9x at 1:2 and 2:3 (5 steps: 2 phases and a standard
// step). R's rounding enters once per phase; with longer phases
// each step multiplies its errors by a^2 and skewed spectra diverge
// (docs/performance.md).
//
// Determinism: oneDNN's CPU matmul is run-to-run deterministic for a fixed
// ISA, library and thread count (its documentation's reproducibility
// note); every rank and muon-run's reference run this code on the same
// shapes with the same thread count (setOneDnnThreads), so runs stay
// bit-exact.
//
//===----------------------------------------------------------------------===//
#include "OneDnnNewtonSchulz.h"

#include "muon/Runtime/DType.h"
#include "muon/Runtime/NsForm.h"

#include <oneapi/dnnl/dnnl.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <dlfcn.h>
#include <immintrin.h>
#include <map>
#include <tuple>

namespace muon::runtime::cpu {

OneDnnCpu oneDnnCpu() {
  static const OneDnnCpu cpu = [] {
    OneDnnCpu c;
    const dnnl_version_t *v = dnnl_version();
    c.version = std::to_string(v->major) + "." + std::to_string(v->minor) +
                "." + std::to_string(v->patch);
    dnnl::cpu_isa isa = dnnl::cpu_isa::all;
    try {
      isa = dnnl::get_effective_cpu_isa();
    } catch (const dnnl::error &) {
      return c;
    }
    // oneDNN's ISA values are feature masks: an ISA includes the bits of
    // every ISA it extends (AMX those of AVX512_BF16).
    auto has = [&](dnnl::cpu_isa want) {
      return (static_cast<unsigned>(isa) & static_cast<unsigned>(want)) ==
             static_cast<unsigned>(want);
    };
    c.bf16 = has(dnnl::cpu_isa::avx512_core_bf16);
    c.isa = has(dnnl::cpu_isa::avx512_core_amx)    ? "avx512_core_amx"
            : has(dnnl::cpu_isa::avx512_core_bf16) ? "avx512_core_bf16"
            : has(dnnl::cpu_isa::avx512_core_vnni) ? "avx512_core_vnni"
            : has(dnnl::cpu_isa::avx512_core)      ? "avx512_core"
            : has(dnnl::cpu_isa::avx2)             ? "avx2"
                                                   : "older than avx2";
    return c;
  }();
  return cpu;
}

// OpenMP's thread count, found at run time (libdnnl brings libgomp), so
// that neither the library nor its users link OpenMP themselves.
static std::atomic<int> oneDnnThreads{0};

/// OpenMP's count for the calling thread's parallel regions, where `want`
/// is positive and differs.
static void setCallingThreadsOpenMp(int want) {
  using SetFn = void (*)(int);
  using GetFn = int (*)();
  static SetFn set =
      reinterpret_cast<SetFn>(::dlsym(RTLD_DEFAULT, "omp_set_num_threads"));
  static GetFn get =
      reinterpret_cast<GetFn>(::dlsym(RTLD_DEFAULT, "omp_get_max_threads"));
  if (want > 0 && set && get && get() != want)
    set(want);
}

static void applyThreads() { setCallingThreadsOpenMp(oneDnnThreads.load()); }

void setOneDnnThreads(int threads) {
  oneDnnThreads.store(threads);
  applyThreads();
}

namespace {

using dnnl::memory;

/// One matmul: dst (M x N) = scale * src (M x K) op(wei) + sum * dst, all
/// dense, src and wei bf16, dst bf16 or (f32Dst) f32; op(wei) is wei
/// (K x N) or, with `transposed`, the transpose of an N x K matrix.
struct MatmulKey {
  int64_t m, n, k;
  bool transposed;
  float scale, sum;
  int threads;
  bool f32Dst = false;
  bool operator<(const MatmulKey &o) const {
    return std::tie(m, n, k, transposed, scale, sum, threads, f32Dst) <
           std::tie(o.m, o.n, o.k, o.transposed, o.scale, o.sum, o.threads,
                    o.f32Dst);
  }
};

struct Matmul {
  dnnl::matmul primitive;
  memory::desc src, wei, dst;
  size_t scratchpadBytes = 0;
};

} // namespace

struct OneDnnNewtonSchulz::Impl {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<MatmulKey, Matmul> cache;
  std::vector<uint8_t> scratchpad;
  // Workspace kept across calls: X and the next X (m x n), A and B
  // (m x m), S (every block column's result, one after another); for the
  // Gram form Q and T (m x m) and one block column's f32 result.
  std::vector<uint16_t> x, next, gram, poly, product, scratch, block;
  std::vector<float> blockF32;

  Matmul &matmul(const MatmulKey &key) {
    auto found = cache.find(key);
    if (found != cache.end())
      return found->second;
    const memory::dim M = key.m, N = key.n, K = key.k;
    Matmul mm;
    mm.src = memory::desc({M, K}, memory::data_type::bf16, {K, 1});
    mm.wei = memory::desc({K, N}, memory::data_type::bf16,
                          key.transposed ? memory::dims{1, K}
                                         : memory::dims{N, 1});
    mm.dst = memory::desc(
        {M, N},
        key.f32Dst ? memory::data_type::f32 : memory::data_type::bf16,
        {N, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (key.scale != 1.0f)
      attr.set_output_scales(0, {key.scale});
    if (key.sum != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(key.sum);
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(mm.src, mm.wei, mm.dst),
                                    attr, engine);
    mm.scratchpadBytes = pd.scratchpad_desc().get_size();
    mm.primitive = dnnl::matmul(pd);
    return cache.emplace(key, std::move(mm)).first->second;
  }

  void run(const MatmulKey &key, const uint16_t *src, const uint16_t *wei,
           void *dst) {
    Matmul &mm = matmul(key);
    if (scratchpad.size() < mm.scratchpadBytes)
      scratchpad.resize(mm.scratchpadBytes);
    memory s(mm.src, engine, const_cast<uint16_t *>(src));
    memory w(mm.wei, engine, const_cast<uint16_t *>(wei));
    memory d(mm.dst, engine, dst);
    memory pad(memory::desc({static_cast<memory::dim>(mm.scratchpadBytes)},
                            memory::data_type::u8, memory::format_tag::a),
               engine, scratchpad.data());
    mm.primitive.execute(stream, {{DNNL_ARG_SRC, s},
                                  {DNNL_ARG_WEIGHTS, w},
                                  {DNNL_ARG_DST, d},
                                  {DNNL_ARG_SCRATCHPAD, pad}});
    stream.wait();
  }
};

OneDnnNewtonSchulz::OneDnnNewtonSchulz() : impl(std::make_unique<Impl>()) {}
OneDnnNewtonSchulz::~OneDnnNewtonSchulz() = default;

/// dst[c][r] = src[r][c] for a 16 x 16 block of bf16 values: the usual
/// AVX2 network of 16-, 32-, 64- and 128-bit interleaves. AVX2 is there:
/// this code runs only where the CPU has AVX512_BF16.
__attribute__((target("avx2"))) static void
transpose16(const uint16_t *src, int64_t srcStride, uint16_t *dst,
            int64_t dstStride) {
  __m256i r[16], t[16];
  for (int i = 0; i < 16; ++i)
    r[i] = _mm256_loadu_si256(
        reinterpret_cast<const __m256i *>(src + i * srcStride));
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm256_unpacklo_epi16(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm256_unpackhi_epi16(r[2 * i], r[2 * i + 1]);
  }
  for (int b = 0; b < 16; b += 4) {
    r[b] = _mm256_unpacklo_epi32(t[b], t[b + 2]);
    r[b + 1] = _mm256_unpackhi_epi32(t[b], t[b + 2]);
    r[b + 2] = _mm256_unpacklo_epi32(t[b + 1], t[b + 3]);
    r[b + 3] = _mm256_unpackhi_epi32(t[b + 1], t[b + 3]);
  }
  for (int b = 0; b < 16; b += 8)
    for (int k = 0; k < 4; ++k) {
      t[b + 2 * k] = _mm256_unpacklo_epi64(r[b + k], r[b + k + 4]);
      t[b + 2 * k + 1] = _mm256_unpackhi_epi64(r[b + k], r[b + k + 4]);
    }
  for (int k = 0; k < 8; ++k) {
    _mm256_storeu_si256(reinterpret_cast<__m256i *>(dst + k * dstStride),
                        _mm256_permute2x128_si256(t[k], t[k + 8], 0x20));
    _mm256_storeu_si256(
        reinterpret_cast<__m256i *>(dst + (k + 8) * dstStride),
        _mm256_permute2x128_si256(t[k], t[k + 8], 0x31));
  }
}

/// Copies the lower part of a block column's result S (rows j0..m-1 of
/// columns j0..j0+w-1 of the m x m matrix G, as an (m - j0) x w dense
/// matrix; its first w rows are the diagonal block, of which only the lower
/// triangle is taken) into G and mirrors it into G's upper triangle.
static void scatterBlock(const uint16_t *s, uint16_t *g, int64_t m,
                         int64_t j0, int64_t w) {
  const int64_t rows = m - j0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t end = r < w ? r + 1 : w;
    std::memcpy(g + (j0 + r) * m + j0, s + r * w,
                static_cast<size_t>(end) * sizeof(uint16_t));
  }
  // The mirror, G[j0 + c][j0 + r] = S[r][c] for r >= c, in 16 x 16 blocks:
  // whole blocks below the diagonal transposed at once, the rest (blocks
  // on the diagonal, the edges) one value at a time.
  constexpr int64_t kB = 16;
  for (int64_t r0 = 0; r0 < rows; r0 += kB)
    for (int64_t c0 = 0; c0 < w && c0 <= r0; c0 += kB) {
      const int64_t r1 = std::min(rows, r0 + kB), c1 = std::min(w, c0 + kB);
      if (r0 > c0 && r1 - r0 == kB && c1 - c0 == kB) {
        transpose16(s + r0 * w + c0, w, g + (j0 + c0) * m + j0 + r0, m);
        continue;
      }
      for (int64_t c = c0; c < c1; ++c) {
        uint16_t *out = g + (j0 + c) * m + j0;
        for (int64_t r = std::max(r0, c); r < r1; ++r)
          out[r] = s[r * w + c];
      }
    }
}

/// out = in^T for a rows x cols row-major bf16 `in`: 16 x 16 blocks
/// transposed at once, the edges one value at a time.
static void transposeBf16(const uint16_t *in, uint16_t *out, int64_t rows,
                          int64_t cols) {
  constexpr int64_t kB = 16;
  const int64_t fullRows = rows / kB * kB, fullCols = cols / kB * kB;
  for (int64_t r0 = 0; r0 < fullRows; r0 += kB)
    for (int64_t c0 = 0; c0 < fullCols; c0 += kB)
      transpose16(in + r0 * cols + c0, cols, out + c0 * rows + r0, rows);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = r < fullRows ? fullCols : 0; c < cols; ++c)
      out[c * rows + r] = in[r * cols + c];
}

bool OneDnnNewtonSchulz::gramPays(int64_t m, int64_t n, int64_t steps,
                                  int64_t tile) {
  // A symmetric product over block columns of width T does (1 + T / m) / 2
  // of a full one (muon/Runtime/NsForm.h has the model and its margin:
  // square shapes model 1.01; 2:3 models 0.90 and measures 0.89).
  if (m <= 0)
    return false;
  return runtime::gramPays(DType::BF16, m, n, steps, blockedHalf(m, tile));
}

/// X = bf16(x); X = bf16(X / max(bf16(||X||_F), eps)), as the f32-product
/// path (CpuDevice.cpp) computes it, the norm summed in double (here in
/// eight interleaved partial sums, which keeps the pass at memory speed).
/// A wide matrix lands in `out`; a tall one is converted in place order
/// into `rounded`, then transposed into `out`.
static void normalizeIntoBf16(const float *x, int64_t rows, int64_t cols,
                              double eps, uint16_t *rounded, uint16_t *out) {
  const int64_t elements = rows * cols;
  const bool tall = rows > cols;
  double partial[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= elements; i += 8)
    for (int k = 0; k < 8; ++k) {
      rounded[i + k] = toBf16Bits(x[i + k]);
      const double v = fromBf16Bits(rounded[i + k]);
      partial[k] += v * v;
    }
  for (; i < elements; ++i) {
    rounded[i] = toBf16Bits(x[i]);
    const double v = fromBf16Bits(rounded[i]);
    partial[0] += v * v;
  }
  const double sumSq = ((partial[0] + partial[1]) + (partial[2] + partial[3])) +
                       ((partial[4] + partial[5]) + (partial[6] + partial[7]));
  float norm = roundToBf16(static_cast<float>(std::sqrt(sumSq)));
  norm = std::max(norm, static_cast<float>(eps));
  uint16_t *scaled = tall ? rounded : out;
  for (int64_t e = 0; e < elements; ++e)
    scaled[e] = toBf16Bits(fromBf16Bits(rounded[e]) / norm);
  if (tall)
    transposeBf16(rounded, out, rows, cols);
}

Status OneDnnNewtonSchulz::run(float *x, int64_t rows, int64_t cols,
                               const std::vector<std::array<double, 3>> &abc,
                               double eps, bool gram) {
  const int64_t elements = rows * cols;
  if (elements == 0)
    return okStatus();
  Impl &s = *impl;
  const bool tall = rows > cols;
  const int64_t m = tall ? cols : rows, n = tall ? rows : cols;
  s.x.resize(elements);
  s.next.resize(elements);
  s.gram.resize(m * m);
  s.poly.resize(m * m);
  const int64_t t = std::max<int64_t>(1, std::min(tile, m));
  if (gram) {
    s.product.resize(m * m);
    s.scratch.resize(m * m);
    s.blockF32.resize(m * t);
  }
  // Block column j0 (width w) takes (m - j0) x w values of S.
  int64_t packed = 0;
  for (int64_t j0 = 0; j0 < m; j0 += t)
    packed += (m - j0) * std::min(t, m - j0);
  s.block.resize(packed);

  normalizeIntoBf16(x, rows, cols, eps, s.next.data(), s.x.data());

  applyThreads();
  const int threads = oneDnnThreads.load();
  uint16_t *X = s.x.data(), *next = s.next.data(), *S = s.block.data();
  // G = bf16(scale * P Q^T + sum * G) over the lower block columns of the
  // symmetric m x m G, for P and Q (m x k, row-major) whose product is
  // symmetric (Q = P, or two commuting symmetric matrices). Each block's
  // result stays in S: with sum != 0, S must hold G's blocks on entry (the
  // last symmetricInto's output), which is how the sum epilogue reads G.
  auto symmetricInto = [&](const uint16_t *P, const uint16_t *Q, int64_t k,
                           float scale, float sum, uint16_t *G) {
    uint16_t *block = S;
    for (int64_t j0 = 0; j0 < m; j0 += t) {
      const int64_t w = std::min(t, m - j0);
      s.run({m - j0, w, k, true, scale, sum, threads}, P + j0 * k,
            Q + j0 * k, block);
      scatterBlock(block, G, m, j0, w);
      block += (m - j0) * w;
    }
  };
  // H = bf16(a I + b R + c R R) for the symmetric m x m R, rounded once:
  // each block column's product lands in f32 on top of b R + a I, also
  // f32. Rounding c R R + b R first and adding a after loses H's low bits
  // where a and c R R + b R cancel (H near 1, a near 3.4: measured 1.12x
  // the standard form's error at 768x3072 instead of 1.0x).
  auto polynomialInto = [&](const uint16_t *R, float a, float b, float c,
                            uint16_t *H) {
    float *F = s.blockF32.data();
    uint16_t *block = S;
    for (int64_t j0 = 0; j0 < m; j0 += t) {
      const int64_t w = std::min(t, m - j0), rows = m - j0;
      for (int64_t r = 0; r < rows; ++r) {
        const uint16_t *in = R + (j0 + r) * m + j0;
        for (int64_t col = 0; col < w; ++col)
          F[r * w + col] = b * fromBf16Bits(in[col]) + (r == col ? a : 0.0f);
      }
      s.run({rows, w, m, true, c, 1.0f, threads, /*f32Dst=*/true},
            R + j0 * m, R + j0 * m, F);
      for (int64_t i = 0; i < rows * w; ++i)
        block[i] = toBf16Bits(F[i]);
      scatterBlock(block, H, m, j0, w);
      block += rows * w;
    }
  };
  try {
    const int64_t steps = static_cast<int64_t>(abc.size());
    for (int64_t start = 0; start < steps;) {
      const int64_t length =
          gram ? std::min(kGramPhaseSteps, steps - start) : 1;
      if (length == 1) {
        // The standard step: A = X X^T, B = c A A^T + b A (the block's A,
        // still in S, the sum epilogue's input), X' = a X + B X.
        const float a = static_cast<float>(abc[start][0]),
                    b = static_cast<float>(abc[start][1]),
                    c = static_cast<float>(abc[start][2]);
        uint16_t *A = s.gram.data(), *B = s.poly.data();
        symmetricInto(X, X, n, 1.0f, 0.0f, A);
        symmetricInto(A, A, m, c, b, B);
        if (a != 0.0f)
          std::memcpy(next, X,
                      static_cast<size_t>(elements) * sizeof(uint16_t));
        s.run({m, n, m, false, 1.0f, a, threads}, B, X, next);
        std::swap(X, next);
        ++start;
        continue;
      }
      // A Gram phase (GramNewtonSchulz.h): R = X X^T; per step H = a I +
      // b R + c R R, Q <- H Q, R <- H (H R) but after the last; X <- Q X.
      uint16_t *R = s.gram.data(), *H = s.poly.data(), *Q = s.product.data(),
               *T = s.scratch.data();
      symmetricInto(X, X, n, 1.0f, 0.0f, R);
      for (int64_t step = start; step < start + length; ++step) {
        const float a = static_cast<float>(abc[step][0]),
                    b = static_cast<float>(abc[step][1]),
                    c = static_cast<float>(abc[step][2]);
        // H (the first straight into Q).
        uint16_t *h = step == start ? Q : H;
        polynomialInto(R, a, b, c, h);
        if (step != start) {
          symmetricInto(h, Q, m, 1.0f, 0.0f, T);
          std::swap(Q, T);
        }
        if (step + 1 < start + length) {
          symmetricInto(h, R, m, 1.0f, 0.0f, T);
          symmetricInto(h, T, m, 1.0f, 0.0f, R);
        }
      }
      s.run({m, n, m, false, 1.0f, 0.0f, threads}, Q, X, next);
      std::swap(X, next);
      start += length;
    }
  } catch (const dnnl::error &e) {
    return internalError(std::string("oneDNN: ") + e.what());
  }
  const uint16_t *result = X;
  if (tall) {
    transposeBf16(X, next, m, n);
    result = next;
  }
  for (int64_t e = 0; e < elements; ++e)
    x[e] = fromBf16Bits(result[e]);
  return okStatus();
}

Status OneDnnNewtonSchulz::gemm(const uint16_t *a, const uint16_t *b,
                                uint16_t *c, int64_t m, int64_t n, int64_t k,
                                int threads) {
  if (threads > 0)
    setCallingThreadsOpenMp(threads);
  else
    applyThreads();
  try {
    impl->run({m, n, k, false, 1.0f, 0.0f,
               threads > 0 ? threads : oneDnnThreads.load()},
              a, b, c);
  } catch (const dnnl::error &e) {
    return internalError(std::string("oneDNN: ") + e.what());
  }
  return okStatus();
}

} // namespace muon::runtime::cpu
