//===- MuonDialect.h - The muon dialect -------------------------*- C++ -*-===//
#ifndef MUON_DIALECT_MUON_IR_MUONDIALECT_H
#define MUON_DIALECT_MUON_IR_MUONDIALECT_H

#include "mlir/Dialect/Shard/IR/ShardDialect.h"
#include "mlir/IR/Dialect.h"

#include "muon/Dialect/Muon/IR/MuonOpsDialect.h.inc"

#endif // MUON_DIALECT_MUON_IR_MUONDIALECT_H
