// consumer PLAN: loads an ahead-of-time plan for one rank, binds every
// parameter, runs two steps with a learning rate that changes.
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/Optimizer.h"

#include <cstdio>
#include <vector>

int main(int argc, char **argv) {
  if (argc != 2)
    return 2;
  muon::runtime::SingleRankCommunicator comm;
  muon::runtime::cpu::CpuDevice device;
  std::unique_ptr<muon::runtime::Optimizer> opt;
  if (muon::Status s =
          muon::runtime::Optimizer::load(argv[1], comm, device, {}, opt);
      !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  std::vector<std::vector<float>> values, grads;
  for (const auto &p : opt->params()) {
    values.emplace_back(p.elements, 1.0f);
    grads.emplace_back(p.elements, 0.25f);
    if (!opt->bind(p.name, values.back().data(), grads.back().data(), p.dtype,
                   p.elements)
             .ok())
      return 1;
  }
  muon::runtime::StepResult result;
  for (int s = 0; s < 2; ++s) {
    for (const muon::PlanGroup &g : opt->plan().groups)
      if (!opt->setGroupLr(g.name, (s + 1) * 0.5 * g.number("lr")).ok())
        return 1;
    if (!opt->step(result).ok() || !result.applied)
      return 1;
  }
  std::printf("runtime consumer: %zu params, %lld steps, first value %.6f\n",
              opt->params().size(), (long long)opt->stepsTaken(),
              values[0][0]);
  return 0;
}
