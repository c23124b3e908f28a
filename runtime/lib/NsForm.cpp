//===- NsForm.cpp - The Gram form's phases and flop model -----------------===//
#include "muon/Runtime/NsForm.h"

#include <algorithm>
#include <cmath>

namespace muon::runtime {

bool parseNsForm(const std::string &name, NsForm &form) {
  for (NsForm f : {NsForm::Auto, NsForm::Standard, NsForm::Gram})
    if (name == nsFormName(f)) {
      form = f;
      return true;
    }
  return false;
}

const char *nsFormName(NsForm form) {
  switch (form) {
  case NsForm::Auto:
    return "auto";
  case NsForm::Standard:
    return "standard";
  case NsForm::Gram:
    return "gram";
  }
  return "auto";
}

bool gramKeepsAccuracy(const std::vector<std::array<double, 3>> &abc) {
  return std::all_of(abc.begin(), abc.end(), [](const std::array<double, 3> &k) {
    return std::abs(k[0]) <= kGramMaxA;
  });
}

std::vector<int64_t> gramPhases(DType precision, int64_t steps) {
  std::vector<int64_t> phases;
  for (int64_t start = 0; start < steps;) {
    const int64_t length =
        roundsToHalf(precision) ? 2 : (start == 0 ? 2 : 3);
    phases.push_back(std::min(length, steps - start));
    start += phases.back();
  }
  return phases;
}

bool gramPays(DType precision, int64_t m, int64_t n, int64_t steps,
              double half) {
  if (steps < 2 || m <= 0)
    return false;
  // Flops in units of m^2, the run's (not the contract's dense count).
  // A standard step: A = X X^T and B = c A A + b A symmetric, X' = a X + B X
  // full.
  const double standardStep = half * (2.0 * n + 2.0 * m) + 2.0 * n;
  // A phase of L steps: R = X X^T; L times R R; L - 1 times Q <- H Q and
  // R <- H (H R) (two products); X <- Q X full. L = 1 is a standard step's
  // cost, whichever form runs it.
  double gram = 0;
  for (int64_t length : gramPhases(precision, steps))
    gram += half * (2.0 * n + 2.0 * m * (length + 3.0 * (length - 1))) +
            2.0 * n;
  const double margin = roundsToHalf(precision) ? 0.92 : 0.8;
  return gram <= margin * static_cast<double>(steps) * standardStep;
}

double blockedHalf(int64_t m, int64_t width) {
  return (1.0 + static_cast<double>(std::min(width, m)) / m) / 2;
}

bool usesGramForm(NsForm form, DType precision, int64_t rows, int64_t cols,
                  const std::vector<std::array<double, 3>> &abc, double half) {
  const bool wanted = form == NsForm::Gram ||
                      (form == NsForm::Auto && gramKeepsAccuracy(abc));
  return wanted && gramPays(precision, std::min(rows, cols),
                            std::max(rows, cols),
                            static_cast<int64_t>(abc.size()), half);
}

} // namespace muon::runtime
