//===- muon-cuda-check.cpp - The CUDA device against the CPU device -------===//
//
// muon-cuda-check [--gpu N] [--seed S]
//                             runs every CudaDevice operation on fresh
//                             random inputs (the seed is printed; --seed
//                             repeats a run) and compares it with CpuDevice;
//                             one line per check, then "N passed, M failed";
//                             exit 0 only when all pass.
// muon-cuda-check --small     the same without the shapes above the
//                             default symmetric threshold (for the host
//                             stand-in of the GPU, whose products are
//                             reference loops: muon-cuda-check-fakegpu).
// muon-cuda-check --probe     exit 0 when a GPU is usable, else the reason
//                             and exit 1.
// muon-cuda-check --bench     times Newton-Schulz with plain GEMMs and with
//                             symmetric tiles on large shapes (to place
//                             MUON_CUDA_SYMMETRIC_MIN); checks nothing.
//
// The registered per-element steps (every one of ElementStep.h, over the
// storage types they read) and box copies must match the CPU bit for bit
// (the kernels run the host loops' arithmetic, ElementMath.h). Newton-Schulz is compared by the
// largest relative Frobenius difference over the batch's matrices:
//  - F32, at most 1e-5. cuBLAS and OpenBLAS sum in different orders; five
//    iterations of the quintic amplify those f32 differences to about 2e-6
//    (measured on the CPU: OpenBLAS against double accumulation, m up to
//    1024).
//  - BF16, at most 2e-2, against the CPU's emulation of the same algorithm.
//    A different summation order flips some of the bf16 roundings of every
//    product; after five iterations that is 0.2% to 0.7% (measured the same
//    way), so 2e-2 leaves room while still catching a wrong product, a
//    missing rounding or a transposed operand (those are off by O(1)).
//  - F16, at most 5e-3, against the CPU's f32 BLAS products rounded to f16
//    at the same points: an order difference flips an f16 rounding, 8
//    times finer than bf16's (measured on the fake GPU: at most 9.7e-4,
//    bf16 8.0e-3).
//  - Both forms (muon/Runtime/NsForm.h): the standard steps against the
//    CPU's standard form, and the Gram form's phases against the CPU's Gram
//    form (f32; bf16 on oneDNN's bf16 products or, on CPUs without them,
//    on f32 BLAS products rounded to bf16 at the same points), with the
//    same limits. Where the two backends' flop models choose different
//    forms for a shape, the line says so; in bf16 the forms round at other
//    points (measured up to 4.0e-2 apart), so the limit there is 1e-1,
//    still ten times below a wrong or transposed product's O(1); in f16
//    2e-2 (measured 2.0e-3).
// Each configuration of the symmetric path (MUON_CUDA_SYMMETRIC_MIN,
// MUON_CUDA_SYMMETRIC_TILE, MUON_CUDA_GROUPED_GEMM) gets a device of its
// own, so small shapes exercise multi-tile plans with short last tiles, and
// sizes above the default threshold run the default plan. Results must also
// be bit-identical from one run to the next (ranks must agree), and the
// memory around the batch must stay untouched.
//
//===----------------------------------------------------------------------===//
#include "CudaDevice.h"

#include "muon/Plan/Algorithm.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/Cuda/CudaBackend.h"
#include "muon/Runtime/DType.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace muon;
using namespace muon::runtime;
using muon::runtime::cpu::CpuDevice;
using muon::runtime::cuda::CudaDevice;

namespace {

using Bytes = std::vector<uint8_t>;

const DType kTypes[] = {DType::F32, DType::BF16, DType::F16};

struct Tally {
  int passed = 0, failed = 0;

