//===- NsCoefficients.cpp - Named Newton-Schulz coefficient tables --------===//
#include "muon/Support/NsCoefficients.h"

#include <cmath>

namespace muon {

const std::vector<std::string> &nsPresetNames() {
  static const std::vector<std::string> names = {"jordan", "polar_express"};
  return names;
}

std::string nsPresetList() {
  const std::vector<std::string> &names = nsPresetNames();
  std::string list;
  for (size_t i = 0; i < names.size(); ++i)
    list += (i == 0 ? "'" : ", '") + names[i] + "'";
  return list;
}

std::optional<std::vector<NsTriple>> nsPreset(std::string_view name,
                                              int64_t steps) {
  if (name == "jordan")
    return std::vector<NsTriple>{{3.4445, -4.775, 2.0315}};
  if (name != "polar_express")
    return std::nullopt;
  // Published in the paper's Algorithm 1 (arXiv:2505.16932, section 1,
  // and github.com/NoahAmsel/PolarExpress): the optimal degree-5
  // composition for singular values in [1e-3, 1], one polynomial per step;
  // the last one is the limit every later step keeps.
  static const NsTriple published[] = {
      {8.28721201814563, -23.595886519098837, 17.300387312530933},
      {4.107059111542203, -2.9478499167379106, 0.5448431082926601},
      {3.9486908534822946, -2.908902115962949, 0.5518191394370137},
      {3.3184196573706015, -2.488488024314874, 0.51004894012372},
      {2.300652019954817, -1.6689039845747493, 0.4188073119525673},
      {1.891301407787398, -1.2679958271945868, 0.37680408948524835},
      {1.8750014808534479, -1.2500016453999487, 0.3750001645474248},
      {1.875, -1.25, 0.375},
  };
  constexpr int64_t kPublished = sizeof(published) / sizeof(published[0]);
  // The paper's safety factor: p(x / 1.01) instead of p(x), so that singular
  // values up to 1.01 (rounding in bf16) still map into the basin; applied
  // to every polynomial but the limit, as in Algorithm 1.
  const double safety = 1.01;
  std::vector<NsTriple> table;
  for (int64_t s = 0; s < steps; ++s) {
    if (s + 1 >= kPublished) {
      table.push_back(published[kPublished - 1]);
      continue;
    }
    const NsTriple &p = published[s];
    table.push_back({p[0] / safety, p[1] / std::pow(safety, 3),
                     p[2] / std::pow(safety, 5)});
  }
  return table;
}

} // namespace muon
