//===- Plan.h - A compiled Muon step, as the runtime sees it ----*- C++ -*-===//
//
// The plan of one optimizer step for every rank: which rank owns (runs
// Newton-Schulz on) each Muon matrix, and the exchanges that gather each
// matrix to its owner and hand every holder its new piece. Plain C++ (no
// MLIR): the compiler fills it, the runtime executes it, and both count
// traffic from it the same way.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_PLAN_PLAN_H
#define MUON_PLAN_PLAN_H

#include "muon/Support/Layout.h"

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace muon {

/// An optimizer algorithm: its index in the registry (algorithms(),
/// muon/Plan/Algorithm.h), which describes each once. Files never hold the
/// index: the JSON formats name the algorithm, binary plans store its
/// binary code.
using AlgorithmId = int;
/// The algorithms the plan itself names: Muon, the algorithm of matrices,
/// and AdamW, a model's default for parameters of fewer than 2 dims (the
/// two groups of a model that declares none, defaultGroups).
inline constexpr AlgorithmId kMuon = 0, kAdamW = 1;

/// A parameter as the runtime needs it: shape, storage type, optimizer group
/// and layout on the mesh (every rank derives its own piece from it).
struct PlanParam {
  std::string name;
  std::string dtype = "f32";
  /// The group's algorithm (Plan::groups[group].algorithm), kept beside the
  /// index because every pass over the parameters asks it.
  AlgorithmId algorithm = kMuon;
  /// Index into Plan::groups.
  int64_t group = 0;
  ParamLayout layout;
  /// Whether its algorithm orthogonalizes its matrices (Muon): they are
  /// the plan's matrices, gathered to an owner and scattered back;
  /// otherwise every holder updates its piece element by element.
  bool orthogonalized() const;
};

/// NorMuon's epsilon in the row normalization (sqrt(v) + eps) and the floor
/// of the normalized matrix's norm, as microsoft/dion's normuon.py.
inline constexpr double kNormuonEps = 1e-8;

/// The values of a Muon group's `weight_decay_mode`, in the dialect's order.
inline constexpr std::array<std::string_view, 3> kWeightDecayModes = {
    "decoupled", "cautious", "none"};

/// The index of `name` in kWeightDecayModes, or -1.
int weightDecayModeIndex(std::string_view name);

/// The values of a Muon group's `adjust_lr`, in the dialect's order.
inline constexpr std::array<std::string_view, 5> kAdjustLrNames = {
    "original", "match_rms_adamw", "spectral", "unit_rms_norm",
    "spectral_unclamped"};

/// Whether `name` is one of kAdjustLrNames.
bool isAdjustLrName(std::string_view name);

/// `"a", "b" or "c"`: a closed set of names for an error message, each in
/// `quote`.
std::string nameList(const std::string_view *names, size_t count,
                     char quote = '"');
inline std::string adjustLrList(char quote = '"') {
  return nameList(kAdjustLrNames.data(), kAdjustLrNames.size(), quote);
}

/// The factor `adjust_lr` puts on lr for a rows x cols matrix (rows: the
/// output features, as torch's [out, in] weights); 0 for an unknown name.
///   original            sqrt(max(1, rows/cols))  (Keller Jordan's Muon;
///                       torch.optim.Muon "original"; Megatron/NVIDIA
///                       Emerging-Optimizers "shape_scaling")
///   match_rms_adamw     0.2 sqrt(max(rows, cols))  (Moonlight, arXiv
///                       2502.16982; torch.optim.Muon)
///   spectral            sqrt(max(rows, cols))  (Emerging-Optimizers
///                       "spectral", extra_scale_factor 1)
///   unit_rms_norm       sqrt(rows/cols)  (Emerging-Optimizers
///                       "unit_rms_norm"; Bernstein, "Deriving Muon")
///   spectral_unclamped  sqrt(rows/cols)  (torch.optim.Muon, no clamp at 1)
double adjustLrFactor(std::string_view name, int64_t rows, int64_t cols);

/// One Newton-Schulz configuration: the iteration a Muon group's matrices
/// run. It decides each matrix's flops and which matrices batch together,
/// so it is part of the plan proper. `coefficients` has one (a, b, c) per
/// NS step.
struct NewtonSchulzConfig {
  int64_t nsSteps = 5;
  std::vector<std::array<double, 3>> coefficients;
  /// The normalization's floor: X / max(||X||_F, eps).
  double eps = 1e-7;
  bool operator==(const NewtonSchulzConfig &o) const {
    return nsSteps == o.nsSteps && coefficients == o.coefficients &&
           eps == o.eps;
  }
  bool operator!=(const NewtonSchulzConfig &o) const { return !(*this == o); }
};

/// How Newton-Schulz runs: the distinct configurations of the model's Muon
/// groups (each group names one, PlanGroup::nsConfig; as torch.optim.Muon,
/// groups may differ in ns_steps, coefficients and eps) and the precision,
/// which is the plan's: every device resolves "auto" once and the ranks
/// agree on it at start-up.
struct NewtonSchulzSettings {
  /// At least one; a plan whose groups all agree has exactly one.
  std::vector<NewtonSchulzConfig> configs = {NewtonSchulzConfig()};
  /// The element type Newton-Schulz runs in: "f32", "bf16", "f16", or
  /// "auto" (the device's default: on the CPU f32 or bf16 by its products'
  /// rates, bf16 on CUDA; never f16).
  std::string nsDtype = "auto";
};

/// One setting's value in a group (GroupSettings.h): a Number's, or a
/// Flag's as 0 or 1, in `number`; a Name's in `text`.
struct SettingValue {
  double number = 0;
  std::string text;
  bool operator==(const SettingValue &o) const {
    return number == o.number && text == o.text;
  }
  bool operator!=(const SettingValue &o) const { return !(*this == o); }
};

/// A parameter group, as torch.optim's param_groups: a name, an algorithm
/// and that algorithm's hyper-parameters, stored by the settings table
/// (GroupSettings.h): one value per setting of the algorithm, in the
/// table's order. The settings are inputs of every step, which a trainer
/// may change between steps (Optimizer::setGroupSettings), except those
/// the table marks fixed; the plan holds their starting values, and they
/// are not part of what ranks must agree on to exchange data (planHash
/// leaves them out).
struct PlanGroup {
  std::string name;
  AlgorithmId algorithm = kMuon;
  /// An orthogonalizing group's Newton-Schulz configuration: an index into
  /// Plan::ns.configs (0 for other groups). Fixed by the plan, unlike the
  /// settings.
  int64_t nsConfig = 0;
  /// The algorithm's settings (Algorithm::settings), in its order.
  std::vector<SettingValue> settings;

  /// A Muon group with every setting at its default.
  PlanGroup();
  /// A group of `algorithm` with every setting at its default.
  explicit PlanGroup(AlgorithmId algorithm);

  /// The value of the setting called `setting` (a setting of the group's
  /// algorithm, by its table name: "lr", "beta1"); asking for another is a
  /// programming error (asserted; 0 or "" in a release build).
  double number(std::string_view setting) const;
  bool flag(std::string_view setting) const { return number(setting) != 0; }
  const std::string &text(std::string_view setting) const;
  void setNumber(std::string_view setting, double value);
  void setFlag(std::string_view setting, bool on) {
    setNumber(setting, on ? 1.0 : 0.0);
  }
  void setText(std::string_view setting, std::string value);
  /// Whether the group's algorithm orthogonalizes matrices (Muon).
  bool orthogonalizes() const;
};

/// The algorithm's name ("muon", "adamw", ...: Algorithm::name).
const char *algorithmName(AlgorithmId algorithm);

/// The two groups of a model that names none: "muon" and "adamw", with
/// torch's defaults.
std::vector<PlanGroup> defaultGroups();

/// The index of the group named `name`, or -1.
int64_t findGroup(const std::vector<PlanGroup> &groups, std::string_view name);

/// One attention layer under QK-clip (MuonClip, Kimi K2, arXiv 2507.20534):
/// after each step's update, every query head h whose largest attention
/// logit S_h of that step (a step input, Optimizer::setQkMaxLogits) exceeds
/// `threshold` has its rows of `query` scaled by sqrt(threshold / S_h), and
/// its key head's rows of `key` by sqrt(threshold / max S) over the query
/// heads sharing that key head (grouped-query attention; with as many key
/// heads as query heads, K2's rule exactly). Both parameters are 2-D
/// [out, in] weights whose rows are the heads' blocks, head after head.
/// Fixed by the plan (written in the hashed text: ranks agree on it).
struct QkClipLayer {
  std::string name;
  std::string query, key; // parameter names
  int64_t numHeads = 0, numKvHeads = 0;
  double threshold = 100.0;
};

/// One Muon matrix: a 2-D parameter or one slice of a batched one.
struct PlanMatrix {
  std::string param;
  int64_t paramIndex = 0;
  int64_t slice = -1; // -1 for a 2-D parameter
  int64_t rows = 0, cols = 0;
  int64_t owner = -1; // -1: no distributed config, every holder runs NS
  int64_t nsFlops = 0;
  /// Orthogonalized once per replica instead of once (Support/Replicas.h):
  /// `owner` owns it in its replica, each other replica's owner is its
  /// mirror, and every gather and scatter stays inside a replica. Under
  /// DDP a replica is one rank: each holder orthogonalizes its own copy
  /// and nothing moves for the matrix.
  /// (Last, so that aggregate initializers of the fields above keep
  /// their meaning.)
  bool redundant = false;
  /// "param" or "param[slice]".
  std::string label() const;
};

/// A box of one matrix moving between two ranks. In a gather it is one
/// partial summand of a piece, bound for the owner; in a scatter it is a
/// holder's new piece, sent by the owner.
struct Transfer {
  int64_t src = 0, dst = 0;
  int64_t matrix = 0; // index into Plan::matrices
  Range rows, cols;
  int64_t summand = 0;
  int64_t elements() const { return rows.size() * cols.size(); }
};

/// One partial summand of an AdamW parameter's piece moving to another
/// holder of the same piece: AdamW's moments are not linear, so each holder
/// needs the summed gradient of its piece before it updates. The box is the
/// receiver's (equal to the sender's) local box of the parameter.
struct Reduction {
  int64_t src = 0, dst = 0;
  int64_t param = 0; // index into Plan::params
  int64_t summand = 0;
  int64_t elements = 0;
};

/// One packed exchange: everything that moves in one round of one phase
/// goes in a single all-to-all-v over the world communicator. Round r gathers
/// in exchange 2r and scatters in 2r+1; the AdamW reduction, if any model
/// parameter needs one, is the last exchange.
struct Exchange {
  enum class Phase { Gather, Scatter, Reduce };
  Phase phase = Phase::Gather;
  int64_t round = 0;
  std::vector<Transfer> transfers;    // Gather, Scatter
  std::vector<Reduction> reductions;  // Reduce
};

/// One entry of the step's sequence, identical on every rank.
///  - Start / Done: post / wait for exchange `index`;
///  - NewtonSchulz: this rank's NS batches of round `index`;
///  - Momentum: momentum (and the Nesterov mix) on every local Muon piece,
///    with the rank's own gradient summand; the gathers carry its result;
///  - ApplyUpdate: weight decay and the adjusted-lr update on every local
///    piece of round `index`'s matrices, from the orthogonalized values;
///  - AdamW: the AdamW update of every local AdamW piece, on summed
///    gradients.
struct ScheduleStep {
  enum class Kind { Start, Done, NewtonSchulz, Momentum, ApplyUpdate, AdamW };
  Kind kind = Kind::Start;
  int64_t index = 0; // exchange for Start/Done, round for NS/ApplyUpdate
};

/// The names the plan file, the tools' output and messages use for phases
/// and schedule steps: one table each (Plan.cpp).
const char *phaseName(Exchange::Phase phase);
std::optional<Exchange::Phase> parsePhase(std::string_view name);
const char *stepName(ScheduleStep::Kind kind);
std::optional<ScheduleStep::Kind> parseStepName(std::string_view name);

/// Same-shape matrices of one Newton-Schulz configuration that a rank
/// orthogonalizes together in one round.
struct NsBatch {
  int64_t round = 0;
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> matrices;
  /// Index into Plan::ns.configs: every matrix's group runs it.
  int64_t config = 0;
};

struct Plan {
  static constexpr int kVersion = 1;
  int64_t worldSize = 1;
  std::string wireDtype = "f32";
  int64_t wireBytes = 4;
  /// False when the model has no distributed config: nothing moves and
  /// every holder orthogonalizes what it holds.
  bool distributed = false;
  Mesh mesh;
  std::vector<PlanParam> params;
  NewtonSchulzSettings ns;
  /// Every group, in declaration order; a plan without groups of its own
  /// has "muon" and "adamw" (defaultGroups).
  std::vector<PlanGroup> groups = defaultGroups();
  /// The attention layers QK-clip rescales after each step; empty: off.
  std::vector<QkClipLayer> qkClip;
  std::vector<PlanMatrix> matrices;
  std::vector<Exchange> exchanges;
  /// Matrices each rank orthogonalizes; with no distributed config, every
  /// holder of a matrix (redundant, as the single-device algorithm does).
  std::vector<std::vector<int64_t>> nsMatrices;

  // Filled by schedulePlan (Schedule.h).
  /// Matrices of each round (all owners).
  std::vector<std::vector<int64_t>> rounds;
  /// Per rank, its NS batches in issue order.
  std::vector<std::vector<NsBatch>> nsBatches;
  std::vector<ScheduleStep> schedule;
  int64_t prefetchCount = 0;
  int64_t inflightLimit = 1;
  int64_t gatherBudgetBytes = 0;
  bool async = true;

  // One rank's part of a plan (PlanBinary.h, loadPlanSlice): what that rank
  // executes, without the other ranks' work, so that a rank of a 16,384-rank
  // run holds kilobytes of plan instead of the whole. `matrices` are then
  // the matrices the rank holds a piece of or owns, and every matrix index
  // in the plan (rounds, transfers, NS batches) indexes that list; the
  // exchanges keep only the transfers and reductions with the rank at one
  // end, in the whole plan's order; nsBatches and nsMatrices have an entry
  // per rank, empty but the rank's own. Everything else is the whole plan's.
  /// The rank this plan is the part of; -1 for a whole plan.
  int64_t sliceRank = -1;
  /// Per entry of `matrices` (slices only): its index in the whole plan.
  std::vector<int64_t> matrixIds;
  /// Slices only: the whole plan's number of matrices.
  int64_t totalMatrices = 0;
  /// Slices only: the plan file's identity (its header checksum), which
  /// every rank of a run must share.
  uint64_t fileId = 0;
  bool isSlice() const { return sliceRank >= 0; }
};

/// The Newton-Schulz configuration (index into ns.configs) of parameter
/// `param`'s group; the groups' indices must be in range.
int64_t nsConfigOf(const std::vector<PlanParam> &params,
                   const std::vector<PlanGroup> &groups, int64_t param);
inline int64_t nsConfigOf(const Plan &plan, int64_t param) {
  return nsConfigOf(plan.params, plan.groups, param);
}

/// The most Newton-Schulz steps of any configuration (what bounds a step's
/// flops).
int64_t maxNsSteps(const NewtonSchulzSettings &ns);

/// The Muon matrices of `params`, in plan order (what `Plan::matrices` must
/// be, owners -1): one per 2-D parameter, one per slice of a batched one,
/// each with its group's NS flops. Group and configuration indices must be
/// in range.
std::vector<PlanMatrix> muonMatrices(const std::vector<PlanParam> &params,
                                     const std::vector<PlanGroup> &groups,
                                     const NewtonSchulzSettings &ns);

/// The ranks that orthogonalize matrix `m` of a distributed plan: its
/// owner, or for a redundant matrix every replica's owner (sorted).
std::vector<int64_t> nsRanksOf(const Plan &plan, int64_t m);

/// The rank that orthogonalizes the copy of matrix `m` that `rank` holds
/// (the owner, or for a redundant matrix the owner of `rank`'s replica).
int64_t ownerFor(const Plan &plan, int64_t m, int64_t rank);

/// Per-rank figures of the run report, counted from the plan's transfers.
struct RankFigures {
  int64_t nsFlops = 0;
  int64_t bytesSent = 0;
  int64_t bytesReceived = 0;
  std::vector<std::string> owned;
};
std::vector<RankFigures> computeRankFigures(const Plan &plan);

/// One rank's side of one exchange, as an all-to-all-v needs it: per peer
/// (ascending), how many elements go to / come from it and where they sit in
/// the rank's send / receive buffer. Within a peer, the transfers keep the
/// exchange's order, each box row-major.
struct PeerSlice {
  int64_t peer = 0;
  int64_t elements = 0;
  int64_t offset = 0;
  std::vector<int64_t> transfers; // indices into Exchange::transfers
};
struct RankExchangeView {
  std::vector<PeerSlice> send, recv;
  int64_t sendElements = 0, recvElements = 0;
};
/// O(the exchange's transfers); allocates only for `rank`'s peers.
RankExchangeView rankExchangeView(const Exchange &exchange, int64_t rank);
/// The views of every rank at once, in one pass over the transfers.
std::vector<RankExchangeView> rankExchangeViews(const Exchange &exchange,
                                                int64_t worldSize);

/// Bytes of matrix `m` gathered whole, in the plan's wire dtype.
int64_t gatheredMatrixBytes(const Plan &plan, int64_t m);

/// Per round (of `rounds`), per rank: bytes of the full matrices the rank
/// gathers as their owner (what the gather budget limits).
std::vector<std::vector<int64_t>>
gatheredBytes(const Plan &plan,
              const std::vector<std::vector<int64_t>> &rounds);

/// Bytes per element of a wire dtype ("f32" 4, "bf16" 2); 0 if unknown.
int64_t wireDtypeBytes(const std::string &dtype);

} // namespace muon

#endif // MUON_PLAN_PLAN_H