  void record(bool ok, const std::string &what, const std::string &detail) {
    std::printf("%s %s%s%s\n", ok ? "ok  " : "FAIL", what.c_str(),
                detail.empty() ? "" : ": ", detail.c_str());
    std::fflush(stdout);
    ++(ok ? passed : failed);
  }
};

std::string format(const char *pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

/// A value in [-range, range] that is never zero.
float randomValue(std::mt19937 &rng, float range) {
  std::uniform_real_distribution<float> u(-range, range);
  float v = 0;
  while (v == 0)
    v = u(rng);
  return v;
}

Bytes typedValues(DType type, const std::vector<float> &values) {
  Bytes out(values.size() * dtypeBytes(type));
  for (size_t i = 0; i < values.size(); ++i)
    storeAs(out.data(), type, static_cast<int64_t>(i), values[i]);
  return out;
}

Bytes randomTyped(DType type, int64_t n, std::mt19937 &rng,
                  float range = 1.0f) {
  std::vector<float> values(n);
  for (float &v : values)
    v = randomValue(rng, range);
  return typedValues(type, values);
}

Bytes filledTyped(DType type, int64_t n, float value) {
  return typedValues(type, std::vector<float>(n, value));
}

/// Element by element: the same bits, or both NaN. Names the first
/// difference.
bool sameElements(DType type, const Bytes &got, const Bytes &want,
                  std::string &detail) {
  const int64_t n = static_cast<int64_t>(want.size()) / dtypeBytes(type);
  const int64_t width = dtypeBytes(type);
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(&got[i * width], &want[i * width], width) == 0)
      continue;
    float g = loadAs(got.data(), type, i), w = loadAs(want.data(), type, i);
    if (std::isnan(g) && std::isnan(w))
      continue;
    char text[160];
    std::snprintf(text, sizeof(text),
                  "element %lld of %lld: gpu %.9g, cpu %.9g (%s)",
                  static_cast<long long>(i), static_cast<long long>(n), g, w,
                  dtypeName(type));
    detail = text;
    return false;
  }
  return true;
}

/// Device memory holding a copy of host bytes.
class GpuArray {
public:
  GpuArray(Device &device, const Bytes &host)
      : device(device), memory(device, static_cast<int64_t>(host.size())),
        bytes(static_cast<int64_t>(host.size())) {
    if (!memory.ok()) {
      std::fprintf(stderr,
                   "muon-cuda-check: the GPU has no room for %lld "
                   "bytes\n",
                   static_cast<long long>(bytes));
      std::exit(1);
    }
    device.copyToDevice(memory.data(), host.data(), bytes);
  }
  void *data() const { return memory.data(); }
  float *floats() const { return memory.floats(); }
  Bytes read() const {
    Bytes host(bytes);
    device.copyToHost(host.data(), memory.data(), bytes);
    return host;
  }

private:
  Device &device;
  DeviceBuffer memory;
  int64_t bytes;
};

float *asFloats(Bytes &bytes) {
  return reinterpret_cast<float *>(bytes.data());
}

// Memory.

void checkMemory(Tally &tally, Device &gpu, std::mt19937 &rng) {
  const int64_t bytes = 4099;
  Bytes zeros(bytes, 0);
  {
    DeviceBuffer memory(gpu, bytes);
    Bytes back(bytes, 0xA5);
    if (memory.ok())
      gpu.copyToHost(back.data(), memory.data(), bytes);
    tally.record(memory.ok() && back == zeros, "allocate returns zeroed memory",
                 memory.ok() ? "" : "allocation failed");
  }
  Bytes data = randomTyped(DType::F32, 1025, rng);
  GpuArray array(gpu, data);
  tally.record(array.read() == data, "copyToDevice then copyToHost", "");
  gpu.zero(array.data(), 4 * 1000);
  Bytes want = data;
  std::fill(want.begin(), want.begin() + 4 * 1000, 0);
  tally.record(array.read() == want, "zero clears exactly its bytes", "");
}

// Elementwise operations.

void checkAllFinite(Tally &tally, Device &gpu, CpuDevice &cpu,
                    std::mt19937 &rng) {
  for (DType type : kTypes)
    for (int64_t n : {1, 1000, 65537}) {
      Bytes values = randomTyped(type, n, rng);
      std::uniform_int_distribution<int64_t> at(0, n - 1);
      const float specials[] = {std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::infinity(),
                                -std::numeric_limits<float>::infinity()};
      for (int bad = -1; bad < 3; ++bad) {
        Bytes x = values;
        if (bad >= 0)
          storeAs(x.data(), type, bad == 2 ? n - 1 : at(rng), specials[bad]);
        GpuArray array(gpu, x);
        bool got = gpu.allFinite(array.data(), type, n);
        bool want = cpu.allFinite(x.data(), type, n);
        std::string what = std::string("allFinite ") + dtypeName(type) +
                           " n=" + std::to_string(n) +
                           (bad < 0    ? " finite"
                            : bad == 0 ? " with NaN"
                            : bad == 1 ? " with +inf"
                                       : " with -inf last");
        tally.record(got == want && want == (bad < 0), what,
                     got == want ? "" : "gpu and cpu disagree");
      }
    }
}

