//===- SpecFuzzer.cpp - Fuzz the spec importer and the compiler -----------===//
//
// Input: a spec (JSON). Import and verify it; when it is valid and small,
// compile it and check the plan (FuzzChecks.h).
//
//===----------------------------------------------------------------------===//
#include "FuzzChecks.h"
#include "FuzzModel.h"

#include "muon/Target/Spec/SpecImport.h"

#include "mlir/IR/MLIRContext.h"

#include <string>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  std::string text(reinterpret_cast<const char *>(data), size);
  std::unique_ptr<mlir::MLIRContext> context = muon::fuzz::makeContext();
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::muon::importSpec(text, context.get());
  if (module)
    muon::fuzz::compileAndCheck(*module);
  return 0;
}
