//===- FuzzChecks.cpp - What every fuzz target asserts --------------------===//
#include "FuzzChecks.h"

#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Validate.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Runtime/Testing/Synthetic.h"

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

namespace muon::fuzz {

[[noreturn]] void trap(const std::string &what) {
  std::fprintf(stderr, "fuzz check failed: %s\n", what.c_str());
  __builtin_trap();
}

void checkCompiledPlan(const Plan &plan) {
  if (Status bad = validatePlan(plan); !bad.ok())
    trap("the compiler produced a plan its validator refuses: " +
         json::describe(bad));
  std::string text = renderPlan(plan);
  StatusOr<Plan> reread = parsePlan(text);
  if (!reread.ok())
    trap("the plan file of a compiled plan does not read back: " +
         reread.status().text());
  if (renderPlan(*reread) != text)
    trap("the plan file does not round-trip");
}

bool smallEnoughToCompile(int64_t worldSize, int64_t pieces) {
  return worldSize <= 256 && pieces <= 20000;
}

bool smallEnoughToRun(const Plan &plan) {
  if (plan.worldSize > 8)
    return false;
  double elements = 0, work = 0;
  for (const PlanParam &p : plan.params) {
    double n = 1;
    for (int64_t d : p.layout.shape)
      n *= static_cast<double>(d);
    elements += n * plan.worldSize;
  }
  for (const PlanMatrix &m : plan.matrices)
    work += static_cast<double>(m.nsFlops);
  return elements <= 2e5 && work <= 5e7;
}

void runEveryRank(const Plan &plan) {
  runEveryRank(std::vector<Plan>(plan.worldSize, plan));
}

void runEveryRank(const std::vector<Plan> &parts) {
  const Plan &plan = parts[0];
  runtime::LocalWorld world(plan.worldSize);
  std::vector<std::string> errors(plan.worldSize);
  std::vector<std::thread> ranks;
  std::vector<int64_t> summands = runtime::summandCounts(plan);
  for (int64_t r = 0; r < plan.worldSize; ++r)
    ranks.emplace_back([&, r] {
      runtime::LocalCommunicator comm(world, r);
      runtime::cpu::CpuDevice device;
      std::unique_ptr<runtime::Optimizer> optimizer;
      errors[r] =
          runtime::Optimizer::create(parts[r], comm, device, {20.0}, optimizer)
              .message();
      if (!optimizer)
        return;
      runtime::SyntheticModel model(*optimizer, device, 1, summands);
      for (int64_t s = 0; s < 2; ++s) {
        model.makeGradients(s, 1, {});
        runtime::StepResult result;
        if (!(errors[r] = optimizer->step(result).message()).empty())
          return;
      }
    });
  for (std::thread &t : ranks)
    t.join();
  for (int64_t r = 0; r < plan.worldSize; ++r)
    if (!errors[r].empty())
      trap("rank " + std::to_string(r) + " of a validated plan failed: " +
           errors[r]);
}

} // namespace muon::fuzz