/// The group whose settings a step's scalars come from: the algorithm
/// that names the step (Muon's for a step no algorithm names, QK-clip's),
/// with its defaults or, `varied`, every setting at another valid value
/// (flags flipped, another name, numbers in (0, 1)).
PlanGroup groupFor(const ElementStep &step, bool varied) {
  AlgorithmId owner = kMuon;
  for (size_t a = 0; a < algorithms().size(); ++a)
    for (const char *name :
         {algorithms()[a].prepareStep, algorithms()[a].updateStep})
      if (name && std::string_view(name) == step.name)
        owner = static_cast<AlgorithmId>(a);
  PlanGroup g(owner);
  if (!varied)
    return g;
  for (const GroupSetting &s : algorithmOf(owner).settings) {
    if (s.kind == GroupSetting::Kind::Flag)
      setSettingValue(s, g, settingValue(s, g) != 0 ? 0.0 : 1.0);
    else if (s.kind == GroupSetting::Kind::Name && s.nameCount > 1)
      setSettingName(s, g, std::string(s.names[1]));
    else if (s.kind == GroupSetting::Kind::Number)
      setSettingValue(s, g, 0.375); // below 0.5: torch.lerp's other branch
  }
  return g;
}

/// Every registered per-element step (ElementStep.h) on the GPU against
/// its host loop on the CPU, bit for bit: each storage type of the values
/// and the gradient it reads, sizes beyond one grid, two settings.
void checkElementSteps(Tally &tally, Device &gpu, CpuDevice &cpu,
                       std::mt19937 &rng) {
  const DType f32Only[] = {DType::F32};
  for (const ElementStep &step : elementSteps()) {
    const bool values = step.uses & (kReadsValues | kWritesValues);
    const bool grad = step.uses & kReadsGrad;
    for (DType type : values ? std::vector<DType>(std::begin(kTypes),
                                                  std::end(kTypes))
                             : std::vector<DType>(std::begin(f32Only),
                                                  std::end(f32Only)))
      for (DType gradType : grad ? std::vector<DType>(std::begin(kTypes),
                                                      std::end(kTypes))
                                 : std::vector<DType>(std::begin(f32Only),
                                                      std::end(f32Only)))
        for (bool varied : {false, true})
          for (int64_t n : {int64_t(1), int64_t(1001), int64_t(100003)}) {
            const PlanGroup group = groupFor(step, varied);
            const StepScalars scalars =
                step.scalars({group, /*step=*/varied ? 7 : 1, 64, 32});
            ElementOperands host, dev;
            host.n = dev.n = n;
            host.type = dev.type = type;
            host.gradType = dev.gradType = gradType;
            host.rowLength = dev.rowLength = 7;
            Bytes valuesBytes = randomTyped(type, n, rng);
            Bytes gradBytes = randomTyped(gradType, n, rng);
            Bytes input = randomTyped(DType::F32, n, rng);
            // Some rows' factors 1 (QK-clip leaves those rows' bits).
            for (int64_t i = 0; i < n; i += 3)
              storeAs(input.data(), DType::F32, i, 1.0f);
            Bytes output = filledTyped(DType::F32, n, NAN);
            std::vector<Bytes> slots;
            for (int k = 0; k < step.slots; ++k) {
              std::vector<float> v(n);
              for (float &x : v)
                x = std::fabs(randomValue(rng, 0.1f)); // a second moment too
              slots.push_back(typedValues(DType::F32, v));
            }
            GpuArray dValues(gpu, valuesBytes), dGrad(gpu, gradBytes),
                dInput(gpu, input), dOutput(gpu, output);
            std::vector<std::unique_ptr<GpuArray>> dSlots;
            for (int k = 0; k < step.slots; ++k)
              dSlots.push_back(std::make_unique<GpuArray>(gpu, slots[k]));
            host.values = valuesBytes.data();
            host.grad = gradBytes.data();
            host.input = asFloats(input);
            host.output = asFloats(output);
            dev.values = dValues.data();
            dev.grad = dGrad.data();
            dev.input = dInput.floats();
            dev.output = dOutput.floats();
            for (int k = 0; k < step.slots; ++k) {
              host.slots[k] = asFloats(slots[k]);
              dev.slots[k] = dSlots[k]->floats();
            }
            gpu.runElementStep(step, dev, scalars);
            cpu.runElementStep(step, host, scalars);
            std::string detail;
            bool ok = sameElements(type, dValues.read(), valuesBytes, detail) &&
                      sameElements(DType::F32, dOutput.read(), output, detail);
            for (int k = 0; ok && k < step.slots; ++k)
              ok = sameElements(DType::F32, dSlots[k]->read(), slots[k],
                                detail);
            tally.record(ok,
                         std::string(step.name) + " values=" +
                             dtypeName(type) + " grad=" + dtypeName(gradType) +
                             (varied ? " varied" : " defaults") +
                             " n=" + std::to_string(n),
                         detail);
          }
  }
}

