//===- muon-translate.cpp - Spec import and plan export --------------------===//
//
// Exit codes follow the tools' contract: 0 success, 2 invalid input or
// flags. The output file is created only once the translation succeeded, so
// a failure never leaves a partial file.
//
//===----------------------------------------------------------------------===//
#include "muon/Dialect/Muon/Analysis/ExchangePlan.h"
#include "muon/InitAll.h"
#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Support/Escape.h"
#include "muon/Support/InputFile.h"
#include "muon/Support/Limits.h"
#include "muon/Support/OutputFile.h"
#include "muon/Target/Spec/SpecImport.h"

#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
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
static cl::opt<bool> exportPlanFlag(
    "export-plan", cl::cat(toolCategory),
    cl::desc("Write the plan file (muon-plan/1) of a compiled model: IR with "
             "owners, rounds and a schedule (muon-assign-owners, "
             "muon-pack-rounds, muon-schedule-step)"));

static cl::opt<bool> convertPlanFlag(
    "convert-plan", cl::cat(toolCategory),
    cl::desc("Read a plan file (JSON or binary), check it whole, and write "
             "it in --plan-format (default: the other form)"));
static cl::opt<std::string> planFormat(
    "plan-format", cl::cat(toolCategory),
    cl::desc("Form of the plan written by --export-plan or --convert-plan: "
             "json (muon-plan/1) or binary (muon-plan-bin/1, one section per "
             "rank)"),
    cl::value_desc("json|binary"), cl::init(""));

/// A plan in the requested form ("" means `fallback`).
static bool renderAs(const ::muon::Plan &plan, const std::string &fallback,
                     std::string &text) {
  std::string form = planFormat.empty() ? fallback : planFormat.getValue();
  if (form == "json")
    text = ::muon::renderPlan(plan);
  else if (form == "binary")
    text = ::muon::renderPlanBinary(plan);
  else {
    llvm::errs() << "muon-translate: unknown --plan-format '" << form
                 << "'; expected json or binary\n";
    return false;
  }
  return true;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  mlir::registerAsmPrinterCLOptions();
  mlir::registerMLIRContextCLOptions();
  cl::HideUnrelatedOptions(toolCategory);
  if (!cl::ParseCommandLineOptions(argc, argv, "muon translation driver\n",
                                   &llvm::errs()))
    return 2;
  if (int(importSpecFlag) + int(exportPlanFlag) + int(convertPlanFlag) != 1) {
    llvm::errs() << "muon-translate: choose one translation: --import-spec, "
                    "--export-plan or --convert-plan (see --help)\n";
    return 2;
  }
  if (!planFormat.empty() && planFormat != "json" && planFormat != "binary") {
    llvm::errs() << "muon-translate: unknown --plan-format '" << planFormat
                 << "'; expected json or binary\n";
    return 2;
  }
  if (muon::Status bad =
          muon::checkOutputs({inputFilename}, {{"-o", outputFilename}});
      !bad.ok()) {
    llvm::errs() << "muon-translate: " << bad.message() << "\n";
    return 2;
  }
  muon::installSignalCleanup();
  // A regular file of bounded size (or standard input): a FIFO, a
  // directory or /dev/zero is refused, not waited on or read forever.
  ::muon::StatusOr<std::string> read = ::muon::readInputFile(
      inputFilename,
      convertPlanFlag ? ::muon::limits::kMaxBinaryPlanFileBytes
                      : ::muon::limits::kMaxTextFileBytes,
      "input file");
  if (!read.ok()) {
    llvm::errs() << "muon-translate: " << read.status().message() << "\n";
    return 2;
  }
  const std::string &source = *read;
  std::unique_ptr<llvm::MemoryBuffer> input = llvm::MemoryBuffer::getMemBuffer(
      source,
      inputFilename == "-" ? std::string("<stdin>") : inputFilename.getValue());
  mlir::DialectRegistry registry;
  mlir::muon::registerAllDialects(registry);
  mlir::MLIRContext context(registry);
  context.printOpOnDiagnostic(false);
  std::string text;
  if (convertPlanFlag) {
    std::string_view bytes(input->getBufferStart(), input->getBufferSize());
    bool binary = ::muon::looksLikePlanBinary(bytes);
    ::muon::StatusOr<::muon::Plan> parsed =
        binary ? ::muon::parsePlanBinary(bytes)
               : ::muon::parsePlan(std::string(bytes));
    if (!parsed.ok()) {
      llvm::errs() << "muon-translate: " << inputFilename << ": "
                   << ::muon::escapeBytes(parsed.status().text()) << "\n";
      return 2;
    }
    const ::muon::Plan &plan = *parsed;
    if (!renderAs(plan, binary ? "json" : "binary", text))
      return 2;
  } else if (importSpecFlag) {
    mlir::muon::SpecDiagnosticHandler handler(&context, inputFilename);
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::muon::importSpec(input->getBuffer(), &context);
    if (!module)
      return 2;
    llvm::raw_string_ostream os(text);
    module->print(os);
    os << "\n";
  } else {
    llvm::SourceMgr sourceMgr;
    sourceMgr.AddNewSourceBuffer(std::move(input), llvm::SMLoc());
    mlir::SourceMgrDiagnosticHandler handler(sourceMgr, &context);
    mlir::OwningOpRef<mlir::ModuleOp> module =
        mlir::parseSourceFile<mlir::ModuleOp>(sourceMgr, &context);
    if (!module)
      return 2;
    auto models = llvm::to_vector(module->getOps<mlir::muon::ModelOp>());
    if (models.size() != 1) {
      llvm::errs() << "muon-translate: expected one muon.model, found "
                   << models.size() << "\n";
      return 2;
    }
    mlir::muon::ModelOp model = models.front();
    if (model.getBodyBlock().getOps<mlir::muon::ScheduleOp>().empty()) {
      model.emitError() << "the model is not compiled: run muon-assign-owners, "
                           "muon-pack-rounds and muon-schedule-step first";
      return 2;
    }
    mlir::FailureOr<mlir::muon::ModelLayout> layout =
        mlir::muon::computeModelLayout(model);
    if (mlir::failed(layout))
      return 2;
    mlir::FailureOr<::muon::Plan> plan =
        mlir::muon::planFromModel(model, *layout);
    if (mlir::failed(plan))
      return 2;
    if (::muon::Status bad = ::muon::verifySchedule(*plan); !bad.ok()) {
      model.emitError() << "the schedule breaks its rules: " << bad.message()
                        << " (run muon-verify-schedule for the place)";
      return 2;
    }
    if (!renderAs(*plan, "json", text))
      return 2;
  }
  if (muon::Status bad = muon::writeOutput(outputFilename, text); !bad.ok()) {
    llvm::errs() << "muon-translate: " << bad.message() << "\n";
    return 2;
  }
  return 0;
}
