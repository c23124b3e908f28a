//===- NsCoefficients.cpp - Named Newton-Schulz coefficient tables --------===//
#include "muon/Support/NsCoefficients.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

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

namespace {
/// max |a s + b s^3 + c s^5| over s in [0, m]: at s = m or at a root of
/// p'(s) = a + 3b s^2 + 5c s^4 (a quadratic in u = s^2) inside the
/// interval; p(0) = 0.
double largestOnInterval(const NsTriple &t, double m) {
  const auto [a, b, c] = t;
  auto p = [&](double s) {
    const double s2 = s * s;
    return std::fabs(s * (a + s2 * (b + s2 * c)));
  };
  double best = p(m);
  std::vector<double> roots; // of 5c u^2 + 3b u + a in u = s^2
  if (c != 0) {
    const double disc = 9 * b * b - 20 * a * c;
    if (disc >= 0) {
      const double r = std::sqrt(disc);
      roots = {(-3 * b + r) / (10 * c), (-3 * b - r) / (10 * c)};
    }
  } else if (b != 0) {
    roots = {-a / (3 * b)};
  }
  for (double u : roots)
    if (u > 0 && std::sqrt(u) < m)
      best = std::max(best, p(std::sqrt(u)));
  return best;
}
} // namespace

std::vector<double> nsSingularValueBounds(const std::vector<NsTriple> &table,
                                          int64_t steps) {
  std::vector<double> bounds;
  double m = 1.0;
  for (int64_t k = 0; k < steps && !table.empty(); ++k) {
    const NsTriple &t = table[std::min<size_t>(k, table.size() - 1)];
    m = largestOnInterval(t, m);
    bounds.push_back(m);
  }
  return bounds;
}

std::optional<double> nsLargestValue(std::string_view dtype) {
  if (dtype == "f32" || dtype == "bf16" || dtype == "auto")
    return 3.4028234663852886e38;
  if (dtype == "f16")
    return 65504.0;
  return std::nullopt;
}

Status checkNsCoefficients(const std::vector<NsTriple> &table,
                                  int64_t steps, std::string_view dtype) {
  const std::optional<double> largest = nsLargestValue(dtype);
  if (!largest)
    return invalidArgument("unknown Newton-Schulz precision \"" + std::string(dtype) + "\"");
  for (size_t i = 0; i < table.size(); ++i)
    for (double x : table[i])
      if (!std::isfinite(x))
        return invalidArgument("step " + std::to_string(i) + "'s coefficients are not all "
               "finite");
  const double room = *largest / 16;
  double m = 1.0;
  const std::vector<double> bounds = nsSingularValueBounds(table, steps);
  for (size_t k = 0; k < bounds.size(); ++k) {
    const auto [a, b, c] = table[std::min(k, table.size() - 1)];
    const double gram = m * m;
    const double poly = std::fabs(b) * gram + std::fabs(c) * gram * gram;
    const double worst = std::max({gram, poly, poly * m, std::fabs(a) * m});
    auto show = [](double v) {
      char text[32];
      std::snprintf(text, sizeof text, "%.3g", v);
      return std::string(text);
    };
    if (!(bounds[k] <= kNsBound))
      return invalidArgument("step " + std::to_string(k) + " can take a singular value to " +
             show(bounds[k]) + " (the iteration diverges; at most " +
             show(kNsBound) + ")");
    if (!(worst <= room))
      return invalidArgument(
          "step " + std::to_string(k) + "'s products can reach " +
          show(worst) + ", past " + show(room) + ", a sixteenth of what " +
          std::string(dtype) + " holds (" + show(*largest) +
          "; the rest is the margin for rounding and sums)");
    m = bounds[k];
  }
  return okStatus();
}

} // namespace muon