// Box copies.

/// Random values with the awkward ones mixed in: NaN, infinities, signed
/// zero, f32 and f16 subnormals, f16's overflow edge, bf16 and f16 ties.
std::vector<float> boxSource(int64_t n, std::mt19937 &rng) {
  std::vector<float> values(n);
  for (float &v : values)
    v = randomValue(rng, 4.0f);
  const float specials[] = {NAN,
                            INFINITY,
                            -INFINITY,
                            -0.0f,
                            1e-40f,
                            3e-8f,
                            65504.0f,
                            65519.0f,
                            65520.0f,
                            1.0f + 1.0f / 256.0f,  // bf16 tie, rounds down
                            1.0f + 3.0f / 256.0f,  // bf16 tie, rounds up
                            1.0f + 1.0f / 2048.0f, // f16 tie
                            -2.5e38f};
  for (size_t i = 0; i < sizeof(specials) / sizeof(float); ++i)
    if (static_cast<int64_t>(i * 7) < n)
      values[i * 7] = specials[i];
  return values;
}

void checkBox(Tally &tally, Device &gpu, CpuDevice &cpu, std::mt19937 &rng,
              DType srcType, DType dstType, DType through, bool accumulate,
              int64_t rows, int64_t cols, int64_t srcStride,
              int64_t dstStride) {
  if (accumulate)
    dstType = DType::F32;
  const int64_t srcCount = (rows - 1) * srcStride + cols;
  const int64_t dstCount = (rows - 1) * dstStride + cols;
  Bytes src = typedValues(srcType, boxSource(srcCount, rng));
  // The destination's gaps between rows must survive: a poison pattern
  // there (and random values to add to when accumulating).
  Bytes dst = accumulate ? randomTyped(DType::F32, dstCount, rng)
                         : Bytes(dstCount * dtypeBytes(dstType), 0xA5);
  GpuArray s(gpu, src), d(gpu, dst);
  BoxCopy c;
  c.srcType = srcType;
  c.dstType = dstType;
  c.srcStride = srcStride;
  c.dstStride = dstStride;
  c.rows = rows;
  c.cols = cols;
  c.through = through;
  c.accumulate = accumulate;
  c.src = s.data();
  c.dst = d.data();
  gpu.copyBox(c);
  c.src = src.data();
  c.dst = dst.data();
  cpu.copyBox(c);
  std::string detail;
  tally.record(sameElements(dstType, d.read(), dst, detail),
               std::string("copyBox ") + dtypeName(srcType) + " -> " +
                   (accumulate ? "+= f32" : dtypeName(dstType)) + " through " +
                   dtypeName(through) + " " + std::to_string(rows) + "x" +
                   std::to_string(cols) + " strides " +
                   std::to_string(srcStride) + "/" + std::to_string(dstStride),
               detail);
}

