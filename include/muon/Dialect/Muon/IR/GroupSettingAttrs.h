//===- GroupSettingAttrs.h - Group ops and the settings table ----*- C++ -*-===//
//
// The ops of a model's parameter groups and the registry of algorithms
// (muon/Plan/Algorithm.h): `muon.optimizer` is a Muon group, `muon.adamw` an
// AdamW group, and `muon.param_group` a group of any other algorithm, which
// its `algorithm` attribute names. The first two declare the settings they
// had before the settings table (muon/Plan/GroupSettings.h) as ODS
// attributes. Every other row of the table is an attribute of the same name
// that the op does not declare: built by the spec importer, verified and
// read into the plan here, by the table, so that a new setting, or a new
// algorithm, needs no change to the ops.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_DIALECT_MUON_IR_GROUPSETTINGATTRS_H
#define MUON_DIALECT_MUON_IR_GROUPSETTINGATTRS_H

#include "muon/Plan/GroupSettings.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Operation.h"

#include <optional>

namespace mlir::muon {

/// The algorithm of a group op (`muon.optimizer`, `muon.adamw`,
/// `muon.param_group` of a registered algorithm), or nullopt for any other
/// op.
std::optional<::muon::AlgorithmId> groupAlgorithm(Operation *op);
/// A group op's name (its `group_name`, or its algorithm's name).
StringRef groupNameOf(Operation *op);

/// Whether the op declares `s` (by its JSON key: AdamW's "betas"), so that
/// its typed accessors carry it; else it is one of the attributes below.
bool declaresSetting(OperationName op, const ::muon::GroupSetting &s);

/// The attribute holding g's value of `s`: f64, bool or string.
Attribute settingAttr(Builder &builder, const ::muon::GroupSetting &s,
                      const ::muon::PlanGroup &g);

/// Verifies the op's undeclared attributes: each (but those with a dialect
/// prefix, "x.y") must be a setting of `algorithm`, of its kind, valid
/// (checkSetting), and present only with its flag (onlyWith). `what` names
/// the op in messages.
LogicalResult verifySettingAttrs(Operation *op, ::muon::AlgorithmId algorithm,
                                 StringRef what);

/// Reads the op's undeclared setting attributes into g (of the op's
/// algorithm).
void readSettingAttrs(Operation *op, ::muon::PlanGroup &g);

} // namespace mlir::muon

#endif // MUON_DIALECT_MUON_IR_GROUPSETTINGATTRS_H
