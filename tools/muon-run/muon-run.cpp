//===- muon-run.cpp - Compile a model and report on its step --------------===//
//
// `muon-run SPEC|IR --dry-run --report FILE` compiles a spec or IR file
// (import, process groups to mesh, owner assignment, exchange plan) and
// writes the run report of the contract from the plan. Real multi-rank runs
// arrive with the runtime.
//
// Exit codes: 0 success, 2 invalid input or flags (with a message, and no
// report file).
//
//===----------------------------------------------------------------------===//
#include "muon/Conversion/Passes.h"
#include "muon/Dialect/Muon/Analysis/ExchangePlan.h"
#include "muon/Dialect/Muon/Analysis/Figures.h"
#include "muon/Dialect/Muon/IR/MuonDialect.h"
#include "muon/Dialect/Muon/Transforms/Passes.h"
#include "muon/Dialect/Muon/Transforms/Pipelines.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Report.h"
#include "muon/Plan/Schedule.h"
#include "muon/Target/Spec/SpecImport.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

namespace cl = llvm::cl;

static cl::OptionCategory toolCategory("muon-run options");
using namespace mlir;

static cl::opt<std::string> inputFilename(cl::cat(toolCategory), cl::Positional,
                                          cl::Required,
                                          cl::desc("<spec.json | model.mlir>"));
static cl::opt<bool>
    dryRun(cl::cat(toolCategory), "dry-run",
           cl::desc("Compile only; report the plan's figures"));
static cl::opt<std::string> reportFile(cl::cat(toolCategory), "report",
                                       cl::desc("Write the run report here"),
                                       cl::value_desc("file"));
static cl::opt<std::string>
    planFile("plan", cl::cat(toolCategory),
             cl::desc("Write the compiled plan (muon-plan/1) here"),
             cl::value_desc("file"));
static cl::opt<std::string>
    wireDtype(cl::cat(toolCategory), "wire-dtype", cl::init("f32"),
              cl::desc("Element type the exchanges carry: f32 or bf16 "
                       "(default: the model's setting, else f32)"));
static cl::opt<bool> quiet(cl::cat(toolCategory), "quiet",
                           cl::desc("No summary on the terminal"));
static cl::opt<bool> printSchedule(
    cl::cat(toolCategory), "print-schedule",
    cl::desc("Print the step's sequence: exchanges, NS batches and the "
             "elementwise updates"));
static cl::opt<int64_t> gatherBudget(
    cl::cat(toolCategory), "gather-budget-bytes", cl::init(0),
    cl::desc("Bytes of gathered matrices a rank may hold at once (0: no "
             "limit)"));
static cl::opt<int64_t>
    maxRounds(cl::cat(toolCategory), "max-rounds", cl::init(8),
              cl::desc("Most rounds the exchanges are split into for overlap"));

static int fail(const llvm::Twine &message) {
  llvm::errs() << "muon-run: " << message << "\n";
  return 2;
}