void checkCopyBox(Tally &tally, Device &gpu, CpuDevice &cpu,
                  std::mt19937 &rng) {
  for (DType src : kTypes)
    for (DType dst : kTypes)
      for (DType through : kTypes)
        checkBox(tally, gpu, cpu, rng, src, dst, through, false, 7, 13, 17, 19);
  for (DType src : kTypes)
    for (DType through : kTypes)
      checkBox(tally, gpu, cpu, rng, src, DType::F32, through, true, 9, 11, 11,
               23);
  // Raw copies (same type, through f32): one row, contiguous, strided.
  for (DType type : kTypes) {
    checkBox(tally, gpu, cpu, rng, type, type, DType::F32, false, 1, 37, 0, 0);
    checkBox(tally, gpu, cpu, rng, type, type, DType::F32, false, 5, 29, 29,
             29);
    checkBox(tally, gpu, cpu, rng, type, type, DType::F32, false, 6, 31, 40,
             33);
  }
  // Many blocks in both directions.
  checkBox(tally, gpu, cpu, rng, DType::F32, DType::BF16, DType::BF16, false,
           300, 1001, 1003, 1001);
  checkBox(tally, gpu, cpu, rng, DType::BF16, DType::F32, DType::F16, true,
           70001, 3, 5, 4);
}

// Newton-Schulz.

const std::vector<std::array<double, 3>> kQuintic(5, {3.4445, -4.775, 2.0315});

struct NsCase {
  int64_t count, rows, cols;
};

/// The largest relative Frobenius difference over the batch's matrices.
double relativeDifference(const float *got, const float *want, int64_t count,
                          int64_t elements) {
  double worst = 0;
  for (int64_t k = 0; k < count; ++k) {
    double diff = 0, norm = 0;
    for (int64_t i = k * elements; i < (k + 1) * elements; ++i) {
      double d = static_cast<double>(got[i]) - want[i];
      diff += d * d;
      norm += static_cast<double>(want[i]) * want[i];
    }
    double relative = std::sqrt(diff / std::max(norm, 1e-300));
    if (std::isnan(relative))
      return std::numeric_limits<double>::infinity();
    worst = std::max(worst, relative);
  }
  return worst;
}

/// The largest relative difference from the CPU that passes (the header's
/// limits): f32 1e-5; bf16 2e-2 and f16 5e-3 in the same form, 1e-1 and
/// 2e-2 where the two backends run different forms.
double nsTolerance(DType precision, bool otherForms) {
  switch (precision) {
  case DType::BF16:
    return otherForms ? 1e-1 : 2e-2;
  case DType::F16:
    return otherForms ? 2e-2 : 5e-3;
  case DType::F32:
    break;
  }
  return 1e-5;
}

