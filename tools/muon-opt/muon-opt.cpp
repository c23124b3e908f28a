//===- muon-opt.cpp - The muon optimizer driver ---------------------------===//
//
// mlir-opt with only the muon dialect, `shard` and our passes registered.
// Exit codes follow the tools' contract: 0 success, 2 invalid input or flags.
//
//===----------------------------------------------------------------------===//
#include "muon/InitAll.h"
#include "muon/Conversion/Passes.h"
#include "muon/Dialect/Muon/IR/MuonDialect.h"
#include "muon/Dialect/Muon/Transforms/Passes.h"
#include "muon/Dialect/Muon/Transforms/Pipelines.h"

#include "muon/Support/InputFile.h"
#include "muon/Support/Limits.h"
#include "muon/Support/OutputFile.h"

#include "mlir/IR/DialectRegistry.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <cstring>
#include <vector>

// registerCLIOptions() leaves the file names to the caller.
static llvm::cl::opt<std::string> inputFilename(llvm::cl::Positional,
                                                llvm::cl::desc("<input file>"),
                                                llvm::cl::init("-"));
static llvm::cl::opt<std::string>
    outputFilename("o", llvm::cl::desc("Output filename"),
                   llvm::cl::value_desc("filename"), llvm::cl::init("-"));

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  mlir::muon::registerAllDialects(registry);
  mlir::muon::registerAllPasses();

  // A model can hold tens of thousands of ops: an error should not dump the
  // whole of it. Users can still ask with --mlir-print-op-on-diagnostic.
  std::vector<char *> args(argv, argv + argc);
  bool printOpChosen = false;
  for (char *arg : args)
    printOpChosen |= std::strstr(arg, "mlir-print-op-on-diagnostic") != nullptr;
  static char noOpDump[] = "--mlir-print-op-on-diagnostic=false";
  if (!printOpChosen)
    args.insert(args.begin() + 1, noOpDump);
  int count = static_cast<int>(args.size());

  std::string header =
      mlir::registerCLIOptions("muon optimizer driver", registry);
  // Check the flags without letting LLVM exit(1): bad flags are exit code 2.
  if (!llvm::cl::ParseCommandLineOptions(count, args.data(), header,
                                         &llvm::errs()))
    return 2;
  // The output is checked before any work and written only once the passes
  // succeeded (atomically, never over the input): MLIR's own driver would
  // open it first, truncating an input given as the output.
  if (muon::Status bad =
          muon::checkOutputs({inputFilename}, {{"-o", outputFilename}});
      !bad.ok()) {
    llvm::errs() << "muon-opt: " << bad.message() << "\n";
    return 2;
  }
  muon::installSignalCleanup();
  // A regular file of bounded size (or standard input): a FIFO, a
  // directory or /dev/zero is refused, not waited on or read forever.
  muon::StatusOr<std::string> read = muon::readInputFile(
      inputFilename, muon::limits::kMaxTextFileBytes, "input file");
  if (!read.ok()) {
    llvm::errs() << "muon-opt: " << read.status().message() << "\n";
    return 2;
  }
  const std::string &source = *read;
  std::unique_ptr<llvm::MemoryBuffer> input =
      llvm::MemoryBuffer::getMemBufferCopy(
          source, inputFilename == "-" ? std::string("<stdin>")
                                       : inputFilename.getValue());
  std::string text;
  llvm::raw_string_ostream os(text);
  mlir::MlirOptMainConfig config = mlir::MlirOptMainConfig::createFromCLOptions();
  if (mlir::failed(mlir::MlirOptMain(os, std::move(input), registry, config)))
    return 2;
  os.flush();
  if (muon::Status bad = muon::writeOutput(outputFilename, text); !bad.ok()) {
    llvm::errs() << "muon-opt: " << bad.message() << "\n";
    return 2;
  }
  return 0;
}
