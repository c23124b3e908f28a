//===- Synthetic.h - Deterministic parameters and gradients -----*- C++ -*-===//
//
// The synthetic training problem muon-run steps through, and the
// single-device reference it is verified against (test support; not part
// of the runtime a trainer links). An element's value depends only on
// (seed, parameter name, step, micro-batch, global index, summand), never on
// the sharding, so every layout of a model (and the single-device reference)
// sees the same global problem. A parameter with partial axes has one
// gradient summand per partial coordinate; the summands add up to the
// gradient the reference sees.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_TESTING_SYNTHETIC_H
#define MUON_RUNTIME_TESTING_SYNTHETIC_H

#include "muon/Plan/Plan.h"
#include "muon/Runtime/Optimizer.h"

#include <cstdint>
#include <string>
#include <vector>

namespace muon::runtime {

/// A value in [-1, 1) with 24 significant bits (exact in f32).
float syntheticValue(uint64_t seed, const std::string &param, int64_t stream,
                     int64_t index, int64_t summand);

/// Where a synthetic gradient gets a NaN (fault injection for tests).
struct NonFiniteInjection {
  std::string param;
  int64_t step = -1;
};

/// One rank's parameter pieces and gradients for the synthetic problem, in
/// the device's memory and the plan's storage types, bound to an
/// optimizer.
class SyntheticModel {
public:
  /// Allocates, initializes and binds every piece the rank holds.
  /// `summands[i]`: how many partial summands parameter i's gradient has in
  /// the distributed model (the reference sums them all itself).
  SyntheticModel(Optimizer &optimizer, Device &device, uint64_t seed,
                 std::vector<int64_t> summands);

  /// Fills the gradients of `step` (0-based) accumulated over
  /// `microBatches` micro-batches: each micro-batch's gradient is added in
  /// order (in f32, then stored in the parameter's type), as a training
  /// loop accumulates them before the step. With QK-clip layers in the
  /// plan, also sets the step's logits (syntheticQkLogits).
  void makeGradients(int64_t step, int64_t microBatches,
                     const std::vector<NonFiniteInjection> &faults);

  /// The rank's piece of parameter `param`, as f32.
  std::vector<float> values(int64_t param) const;
  /// Writes the rank's pieces into `whole` (one tensor per parameter, as
  /// from wholeTensors): ranks running in threads fill disjoint elements.
  void copyInto(std::vector<std::vector<float>> &whole) const;
  /// Adds `delta` to the first value the rank holds (fault injection:
  /// what a lost update looks like).
  void perturb(int64_t param, float delta);
  /// Binds parameter `param` without its gradient (torch's grad None: the
  /// steps that follow leave it out), or with it again.
  Status setHasGradient(int64_t param, bool has);

private:
  void store(int64_t param, DeviceBuffer &buffer,
             const std::vector<float> &host);

  Optimizer &optimizer;
  Device &device;
  uint64_t seed;
  std::vector<int64_t> summands;
  std::vector<DeviceBuffer> params, grads;
};

/// QK-clip's synthetic logits of `layer` at `step` (SyntheticModel's
/// makeGradients passes them): what rank `rank` of `world` measured. Each
/// head's largest value is on one rank and in [0, 2) x the threshold (about
/// a quarter of the heads clipped); the others' are lower, so the maximum
/// the step takes is the same whatever the world size.
std::vector<float> syntheticQkLogits(uint64_t seed, const QkClipLayer &layer,
                                     int64_t step, int64_t rank,
                                     int64_t world);

/// Per parameter, a zero tensor of its whole (unsharded) size.
std::vector<std::vector<float>> wholeTensors(const Plan &plan);

/// Per parameter, how many partial summands its gradient has: the product
/// of its partial axes' sizes (1 without).
std::vector<int64_t> summandCounts(const Plan &plan);

/// The single-device form of a plan: one rank, nothing sharded or partial,
/// no distributed config, same optimizer settings, storage and wire dtypes.
Plan referencePlan(const Plan &plan);

/// Runs the single-device reference of `plan` for `steps` steps of the
/// synthetic problem on `device`: every parameter, whole.
StatusOr<std::vector<std::vector<float>>>
runReference(const Plan &plan, Device &device, uint64_t seed, int64_t steps,
             int64_t microBatches,
             const std::vector<NonFiniteInjection> &faults);

} // namespace muon::runtime

#endif // MUON_RUNTIME_TESTING_SYNTHETIC_H