void checkNewtonSchulz(Tally &tally, CudaDevice &gpu, NsForm form,
                       std::mt19937 &rng, const NsCase &shape, DType precision,
                       const std::vector<std::array<double, 3>> &abc) {
  const int64_t elements = shape.rows * shape.cols;
  const int64_t total = shape.count * elements;
  std::normal_distribution<float> normal;
  std::vector<float> x(total);
  for (float &v : x)
    do
      v = normal(rng);
    while (v == 0);
  // The CPU in the same form (NsForm.h: each backend decides where it pays).
  cpu::CpuDeviceOptions cpuOptions;
  cpuOptions.nsForm = form;
  CpuDevice reference(cpuOptions);
  const bool cpuGram = cpu::usesGramNewtonSchulz(cpuOptions, precision,
                                                 shape.rows, shape.cols, abc);
  std::vector<float> want = x;
  const int64_t wantFlops = reference.newtonSchulz(
      want.data(), shape.count, shape.rows, shape.cols, abc, 1e-7, precision);

  // The batch between two guards that must not change.
  const int64_t guard = 64;
  std::vector<float> image(guard, -12345.0f);
  image.insert(image.end(), x.begin(), x.end());
  image.insert(image.end(), guard, -12345.0f);
  const Bytes imageBytes = typedValues(DType::F32, image);
  std::vector<Bytes> results;
  int64_t flops = 0;
  double milliseconds = 0;
  for (int run = 0; run < 2; ++run) {
    GpuArray array(gpu, imageBytes);
    gpu.synchronize();
    auto start = std::chrono::steady_clock::now();
    flops = gpu.newtonSchulz(array.floats() + guard, shape.count, shape.rows,
                             shape.cols, abc, 1e-7, precision);
    gpu.synchronize();
    milliseconds = std::chrono::duration<double, std::milli>(
                       std::chrono::steady_clock::now() - start)
                       .count();
    results.push_back(array.read());
  }
  const float *got = reinterpret_cast<const float *>(results[0].data());
  bool guardsKept = std::equal(got, got + guard, image.begin()) &&
                    std::equal(got + guard + total, got + 2 * guard + total,
                               image.begin() + guard + total);
  const std::string path = gpu.lastNewtonSchulzPath();
  const bool gpuGram = path.find("Gram") != std::string::npos;
  // bf16 and f16 in two forms (each backend's flop model may choose
  // differently near the boundary) round at other points.
  const bool otherRoundings = roundsToHalf(precision) && gpuGram != cpuGram;
  const double tolerance = nsTolerance(precision, otherRoundings);
  const double relative =
      relativeDifference(got + guard, want.data(), shape.count, elements);
  std::string what =
      std::string("newtonSchulz ") + dtypeName(precision) + " " +
      nsFormName(form) + " " + std::to_string(shape.count) + " x " +
      std::to_string(shape.rows) + "x" + std::to_string(shape.cols) +
      (abc.empty() ? " (no iteration)" : "") + " [" + path + "]" +
      (gpuGram != cpuGram ? std::string(" against the CPU's ") +
                                (cpuGram ? "Gram" : "standard") + " form"
                          : "");
  std::string detail = "relative difference " + format("%.2e", relative) +
                       " (limit " + format("%.0e", tolerance) + "), " +
                       format("%.2f", milliseconds) + " ms";
  bool ok = relative <= tolerance;
  if (flops != wantFlops) {
    ok = false;
    detail += "; flops " + std::to_string(flops) + ", want " +
              std::to_string(wantFlops);
  }
  if (!guardsKept) {
    ok = false;
    detail += "; memory around the batch changed";
  }
  if (results[0] != results[1]) {
    ok = false;
    detail += "; a second run differs (not deterministic)";
  }
  tally.record(ok, what, detail);
}

/// Sets or clears an environment variable for the next device.
void setEnv(const char *name, const char *value) {
  if (value)
    setenv(name, value, 1);
  else
    unsetenv(name);
}

struct NsConfig {
  const char *label;
  const char *symmetricMin, *tile, *grouped; // null: unset
  std::vector<NsCase> shapes;
};

