//===- ShardAdapter.h - The only door to the upstream shard API -*- C++ -*-===//
//
// The upstream `shard` dialect (formerly `mesh`) was renamed and reshaped
// several times; every use of its C++ API goes through these functions so
// that the next change touches one file.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_DIALECT_MUON_IR_SHARDADAPTER_H
#define MUON_DIALECT_MUON_IR_SHARDADAPTER_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/Operation.h"
#include "mlir/IR/SymbolTable.h"

#include <optional>
#include <string>
#include <vector>

namespace mlir::muon::shard_adapter {

/// True when `op` is a `shard.grid`.
bool isGrid(Operation *op);
/// The `shard.grid` named `name` visible from `from`, or null.
Operation *lookupGrid(Operation *from, FlatSymbolRefAttr name);
/// Static axis sizes of a grid; nullopt when some size is dynamic.
std::optional<std::vector<int64_t>> getGridShape(Operation *grid);
StringRef getGridName(Operation *grid);
/// Creates `shard.grid @name(shape = ...)` at the builder's insertion point.
Operation *createGrid(OpBuilder &builder, Location loc, StringRef name,
                      ArrayRef<int64_t> shape);

} // namespace mlir::muon::shard_adapter

#endif // MUON_DIALECT_MUON_IR_SHARDADAPTER_H
