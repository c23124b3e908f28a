//===- Verify.cpp - A run's parameters against one device -----------------===//
#include "Verify.h"
#include "Backend.h"
#include "RankRun.h"

#include "muon/Runtime/Backends.h"
#include "muon/Support/Format.h"

#include <algorithm>
#include <cmath>

namespace muon::tool {
using namespace muon::runtime;

namespace {

/// Partial parameters are compared with a relative tolerance: their summands
/// are added in another order than the reference adds them. In f32 that
/// moves the last bits; a bf16 wire rounds the summands, and bf16 (f16)
/// Newton-Schulz rounds the sum, where a last-bit difference can flip a
/// rounding (2^-8 relative; f16 2^-11) that the iterations carry on.
double partialRelativeTolerance(const Plan &plan, DType nsDtype) {
  return plan.wireBytes == 4 && nsDtype == DType::F32 ? 1e-6 : 1e-2;
}

/// A GPU does not compute bit for bit what the CPU reference does (other
/// summation orders, fused multiply-adds), so its runs are compared by how
/// far each parameter is from the reference relative to how far the
/// reference moved it: f32 Newton-Schulz (no TF32) within 1e-5; bf16, the
/// same algorithm in bf16 on both sides, within 5e-2, since a product that
/// sums in another order can round to the neighbouring bf16 value (2^-8
/// relative) and five iterations carry that on. Both sides choose the
/// form (standard or Gram) with the same rule (NsForm.h), the CPU on
/// oneDNN's bf16 products or on BLAS's f32 products rounded to bf16. f16,
/// the same algorithm in f16 on both sides (the CPU's f32 BLAS products
/// rounded to f16), within 1e-2: a flipped rounding is 2^-11 relative, 8
/// times finer than bf16's, and the fake GPU's runs of the examples land
/// well inside it (docs/runtime.md).
double updateRelativeTolerance(DType nsDtype) {
  switch (nsDtype) {
  case DType::BF16:
    return 5e-2;
  case DType::F16:
    return 1e-2;
  case DType::F32:
    break;
  }
  return 1e-5;
}

/// The spacing of `type`'s values at `value`'s magnitude. Each step rounds
/// a parameter to its storage type on the GPU and in the reference alike:
/// updates that differ by far less than the tolerance above can still round
/// to neighbouring values, so a GPU's parameter may also be one spacing per
/// step away.
double storageSpacing(DType type, float value) {
  const float magnitude = std::fabs(value);
  if (!(magnitude > 0) || !std::isfinite(magnitude))
    return 0;
  const int exponent = std::ilogb(magnitude);
  switch (type) {
  case DType::BF16:
    return std::ldexp(1.0, exponent - 7);
  case DType::F16:
    return std::ldexp(1.0, std::max(exponent, -14) - 10);
  case DType::F32:
    break;
  }
  return static_cast<double>(std::nextafter(magnitude, INFINITY)) - magnitude;
}

/// Compares every rank's pieces (gathered at rank 0) with the reference:
/// within `tolerance` (absolute), or with `updateRelative` > 0 within that
/// fraction of the largest change the reference made to the parameter
/// (from `initial`) plus, element by element, one storage spacing per step
/// (`steps`).
Verification compare(const Plan &plan,
                     const std::vector<std::vector<float>> &reference,
                     const std::vector<std::vector<float>> &initial,
                     const std::vector<std::vector<char>> &pieces,
                     double tolerance, double updateRelative, int64_t steps,
                     DType nsDtype) {
  Verification v;
  std::vector<double> paramDiff(plan.params.size(), 0.0);
  // How far past the rounding allowance each parameter is (updateRelative).
  std::vector<double> beyondRounding(plan.params.size(), 0.0);
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    std::vector<float> values = as<float>(pieces[r]);
    size_t at = 0;
    std::vector<int64_t> coords = plan.mesh.coordsOfRank(r);
    for (size_t i = 0; i < plan.params.size(); ++i) {
      const ParamLayout &layout = plan.params[i].layout;
      if (!layout.inSubmesh(coords))
        continue;
      const std::vector<float> &ref = reference[i];
      const DType storage =
          parseDType(plan.params[i].dtype).value_or(DType::F32);
      forEachElement(layout.shape, layout.localBox(plan.mesh, coords),
                     [&](int64_t, int64_t global) {
                       double d = std::fabs(static_cast<double>(values[at++]) -
                                            ref[global]);
                       if (std::isnan(d))
                         d = INFINITY;
                       paramDiff[i] = std::max(paramDiff[i], d);
                       if (updateRelative > 0)
                         beyondRounding[i] = std::max(
                             beyondRounding[i],
                             d - static_cast<double>(steps) *
                                     storageSpacing(storage, ref[global]));
                     });
    }
  }
  for (size_t i = 0; i < plan.params.size(); ++i) {
    double allowed = tolerance;
    if (updateRelative > 0) {
      double moved = 0;
      for (size_t e = 0; e < reference[i].size(); ++e)
        moved = std::max(moved, std::fabs(static_cast<double>(reference[i][e]) -
                                          initial[i][e]));
      allowed = updateRelative * moved;
    } else if (plan.params[i].layout.isPartial()) {
      double largest = 0;
      for (float x : reference[i])
        largest = std::max(largest, std::fabs(static_cast<double>(x)));
      allowed = std::max(allowed,
                         partialRelativeTolerance(plan, nsDtype) * largest);
    }
    v.maxAbsDiff = std::max(v.maxAbsDiff, paramDiff[i]);
    if (updateRelative > 0 ? !(beyondRounding[i] <= allowed)
                           : !(paramDiff[i] <= allowed)) {
      v.verified = false;
      v.failures.push_back(
          updateRelative > 0
              ? format("'%s' differs by %e, %e beyond its storage's rounding "
                       "(allowed %e)",
                       plan.params[i].name.c_str(), paramDiff[i],
                       beyondRounding[i], allowed)
              : format("'%s' differs by %e (allowed %e)",
                       plan.params[i].name.c_str(), paramDiff[i], allowed));
    }
  }
  return v;
}

} // namespace

StatusOr<Verification> verifyAgainstReference(
    const Plan &plan, const RunFlags &flags, DType nsDtype,
    const std::vector<NonFiniteInjection> &nonFinite,
    const std::vector<std::vector<char>> &pieces) {
  // The reference runs on the CPU, with the Newton-Schulz precision the
  // ranks used (a plan's "auto" means the ranks' device's default).
  Plan referenced = plan;
  referenced.ns.nsDtype = dtypeName(nsDtype);
  // The form the ranks' devices ran (a GPU's Gram form is the CPU's), on
  // the CPU opened by name.
  std::unique_ptr<Device> cpu;
  MUON_RETURN_IF_ERROR(createDevice(
      "cpu", {{"ns_form", nsFormName(rankNsForm(flags))}}, cpu));
  MUON_ASSIGN_OR_RETURN(std::vector<std::vector<float>> reference,
                        runReference(referenced, *cpu, flags.seed,
                                     flags.steps, flags.microBatches,
                                     nonFinite));
  MUON_ASSIGN_OR_RETURN(std::vector<std::vector<float>> initial,
                        runReference(referenced, *cpu, flags.seed, 0, 1, {}));
  // Bit-exact on the CPU unless a tolerance is given; a GPU's result is
  // compared relative to the reference's update.
  double updateRelative = flags.backend == "cuda" && !flags.toleranceGiven
                              ? updateRelativeTolerance(nsDtype)
                              : 0;
  return compare(plan, reference, initial, pieces, flags.tolerance,
                 updateRelative, flags.steps, nsDtype);
}

} // namespace muon::tool