void checkNewtonSchulzConfigs(Tally &tally, int ordinal, std::mt19937 &rng,
                              bool smallOnly) {
  // 2 x 129x257: the norm's sum of squares in three parts per matrix.
  // 3 x 37x101, 2 x 131x29, 1 x 33x200, 4 x 1x50 and 2 x 50x1 take the
  // Gram form where asked (NsForm.h's flop model), squares never.
  const std::vector<NsCase> small = {{3, 37, 101},  {2, 131, 29}, {1, 64, 64},
                                     {2, 100, 100}, {1, 33, 200}, {4, 1, 50},
                                     {2, 50, 1},    {2, 129, 257}};
  const std::vector<NsConfig> configs = {
      {"plain GEMMs", "1000000000", nullptr, nullptr, small},
      {"symmetric tiles of 16, grouped", "0", "16", "1", small},
      {"symmetric tiles of 16, batched per tile shape", "0", "16", "0", small},
      {"symmetric tiles of 48, grouped",
       "0",
       "48",
       "1",
       {{2, 100, 130}, {3, 150, 97}}},
      // Above the default threshold (2048), with the default tiles.
      {"defaults",
       nullptr,
       nullptr,
       nullptr,
       {{1, 2048, 2304}, {1, 2304, 2048}, {2, 2100, 2200}, {2, 300, 500},
        {1, 2048, 8192}}},
  };
  for (const NsConfig &config : configs) {
    if (smallOnly && !config.symmetricMin)
      continue; // the defaults: shapes above the threshold
    setEnv("MUON_CUDA_SYMMETRIC_MIN", config.symmetricMin);
    setEnv("MUON_CUDA_SYMMETRIC_TILE", config.tile);
    setEnv("MUON_CUDA_GROUPED_GEMM", config.grouped);
    for (NsForm form : {NsForm::Standard, NsForm::Gram}) {
      cuda::DeviceOptions options;
      options.nsForm = form;
      StatusOr<std::unique_ptr<Device>> made =
          cuda::createDevice(ordinal, options);
      std::printf("-- Newton-Schulz, %s, %s form\n", config.label,
                  nsFormName(form));
      if (!made.ok()) {
        tally.record(false,
                     std::string("creating a device for ") + config.label,
                     made.status().message());
        continue;
      }
      std::unique_ptr<Device> device = std::move(made).value();
      auto &gpu = static_cast<CudaDevice &>(*device);
      for (const NsCase &shape : config.shapes)
        for (DType precision : {DType::F32, DType::BF16, DType::F16})
          checkNewtonSchulz(tally, gpu, form, rng, shape, precision, kQuintic);
    }
  }
  setEnv("MUON_CUDA_SYMMETRIC_MIN", nullptr);
  setEnv("MUON_CUDA_SYMMETRIC_TILE", nullptr);
  setEnv("MUON_CUDA_GROUPED_GEMM", nullptr);
}

void checkNewtonSchulzEdges(Tally &tally, CudaDevice &gpu, std::mt19937 &rng) {
  for (DType precision : {DType::F32, DType::BF16, DType::F16})
    checkNewtonSchulz(tally, gpu, NsForm::Auto, rng, {2, 20, 30}, precision,
                      {});
  // An empty batch does nothing and counts nothing.
  float untouched = 1.5f;
  GpuArray one(gpu, typedValues(DType::F32, {untouched}));
  int64_t flops =
      gpu.newtonSchulz(one.floats(), 0, 4, 4, kQuintic, 1e-7, DType::F32);
  Bytes back = one.read();
  tally.record(flops == 0 && loadAs(back.data(), DType::F32, 0) == untouched,
               "newtonSchulz on an empty batch", "");
}

// Timing.

/// Milliseconds of one newtonSchulz call on `x` (the median of three, after
/// one to warm up).
double timeNewtonSchulz(CudaDevice &gpu, float *x, const NsCase &shape,
                        DType precision) {
  std::vector<double> times;
  for (int run = 0; run < 4; ++run) {
    gpu.synchronize();
    auto start = std::chrono::steady_clock::now();
    gpu.newtonSchulz(x, shape.count, shape.rows, shape.cols, kQuintic, 1e-7,
                     precision);
    gpu.synchronize();
    if (run > 0)
      times.push_back(std::chrono::duration<double, std::milli>(
                          std::chrono::steady_clock::now() - start)
                          .count());
  }
  std::sort(times.begin(), times.end());
  return times[1];
}

