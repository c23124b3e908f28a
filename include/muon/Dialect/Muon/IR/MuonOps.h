//===- MuonOps.h - muon dialect operations ----------------------*- C++ -*-===//
#ifndef MUON_DIALECT_MUON_IR_MUONOPS_H
#define MUON_DIALECT_MUON_IR_MUONOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/SymbolTable.h"
#include "muon/Dialect/Muon/IR/MuonDialect.h"
#include "muon/Plan/Plan.h"

#include <array>
#include <utility>
#include <vector>

#include "muon/Dialect/Muon/IR/MuonEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "muon/Dialect/Muon/IR/MuonAttrs.h.inc"

#define GET_TYPEDEF_CLASSES
#include "muon/Dialect/Muon/IR/MuonOpsTypes.h.inc"

#define GET_OP_CLASSES
#include "muon/Dialect/Muon/IR/MuonOps.h.inc"

#endif // MUON_DIALECT_MUON_IR_MUONOPS_H
