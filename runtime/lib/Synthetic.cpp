//===- Synthetic.cpp - Deterministic parameters and gradients -------------===//
#include "muon/Runtime/Synthetic.h"

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

float syntheticValue(uint64_t seed, const std::string &param, int64_t stream,
                     int64_t index, int64_t summand) {
  uint64_t h = mix(seed);
  for (char c : param)
    h = mix(h ^ static_cast<unsigned char>(c));
  h = mix(h ^ static_cast<uint64_t>(stream));
  h = mix(h ^ static_cast<uint64_t>(index));
  h = mix(h ^ static_cast<uint64_t>(summand));
  // 24 random bits scaled to [-1, 1): exactly representable.
  return static_cast<float>(static_cast<int64_t>(h >> 40) - (1 << 23)) /
         static_cast<float>(1 << 23);
}

/// Streams: parameters are initialized from stream -1, gradients of step s,
/// micro-batch b (of M) from stream s * M + b.
static constexpr int64_t kInitStream = -1;

SyntheticModel::SyntheticModel(StepExecutor &executor, uint64_t seed,
                               std::vector<int64_t> summands)
    : executor(executor), seed(seed), summands(std::move(summands)) {
  const Plan &plan = executor.plan();
  params.resize(plan.params.size());
  grads.resize(plan.params.size());
  for (size_t i = 0; i < plan.params.size(); ++i) {
    int64_t n = executor.localElements(i);
    params[i].assign(n, 0.0f);
    grads[i].assign(n, 0.0f);
    const PlanParam &p = plan.params[i];
    forEachElement(p.layout.shape, executor.localBox(i),
                   [&](int64_t local, int64_t global) {
                     params[i][local] =
                         syntheticValue(seed, p.name, kInitStream, global, 0);
                   });
    executor.bind(i, params[i].data(), grads[i].data());
  }
}

void SyntheticModel::makeGradients(
    int64_t step, int64_t microBatches,
    const std::vector<NonFiniteInjection> &faults) {
  const Plan &plan = executor.plan();
  // A one-rank plan with a multi-summand parameter is the reference: it
  // holds every summand itself.
  const bool holdsAllSummands = plan.worldSize == 1;
  for (size_t i = 0; i < plan.params.size(); ++i) {
    const PlanParam &p = plan.params[i];
    bool nan = false;
    for (const NonFiniteInjection &f : faults)
      nan |= f.param == p.name && f.step == step;
    int64_t first = holdsAllSummands ? 0 : executor.localSummand(i);
    int64_t last = holdsAllSummands ? summands[i] : first + 1;
    std::vector<float> &g = grads[i];
    std::fill(g.begin(), g.end(), 0.0f);
    for (int64_t b = 0; b < microBatches; ++b) {
      int64_t stream = step * microBatches + b;
      forEachElement(p.layout.shape, executor.localBox(i),
                     [&](int64_t local, int64_t global) {
                       float sum = 0.0f;
                       for (int64_t s = first; s < last; ++s)
                         sum += syntheticValue(seed, p.name, stream, global, s);
                       g[local] += sum;
                       if (nan && global == 0)
                         g[local] = std::numeric_limits<float>::quiet_NaN();
                     });
    }
  }
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
    q.muon = p.muon;
    q.layout.shape = p.layout.shape;
    q.layout.splitAxes.assign(p.layout.shape.size(), {});
    ref.params.push_back(std::move(q));
  }
  ref.muon = plan.muon;
  ref.adamw = plan.adamw;
  ref.nsMatrices.assign(1, {});
  for (size_t k = 0; k < plan.matrices.size(); ++k) {
    PlanMatrix m = plan.matrices[k];
    m.owner = -1;
    ref.matrices.push_back(m);
    ref.nsMatrices[0].push_back(static_cast<int64_t>(k));
  }
  ScheduleOptions options;
  options.prefetchCount = 0;
  options.maxRounds = 1;
  std::string error;
  schedulePlan(ref, options, error); // no budget: cannot fail
  return ref;
}

} // namespace muon::runtime