int bench(int ordinal, std::mt19937 &rng) {
  // Two devices: one never tiles, one always does (default tiles).
  std::unique_ptr<Device> devices[2];
  const char *mins[2] = {"1000000000", "0"};
  for (int i = 0; i < 2; ++i) {
    setEnv("MUON_CUDA_SYMMETRIC_MIN", mins[i]);
    StatusOr<std::unique_ptr<Device>> made = cuda::createDevice(ordinal);
    if (!made.ok()) {
      std::fprintf(stderr, "muon-cuda-check: %s\n",
                   made.status().message().c_str());
      return 1;
    }
    devices[i] = std::move(made).value();
  }
  setEnv("MUON_CUDA_SYMMETRIC_MIN", nullptr);
  const std::vector<NsCase> shapes = {{8, 1024, 1024}, {1, 2048, 2048},
                                      {4, 2048, 2048}, {1, 2048, 8192},
                                      {1, 4096, 4096}, {1, 8192, 8192}};
  std::normal_distribution<float> normal;
  for (const NsCase &shape : shapes) {
    std::vector<float> x(shape.count * shape.rows * shape.cols);
    for (float &v : x)
      v = normal(rng);
    for (DType precision : {DType::BF16, DType::F32}) {
      const int64_t m = std::min(shape.rows, shape.cols);
      const int64_t n = std::max(shape.rows, shape.cols);
      const double flops =
          5.0 * shape.count * (4.0 * m * m * n + 2.0 * m * m * m);
      std::printf("bench %s %lld x %lldx%lld:", dtypeName(precision),
                  static_cast<long long>(shape.count),
                  static_cast<long long>(shape.rows),
                  static_cast<long long>(shape.cols));
      for (int i = 0; i < 2; ++i) {
        auto &gpu = static_cast<CudaDevice &>(*devices[i]);
        GpuArray array(gpu, typedValues(DType::F32, x));
        double ms = timeNewtonSchulz(gpu, array.floats(), shape, precision);
        std::printf(" %s [%s] %.2f ms (%.1f dense TFLOP/s)",
                    i == 0 ? "plain" : "symmetric",
                    gpu.lastNewtonSchulzPath().c_str(),
                    ms, flops / ms / 1e9);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
  }
  return 0;
}

int usage(const char *message) {
  if (message)
    std::fprintf(stderr, "muon-cuda-check: %s\n", message);
  std::fprintf(stderr,
               "usage: muon-cuda-check [--gpu N] [--seed S] [--small]   "
               "compare the CUDA device with the CPU device\n"
               "       muon-cuda-check [--gpu N] --probe      exit 0 when a "
               "GPU is usable\n"
               "       muon-cuda-check [--gpu N] --bench      time "
               "Newton-Schulz, plain and symmetric\n");
  return 2;
}

} // namespace

int main(int argc, char **argv) {
  bool probe = false, timing = false, smallOnly = false;
  int ordinal = 0;
  unsigned seed = std::random_device{}();
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--probe") {
      probe = true;
    } else if (arg == "--bench") {
      timing = true;
    } else if (arg == "--small") {
      smallOnly = true;
    } else if (arg == "--gpu" && i + 1 < argc) {
      char *end = nullptr;
      long value = std::strtol(argv[++i], &end, 10);
      if (*end || value < 0 || value > 1 << 20)
        return usage("--gpu takes a GPU number");
      ordinal = static_cast<int>(value);
    } else if (arg == "--seed" && i + 1 < argc) {
      char *end = nullptr;
      unsigned long value = std::strtoul(argv[++i], &end, 10);
      if (*end || value > 0xFFFFFFFFul)
        return usage("--seed takes a number");
      seed = static_cast<unsigned>(value);
    } else if (arg == "--help" || arg == "-h") {
      usage(nullptr);
      return 0;
    } else {
      return usage(("unknown argument '" + arg + "'").c_str());
    }
  }

  StatusOr<std::unique_ptr<Device>> made = cuda::createDevice(ordinal);
  if (!made.ok()) {
    std::fprintf(stderr, "muon-cuda-check: no usable CUDA GPU: %s\n",
                 made.status().message().c_str());
    return 1;
  }
  std::unique_ptr<Device> device = std::move(made).value();
  auto &gpu = static_cast<CudaDevice &>(*device);
  std::printf("muon-cuda-check: GPU %d: %s\n", ordinal,
              gpu.description().c_str());
  if (probe)
    return 0;

  std::printf("muon-cuda-check: seed %u\n", seed);
  std::mt19937 rng(seed);
  if (timing)
    return bench(ordinal, rng);
  CpuDevice cpu;
  Tally tally;
  checkMemory(tally, gpu, rng);
  checkAllFinite(tally, gpu, cpu, rng);
  checkElementSteps(tally, gpu, cpu, rng);
  checkCopyBox(tally, gpu, cpu, rng);
  checkNewtonSchulzEdges(tally, gpu, rng);
  checkNewtonSchulzConfigs(tally, ordinal, rng, smallOnly);
  std::printf("%d passed, %d failed\n", tally.passed, tally.failed);
  return tally.failed == 0 ? 0 : 1;
}
