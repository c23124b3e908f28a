//===- ShardAdapter.cpp - The only door to the upstream shard API ---------===//
#include "muon/Dialect/Muon/IR/ShardAdapter.h"

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/Dialect/Shard/IR/ShardOps.h"

namespace mlir::muon::shard_adapter {

bool isGrid(Operation *op) { return isa<shard::GridOp>(op); }

Operation *lookupGrid(Operation *from, FlatSymbolRefAttr name) {
  return dyn_cast_or_null<shard::GridOp>(
      SymbolTable::lookupNearestSymbolFrom(from, name));
}

std::optional<std::vector<int64_t>> getGridShape(Operation *grid) {
  std::vector<int64_t> shape;
  for (int64_t size : cast<shard::GridOp>(grid).getShape()) {
    if (ShapedType::isDynamic(size))
      return std::nullopt;
    shape.push_back(size);
  }
  return shape;
}

StringRef getGridName(Operation *grid) {
  return cast<shard::GridOp>(grid).getSymName();
}

Operation *createGrid(OpBuilder &builder, Location loc, StringRef name,
                      ArrayRef<int64_t> shape) {
  return shard::GridOp::create(builder, loc, name, shape);
}

} // namespace mlir::muon::shard_adapter
