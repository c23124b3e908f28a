//===- KernelBodies.h - The CUDA backend's kernels, one source --*- C++ -*-===//
//
// Every kernel of the CUDA backend written once, for the GPU and for the
// host: what one thread does (MUON_HOST_DEVICE), the launch geometry, the
// choice of template instance by storage type and the memory each launch
// may touch. Kernels.cu runs them as CUDA kernels (CudaLaunch there); the
// host stand-in of the GPU (unittests/FakeGpu) runs the same bodies over
// the same grid, block by block and thread by thread, so that make check
// runs every kernel's indexing and bounds handling without a GPU.
//
// A kernel is a function object:
//  - elementwise kernels: `void operator()(const ThreadIndex &) const`,
//    the whole of one thread's work (grid-stride loops over 64-bit
//    indices);
//  - kernels whose threads cooperate through shared memory (kCooperative):
//    `void operator()(Block &, Shared &) const`, written per block: the
//    block-uniform loops in plain code, and each stretch between two
//    barriers as `block.eachThread(f)`, which runs `f` for every thread of
//    the block and then waits for all of them (__syncthreads() on the GPU,
//    the end of a loop over the threads on the host).
// A launch is `launch(geometry, kernel, name, {spans})` (or the spans as a
// pointer and a count): the spans are the memory the kernel may read or
// write, which the host stand-in checks lies in live allocations (the GPU
// ignores them).
//
// Plain C++ with MUON_HOST_DEVICE functions: g++ compiles it for the host,
// nvcc for the GPU. The elementwise arithmetic is ElementMath.h's, the
// code CpuDevice runs, so kernels store what the CPU stores bit for bit.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_CUDA_KERNELBODIES_H
#define MUON_RUNTIME_CUDA_KERNELBODIES_H

#include "DTypeDevice.cuh"

#include "muon/Runtime/DType.h"
#include "muon/Runtime/Device.h"
#include "muon/Runtime/ElementMath.h"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>

