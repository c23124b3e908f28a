//===- Synthetic.cpp - Deterministic parameters and gradients -------------===//
#include "muon/Runtime/Testing/Synthetic.h"

#include "muon/Planner/Schedule.h"

#include <limits>

namespace muon::runtime {

static uint64_t mix(uint64_t x) {
  // splitmix64's finalizer.
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// The hash of everything but the element: one tensor's stream hashes its
/// name once, not once per element (a Llama-3-8B layer stack has 1.7e9).
static uint64_t streamPrefix(uint64_t seed, const std::string &param,
                             int64_t stream) {
  uint64_t h = mix(seed);
  for (char c : param)
    h = mix(h ^ static_cast<unsigned char>(c));
  return mix(h ^ static_cast<uint64_t>(stream));
}

static float valueFromPrefix(uint64_t prefix, int64_t index, int64_t summand) {
  uint64_t h = mix(prefix ^ static_cast<uint64_t>(index));
  h = mix(h ^ static_cast<uint64_t>(summand));
  // 24 random bits scaled to [-1, 1): exactly representable.
  return static_cast<float>(static_cast<int64_t>(h >> 40) - (1 << 23)) /
         static_cast<float>(1 << 23);
}

float syntheticValue(uint64_t seed, const std::string &param, int64_t stream,
                     int64_t index, int64_t summand) {
  return valueFromPrefix(streamPrefix(seed, param, stream), index, summand);
}

/// Streams: parameters are initialized from stream -1, gradients of step s,
/// micro-batch b (of M) from stream s * M + b.
static constexpr int64_t kInitStream = -1;

SyntheticModel::SyntheticModel(Optimizer &optimizer, Device &device,
                               uint64_t seed, std::vector<int64_t> summands)
    : optimizer(optimizer), device(device), seed(seed),
      summands(std::move(summands)) {
  const std::vector<ParamSlot> &slots = optimizer.params();
  for (size_t i = 0; i < slots.size(); ++i) {
    const ParamSlot &slot = slots[i];
    int64_t bytes = slot.elements * dtypeBytes(slot.dtype);
    params.emplace_back(device, bytes);
    grads.emplace_back(device, bytes);
    std::vector<float> host(slot.elements);
    const uint64_t prefix = streamPrefix(seed, slot.name, kInitStream);
    forEachElement(slot.shape, slot.box, [&](int64_t local, int64_t global) {
      host[local] = valueFromPrefix(prefix, global, 0);
    });
    store(i, params[i], host);
    // The slot's own sizes: cannot fail.
    (void)optimizer.bind(slot.name, params[i].data(), grads[i].data(),
                         slot.dtype, slot.elements);
  }
}

Status SyntheticModel::setHasGradient(int64_t param, bool has) {
  const ParamSlot &slot = optimizer.params()[param];
  return optimizer.bind(slot.name, params[param].data(), slot.dtype,
                        has ? grads[param].data() : nullptr, slot.gradType,
                        slot.elements);
}

void SyntheticModel::store(int64_t param, DeviceBuffer &buffer,
                           const std::vector<float> &host) {
  const ParamSlot &slot = optimizer.params()[param];
  std::vector<char> typed(host.size() * dtypeBytes(slot.dtype));
  for (size_t e = 0; e < host.size(); ++e)
    storeAs(typed.data(), slot.dtype, static_cast<int64_t>(e), host[e]);
  if (!typed.empty())
    device.copyToDevice(buffer.data(), typed.data(),
                        static_cast<int64_t>(typed.size()));
}

std::vector<float> SyntheticModel::values(int64_t param) const {
  const ParamSlot &slot = optimizer.params()[param];
  std::vector<char> typed(slot.elements * dtypeBytes(slot.dtype));
  if (!typed.empty())
    device.copyToHost(typed.data(), params[param].data(),
                      static_cast<int64_t>(typed.size()));
  std::vector<float> host(slot.elements);
  for (int64_t e = 0; e < slot.elements; ++e)
    host[e] = loadAs(typed.data(), slot.dtype, e);
  return host;
}

void SyntheticModel::copyInto(std::vector<std::vector<float>> &whole) const {
  for (size_t i = 0; i < optimizer.params().size(); ++i) {
    std::vector<float> piece = values(static_cast<int64_t>(i));
    forEachElement(optimizer.plan().params[i].layout.shape,
                   optimizer.params()[i].box,
                   [&](int64_t local, int64_t global) {
                     whole[i][global] = piece[local];
                   });
  }
}

std::vector<std::vector<float>> wholeTensors(const Plan &plan) {
  std::vector<std::vector<float>> whole;
  for (const PlanParam &p : plan.params) {
    int64_t n = 1;
    for (int64_t d : p.layout.shape)
      n *= d;
    whole.emplace_back(n, 0.0f);
  }
  return whole;
}

void SyntheticModel::perturb(int64_t param, float delta) {
  std::vector<float> host = values(param);
  if (host.empty())
    return;
  host[0] += delta;
  store(param, params[param], host);
}

void SyntheticModel::makeGradients(
    int64_t step, int64_t microBatches,
    const std::vector<NonFiniteInjection> &faults) {
  const Plan &plan = optimizer.plan();
  // A one-rank plan with a multi-summand parameter is the reference: it
  // holds every summand itself.
  const bool holdsAllSummands = plan.worldSize == 1;
  const std::vector<ParamSlot> &slots = optimizer.params();
  for (size_t i = 0; i < slots.size(); ++i) {
    const ParamSlot &slot = slots[i];
    bool nan = false;
    for (const NonFiniteInjection &f : faults)
      nan |= f.param == slot.name && f.step == step;
    int64_t first = holdsAllSummands ? 0 : slot.summand;
    int64_t last = holdsAllSummands ? summands[i] : first + 1;
    std::vector<float> g(slot.elements, 0.0f);
    for (int64_t b = 0; b < microBatches; ++b) {
      int64_t stream = step * microBatches + b;
      const uint64_t prefix = streamPrefix(seed, slot.name, stream);
      forEachElement(slot.shape, slot.box, [&](int64_t local, int64_t global) {
        float sum = 0.0f;
        for (int64_t s = first; s < last; ++s)
          sum += valueFromPrefix(prefix, global, s);
        g[local] += sum;
        if (nan && global == 0)
          g[local] = std::numeric_limits<float>::quiet_NaN();
      });
    }
    store(i, grads[i], g);
  }
  // QK-clip's step input comes from the same forward pass.
  for (const QkClipLayer &layer : optimizer.qkClipLayers()) {
    std::vector<float> logits = syntheticQkLogits(
        seed, layer, step, optimizer.currentRank(), optimizer.worldSize());
    // One finite value per head: cannot be refused.
    (void)optimizer.setQkMaxLogits(layer.name, logits.data(),
                                   static_cast<int64_t>(logits.size()));
  }
}

std::vector<float> syntheticQkLogits(uint64_t seed, const QkClipLayer &layer,
                                     int64_t step, int64_t rank,
                                     int64_t world) {
  std::vector<float> logits(layer.numHeads);
  for (int64_t h = 0; h < layer.numHeads; ++h) {
    // Up to twice the threshold: about a quarter of the heads above it.
    const double value =
        layer.threshold *
        (1.0 + syntheticValue(seed, "qk_clip:" + layer.name, step, h, 0));
    // Lower on every rank but one, by whole units of the threshold's
    // scale: the maximum over ranks is `value` itself.
    const double below = rank == h % world ? 0 : 0.25 * (1 + rank);
    logits[h] = static_cast<float>(value - below * layer.threshold);
  }
  return logits;
}

std::vector<int64_t> summandCounts(const Plan &plan) {
  std::vector<int64_t> counts;
  for (const PlanParam &p : plan.params) {
    int64_t n = 1;
    for (int64_t axis : p.layout.partialAxes)
      n *= plan.mesh.shape[axis];
    counts.push_back(n);
  }
  return counts;
}

Plan referencePlan(const Plan &plan) {
  Plan ref;
  ref.worldSize = 1;
  ref.wireDtype = plan.wireDtype;
  ref.wireBytes = plan.wireBytes;
  ref.distributed = false;
  ref.mesh.shape = {1};
  for (const PlanParam &p : plan.params) {
    PlanParam q;
    q.name = p.name;
    q.dtype = p.dtype;
    q.algorithm = p.algorithm;
    q.group = p.group;
    q.layout.shape = p.layout.shape;
    q.layout.splitAxes.assign(p.layout.shape.size(), {});
    q.layout.numHeads = p.layout.numHeads;
    q.layout.headSplitDim = p.layout.headSplitDim;
    ref.params.push_back(std::move(q));
  }
  ref.ns = plan.ns;
  ref.groups = plan.groups;
  ref.qkClip = plan.qkClip;
  ref.nsMatrices.assign(1, {});
  // From the parameters, not plan.matrices: a rank's part of a plan lists
  // only its own matrices, and the reference runs them all.
  ref.matrices = muonMatrices(ref.params, ref.groups, ref.ns);
  for (size_t k = 0; k < ref.matrices.size(); ++k)
    ref.nsMatrices[0].push_back(static_cast<int64_t>(k));
  ScheduleOptions options;
  options.prefetchCount = 0;
  options.maxRounds = 1;
  (void)schedulePlan(ref, options); // no budget: cannot fail
  return ref;
}

StatusOr<std::vector<std::vector<float>>>
runReference(const Plan &plan, Device &device, uint64_t seed, int64_t steps,
             int64_t microBatches,
             const std::vector<NonFiniteInjection> &faults) {
  SingleRankCommunicator self;
  std::unique_ptr<Optimizer> optimizer;
  MUON_RETURN_IF_ERROR(
      Optimizer::create(referencePlan(plan), self, device, {}, optimizer));
  SyntheticModel model(*optimizer, device, seed, summandCounts(plan));
  for (int64_t s = 0; s < steps; ++s) {
    model.makeGradients(s, microBatches, faults);
    StepResult result;
    MUON_RETURN_IF_ERROR(optimizer->step(result));
  }
  std::vector<std::vector<float>> values;
  for (size_t i = 0; i < plan.params.size(); ++i)
    values.push_back(model.values(i));
  return values;
}

} // namespace muon::runtime
