//===- muon-translate.cpp - Spec import (later: plan export) --------------===//
//
// Exit codes follow the tools' contract: 0 success, 2 invalid input or
// flags. The output file is created only once the translation succeeded, so
// a failure never leaves a partial file.
//
//===----------------------------------------------------------------------===//
#include "muon/Target/Spec/SpecImport.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/ToolOutputFile.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

static cl::OptionCategory toolCategory("muon-translate options");

static cl::opt<std::string> inputFilename(cl::cat(toolCategory), cl::Positional,
                                          cl::desc("<input file>"),
                                          cl::init("-"));
static cl::opt<std::string> outputFilename(cl::cat(toolCategory), "o",
                                           cl::desc("Output filename"),
                                           cl::value_desc("filename"),
                                           cl::init("-"));
static cl::opt<bool> importSpecFlag(
    cl::cat(toolCategory), "import-spec",
    cl::desc("Import a muon-spec/1 JSON model spec into the muon dialect"));

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  cl::HideUnrelatedOptions(toolCategory);
  if (!cl::ParseCommandLineOptions(argc, argv, "muon translation driver\n",
                                   &llvm::errs()))
    return 2;
  if (!importSpecFlag) {
    llvm::errs() << "muon-translate: no translation chosen; use "
                    "--import-spec (see --help)\n";
    return 2;
  }
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> input =
      mlir::openInputFile(inputFilename, &error);
  if (!input) {
    llvm::errs() << "muon-translate: " << error << "\n";
    return 2;
  }
  mlir::MLIRContext context;
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::muon::importSpec(input->getBuffer(), &context, inputFilename);
  if (!module)
    return 2;
  std::unique_ptr<llvm::ToolOutputFile> output =
      mlir::openOutputFile(outputFilename, &error);
  if (!output) {
    llvm::errs() << "muon-translate: " << error << "\n";
    return 2;
  }
  module->print(output->os());
  output->os() << "\n";
  output->keep();
  return 0;
}