namespace muon::runtime::cuda::kernels {

// Launch geometry.

struct Dim3 {
  uint32_t x = 1, y = 1, z = 1;
};

struct Geometry {
  Dim3 grid, block;
};

/// One thread's coordinates, as CUDA's built-in variables give them.
struct ThreadIndex {
  Dim3 thread, block, blockDim, gridDim;
  /// The thread's first index of a grid-stride loop along x.
  MUON_HOST_DEVICE int64_t first() const {
    return static_cast<int64_t>(block.x) * blockDim.x + thread.x;
  }
  /// The stride of a grid-stride loop along x.
  MUON_HOST_DEVICE int64_t stride() const {
    return static_cast<int64_t>(gridDim.x) * blockDim.x;
  }
};

/// Memory a launch may read or write.
struct Span {
  const void *data = nullptr;
  int64_t bytes = 0;
};

constexpr uint32_t kThreads = 256;
// Enough blocks to fill any GPU; the grid-stride loops do the rest.
constexpr int64_t kMaxBlocks = 8192;

inline int64_t clampTo(int64_t value, int64_t low, int64_t high) {
  return value < low ? low : value > high ? high : value;
}

/// One thread per element, up to kMaxBlocks blocks of kThreads.
inline Geometry elementwiseGeometry(int64_t n) {
  Geometry g;
  g.grid.x = static_cast<uint32_t>(
      clampTo((n + kThreads - 1) / kThreads, 1, kMaxBlocks));
  g.block.x = kThreads;
  return g;
}

/// Columns over x (at most 64 blocks: rows bring the parallelism), rows
/// over y.
inline Geometry copyBoxGeometry(int64_t rows, int64_t cols) {
  Geometry g = elementwiseGeometry(cols);
  g.grid.x = g.grid.x < 64 ? g.grid.x : 64;
  g.grid.y = static_cast<uint32_t>(clampTo(rows, 1, 65535));
  return g;
}

// Newton-Schulz's norms: partial sums of squares per (matrix, part).
constexpr int64_t kElementsPerPart = 16384;
constexpr int kMaxParts = 64;

/// How many partial sums per matrix the sum of squares writes.
inline int sumSquaresParts(int64_t elements) {
  return static_cast<int>(clampTo(
      (elements + kElementsPerPart - 1) / kElementsPerPart, 1, kMaxParts));
}

/// One block per (matrix, part), grid-strided beyond 65536.
inline Geometry sumSquaresGeometry(int64_t count, int parts) {
  Geometry g;
  g.grid.x = static_cast<uint32_t>(clampTo(count * parts, 1, 65536));
  g.block.x = kThreads;
  return g;
}

// The mirror of symmetric matrices: 32 x 32 tiles, 8 rows of threads.
constexpr uint32_t kTile = 32, kTileRows = 8;

/// Tiles over x, matrices over y.
inline Geometry mirrorGeometry(int64_t count, int64_t m) {
  const int64_t tiles = (m + kTile - 1) / kTile;
  Geometry g;
  g.grid.x = static_cast<uint32_t>(clampTo(tiles * tiles, 1, 65536));
  g.grid.y = static_cast<uint32_t>(clampTo(count, 1, 65535));
  g.block.x = kTile;
  g.block.y = kTileRows;
  return g;
}

// The kernels.

template <DType T> struct FindNonFinite {
  const void *x;
  int64_t n;
  int *nonFinite;
  MUON_HOST_DEVICE void operator()(const ThreadIndex &t) const {
    for (int64_t i = t.first(); i < n; i += t.stride())
      if (!isFiniteValue(loadElement<T>(x, i)))
        *nonFinite = 1; // every writer writes the same value
  }
};

/// One element of a per-element step's operands (ElementStep.h) in a
/// kernel: the values stored as T, the gradient as G (one kernel instance
/// per pair, no switch per element).
template <DType T, DType G> struct StepElement {
  const ElementOperands &o;
  int64_t i;
  MUON_HOST_DEVICE float value() const { return loadElement<T>(o.values, i); }
  MUON_HOST_DEVICE void setValue(float v) const {
    storeElement<T>(o.values, i, v);
  }
  MUON_HOST_DEVICE float grad() const { return loadElement<G>(o.grad, i); }
  MUON_HOST_DEVICE float input() const { return o.input[i]; }
  MUON_HOST_DEVICE float rowInput() const { return o.input[i / o.rowLength]; }
  MUON_HOST_DEVICE void setOutput(float v) const { o.output[i] = v; }
  MUON_HOST_DEVICE float slot(int k) const { return o.slots[k][i]; }
  MUON_HOST_DEVICE void setSlot(int k, float v) const { o.slots[k][i] = v; }
};

/// A registered per-element step (an op of ElementMath.h) on every element:
/// the op's `apply`, the code the CPU's host loop runs. `at`, where not
/// null, holds the scalars in device memory instead of `s`: a step graph's
/// kernels read the scalars of the step being replayed there (the learning
/// rate, AdamW's bias corrections: CudaDevice's scalar slots).
template <typename Op, DType T, DType G> struct ElementStepKernel {
  ElementOperands o;
  typename Op::Scalars s;
  const typename Op::Scalars *at;
  MUON_HOST_DEVICE void operator()(const ThreadIndex &t) const {
    const typename Op::Scalars scalars = at ? *at : s;
    for (int64_t i = t.first(); i < o.n; i += t.stride()) {
      StepElement<T, G> e{o, i};
      Op::apply(e, scalars);
    }
  }
};

/// Rows over the grid's y, columns over x. `Accumulate` adds to an f32
/// destination whatever `D` says, as CpuDevice does.
template <DType S, DType D, bool Accumulate> struct CopyBox {
  const void *src;
  int64_t srcStride;
  void *dst;
  int64_t dstStride, rows, cols;
  DType through;
  MUON_HOST_DEVICE void operator()(const ThreadIndex &t) const {
    for (int64_t r = t.block.y; r < rows; r += t.gridDim.y) {
      const int64_t from = r * srcStride, to = r * dstStride;
      for (int64_t c = t.first(); c < cols; c += t.stride()) {
        float v = roundTo(through, loadElement<S>(src, from + c));
        if (Accumulate)
          static_cast<float *>(dst)[to + c] += v;
        else
          storeElement<D>(dst, to + c, v);
      }
    }
  }
};

/// One block per (matrix, part); a fixed tree in shared memory, so that
/// every run sums in the same order.
template <bool RoundToBf16> struct SumSquares {
  static constexpr bool kCooperative = true;
  struct Shared {
    double sums[kThreads];
  };
  const float *x;
  int64_t count, elements;
  int parts;
  double *partials;

  template <typename Block>
  MUON_HOST_DEVICE void operator()(Block &block, Shared &shared) const {
    const int64_t chunk = (elements + parts - 1) / parts;
    for (int64_t b = block.index().x; b < count * parts;
         b += block.count().x) {
      const int64_t matrix = b / parts, part = b % parts;
      const int64_t begin = part * chunk;
      const int64_t end = begin + chunk < elements ? begin + chunk : elements;
      const float *values = x + matrix * elements;
      block.eachThread([&](const ThreadIndex &t) {
        double sum = 0;
        for (int64_t i = begin + t.thread.x; i < end; i += t.blockDim.x) {
          float v = RoundToBf16 ? roundToBf16(values[i]) : values[i];
          sum += static_cast<double>(v) * static_cast<double>(v);
        }
        shared.sums[t.thread.x] = sum;
      });
      for (uint32_t half = kThreads / 2; half > 0; half /= 2)
        block.eachThread([&](const ThreadIndex &t) {
          if (t.thread.x < half)
            shared.sums[t.thread.x] += shared.sums[t.thread.x + half];
        });
      // The barrier after it: `sums` is rewritten by the block's next turn.
      block.eachThread([&](const ThreadIndex &t) {
        if (t.thread.x == 0)
          partials[b] = shared.sums[0];
      });
    }
  }
};

struct FinishNorms {
  const double *partials;
  int64_t count;
  int parts;
  float eps;
  bool inBf16;
  float *norms;
  MUON_HOST_DEVICE void operator()(const ThreadIndex &t) const {
    for (int64_t i = t.first(); i < count; i += t.stride()) {
      double sum = 0;
      for (int p = 0; p < parts; ++p)
        sum += partials[i * parts + p];
      float norm = static_cast<float>(sqrt(sum));
      if (inBf16)
        norm = roundToBf16(norm);
      norms[i] = norm < eps ? eps : norm; // std::max(norm, eps)
    }
  }
};

/// bf16 rounds x before the division (torch.optim.Muon's order); f16 and
/// f32 divide x as it is.
template <DType Out> struct Normalize {
  const float *x;
  int64_t count, elements;
  const float *norms;
  void *out;
  int64_t outStride;
  MUON_HOST_DEVICE void operator()(const ThreadIndex &t) const {
    const int64_t total = count * elements;
    for (int64_t i = t.first(); i < total; i += t.stride()) {
      const int64_t matrix = i / elements;
      float v = Out == DType::BF16 ? roundToBf16(x[i]) : x[i];
      storeElement<Out>(out, i + matrix * (outStride - elements),
                        v / norms[matrix]);
    }
  }
};

template <DType In> struct CopyOut {
  const void *in;
  int64_t inStride;
  float *out;
  int64_t count, elements;
  MUON_HOST_DEVICE void operator()(const ThreadIndex &t) const {
    const int64_t total = count * elements;
    for (int64_t i = t.first(); i < total; i += t.stride())
      out[i] = loadElement<In>(in, i + i / elements * (inStride - elements));
  }
};

/// The Gram form's H = a I + b R + c R R starts as F = b R + a I in f32
/// (the product then adds c R R on top, and H is F rounded once): per
/// element of `count` column-major m x m matrices `stride` elements apart,
/// R's values (F32, or BF16 or F16 bits) in, F's out. The expression is
/// OneDnnNewtonSchulz.cpp's, term for term.
template <DType R> struct PolynomialBase {
  const void *r;
  float *f;
  int64_t count, m, stride;
  float a, b;
  MUON_HOST_DEVICE void operator()(const ThreadIndex &t) const {
    const int64_t square = m * m, total = count * square;
    for (int64_t i = t.first(); i < total; i += t.stride()) {
      const int64_t matrix = i / square, at = i % square;
      const int64_t row = at % m, col = at / m;
      const int64_t index = matrix * stride + at;
      f[index] = b * loadElement<R>(r, index) + (row == col ? a : 0.0f);
    }
  }
};

/// out = Half(in) per element of `count` matrices of `elements` values,
/// `stride` elements apart in both (round to nearest even, NaNs quiet; f16
/// beyond 65504 to infinity).
template <DType Half> struct RoundMatricesToHalf {
  const float *in;
  uint16_t *out;
  int64_t count, elements, stride;
  MUON_HOST_DEVICE void operator()(const ThreadIndex &t) const {
    const int64_t total = count * elements;
    for (int64_t i = t.first(); i < total; i += t.stride()) {
      const int64_t index = i / elements * stride + i % elements;
      storeElement<Half>(out, index, in[index]);
    }
  }
};

/// Per 32 x 32 tile of the strict upper triangle: read the mirrored lower
/// tile along columns (coalesced), write it transposed through shared
/// memory. A diagonal tile reads all of itself before writing its upper
/// half from its lower half.
template <typename T> struct MirrorLower {
  static constexpr bool kCooperative = true;
  struct Shared {
    T tile[kTile][kTile + 1];
  };
  T *matrices;
  int64_t count, m, stride;

  template <typename Block>
  MUON_HOST_DEVICE void operator()(Block &block, Shared &shared) const {
    const int64_t tiles = (m + kTile - 1) / kTile;
    for (int64_t matrix = block.index().y; matrix < count;
         matrix += block.count().y) {
      T *a = matrices + matrix * stride;
      for (int64_t t = block.index().x; t < tiles * tiles;
           t += block.count().x) {
        const int64_t tileRow = t / tiles, tileCol = t % tiles;
        if (tileRow > tileCol)
          continue; // a lower tile: a source, never written
        const int64_t row0 = tileRow * kTile, col0 = tileCol * kTile;
        block.eachThread([&](const ThreadIndex &th) {
          for (uint32_t k = th.thread.y; k < kTile; k += th.blockDim.y) {
            const int64_t r = col0 + th.thread.x, c = row0 + k;
            if (r < m && c < m)
              shared.tile[k][th.thread.x] = a[r + c * m];
          }
        });
        block.eachThread([&](const ThreadIndex &th) {
          for (uint32_t k = th.thread.y; k < kTile; k += th.blockDim.y) {
            const int64_t r = row0 + th.thread.x, c = col0 + k;
            if (r < c && c < m)
              a[r + c * m] = shared.tile[th.thread.x][k];
          }
        });
      }
    }
  }
};

/// Whether `K` is written per block (kCooperative) rather than per thread.
/// NorMuon's rows (normuonStep, ElementMath.h): one block per row (grid-
/// strided beyond 65536). The row's sum of squares by a fixed tree, its
/// state and divisor (normuonRowDivisor) by thread 0, the division, and
/// the sum of squares after it; both sums go to `before` and `after` for
/// NormuonFinish.
struct NormuonRows {
  static constexpr bool kCooperative = true;
  struct Shared {
    double sums[kThreads];
    float divisor;
  };
  float *x;
  int64_t rows, cols;
  float *v;
  NormuonScalars s;
  double *before, *after;

