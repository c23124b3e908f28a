//===- PlanInput.cpp - The plan of muon-run's input file ------------------===//
#include "PlanInput.h"
#include "Console.h"

#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Support/InputFile.h"
#include "muon/Support/Limits.h"

#include <cstdlib>

namespace muon::tool {

int64_t rankFromEnvironment() {
  // mpirun (OpenMPI, MPICH, PMIx) tells each process its rank before
  // MPI_Init, which is what lets a rank load its part before it starts.
  for (const char *name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"})
    if (const char *value = std::getenv(name))
      if (std::optional<int64_t> rank = parseDecimal(value))
        return *rank;
  return -1;
}

bool loadPlan(const std::string &path, const CompileFlags &flags, Plan &plan,
              bool &isPlanFile, int64_t sliceRank) {
  std::string text;
  // A binary plan: a rank of a run reads only its part; anyone else reads
  // and checks the whole.
  if (looksLikePlanBinary(readInputPrefix(path, kPlanBinaryProbeSize))) {
    isPlanFile = true;
    if (flags.wireDtypeGiven || flags.gatherBudgetGiven ||
        flags.maxRoundsGiven || flags.placement) {
      printError(path + ": a plan file is already compiled; --wire-dtype, "
                        "--gather-budget-bytes, --max-rounds and --placement "
                        "apply to specs and IR only");
      return false;
    }
    if (sliceRank >= 0) {
      StatusOr<Plan> slice = loadPlanSlice(path, sliceRank);
      if (!slice.ok()) {
        printError("rank " + std::to_string(sliceRank) + ": " +
                   slice.status().text());
        return false;
      }
      plan = std::move(slice).value();
      return true;
    }
    StatusOr<std::string> read =
        readInputFile(path, limits::kMaxBinaryPlanFileBytes, "input file");
    if (!read.ok()) {
      printError(read.status().message());
      return false;
    }
    StatusOr<Plan> whole = parsePlanBinary(*read);
    if (!whole.ok()) {
      printError(path + ": " + whole.status().text());
      return false;
    }
    plan = std::move(whole).value();
    return true;
  }
  StatusOr<std::string> read =
      readInputFile(path, limits::kMaxTextFileBytes, "input file");
  if (!read.ok()) {
    printError(read.status().message());
    return false;
  }
  text = std::move(read).value();
  // A plan file names its format first; a spec is another JSON object; IR
  // never starts with '{'.
  size_t first = text.find_first_not_of(" \t\r\n");
  bool json = first != std::string::npos && text[first] == '{';
  isPlanFile = json && text.substr(first, 256).find("\"muon-plan/") !=
                           std::string::npos;
  if (isPlanFile) {
    if (flags.wireDtypeGiven || flags.gatherBudgetGiven ||
        flags.maxRoundsGiven || flags.placement) {
      printError(path + ": a plan file is already compiled; --wire-dtype, "
                        "--gather-budget-bytes, --max-rounds and --placement "
                        "apply to specs and IR only");
      return false;
    }
    StatusOr<Plan> parsed = parsePlan(text);
    if (!parsed.ok()) {
      printError(path + ": " + parsed.status().text());
      return false;
    }
    plan = std::move(parsed).value();
    return true;
  }
  if (!haveCompiler()) {
    printError(path + ": this muon-run is built without the compiler (a "
                      "runtime-only build) and takes plan files only; "
                      "compile the model where the compiler is, with "
                      "`muon-run MODEL --dry-run --plan PLAN.json`");
    return false;
  }
  return compileModel(path, text, flags, plan);
}

} // namespace muon::tool
