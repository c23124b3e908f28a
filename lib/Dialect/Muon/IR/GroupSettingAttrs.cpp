//===- GroupSettingAttrs.cpp - Group settings the table alone describes ---===//
#include "muon/Dialect/Muon/IR/GroupSettingAttrs.h"

#include "muon/Dialect/Muon/IR/MuonOps.h"
#include "muon/Plan/Algorithm.h"

#include "mlir/IR/BuiltinAttributes.h"
#include "llvm/ADT/STLExtras.h"

namespace mlir::muon {

using ::muon::GroupSetting;

std::optional<::muon::AlgorithmId> groupAlgorithm(Operation *op) {
  if (isa<OptimizerOp>(op))
    return ::muon::kMuon;
  if (isa<AdamWOp>(op))
    return ::muon::kAdamW;
  if (auto group = dyn_cast<ParamGroupOp>(op))
    return ::muon::findAlgorithm(group.getAlgorithm());
  return std::nullopt;
}

StringRef groupNameOf(Operation *op) {
  if (auto opt = dyn_cast<OptimizerOp>(op))
    return opt.groupName();
  if (auto adamw = dyn_cast<AdamWOp>(op))
    return adamw.groupName();
  return cast<ParamGroupOp>(op).groupName();
}

bool declaresSetting(OperationName op, const GroupSetting &s) {
  return llvm::any_of(op.getAttributeNames(), [&](StringAttr name) {
    return name.getValue() == s.jsonKey;
  });
}

Attribute settingAttr(Builder &builder, const GroupSetting &s,
                      const ::muon::PlanGroup &g) {
  switch (s.kind) {
  case GroupSetting::Kind::Number:
    return builder.getF64FloatAttr(::muon::settingValue(s, g));
  case GroupSetting::Kind::Flag:
    return builder.getBoolAttr(::muon::settingValue(s, g) != 0);
  case GroupSetting::Kind::Name:
    return builder.getStringAttr(::muon::settingName(s, g));
  }
  return {};
}

/// Sets g's value of `s` from `attr`; false if the attribute is not of the
/// setting's kind.
static bool setFromAttr(const GroupSetting &s, Attribute attr,
                        ::muon::PlanGroup &g) {
  switch (s.kind) {
  case GroupSetting::Kind::Number:
    if (auto f = dyn_cast<FloatAttr>(attr)) {
      ::muon::setSettingValue(s, g, f.getValueAsDouble());
      return true;
    }
    return false;
  case GroupSetting::Kind::Flag:
    if (auto b = dyn_cast<BoolAttr>(attr)) {
      ::muon::setSettingValue(s, g, b.getValue() ? 1.0 : 0.0);
      return true;
    }
    return false;
  case GroupSetting::Kind::Name:
    if (auto str = dyn_cast<StringAttr>(attr)) {
      ::muon::setSettingName(s, g, str.str());
      return true;
    }
    return false;
  }
  return false;
}

static const char *kindName(GroupSetting::Kind kind) {
  switch (kind) {
  case GroupSetting::Kind::Number:
    return "an f64 number";
  case GroupSetting::Kind::Flag:
    return "true or false";
  case GroupSetting::Kind::Name:
    return "a string";
  }
  return "";
}

/// g's value of the flag `name` as the op holds it: its attribute, declared
/// or not, else the default.
static bool flagOf(Operation *op, const GroupSetting &flag) {
  if (auto b = dyn_cast_or_null<BoolAttr>(op->getAttr(flag.jsonKey)))
    return b.getValue();
  return flag.defaultNumber != 0;
}

LogicalResult verifySettingAttrs(Operation *op, ::muon::AlgorithmId algorithm,
                                 StringRef what) {
  for (NamedAttribute attr : op->getDiscardableAttrs()) {
    StringRef name = attr.getName().getValue();
    if (name.contains('.'))
      continue; // a dialect's own attribute
    const GroupSetting *s = ::muon::findGroupSetting(algorithm, name);
    if (!s || declaresSetting(op->getName(), *s))
      return op->emitError() << what << " has no setting '" << name << "'";
    ::muon::PlanGroup g(algorithm);
    if (!setFromAttr(*s, attr.getValue(), g))
      return op->emitError() << what << " '" << name << "' must be "
                             << kindName(s->kind);
    if (::muon::Status why = ::muon::checkSetting(*s, g); !why.ok())
      return op->emitError() << what << " '" << name << "': " << why.message();
    if (s->onlyWith &&
        !flagOf(op, *::muon::findGroupSetting(algorithm, s->onlyWith)))
      return op->emitError() << what << " '" << name << "' is "
                             << s->onlyWithNote << "; it needs "
                             << s->onlyWith << " = true";
  }
  return success();
}

void readSettingAttrs(Operation *op, ::muon::PlanGroup &g) {
  for (const GroupSetting &s : ::muon::algorithmOf(g.algorithm).settings)
    if (!declaresSetting(op->getName(), s))
      if (Attribute attr = op->getDiscardableAttr(s.name))
        setFromAttr(s, attr, g);
}

} // namespace mlir::muon
