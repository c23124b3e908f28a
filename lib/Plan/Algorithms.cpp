//===- Algorithms.cpp - Every optimizer algorithm, registered once --------===//
//
// The registry of muon/Plan/Algorithm.h: one entry per algorithm, with its
// settings (GroupSettings.h) and per-element slots (ElementState.h). An
// entry is all a new algorithm needs from the plan's side; its arithmetic
// is the runtime's (ElementMath.h, registered by name in ElementStep.h).
//
//===----------------------------------------------------------------------===//
#include "muon/Plan/Algorithm.h"

#include <cassert>

namespace muon {

namespace {

using namespace setting;

/// Muon (Keller Jordan; torch.optim.Muon's defaults): momentum on each
/// holder's gradient summand, Newton-Schulz on the owner, then weight decay
/// and the update scaled by adjust_lr.
Algorithm muon() {
  return {
      "muon",
      "Muon",
      /*orthogonalizes=*/true,
      /*binaryCode=*/1,
      /*modelTag=*/"m",
      /*prepareStep=*/"momentum",
      /*updateStep=*/"muon_update",
      {
          number("lr", 1e-3, NonNegative),
          number("weight_decay", 0.1, NonNegative),
          number("momentum", 0.95, NonNegativeBelowOne),
          flag("nesterov", true),
          // How lr scales with the matrix's shape (adjustLrFactor).
          name("adjust_lr", "original", kAdjustLrNames),
          // "decoupled" (param *= 1 - lr * weight_decay), "cautious" (only
          // where the update and the parameter agree in sign, arXiv
          // 2510.12402) or "none".
          omittedAtDefault(name("weight_decay_mode", "decoupled",
                                kWeightDecayModes)),
          // NorMuon (arXiv 2510.05491), a per-matrix step (MatrixStep.h):
          // it decides which matrices carry per-row state, so the plan
          // fixes it; its beta2 may change between steps.
          fixedByPlan(omittedAtDefault(flag("normuon", false))),
          onlyWith(number("normuon_beta2", 0.95, UnitInterval),
                   "normuon", "NorMuon's setting"),
          // A factor on the update's learning rate after adjust_lr's, not
          // on weight decay's: Megatron-LM's --muon-extra-scale-factor,
          // Emerging-Optimizers' extra_scale_factor.
          omittedAtDefault(
              number("extra_scale_factor", 1.0, NonNegative)),
      },
      {
          // Linear in the gradient: one per summand (see perSummand).
          {"momentum", nullptr, /*perSummand=*/true, /*carriesStep=*/false},
      },
  };
}

/// AdamW (torch.optim.AdamW's defaults, bias-corrected, decoupled decay).
Algorithm adamw() {
  return {
      "adamw",
      "AdamW",
      /*orthogonalizes=*/false,
      /*binaryCode=*/0,
      /*modelTag=*/"a",
      /*prepareStep=*/nullptr,
      /*updateStep=*/"adamw",
      {
          number("lr", 1e-3, NonNegative),
          numberIn("beta1", "betas", "betas[0]", 0.9, UnitInterval),
          numberIn("beta2", "betas", "betas[1]", 0.999, UnitInterval),
          number("eps", 1e-8, Positive),
          number("weight_decay", 0.01, NonNegative),
      },
      {
          // The bias correction counts each piece's steps; the update is
          // exp_avg over sqrt(exp_avg_sq).
          {"exp_avg", nullptr, /*perSummand=*/false, /*carriesStep=*/true,
           /*nonNegative=*/false, /*dividedBy=*/"exp_avg_sq"},
          // A second moment: never below zero.
          {"exp_avg_sq", nullptr, /*perSummand=*/false,
           /*carriesStep=*/false, /*nonNegative=*/true},
      },
  };
}

/// Lion (Chen et al. 2023, arXiv 2302.06675, Algorithm 2): the sign of an
/// interpolation of the momentum and the gradient, decoupled weight decay,
/// one slot; the paper's defaults (lr 1e-4, betas (0.9, 0.99), no weight
/// decay). Its step is "lion" (ElementMath.h, LionOp).
Algorithm lion() {
  return {
      "lion",
      "Lion",
      /*orthogonalizes=*/false,
      /*binaryCode=*/2,
      /*modelTag=*/"lion",
      /*prepareStep=*/nullptr,
      /*updateStep=*/"lion",
      {
          number("lr", 1e-4, NonNegative),
          numberIn("beta1", "betas", "betas[0]", 0.9, UnitInterval),
          numberIn("beta2", "betas", "betas[1]", 0.99, UnitInterval),
          number("weight_decay", 0.0, NonNegative),
      },
      {
          // The momentum, as Lion's torch ports name it.
          {"exp_avg", nullptr, /*perSummand=*/false, /*carriesStep=*/false},
      },
  };
}

/// The registry, with each row's algorithm and place filled in.
std::vector<Algorithm> registry() {
  std::vector<Algorithm> all = {muon(), adamw(), lion()};
  assert(all[kMuon].name == std::string_view("muon") &&
         all[kAdamW].name == std::string_view("adamw"));
  for (size_t a = 0; a < all.size(); ++a) {
    for (size_t i = 0; i < all[a].settings.size(); ++i) {
      all[a].settings[i].algorithm = static_cast<AlgorithmId>(a);
      all[a].settings[i].index = static_cast<int>(i);
    }
    for (ElementSlot &slot : all[a].slots)
      slot.algorithm = static_cast<AlgorithmId>(a);
  }
  return all;
}

} // namespace

const std::vector<Algorithm> &algorithms() {
  static const std::vector<Algorithm> all = registry();
  return all;
}

bool validAlgorithm(AlgorithmId algorithm) {
  return algorithm >= 0 &&
         static_cast<size_t>(algorithm) < algorithms().size();
}

const Algorithm &algorithmOf(AlgorithmId algorithm) {
  assert(validAlgorithm(algorithm));
  return algorithms()[algorithm];
}

std::optional<AlgorithmId> findAlgorithm(std::string_view name) {
  const std::vector<Algorithm> &all = algorithms();
  for (size_t a = 0; a < all.size(); ++a)
    if (name == all[a].name)
      return static_cast<AlgorithmId>(a);
  return std::nullopt;
}

std::optional<AlgorithmId> algorithmWithBinaryCode(uint8_t code) {
  const std::vector<Algorithm> &all = algorithms();
  for (size_t a = 0; a < all.size(); ++a)
    if (all[a].binaryCode == code)
      return static_cast<AlgorithmId>(a);
  return std::nullopt;
}

std::string algorithmNames(char quote) {
  std::vector<std::string_view> names;
  for (const Algorithm &a : algorithms())
    names.push_back(a.name);
  return nameList(names.data(), names.size(), quote);
}

const char *algorithmName(AlgorithmId algorithm) {
  return algorithmOf(algorithm).name;
}

} // namespace muon
