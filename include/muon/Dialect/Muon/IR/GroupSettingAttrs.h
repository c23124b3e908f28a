//===- GroupSettingAttrs.h - Group settings the table alone describes -*- C++ -*-===//
//
// `muon.optimizer` and `muon.adamw` declare the settings they had before the
// settings table (muon/Plan/GroupSettings.h) as ODS attributes. Every other
// row of the table is an attribute of the same name that the op does not
// declare: built by the spec importer, verified and read into the plan
// here, by the table, so that a new setting needs no change to the ops.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_DIALECT_MUON_IR_GROUPSETTINGATTRS_H
#define MUON_DIALECT_MUON_IR_GROUPSETTINGATTRS_H

#include "muon/Plan/GroupSettings.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Operation.h"

namespace mlir::muon {

/// Whether the op declares `s` (by its JSON key: AdamW's "betas"), so that
/// its typed accessors carry it; else it is one of the attributes below.
bool declaresSetting(OperationName op, const ::muon::GroupSetting &s);

/// The attribute holding g's value of `s`: f64, bool or string.
Attribute settingAttr(Builder &builder, const ::muon::GroupSetting &s,
                      const ::muon::PlanGroup &g);

/// Verifies the op's undeclared attributes: each (but those with a dialect
/// prefix, "x.y") must be a setting of the op's algorithm (`muon`), of its
/// kind, valid (checkSetting), and present only with its flag (onlyWith).
LogicalResult verifySettingAttrs(Operation *op, bool muon, StringRef what);

/// Reads the op's undeclared setting attributes into g.
void readSettingAttrs(Operation *op, ::muon::PlanGroup &g);

} // namespace mlir::muon

#endif // MUON_DIALECT_MUON_IR_GROUPSETTINGATTRS_H
