//===- Verify.h - A run's parameters against one device ---------*- C++ -*-===//
//
// `muon-run --verify`: rank 0 gathers every rank's pieces and compares them
// with the single-device reference of the same plan (the runtime's testing
// library runs it on the CPU): bit for bit on the CPU, relative to the
// reference's update on a GPU, whose sums run in other orders.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_TOOLS_MUON_RUN_VERIFY_H
#define MUON_TOOLS_MUON_RUN_VERIFY_H

#include "RunOptions.h"

#include "muon/Plan/Plan.h"
#include "muon/Runtime/DType.h"
#include "muon/Runtime/Testing/Synthetic.h"

#include <string>
#include <vector>

namespace muon::tool {

struct Verification {
  bool verified = true;
  double maxAbsDiff = 0;
  std::vector<std::string> failures;
};

/// Runs the reference of `plan` for the run's steps (Newton-Schulz in
/// `nsDtype`, the ranks' precision) and compares `pieces` (each rank's
/// values, gathered at rank 0) with it. Fails when the reference does not
/// run.
StatusOr<Verification> verifyAgainstReference(
    const Plan &plan, const RunFlags &flags, runtime::DType nsDtype,
    const std::vector<runtime::NonFiniteInjection> &nonFinite,
    const std::vector<std::vector<char>> &pieces);

} // namespace muon::tool

#endif // MUON_TOOLS_MUON_RUN_VERIFY_H