/// The input as a module holding one muon.model: a JSON spec is imported,
/// anything else parsed as IR. Diagnostics of the whole run go through the
/// handler installed here (JSON paths for specs, file:line:col for IR).
static OwningOpRef<ModuleOp>
loadInput(MLIRContext &context, llvm::SourceMgr &sourceMgr,
          std::unique_ptr<ScopedDiagnosticHandler> &handler) {
  std::string error;
  std::unique_ptr<llvm::MemoryBuffer> buffer =
      openInputFile(inputFilename, &error);
  if (!buffer) {
    llvm::errs() << "muon-run: " << error << "\n";
    return nullptr;
  }
  // A spec is a JSON object; IR never starts with '{'.
  if (StringRef(inputFilename).ends_with(".json") ||
      buffer->getBuffer().ltrim().starts_with("{")) {
    handler = std::make_unique<mlir::muon::SpecDiagnosticHandler>(
        &context, inputFilename);
    return mlir::muon::importSpec(buffer->getBuffer(), &context,
                                  inputFilename);
  }
  sourceMgr.AddNewSourceBuffer(std::move(buffer), llvm::SMLoc());
  handler = std::make_unique<SourceMgrDiagnosticHandler>(sourceMgr, &context);
  return parseSourceFile<ModuleOp>(sourceMgr, &context);
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::HideUnrelatedOptions(toolCategory);
  if (!cl::ParseCommandLineOptions(
          argc, argv,
          "muon-run: compile a Muon model and report on its optimizer step\n",
          &llvm::errs()))
    return 2;
  if (!dryRun)
    return fail("only --dry-run is available: executing plans on MPI ranks "
                "needs the runtime, which is not built yet");
  if (!::muon::wireDtypeBytes(wireDtype))
    return fail("unknown --wire-dtype '" + wireDtype +
                "'; expected f32 or bf16");

  DialectRegistry registry;
  registry.insert<mlir::muon::MuonDialect, shard::ShardDialect>();
  MLIRContext context(registry);
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  std::unique_ptr<ScopedDiagnosticHandler> handler;
  OwningOpRef<ModuleOp> module = loadInput(context, sourceMgr, handler);
  if (!module)
    return 2;
  auto models = llvm::to_vector(module->getOps<mlir::muon::ModelOp>());
  if (models.size() != 1)
    return fail("expected one muon.model in '" + inputFilename + "', found " +
                llvm::Twine(models.size()));
  mlir::muon::ModelOp model = models.front();

  // Flags given on the command line override the model's settings.
  if (gatherBudget < 0 || maxRounds < 1)
    return fail("--gather-budget-bytes must be >= 0 and --max-rounds >= 1");
  for (mlir::muon::DistributedOp d :
       model.getBodyBlock().getOps<mlir::muon::DistributedOp>()) {
    Builder b(&context);
    if (wireDtype.getNumOccurrences())
      d.setWireDtypeAttr(b.getStringAttr(wireDtype));
    if (gatherBudget.getNumOccurrences())
      d.setGatherBudgetBytesAttr(b.getI64IntegerAttr(gatherBudget));
    if (maxRounds.getNumOccurrences())
      d.setMaxRoundsAttr(b.getI64IntegerAttr(maxRounds));
  }

  // The compiler proper: every decision is written into the IR and checked.
  PassManager pm(&context, ModuleOp::getOperationName());
  mlir::muon::buildCompilePipeline(pm.nest<mlir::muon::ModelOp>());
  // The input was verified when it was read; verifying the whole model after
  // each pass costs seconds at scale, so the result is verified once.
  pm.enableVerifier(false);
  if (failed(pm.run(*module)) || failed(verify(*module)))
    return 2;

  FailureOr<mlir::muon::ModelLayout> layout =
      mlir::muon::computeModelLayout(model);
  if (failed(layout))
    return 2;
  FailureOr<::muon::Plan> plan =
      mlir::muon::planFromModel(model, *layout, wireDtype);
  if (failed(plan))
    return 2;
  std::vector<mlir::muon::MuonMatrix> matrices =
      mlir::muon::collectMuonMatrices(model, *layout);
  mlir::muon::LowerBounds bounds =
      mlir::muon::computeLowerBounds(*layout, matrices, plan->wireBytes);

  ::muon::Report report;
  report.worldSize = plan->worldSize;
  report.wireDtype = plan->wireDtype;
  report.perRank = ::muon::computeRankFigures(*plan);
  report.lowerBoundBytesReceived = bounds.bytesReceived;
  report.lowerBoundMakespanFlops = bounds.makespanFlops;
  // Both outputs or neither: each is staged in a temporary file beside its
  // target, and only when both are complete do they move into place.
  std::vector<std::pair<std::string, std::string>> outputs;
  if (!planFile.empty())
    outputs.push_back({planFile, ::muon::renderPlan(*plan)});
  if (!reportFile.empty())
    outputs.push_back({reportFile, ::muon::renderReport(report)});
  std::string error;
  if (!::muon::writeFilesAtomically(outputs, error))
    return fail(error);
  if (!quiet) {
    llvm::raw_ostream &os = llvm::outs();
    int64_t received = 0, busiest = 0;
    os << llvm::formatv("dry run: {0} ranks, {1} Muon matri{3}, wire {2}\n",
                        plan->worldSize, plan->matrices.size(), plan->wireDtype,
                        plan->matrices.size() == 1 ? "x" : "ces");
    for (size_t r = 0; r < report.perRank.size(); ++r) {
      const ::muon::RankFigures &f = report.perRank[r];
      received += f.bytesReceived;
      busiest = std::max(busiest, f.nsFlops);
      if (report.perRank.size() <= 64)
        os << llvm::formatv(
            "  rank {0,4}: owns {1,5}  NS {2,10:F3} GFLOP  recv {3,10:F3} MB  "
            "sent {4,10:F3} MB\n",
            r, f.owned.size(), f.nsFlops / 1e9, f.bytesReceived / 1e6,
            f.bytesSent / 1e6);
    }
    os << llvm::formatv("  bytes received {0} (lower bound {1})\n", received,
                        bounds.bytesReceived);
    os << llvm::formatv("  busiest rank NS {0:F3} GFLOP (lower bound {1:F3})\n",
                        busiest / 1e9, bounds.makespanFlops / 1e9);
    os << llvm::formatv("  schedule: {0} rounds, {1} exchanges, {2} steps, "
                        "{3} in flight at most ({4})\n",
                        plan->rounds.size(), plan->exchanges.size(),
                        plan->schedule.size(), plan->inflightLimit,
                        plan->async ? "async" : "sequential debug order");
  }
  if (printSchedule) {
    llvm::raw_ostream &os = llvm::outs();
    using Kind = ::muon::ScheduleStep::Kind;
    for (const ::muon::ScheduleStep &s : plan->schedule) {
      switch (s.kind) {
      case Kind::NewtonSchulz:
        os << "ns round " << s.index << "\n";
        continue;
      case Kind::Momentum:
        os << "momentum\n";
        continue;
      case Kind::ApplyUpdate:
        os << "apply round " << s.index << "\n";
        continue;
      case Kind::AdamW:
        os << "adamw\n";
        continue;
      case Kind::Start:
      case Kind::Done:
        break;
      }
      const ::muon::Exchange &ex = plan->exchanges[s.index];
      os << (s.kind == Kind::Start ? "start " : "done ");
      if (ex.phase == ::muon::Exchange::Phase::Reduce) {
        os << "reduce (" << ex.reductions.size() << " reductions)\n";
        continue;
      }
      os << (ex.phase == ::muon::Exchange::Phase::Gather ? "gather" : "scatter")
         << " round " << ex.round << " (" << ex.transfers.size()
         << " transfers)\n";
    }
  }
  return 0;
}
