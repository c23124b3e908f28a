//===- ElementMath.h - The optimizers' arithmetic per element ---*- C++ -*-===//
//
// What momentum, the Muon update, AdamW and the other per-element steps
// compute for one element, written once for every device
// (MUON_HOST_DEVICE), and the steps themselves as ops (at the end): the
// registry's host loops (ElementStep.cpp) and the CUDA kernels
// (KernelBodies.h) run the same ops, so the two can only differ where a
// compiler does (see HostDevice.h). The scalars derived from the settings
// are computed on the host, once per call, in double and then rounded to
// f32, as here.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_ELEMENTMATH_H
#define MUON_RUNTIME_ELEMENTMATH_H

#include "muon/Plan/Plan.h"
#include "muon/Runtime/ElementStep.h"
#include "muon/Runtime/HostDevice.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>

namespace muon::runtime {

/// torch.lerp's formula in f32 (exact at both ends).
MUON_HOST_DEVICE inline float lerp(float start, float end, float weight) {
  return weight < 0.5f ? start + weight * (end - start)
                       : end - (end - start) * (1.0f - weight);
}

/// Whether an f32 is neither infinite nor NaN (its exponent is not all
/// ones).
MUON_HOST_DEVICE inline bool isFiniteValue(float value) {
  return (floatBits(value) & 0x7F800000u) != 0x7F800000u;
}

struct MomentumScalars {
  float momentum = 0, oneMinusMomentum = 1;
  bool nesterov = false;
};

inline MomentumScalars momentumScalars(const PlanGroup &muon) {
  const double momentum = muon.number("momentum");
  return {static_cast<float>(momentum), static_cast<float>(1.0 - momentum),
          muon.flag("nesterov")};
}

/// buf = lerp(buf, grad, 1 - momentum); the returned update is
/// lerp(grad, buf, momentum) with Nesterov, else buf.
MUON_HOST_DEVICE inline float momentumStep(float grad, float &buf,
                                           const MomentumScalars &s) {
  buf = lerp(buf, grad, s.oneMinusMomentum);
  return s.nesterov ? lerp(grad, buf, s.momentum) : buf;
}

/// Muon's learning rate for a rows x cols matrix of a Muon group
/// (`adjust_lr`, then `extra_scale_factor`). The plan's reader and
/// setGroupSettings accept only known adjust_lr names.
inline double adjustedLr(const PlanGroup &muon, int64_t rows, int64_t cols) {
  return muon.number("lr") *
         adjustLrFactor(muon.text("adjust_lr"), rows, cols) *
         muon.number("extra_scale_factor");
}

/// The Muon update: values * decay - alr * orth, where decay is
/// 1 - lr * weight_decay ("decoupled"), that only where orth * value >= 0
/// and 1 elsewhere ("cautious": Cautious Weight Decay, arXiv 2510.12402),
/// or 1 ("none").
struct UpdateScalars {
  float decay = 1, step = 0;
  bool cautious = false;
};

inline UpdateScalars updateScalars(const PlanGroup &muon, double adjustedLr) {
  const std::string &mode = muon.text("weight_decay_mode");
  return {mode == "none" ? 1.0f
                         : static_cast<float>(1.0 - muon.number("lr") *
                                                        muon.number(
                                                            "weight_decay")),
          static_cast<float>(adjustedLr), mode == "cautious"};
}

/// Whether the update `orth` (subtracted) and `value` disagree in sign: the
/// elements cautious weight decay leaves alone (a zero agrees with both).
MUON_HOST_DEVICE inline bool signsDisagree(float orth, float value) {
  return (orth > 0.0f && value < 0.0f) || (orth < 0.0f && value > 0.0f);
}

MUON_HOST_DEVICE inline float updatedValue(float value, float orth,
                                           const UpdateScalars &s) {
  const float decayed =
      s.cautious && signsDisagree(orth, value) ? value : value * s.decay;
  return decayed - s.step * orth;
}

/// AdamW (torch.optim.AdamW, decoupled weight decay, bias-corrected).
struct AdamWScalars {
  float decay = 1, oneMinusBeta1 = 0, beta2 = 0, oneMinusBeta2 = 0;
  float stepSize = 0, bc2Sqrt = 1, eps = 0;
};

/// The scalars of step `step` (1-based).
inline AdamWScalars adamwScalars(const PlanGroup &adamw, int64_t step) {
  const double lr = adamw.number("lr"), beta1 = adamw.number("beta1"),
               beta2 = adamw.number("beta2");
  const double bc1 = 1.0 - std::pow(beta1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(beta2, static_cast<double>(step));
  AdamWScalars scalars;
  scalars.decay =
      static_cast<float>(1.0 - lr * adamw.number("weight_decay"));
  scalars.oneMinusBeta1 = static_cast<float>(1.0 - beta1);
  scalars.beta2 = static_cast<float>(beta2);
  scalars.oneMinusBeta2 = static_cast<float>(1.0 - beta2);
  scalars.stepSize = static_cast<float>(lr / bc1);
  scalars.bc2Sqrt = static_cast<float>(std::sqrt(bc2));
  scalars.eps = static_cast<float>(adamw.number("eps"));
  return scalars;
}

/// One element of AdamW: updates the two moments and returns the new value.
MUON_HOST_DEVICE inline float adamwStep(float value, float grad, float &expAvg,
                                        float &expAvgSq,
                                        const AdamWScalars &s) {
  const float decayed = value * s.decay;
  expAvg = lerp(expAvg, grad, s.oneMinusBeta1);
  expAvgSq = expAvgSq * s.beta2 + s.oneMinusBeta2 * grad * grad;
  const float denom = sqrtf(expAvgSq) / s.bc2Sqrt + s.eps;
  return decayed - s.stepSize * (expAvg / denom);
}

/// Lion (Chen et al. 2023, arXiv 2302.06675, Algorithm 2) with decoupled
/// weight decay:
///   c = beta1 m + (1 - beta1) g
///   p = p (1 - lr wd) - lr sign(c)
///   m = beta2 m + (1 - beta2) g
struct LionScalars {
  float decay = 1, lr = 0, beta1 = 0, oneMinusBeta1 = 1, beta2 = 0,
        oneMinusBeta2 = 1;
};

inline LionScalars lionScalars(const PlanGroup &lion) {
  const double lr = lion.number("lr"), beta1 = lion.number("beta1"),
               beta2 = lion.number("beta2");
  LionScalars s;
  s.decay = static_cast<float>(1.0 - lr * lion.number("weight_decay"));
  s.lr = static_cast<float>(lr);
  s.beta1 = static_cast<float>(beta1);
  s.oneMinusBeta1 = static_cast<float>(1.0 - beta1);
  s.beta2 = static_cast<float>(beta2);
  s.oneMinusBeta2 = static_cast<float>(1.0 - beta2);
  return s;
}

/// torch.sign: 1 above zero, -1 below, zeros and NaN as they are.
MUON_HOST_DEVICE inline float signOf(float x) {
  return x > 0.0f ? 1.0f : (x < 0.0f ? -1.0f : x);
}

/// One element of Lion: updates the momentum and returns the new value.
MUON_HOST_DEVICE inline float lionStep(float value, float grad, float &m,
                                       const LionScalars &s) {
  const float c = s.beta1 * m + s.oneMinusBeta1 * grad;
  m = s.beta2 * m + s.oneMinusBeta2 * grad;
  return value * s.decay - s.lr * signOf(c);
}

/// NorMuon's per-matrix step (arXiv 2510.05491; microsoft/dion's
/// normuon.py), on the owner after Newton-Schulz, in place on one row-major
/// rows x cols f32 matrix `x` (the orthogonalized update O) with its per-row
/// state `v` (rows values):
///   m_i = mean_j O_ij^2                       (summed in double)
///   v_i = lerp(v_i, m_i, 1 - beta2)           (f32, torch.lerp)
///   N_ij = O_ij / (sqrt(v_i) + eps)
///   x = N * (||O||_F / max(||N||_F, eps))     (norms in double)
/// so the update keeps the Newton-Schulz output's Frobenius norm, and with
/// it Muon's RMS. eps is kNormuonEps. normuonStep is the CPU's loop; the
/// per-row and the final arithmetic (normuonRowDivisor, normuonRescale) are
/// shared with the CUDA kernels, which sum each row's squares in another
/// order (a fixed tree).
struct NormuonScalars {
  float oneMinusBeta2 = 0.05f, eps = 1e-8f;
};

inline NormuonScalars normuonScalars(const PlanGroup &muon) {
  return {static_cast<float>(1.0 - muon.number("normuon_beta2")),
          static_cast<float>(kNormuonEps)};
}

/// A row's state update from its sum of squares, and its divisor:
/// v = lerp(v, mean square, 1 - beta2), sqrt(v) + eps.
MUON_HOST_DEVICE inline float normuonRowDivisor(float &v, double squares,
                                                int64_t cols,
                                                const NormuonScalars &s) {
  const float mean = static_cast<float>(squares / static_cast<double>(cols));
  v = lerp(v, mean, s.oneMinusBeta2);
  return sqrtf(v) + s.eps;
}

/// The factor back to the Newton-Schulz output's norm, from the sums of
/// squares before and after the rows' division.
MUON_HOST_DEVICE inline float normuonRescale(double before, double after,
                                             float eps) {
  const double normAfter = sqrt(after), floor = static_cast<double>(eps);
  return static_cast<float>(sqrt(before) /
                            (normAfter > floor ? normAfter : floor));
}

inline void normuonStep(float *x, int64_t rows, int64_t cols, float *v,
                        const NormuonScalars &s) {
  double before = 0, after = 0;
  for (int64_t i = 0; i < rows; ++i) {
    float *row = x + i * cols;
    double squares = 0;
    for (int64_t j = 0; j < cols; ++j)
      squares += static_cast<double>(row[j]) * row[j];
    before += squares;
    const float divisor = normuonRowDivisor(v[i], squares, cols, s);
    for (int64_t j = 0; j < cols; ++j) {
      row[j] = row[j] / divisor;
      after += static_cast<double>(row[j]) * row[j];
    }
  }
  const float scale = normuonRescale(before, after, s.eps);
  for (int64_t e = 0; e < rows * cols; ++e)
    x[e] *= scale;
}

/// QK-clip (MuonClip, Kimi K2, arXiv 2507.20534): the factor on a head's
/// rows of W_q or W_k after the update, sqrt(threshold / maxLogit) where the
/// head's largest logit of the step exceeds the threshold, else 1 (the head
/// is left alone). In double, rounded once to f32, so every rank and device
/// scales by the same f32.
inline float qkClipFactor(double threshold, double maxLogit) {
  return maxLogit > threshold
             ? static_cast<float>(std::sqrt(threshold / maxLogit))
             : 1.0f;
}

/// One stored value scaled by a QK-clip factor: f32 product, rounded to
/// the storage type by the store (storeAs).
MUON_HOST_DEVICE inline float qkClipped(float value, float factor) {
  return value * factor;
}

// The per-element steps as ops: each has its name, the operands it touches
// (kUses, kSlots), its Scalars and how it derives them from a call's
// context, and `apply`, one element's work on an accessor `e` of the
// element's operands (value()/setValue(), grad(), input(), rowInput(),
// setOutput(), slot(k)/setSlot(k)), which the host loop and the CUDA
// kernels provide. Every value is read once and written once, through
// registers.

/// A step without scalars.
struct NoScalars {};

/// Muon's momentum (and the Nesterov mix) on a holder's own gradient
/// summand: its slot 0 is the momentum buffer, its output the update the
/// gathers carry.
struct MomentumOp {
  static constexpr const char *kName = "momentum";
  static constexpr unsigned kUses = kReadsGrad | kWritesOutput;
  static constexpr int kSlots = 1;
  using Scalars = MomentumScalars;
  static Scalars scalars(const StepContext &c) {
    return momentumScalars(c.group);
  }
  template <typename E>
  MUON_HOST_DEVICE static void apply(E &e, const Scalars &s) {
    float buf = e.slot(0);
    e.setOutput(momentumStep(e.grad(), buf, s));
    e.setSlot(0, buf);
  }
};

/// Muon's update of a stored piece from its orthogonalized values (the
/// input), with weight decay (updatedValue); the context's matrix shape
/// gives the adjusted lr.
struct MuonUpdateOp {
  static constexpr const char *kName = "muon_update";
  static constexpr unsigned kUses = kReadsValues | kWritesValues | kReadsInput;
  static constexpr int kSlots = 0;
  using Scalars = UpdateScalars;
  static Scalars scalars(const StepContext &c) {
    return updateScalars(c.group, adjustedLr(c.group, c.rows, c.cols));
  }
  template <typename E>
  MUON_HOST_DEVICE static void apply(E &e, const Scalars &s) {
    e.setValue(updatedValue(e.value(), e.input(), s));
  }
};

/// AdamW's update on the summed gradient: slots 0 and 1 are its moments.
struct AdamWOp {
  static constexpr const char *kName = "adamw";
  static constexpr unsigned kUses = kReadsValues | kWritesValues | kReadsGrad;
  static constexpr int kSlots = 2;
  using Scalars = AdamWScalars;
  static Scalars scalars(const StepContext &c) {
    return adamwScalars(c.group, c.step);
  }
  template <typename E>
  MUON_HOST_DEVICE static void apply(E &e, const Scalars &s) {
    float m = e.slot(0), v = e.slot(1);
    e.setValue(adamwStep(e.value(), e.grad(), m, v, s));
    e.setSlot(0, m);
    e.setSlot(1, v);
  }
};

/// Lion's update on the summed gradient: slot 0 is its momentum.
struct LionOp {
  static constexpr const char *kName = "lion";
  static constexpr unsigned kUses = kReadsValues | kWritesValues | kReadsGrad;
  static constexpr int kSlots = 1;
  using Scalars = LionScalars;
  static Scalars scalars(const StepContext &c) { return lionScalars(c.group); }
  template <typename E>
  MUON_HOST_DEVICE static void apply(E &e, const Scalars &s) {
    float m = e.slot(0);
    e.setValue(lionStep(e.value(), e.grad(), m, s));
    e.setSlot(0, m);
  }
};

/// QK-clip's rescale of a stored piece: each row times its factor (the
/// input, one per row); a row whose factor is 1 keeps its bits.
struct QkClipOp {
  static constexpr const char *kName = "qk_clip";
  static constexpr unsigned kUses =
      kReadsValues | kWritesValues | kReadsRowInput;
  static constexpr int kSlots = 0;
  using Scalars = NoScalars;
  static Scalars scalars(const StepContext &) { return {}; }
  template <typename E>
  MUON_HOST_DEVICE static void apply(E &e, const Scalars &) {
    const float factor = e.rowInput();
    if (factor != 1.0f)
      e.setValue(qkClipped(e.value(), factor));
  }
};

/// Every per-element step, in registry order (ElementStep.h): the host
/// loops and the CUDA kernels are made from this list.
using ElementOps =
    std::tuple<MomentumOp, MuonUpdateOp, AdamWOp, QkClipOp, LionOp>;

} // namespace muon::runtime

#endif // MUON_RUNTIME_ELEMENTMATH_H
