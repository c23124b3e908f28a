//===- RunOptions.h - What muon-run was asked to do -------------*- C++ -*-===//
#ifndef MUON_TOOLS_MUON_RUN_RUNOPTIONS_H
#define MUON_TOOLS_MUON_RUN_RUNOPTIONS_H

#include "muon/Plan/Placement.h"
#include "muon/Plan/TransferSink.h"
#include "muon/Plan/Report.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace muon::tool {

/// Compiler settings given on the command line (they override the model's).
struct CompileFlags {
  std::string wireDtype = "f32";
  bool wireDtypeGiven = false;
  int64_t gatherBudgetBytes = 0;
  bool gatherBudgetGiven = false;
  int64_t maxRounds = 8;
  bool maxRoundsGiven = false;
  /// --placement ("auto", "once", "redundant_below" with `redundantBelow`)
  /// and the machine placement "auto" decides on.
  std::optional<std::string> placement;
  std::optional<int64_t> redundantBelow;
  PlacementMachine machine;
  /// A spec's wire follows Newton-Schulz's element type unless
  /// --wire-dtype is given: bf16 Newton-Schulz gets a bf16 wire (IR
  /// carries its own, muon.distributed's wire_dtype). `autoNsDtype` is what
  /// ns_dtype "auto" means on the run's device ("f32" or "bf16"); empty,
  /// the wire does not follow (a dry run compiles for no device, and the
  /// CUDA backend keeps its f32 wire). `nsDtypeFlag` is --ns-dtype, when
  /// given.
  std::string autoNsDtype, nsDtypeFlag;
  /// When set (a dry run with no need for the transfer list), the compiler
  /// streams the transfers into it instead of holding them in the plan.
  TransferSink *stream = nullptr;
};

/// A fault to inject, for testing that failures are loud and lose nothing.
struct Fault {
  enum class Kind { NonFinite, Die, Stall, PlanMismatch, Corrupt, DieAtEnd } kind;
  std::string param; // NonFinite
  int64_t rank = -1; // Die, Stall, PlanMismatch, Corrupt, DieAtEnd
  int64_t step = -1; // NonFinite, Die, Stall, Corrupt
};

/// Settings of a real run; the launcher forwards them to every rank.
struct RunFlags {
  int64_t ranks = 0; // 0: the plan's world size
  int64_t steps = 3;
  int64_t microBatches = 1;
  uint64_t seed = 0;
  bool verify = false;
  bool graphs = false; // OptimizerOptions::graphs
  double timeoutSeconds = 60;
  bool nonFiniteFatal = false;
  int64_t blasThreads = 1;
  double tolerance = 0;
  bool toleranceGiven = false;
  std::string reportFile;
  bool quiet = false;
  std::vector<Fault> faults;
  std::vector<std::string> faultSpecs; // as given, to forward
  std::string mpirun = "mpirun";
  std::string backend = "cpu";    // cpu or cuda
  std::string transport = "auto"; // auto, nccl or host
  std::string mpiProgress = "auto"; // auto, thread or calls
  /// --simulate: the profile's name and the file it is read from (resolved
  /// on the launching side, so every rank reads the same file).
  std::string simulate, profilesFile;
  /// The plan file the ranks load (their own parts of it, when binary):
  /// rank 0 reads it whole to simulate every rank.
  std::string planFile;
  /// --trace: where the step's timeline goes (rank 0 writes it).
  std::string traceFile;
};

/// Parses "nan:PARAM:STEP", "die:RANK:STEP", "stall:RANK:STEP",
/// "corrupt:RANK:STEP" (a silently wrong update, which --verify must catch),
/// "plan-mismatch:RANK" or "die-at-end:RANK" (a rank that dies after its
/// last step, once rank 0 has what it needs for the report);
/// InvalidArgument naming the flag's forms.
StatusOr<Fault> parseFault(const std::string &text);

/// The plan's own figures with the compiler's lower bounds: the start of
/// every report muon-run writes.
Report reportOf(const Plan &plan);

} // namespace muon::tool

#endif // MUON_TOOLS_MUON_RUN_RUNOPTIONS_H
