//===- ModelParams.h - Parameters of the compiler tests' models -*- C++ -*-===//
//
// The compiler tests build small models through the C++ API; most of their
// parameters are split by rows over a one-axis mesh and named by group.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_UNITTESTS_MODELPARAMS_H
#define MUON_UNITTESTS_MODELPARAMS_H

#include "muon/Compiler/Compile.h"

#include <cstdint>
#include <string>
#include <vector>

namespace muon {

/// Appends to `model` a parameter of `group`, Shard(0) on the mesh.
inline void addRowShardedParam(compiler::Model &model, std::string name,
                               std::vector<int64_t> shape, std::string group) {
  compiler::Param p;
  p.name = std::move(name);
  p.shape = std::move(shape);
  p.groupName = std::move(group);
  p.placements = {compiler::Placement::shard(0)};
  model.params.push_back(std::move(p));
}

} // namespace muon

#endif // MUON_UNITTESTS_MODELPARAMS_H