  template <typename Block>
  MUON_HOST_DEVICE static void reduce(Block &block, Shared &shared) {
    for (uint32_t half = kThreads / 2; half > 0; half /= 2)
      block.eachThread([&](const ThreadIndex &t) {
        if (t.thread.x < half)
          shared.sums[t.thread.x] += shared.sums[t.thread.x + half];
      });
  }

  template <typename Block>
  MUON_HOST_DEVICE void operator()(Block &block, Shared &shared) const {
    for (int64_t r = block.index().x; r < rows; r += block.count().x) {
      float *row = x + r * cols;
      block.eachThread([&](const ThreadIndex &t) {
        double sum = 0;
        for (int64_t j = t.thread.x; j < cols; j += t.blockDim.x)
          sum += static_cast<double>(row[j]) * static_cast<double>(row[j]);
        shared.sums[t.thread.x] = sum;
      });
      reduce(block, shared);
      block.eachThread([&](const ThreadIndex &t) {
        if (t.thread.x == 0) {
          before[r] = shared.sums[0];
          shared.divisor = normuonRowDivisor(v[r], shared.sums[0], cols, s);
        }
      });
      block.eachThread([&](const ThreadIndex &t) {
        double sum = 0;
        for (int64_t j = t.thread.x; j < cols; j += t.blockDim.x) {
          const float q = row[j] / shared.divisor;
          row[j] = q;
          sum += static_cast<double>(q) * static_cast<double>(q);
        }
        shared.sums[t.thread.x] = sum;
      });
      reduce(block, shared);
      // The barrier after it: `sums` is rewritten by the block's next row.
      block.eachThread([&](const ThreadIndex &t) {
        if (t.thread.x == 0)
          after[r] = shared.sums[0];
      });
    }
  }
};

/// The whole matrix's factor (normuonRescale) from the rows' sums, added
/// in row order as normuonStep adds them: one thread.
struct NormuonFinish {
  const double *before, *after;
  int64_t rows;
  float eps;
  float *scale;
  MUON_HOST_DEVICE void operator()(const ThreadIndex &t) const {
    if (t.first() != 0)
      return;
    double b = 0, a = 0;
    for (int64_t r = 0; r < rows; ++r) {
      b += before[r];
      a += after[r];
    }
    *scale = normuonRescale(b, a, eps);
  }
};

/// x *= *scale, element by element.
struct ScaleBy {
  float *x;
  int64_t n;
  const float *scale;
  MUON_HOST_DEVICE void operator()(const ThreadIndex &t) const {
    const float factor = *scale;
    for (int64_t i = t.first(); i < n; i += t.stride())
      x[i] *= factor;
  }
};


template <typename K, typename = void> struct Cooperative : std::false_type {};
template <typename K>
struct Cooperative<K, std::void_t<decltype(K::kCooperative)>>
    : std::bool_constant<K::kCooperative> {};
template <typename K> constexpr bool isCooperative() {
  return Cooperative<K>::value;
}

// The launches: the early outs, the geometry, the instance per storage type
// and the memory each may touch. `Launch` is CudaLaunch (Kernels.cu) or the
// host stand-in's launcher.

/// Calls `f` with std::integral_constant<DType, type>.
template <typename F> void withType(DType type, F &&f) {
  switch (type) {
  case DType::F32:
    f(std::integral_constant<DType, DType::F32>());
    return;
  case DType::BF16:
    f(std::integral_constant<DType, DType::BF16>());
    return;
  case DType::F16:
    f(std::integral_constant<DType, DType::F16>());
    return;
  }
}

/// Bytes of `elements` values of `type`.
inline int64_t bytesOf(int64_t elements, DType type) {
  return elements * dtypeBytes(type);
}

/// Bytes of `count` matrices of `elements` values `stride` apart.
inline int64_t stridedBytes(int64_t count, int64_t stride, int64_t elements,
                            DType type) {
  return count <= 0 ? 0 : bytesOf((count - 1) * stride + elements, type);
}

template <typename Launch>
void findNonFinite(Launch &launch, const void *x, DType type, int64_t n,
                   int *nonFinite) {
  if (n <= 0)
    return;
  withType(type, [&](auto t) {
    launch(elementwiseGeometry(n),
           FindNonFinite<decltype(t)::value>{x, n, nonFinite},
           "findNonFiniteKernel",
           {{x, bytesOf(n, type)}, {nonFinite, sizeof(int)}});
  });
}

/// The op's kernel over the operands' storage types: an instance per
/// type only of the operands it touches (F32 stands in for the others).
template <typename Op, typename F>
void withStepTypes(const ElementOperands &o, F &&f) {
  constexpr bool values = Op::kUses & (kReadsValues | kWritesValues);
  constexpr bool grad = Op::kUses & kReadsGrad;
  withType(values ? o.type : DType::F32, [&](auto t) {
    withType(grad ? o.gradType : DType::F32, [&](auto g) { f(t, g); });
  });
}

/// The memory a step's launch may touch: the operands the op uses, and
/// its scalars' slot in a step graph.
template <typename Op> struct StepSpans {
  Span spans[5 + kMaxStepSlots];
  size_t count = 0;
  StepSpans(const ElementOperands &o, const void *scalarsAt) {
    const int64_t n = o.n;
    if (Op::kUses & (kReadsValues | kWritesValues))
      spans[count++] = {o.values, bytesOf(n, o.type)};
    if (Op::kUses & kReadsGrad)
      spans[count++] = {o.grad, bytesOf(n, o.gradType)};
    if (const int64_t inputs = inputCount(Op::kUses, o))
      spans[count++] = {o.input, bytesOf(inputs, DType::F32)};
    if (Op::kUses & kWritesOutput)
      spans[count++] = {o.output, bytesOf(n, DType::F32)};
    for (int k = 0; k < Op::kSlots; ++k)
      spans[count++] = {o.slots[k], bytesOf(n, DType::F32)};
    if (scalarsAt)
      spans[count++] = {scalarsAt,
                        static_cast<int64_t>(sizeof(typename Op::Scalars))};
  }
};

/// A per-element step's kernel, named after the step ("momentumKernel");
/// `at` as ElementStepKernel's.
template <typename Launch, typename Op>
void elementStep(Launch &launch, const ElementOperands &o,
                 const typename Op::Scalars &s,
                 const typename Op::Scalars *at) {
  if (o.n <= 0)
    return;
  static const std::string name = std::string(Op::kName) + "Kernel";
  const StepSpans<Op> spans(o, at);
  withStepTypes<Op>(o, [&](auto t, auto g) {
    launch(elementwiseGeometry(o.n),
           ElementStepKernel<Op, decltype(t)::value, decltype(g)::value>{o, s,
                                                                        at},
           name.c_str(), spans.spans, spans.count);
  });
}

/// Launches the kernel of `step` (a registered step, ElementStep.h) when
/// one of ElementOps is called so, its scalars read from `scalarsAt` (the
/// op's Scalars in device memory) where that is not null; false when none
/// is (then the device's default runs it).
template <typename Launch, typename... Ops>
bool launchStepOf(Launch &launch, const ElementStep &step,
                  const ElementOperands &o, const StepScalars &s,
                  const void *scalarsAt, const std::tuple<Ops...> *) {
  bool launched = false;
  (void)std::initializer_list<int>{
      (!launched && std::string_view(step.name) == Ops::kName
           ? (elementStep<Launch, Ops>(
                  launch, o, s.as<typename Ops::Scalars>(),
                  static_cast<const typename Ops::Scalars *>(scalarsAt)),
              launched = true, 0)
           : 0)...};
  return launched;
}

template <typename Launch> void copyBox(Launch &launch, const BoxCopy &c) {
  if (c.rows <= 0 || c.cols <= 0)
    return;
  const Geometry geometry = copyBoxGeometry(c.rows, c.cols);
  const Span src = {c.src, stridedBytes(c.rows, c.srcStride, c.cols, c.srcType)};
  withType(c.srcType, [&](auto s) {
    constexpr DType S = decltype(s)::value;
    if (c.accumulate) {
      launch(geometry,
             CopyBox<S, DType::F32, true>{c.src, c.srcStride, c.dst,
                                          c.dstStride, c.rows, c.cols,
                                          c.through},
             "copyBoxKernel",
             {src,
              {c.dst, stridedBytes(c.rows, c.dstStride, c.cols, DType::F32)}});
      return;
    }
    withType(c.dstType, [&](auto d) {
      launch(geometry,
             CopyBox<S, decltype(d)::value, false>{c.src, c.srcStride, c.dst,
                                                   c.dstStride, c.rows, c.cols,
                                                   c.through},
             "copyBoxKernel",
             {src,
              {c.dst, stridedBytes(c.rows, c.dstStride, c.cols, c.dstType)}});
    });
  });
}

template <typename Launch>
void sumSquares(Launch &launch, const float *x, int64_t count,
                int64_t elements, double *partials, bool inBf16) {
  if (count <= 0 || elements <= 0)
    return;
  const int parts = sumSquaresParts(elements);
  const Geometry geometry = sumSquaresGeometry(count, parts);
  const std::initializer_list<Span> spans = {
      {x, bytesOf(count * elements, DType::F32)},
      {partials, count * parts * static_cast<int64_t>(sizeof(double))}};
  if (inBf16)
    launch(geometry, SumSquares<true>{x, count, elements, parts, partials},
           "sumSquaresKernel", spans);
  else
    launch(geometry, SumSquares<false>{x, count, elements, parts, partials},
           "sumSquaresKernel", spans);
}

template <typename Launch>
void finishNorms(Launch &launch, const double *partials, int64_t count,
                 int parts, float eps, bool inBf16, float *norms) {
  if (count <= 0)
    return;
  launch(elementwiseGeometry(count),
         FinishNorms{partials, count, parts, eps, inBf16, norms},
         "finishNormsKernel",
         {{partials, count * parts * static_cast<int64_t>(sizeof(double))},
          {norms, bytesOf(count, DType::F32)}});
}

template <typename Launch>
void normalize(Launch &launch, const float *x, int64_t count,
               int64_t elements, const float *norms, void *out,
               int64_t outStride, DType outType) {
  const int64_t total = count * elements;
  if (total <= 0)
    return;
  const std::initializer_list<Span> spans = {
      {x, bytesOf(total, DType::F32)},
      {norms, bytesOf(count, DType::F32)},
      {out, stridedBytes(count, outStride, elements, outType)}};
  withType(outType, [&](auto type) {
    launch(elementwiseGeometry(total),
           Normalize<decltype(type)::value>{x, count, elements, norms, out,
                                            outStride},
           "normalizeKernel", spans);
  });
}

template <typename Launch>
void copyOut(Launch &launch, const void *in, int64_t inStride, DType inType,
             float *out, int64_t count, int64_t elements) {
  const int64_t total = count * elements;
  if (total <= 0)
    return;
  const std::initializer_list<Span> spans = {
      {in, stridedBytes(count, inStride, elements, inType)},
      {out, bytesOf(total, DType::F32)}};
  withType(inType, [&](auto type) {
    launch(elementwiseGeometry(total),
           CopyOut<decltype(type)::value>{in, inStride, out, count, elements},
           "copyOutKernel", spans);
  });
}

template <typename Launch>
void mirrorLower(Launch &launch, void *matrices, int64_t count, int64_t m,
                 int64_t stride, DType type) {
  if (count <= 0 || m <= 1)
    return;
  const Geometry geometry = mirrorGeometry(count, m);
  const std::initializer_list<Span> spans = {
      {matrices, stridedBytes(count, stride, m * m, type)}};
  if (type == DType::F32)
    launch(geometry,
           MirrorLower<float>{static_cast<float *>(matrices), count, m,
                              stride},
           "mirrorLowerKernel", spans);
  else
    launch(geometry,
           MirrorLower<uint16_t>{static_cast<uint16_t *>(matrices), count, m,
                                 stride},
           "mirrorLowerKernel", spans);
}

/// F = b R + a I over `count` m x m matrices `stride` elements apart (R in
/// `rType`, F f32): the Gram form's polynomial before its product.
template <typename Launch>
void polynomialBase(Launch &launch, const void *r, DType rType, float *f,
                    int64_t count, int64_t m, int64_t stride, float a,
                    float b) {
  if (count <= 0 || m <= 0)
    return;
  const std::initializer_list<Span> spans = {
      {r, stridedBytes(count, stride, m * m, rType)},
      {f, stridedBytes(count, stride, m * m, DType::F32)}};
  withType(rType, [&](auto type) {
    launch(elementwiseGeometry(count * m * m),
           PolynomialBase<decltype(type)::value>{r, f, count, m, stride, a, b},
           "polynomialBaseKernel", spans);
  });
}

/// out = `type`(in) (BF16 or F16) over `count` matrices of `elements`
/// values, `stride` elements apart: roundToBf16Kernel, roundToF16Kernel.
template <typename Launch>
void roundToHalf(Launch &launch, const float *in, uint16_t *out, DType type,
                 int64_t count, int64_t elements, int64_t stride) {
  if (count <= 0 || elements <= 0)
    return;
  const std::initializer_list<Span> spans = {
      {in, stridedBytes(count, stride, elements, DType::F32)},
      {out, stridedBytes(count, stride, elements, type)}};
  if (type == DType::F16)
    launch(elementwiseGeometry(count * elements),
           RoundMatricesToHalf<DType::F16>{in, out, count, elements, stride},
           "roundToF16Kernel", spans);
  else
    launch(elementwiseGeometry(count * elements),
           RoundMatricesToHalf<DType::BF16>{in, out, count, elements, stride},
           "roundToBf16Kernel", spans);
}

/// NorMuon's step on one rows x cols matrix: `sums` holds 2 * rows
/// doubles (the rows' sums of squares before and after), `scale` one float.
template <typename Launch>
void normuon(Launch &launch, float *x, int64_t rows, int64_t cols, float *v,
             const NormuonScalars &s, double *sums, float *scale) {
  if (rows <= 0 || cols <= 0)
    return;
  const int64_t sumBytes = 2 * rows * static_cast<int64_t>(sizeof(double));
  Geometry rowsGeometry;
  rowsGeometry.grid.x = static_cast<uint32_t>(clampTo(rows, 1, 65536));
  rowsGeometry.block.x = kThreads;
  launch(rowsGeometry, NormuonRows{x, rows, cols, v, s, sums, sums + rows},
         "normuonRowsKernel",
         {{x, bytesOf(rows * cols, DType::F32)},
          {v, bytesOf(rows, DType::F32)},
          {sums, sumBytes}});
  launch(elementwiseGeometry(1),
         NormuonFinish{sums, sums + rows, rows, s.eps, scale},
         "normuonFinishKernel",
         {{sums, sumBytes}, {scale, bytesOf(1, DType::F32)}});
  launch(elementwiseGeometry(rows * cols), ScaleBy{x, rows * cols, scale},
         "scaleByKernel",
         {{x, bytesOf(rows * cols, DType::F32)},
          {scale, bytesOf(1, DType::F32)}});
}

} // namespace muon::runtime::cuda::kernels

#endif // MUON_RUNTIME_CUDA_KERNELBODIES_H
