//===- Device.h - What the runtime needs from the hardware ------*- C++ -*-===//
//
// The step executor keeps its state and scratch in device memory and calls
// the device for every computation: memory and copies (the box copies that
// pack and unpack exchanges, with the wire conversion), Newton-Schulz, the
// registered per-element and per-matrix steps (ElementStep.h,
// MatrixStep.h), and synchronization. A backend implements this interface
// (backends/cpu: the steps' host loops and OpenBLAS; backends/cuda:
// kernels and cuBLAS). Every pointer the executor passes is memory of the
// device: its own allocations, or the trainer's parameter and gradient
// storage bound to it.
//
// Devices must compute bit-identically across ranks for the same inputs:
// the reference and every rank run the same device code.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_DEVICE_H
#define MUON_RUNTIME_DEVICE_H

#include "muon/Plan/Plan.h"
#include "muon/Runtime/DType.h"
#include "muon/Runtime/ElementStep.h"
#include "muon/Support/Status.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace muon::runtime {

/// One box copy: `rows` x `cols` elements between two row-major buffers
/// with row strides in elements. Each value is converted from `srcType` to
/// f32, rounded to `through` (the wire type, so that every rank sees values
/// as if they had crossed the wire), then stored as `dstType` or, with
/// `accumulate`, added to the f32 destination.
struct BoxCopy {
  const void *src = nullptr;
  DType srcType = DType::F32;
  int64_t srcStride = 0;
  void *dst = nullptr;
  DType dstType = DType::F32;
  int64_t dstStride = 0;
  int64_t rows = 0, cols = 0;
  DType through = DType::F32;
  bool accumulate = false;
};

struct MatrixStep;

/// Step graphs (ExecutorOptions::graphs): recording a step's device work
/// once and replaying it. A device that can offers one through
/// Device::stepGraphs().
///
/// Recording: between beginRecording and endRecording the operations are
/// recorded, not run; Device::allocate() hands out memory that lives as long
/// as the recording, release() keeps it. Any operation that must reach the
/// host (copyToHost, allFinite, synchronize, ...) makes the recording fail.
/// endRecording fails, saying why, when something could not be recorded:
/// nothing ran, and dropRecording() forgets it.
///
/// Checking: between beginReplayCheck and endReplayCheck every operation is
/// compared with the recorded one at its place (the same operation, memory,
/// sizes, types, Newton-Schulz's steps) and not run; allocate() returns
/// what the recording's did. The scalars that may change from one step to
/// the next (the learning rate, weight decay, AdamW's bias corrections) are
/// taken from the checked calls for the next replay. endReplayCheck fails
/// at the first difference, naming it.
class StepGraphRecorder {
public:
  virtual ~StepGraphRecorder() = default;
  virtual Status beginRecording() = 0;
  virtual Status endRecording() = 0;
  virtual void beginReplayCheck() = 0;
  virtual Status endReplayCheck() = 0;
  /// Queues the recorded work with the scalars of the last recording or
  /// check, as the recorded operations would have queued it.
  virtual void replay() = 0;
  /// Forgets the recording and frees its memory (after queued work).
  virtual void dropRecording() = 0;
};

class Device {
public:
  virtual ~Device() = default;
  virtual const char *name() const = 0;

  /// `bytes` of zeroed device memory; nullptr when there is not enough.
  virtual void *allocate(int64_t bytes) = 0;
  /// Gives memory back; work queued before may still use it (a GPU frees
  /// it in queue order).
  virtual void release(void *memory) = 0;
  virtual void zero(void *memory, int64_t bytes) = 0;
  /// Host memory to device memory and back (checkpoints, host-staged
  /// exchanges, tests). Both are ordered after the work queued before them
  /// and done when they return.
  virtual void copyToDevice(void *dst, const void *src, int64_t bytes) = 0;
  virtual void copyToHost(void *dst, const void *src, int64_t bytes) = 0;

