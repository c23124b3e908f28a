// consumer: describes a model in code, compiles it in process for a 2x2
// FSDP x TP mesh, and prints what each rank owns.
#include "muon/Compiler/Compile.h"

#include <cstdio>

using namespace muon::compiler;

int main() {
  Model model;
  model.params = {{"wq", {64, 64}}, {"w_up", {128, 64}}, {"norm", {64}}};
  for (Param &p : model.params)
    if (p.shape.size() == 2)
      p.placements = {Placement::shard(0), Placement::shard(1)};
  DistributedConfig config = createDTensorConfig({{2, 2}, {"fsdp", "tp"}});
  muon::StatusOr<muon::Plan> compiled = compile(model, &config);
  if (!compiled.ok()) {
    std::fprintf(stderr, "%s\n", compiled.status().text().c_str());
    return 1;
  }
  const muon::Plan &plan = *compiled;
  std::printf("compiler consumer: %lld ranks, %zu matrices, %zu exchanges\n",
              (long long)plan.worldSize, plan.matrices.size(),
              plan.exchanges.size());
  return 0;
}
