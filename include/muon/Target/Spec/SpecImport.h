//===- SpecImport.h - muon-spec/1 JSON to the muon dialect ------*- C++ -*-===//
//
// Reads the model spec of docs/spec-format.md (both configuration styles) into
// a module holding one `muon.model`. Structural errors (malformed JSON,
// unknown keys, wrong types) are reported with the JSON path of the offending
// value; every op is located at its JSON path (a NameLoc), so the dialect
// verifier's errors name the place too.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_TARGET_SPEC_SPECIMPORT_H
#define MUON_TARGET_SPEC_SPECIMPORT_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/OwningOpRef.h"
#include "muon/Support/Json.h"

namespace mlir::muon {

/// Imports and verifies a spec. Returns null after emitting diagnostics
/// (located at JSON paths; a SpecDiagnosticHandler prints them).
OwningOpRef<ModuleOp> importSpec(llvm::StringRef json, MLIRContext *context);
/// The same from a document already in memory (the compiler API builds one
/// from its C++ model): every check but the text's own.
OwningOpRef<ModuleOp> importSpecDocument(const ::muon::json::Value &document,
                                         MLIRContext *context);

/// While alive, prints diagnostics located at a JSON path (a NameLoc) as
/// `<file>: <json path>: error: message` on stderr; others pass through.
class SpecDiagnosticHandler : public ScopedDiagnosticHandler {
public:
  SpecDiagnosticHandler(MLIRContext *context, llvm::StringRef sourceName);
};

} // namespace mlir::muon

#endif // MUON_TARGET_SPEC_SPECIMPORT_H