  /// Whether every one of `n` values is finite.
  virtual bool allFinite(const void *x, DType type, int64_t n) = 0;
  virtual void copyBox(const BoxCopy &copy) = 0;
  /// Runs a registered per-element step (ElementStep.h) over `operands`,
  /// device memory, with `scalars` (the step's, from its context). The
  /// default runs the step's host loop on host copies of the operands it
  /// touches (copyToHost, copyToDevice); a backend runs its own kernels.
  virtual void runElementStep(const ElementStep &step,
                              const ElementOperands &operands,
                              const StepScalars &scalars);
  /// Runs a registered per-matrix step (MatrixStep.h, NorMuon's) on one
  /// rows x cols f32 matrix `x` with its per-row state `state`. The default
  /// runs its host loop on host copies of both.
  virtual void runMatrixStep(const MatrixStep &step, float *x, int64_t rows,
                             int64_t cols, float *state,
                             const StepScalars &scalars);
  /// Newton-Schulz in place on `count` rows x cols f32 matrices stored one
  /// after another from `x` (row-major, stride rows * cols elements), one
  /// iteration per coefficient triple. Returns the contract's dense count,
  /// per matrix steps * (4 m^2 n + 2 m^3) with m <= n, whatever products a
  /// device actually runs (a symmetric product does half). `precision`:
  ///  - F32: X = x / max(||x||_F, eps); per (a, b, c): A = X X^T,
  ///    B = c A A + b A, X = a X + B X (X^T X and X B for tall matrices);
  ///    f32 products with f32 accumulation (no TF32).
  ///  - BF16, as torch.optim.Muon runs it: X = bf16(x);
  ///    X = bf16(X / max(bf16(||X||_F), eps)); per (a, b, c):
  ///    A = bf16(X X^T), B = bf16(c A A + b A), X = bf16(a X + B X), with
  ///    f32 accumulation inside each product and its epilogue; x = X.
  ///  - F16: X = f16(x / max(||x||_F, eps)), the norm and the division in
  ///    f32 (f16's range would flush or overflow unnormalized values); per
  ///    (a, b, c): A = f16(X X^T), B = f16(c A A + b A),
  ///    X = f16(a X + B X), with f32 accumulation inside each product and
  ///    its epilogue; x = X.
  /// At most nsBatchLimit() matrices per call.
  virtual int64_t newtonSchulz(float *x, int64_t count, int64_t rows,
                               int64_t cols,
                               const std::vector<std::array<double, 3>> &abc,
                               double eps, DType precision) = 0;
  /// How many matrices one newtonSchulz call takes: 1 lets the executor
  /// advance exchanges between matrices (CPU); a GPU takes whole batches.
  virtual int64_t nsBatchLimit() const { return 1; }
  /// The precision Newton-Schulz runs in when the plan says "auto", and
  /// why, in words for reports ("" where the device says nothing).
  virtual DType defaultNsDtype() const { return DType::F32; }
  virtual std::string defaultNsDtypeReason() const { return {}; }
  /// Waits for queued work (a device that runs everything at once need not).
  virtual void synchronize() {}
  /// Step graphs (ExecutorOptions::graphs): the device's recorder, where
  /// it can record the work queued on it into a graph and replay it (a
  /// GPU's stream capture); nullptr where it records none.
  virtual StepGraphRecorder *stepGraphs() { return nullptr; }

  /// The first error the device met since the last call, and clears it.
  /// Operations have no error path of their own (a GPU reports many
  /// failures later, at a synchronization), so a device records its first
  /// failure and goes on; the executor asks after every step's work, and
  /// every rank fails that step with the message.
  virtual Status takeError() { return okStatus(); }
};

/// Device memory that releases itself.
class DeviceBuffer {
public:
  DeviceBuffer() = default;
  DeviceBuffer(Device &device, int64_t bytes)
      : device(&device), bytes(bytes),
        memory(bytes ? device.allocate(bytes) : nullptr) {}
  /// Counts its bytes into `*live` while it holds them, and the most ever
  /// held into `*peak` (the executor's working-memory figure).
  DeviceBuffer(Device &device, int64_t bytes, int64_t *live, int64_t *peak)
      : DeviceBuffer(device, bytes) {
    if (memory) {
      tracker = live;
      *live += bytes;
      *peak = std::max(*peak, *live);
    }
  }
  DeviceBuffer(DeviceBuffer &&o) noexcept { *this = std::move(o); }
  DeviceBuffer &operator=(DeviceBuffer &&o) noexcept {
    std::swap(device, o.device);
    std::swap(bytes, o.bytes);
    std::swap(memory, o.memory);
    std::swap(tracker, o.tracker);
    return *this;
  }
  DeviceBuffer(const DeviceBuffer &) = delete;
  DeviceBuffer &operator=(const DeviceBuffer &) = delete;
  ~DeviceBuffer() {
    if (memory)
      device->release(memory);
    if (tracker)
      *tracker -= bytes;
  }
  /// False when the device could not allocate it.
  bool ok() const { return memory || !bytes; }
  void *data() const { return memory; }
  float *floats() const { return static_cast<float *>(memory); }
  int64_t size() const { return bytes; }

private:
  Device *device = nullptr;
  int64_t bytes = 0;
  void *memory = nullptr;
  int64_t *tracker = nullptr;
};

} // namespace muon::runtime

#endif // MUON_RUNTIME_DEVICE_H
