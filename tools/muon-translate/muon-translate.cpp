//===- muon-translate.cpp - Spec import (and later plan export) -----------===//
//
// Exit codes follow the tools' contract: 0 success, 2 invalid input. Output
// files are written only on success.
//
//===----------------------------------------------------------------------===//
#include "muon/Target/Spec/SpecImport.h"

#include "mlir/Tools/mlir-translate/MlirTranslateMain.h"

int main(int argc, char **argv) {
  mlir::muon::registerSpecImportTranslation();
  return mlir::failed(
             mlir::mlirTranslateMain(argc, argv, "muon translation driver"))
             ? 2
             : 0;
}
