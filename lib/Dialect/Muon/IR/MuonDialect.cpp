//===- MuonDialect.cpp - The muon dialect ---------------------------------===//
#include "muon/Dialect/Muon/IR/MuonDialect.h"
#include "muon/Dialect/Muon/IR/MuonOps.h"
#include "muon/Dialect/Muon/IR/ShardAdapter.h"

#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::muon;

#include "muon/Dialect/Muon/IR/MuonOpsDialect.cpp.inc"

#include "muon/Dialect/Muon/IR/MuonEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "muon/Dialect/Muon/IR/MuonAttrs.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "muon/Dialect/Muon/IR/MuonOpsTypes.cpp.inc"

void MuonDialect::initialize() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "muon/Dialect/Muon/IR/MuonAttrs.cpp.inc"
      >();
  addTypes<
#define GET_TYPEDEF_LIST
#include "muon/Dialect/Muon/IR/MuonOpsTypes.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "muon/Dialect/Muon/IR/MuonOps.cpp.inc"
      >();
}

/// `muon.axis_names` and `muon.devices` decorate a `shard.grid`.
LogicalResult MuonDialect::verifyOperationAttribute(Operation *op,
                                                    NamedAttribute attr) {
  StringRef name = attr.getName().getValue();
  if (name != kAxisNamesAttr && name != kDevicesAttr)
    return op->emitError() << "unknown muon attribute '" << name << "'";
  if (!shard_adapter::isGrid(op))
    return op->emitError() << "'" << name << "' belongs on a shard.grid";
  std::optional<std::vector<int64_t>> shape = shard_adapter::getGridShape(op);
  if (!shape)
    return op->emitError() << "grid @" << shard_adapter::getGridName(op)
                           << " must have a static shape";
  if (name == kAxisNamesAttr) {
    auto names = dyn_cast<ArrayAttr>(attr.getValue());
    if (!names || !llvm::all_of(names, llvm::IsaPred<StringAttr>))
      return op->emitError() << "'" << name << "' must be an array of strings";
    if (names.size() != shape->size())
      return op->emitError()
             << "'" << name << "' has " << names.size()
             << " names but the grid has " << shape->size() << " axes";
    llvm::DenseSet<StringAttr> seen;
    for (Attribute a : names) {
      auto s = cast<StringAttr>(a);
      if (s.getValue().empty())
        return op->emitError() << "mesh axis names must not be empty";
      if (!seen.insert(s).second)
        return op->emitError()
               << "mesh axis name '" << s.getValue() << "' is used twice";
    }
    return success();
  }
  auto devices = dyn_cast<DenseI64ArrayAttr>(attr.getValue());
  if (!devices)
    return op->emitError() << "'" << name << "' must be an array<i64>";
  int64_t count = 1;
  for (int64_t s : *shape)
    count *= s;
  if (static_cast<int64_t>(devices.size()) != count)
    return op->emitError() << "'" << name << "' lists " << devices.size()
                           << " ranks but the grid has " << count
                           << " positions";
  std::vector<bool> seen(count, false);
  for (int64_t r : devices.asArrayRef()) {
    if (r < 0 || r >= count || seen[r])
      return op->emitError()
             << "'" << name << "' must be a permutation of 0.." << count - 1;
    seen[r] = true;
  }
  return success();
}
