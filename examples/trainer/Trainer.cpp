//===- Trainer.cpp - A trainer that embeds the Muon runtime ---------------===//
//
// muon-train-example [--layout single|fsdp|fsdp-tp] [--ranks N] [--steps N]
//   [--checkpoint-dir D --stop-after K] [--resume D] [--print-every P]
//   [--plan FILE] [--data FILE] [--seed S] [--check-gradients]
//   [--write-spec LAYOUT --output FILE]
//
// Trains CharModel on a text file the way an FSDP trainer does: every rank
// all-gathers the full weights from the shards, computes the gradients of
// its share of the batch, and reduce-scatters them back to the shards; the
// optimizer step goes through the runtime's API (muon/Runtime/Optimizer.h)
// with an ahead-of-time plan (muon-run --plan), so this program links only
// Muon::Runtime. The global batch is 4 groups of positions whatever the
// number of ranks, and gradients are summed group by group in group order,
// so every layout computes the same numbers: the loss curves of 1, 2 and 4
// ranks agree to the last bit. docs/embedding.md walks through this file.
//
//===----------------------------------------------------------------------===//
#include "CharModel.h"

#include "muon/Plan/Plan.h"
#include "muon/Runtime/Backends.h"
#include "muon/Runtime/BuiltBackends.h"
#include "muon/Runtime/Communicator.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/Cpu/MpiLauncher.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Support/Fnv.h"
#include "muon/Support/InputFile.h"
#include "muon/Support/Limits.h"

#include <mpi.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace muon::runtime;
using muon::fnv1a;
using muon::kFnvOffsetBasis;
using muon::readInputFile;
using muon::Status;
using muon::StatusOr;
using trainer::Tensors;
namespace limits = muon::limits;

namespace {

constexpr int kGroups = 4;          // the global batch, whatever the ranks
constexpr int kGroupPositions = 32; // positions per group

struct Options {
  std::string layout = "single";
  int ranks = 0;
  int64_t steps = 200;
  int64_t stopAfter = -1;
  int64_t printEvery = 10;
  /// Learning-rate schedule: linear warmup over `warmup` steps, then a
  /// cosine decay to 10% at the last step (0 warmup and `constantLr`: off).
  int64_t warmup = 10;
  bool constantLr = false;
  std::string checkpointDir, resume, plan, data, writeSpec, output;
  uint64_t seed = 1;
  bool checkGradients = false;
};

int expectedRanks(const std::string &layout) {
  return layout == "single" ? 1 : layout == "fsdp" ? 2 : 4;
}

const char *const kUsage =
    "usage: muon-train-example [--layout single|fsdp|fsdp-tp] "
    "[--ranks N] [--steps N] [--checkpoint-dir D --stop-after K] "
    "[--resume D] [--print-every P] [--plan FILE] [--data FILE] "
    "[--seed S] [--warmup W] [--constant-lr] [--check-gradients] "
    "[--write-spec LAYOUT --output FILE]\n"
    "  --layout      single (1 rank), fsdp (2 ranks) or fsdp-tp (4 ranks)\n"
    "  --steps       training steps (the default is 200)\n"
    "  --checkpoint-dir D --stop-after K\n"
    "                save to D after step K and stop there\n"
    "  --resume D    load parameters and optimizer state from D first\n"
    "  --plan FILE   an ahead-of-time plan (default: the layout's, built\n"
    "                with the example)\n"
    "  --print-every P  print the loss every P steps (10)\n"
    "  --data FILE   the training text (default: the shipped corpus)\n"
    "  --seed S      initialization seed (1)\n"
    "  --warmup W    learning-rate warmup steps (10), then a cosine decay to\n"
    "                10% of each group's lr at the last step\n"
    "  --constant-lr no schedule: every group keeps the plan's lr\n"
    "  --check-gradients  compare the backward with finite differences\n"
    "  --write-spec LAYOUT --output FILE  write the model spec and exit\n"
    "See docs/embedding.md.\n";

[[noreturn]] void usage(const std::string &problem) {
  std::fprintf(stderr, "muon-train-example: %s\n%s", problem.c_str(), kUsage);
  std::exit(2);
}

Options parse(int argc, char **argv) {
  Options o;
  auto integer = [&](int &i) -> int64_t {
    if (i + 1 >= argc)
      usage(std::string(argv[i]) + " needs a value");
    char *end = nullptr;
    long long v = std::strtoll(argv[++i], &end, 10);
    if (!*argv[i] || *end || v < 0)
      usage(std::string("bad value '") + argv[i] + "' for " + argv[i - 1]);
    return v;
  };
  auto text = [&](int &i) -> std::string {
    if (i + 1 >= argc)
      usage(std::string(argv[i]) + " needs a value");
    return argv[++i];
  };
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (a == "--layout")
      o.layout = text(i);
    else if (a == "--ranks")
      o.ranks = static_cast<int>(integer(i));
    else if (a == "--steps")
      o.steps = integer(i);
    else if (a == "--stop-after")
      o.stopAfter = integer(i);
    else if (a == "--print-every")
      o.printEvery = std::max<int64_t>(1, integer(i));
    else if (a == "--checkpoint-dir")
      o.checkpointDir = text(i);
    else if (a == "--resume")
      o.resume = text(i);
    else if (a == "--plan")
      o.plan = text(i);
    else if (a == "--data")
      o.data = text(i);
    else if (a == "--seed")
      o.seed = static_cast<uint64_t>(integer(i));
    else if (a == "--warmup")
      o.warmup = integer(i);
    else if (a == "--constant-lr")
      o.constantLr = true;
    else if (a == "--check-gradients")
      o.checkGradients = true;
    else if (a == "--write-spec")
      o.writeSpec = text(i);
    else if (a == "--output")
      o.output = text(i);
    else
      usage("unknown argument '" + a + "'");
  }
  for (const std::string &l : {o.layout, o.writeSpec})
    if (!l.empty() && l != "single" && l != "fsdp" && l != "fsdp-tp")
      usage("unknown layout '" + l + "'");
  if (o.ranks && o.ranks != expectedRanks(o.layout))
    usage("layout " + o.layout + " runs on " +
          std::to_string(expectedRanks(o.layout)) + " ranks, not " +
          std::to_string(o.ranks));
  o.ranks = expectedRanks(o.layout);
  if (o.stopAfter >= 0 && o.checkpointDir.empty())
    usage("--stop-after needs --checkpoint-dir");
  if (o.data.empty())
    o.data = MUON_TRAINER_DATA;
  if (o.plan.empty())
    o.plan = std::string(MUON_TRAINER_PLANS) + "/" + o.layout + ".plan.json";
  return o;
}

/// The schedule's multiplier of the base learning rate before step `step`
/// (from 0): warmup, then cosine to 10%. A function of the step alone, so a
/// resumed run sets the same rates as the run it continues.
double lrFactor(const Options &o, int64_t step) {
  if (o.constantLr)
    return 1.0;
  if (step < o.warmup)
    return static_cast<double>(step + 1) / static_cast<double>(o.warmup);
  const double span =
      static_cast<double>(std::max<int64_t>(1, o.steps - o.warmup));
  const double progress =
      std::min(1.0, static_cast<double>(step - o.warmup) / span);
  return 0.1 + 0.9 * 0.5 * (1.0 + std::cos(3.14159265358979323846 * progress));
}

/// The model's spec for a layout: what muon-run compiles into the plan.
std::string specFor(const std::string &layout) {
  using Json = nlohmann::json;
  Json mesh = layout == "single" ? Json{{"shape", {1}}}
              : layout == "fsdp"
                  ? Json{{"shape", {2}}, {"names", {"fsdp"}}}
                  : Json{{"shape", {2, 2}}, {"names", {"fsdp", "tp"}}};
  Json params = Json::array();
  for (const trainer::ParamShape &p : trainer::paramShapes()) {
    Json placements =
        layout == "single" ? Json{"R"}
        : layout == "fsdp" ? Json{"S(0)"}
        : p.shape.size() == 2 ? Json{"S(0)", "S(1)"}
                              : Json{"S(0)", "R"};
    params.push_back({{"name", p.name},
                      {"shape", p.shape},
                      {"optimizer", p.optimizer},
                      {"placements", placements}});
  }
  Json spec = {{"format", "muon-spec/1"},
               {"mesh", mesh},
               {"optimizer",
                {{"lr", 0.02}, {"momentum", 0.95}, {"weight_decay", 0.01}}},
               {"adamw",
                {{"lr", 0.003},
                 {"betas", {0.9, 0.95}},
                 {"eps", 1e-8},
                 {"weight_decay", 0.0}}},
               {"distributed", {{"prefetch_count", 1}}},
               {"params", params}};
  return spec.dump(2) + "\n";
}

/// The data-parallel traffic of the trainer itself (not the optimizer's):
/// MPI when there are several ranks, nothing to do on one.
class DataParallel {
public:
  DataParallel(int rank, int size) : rank(rank), size(size) {}
  const int rank, size;

  /// Every rank's `mine`, in rank order.
  std::vector<std::vector<float>> allGather(const std::vector<float> &mine) {
    if (size == 1)
      return {mine};
    int count = static_cast<int>(mine.size());
    std::vector<int> counts(size), offsets(size);
    MPI_Allgather(&count, 1, MPI_INT, counts.data(), 1, MPI_INT,
                  MPI_COMM_WORLD);
    int total = 0;
    for (int r = 0; r < size; ++r) {
      offsets[r] = total;
      total += counts[r];
    }
    std::vector<float> all(total);
    MPI_Allgatherv(mine.data(), count, MPI_FLOAT, all.data(), counts.data(),
                   offsets.data(), MPI_FLOAT, MPI_COMM_WORLD);
    std::vector<std::vector<float>> out;
    for (int r = 0; r < size; ++r)
      out.emplace_back(all.begin() + offsets[r],
                       all.begin() + offsets[r] + counts[r]);
    return out;
  }
  /// `toRank[r]` goes to rank r; returns what each rank sent here.
  std::vector<std::vector<float>>
  allToAll(const std::vector<std::vector<float>> &toRank) {
    if (size == 1)
      return toRank;
    std::vector<int> sendCounts(size), recvCounts(size), sendOffsets(size),
        recvOffsets(size);
    std::vector<float> send;
    for (int r = 0; r < size; ++r) {
      sendOffsets[r] = static_cast<int>(send.size());
      sendCounts[r] = static_cast<int>(toRank[r].size());
      send.insert(send.end(), toRank[r].begin(), toRank[r].end());
    }
    MPI_Alltoall(sendCounts.data(), 1, MPI_INT, recvCounts.data(), 1, MPI_INT,
                 MPI_COMM_WORLD);
    int total = 0;
    for (int r = 0; r < size; ++r) {
      recvOffsets[r] = total;
      total += recvCounts[r];
    }
    std::vector<float> recv(total);
    MPI_Alltoallv(send.data(), sendCounts.data(), sendOffsets.data(),
                  MPI_FLOAT, recv.data(), recvCounts.data(),
                  recvOffsets.data(), MPI_FLOAT, MPI_COMM_WORLD);
    std::vector<std::vector<float>> out;
    for (int r = 0; r < size; ++r)
      out.emplace_back(recv.begin() + recvOffsets[r],
                       recv.begin() + recvOffsets[r] + recvCounts[r]);
    return out;
  }
};

/// The elements of `box` (one range per dim) of a row-major tensor.
std::vector<float> cut(const std::vector<float> &whole,
                       const std::vector<int64_t> &shape,
                       const std::vector<muon::Range> &box) {
  std::vector<float> out;
  if (box.empty())
    return out;
  if (shape.size() == 1)
    return {whole.begin() + box[0].begin, whole.begin() + box[0].end};
  for (int64_t r = box[0].begin; r < box[0].end; ++r)
    out.insert(out.end(), whole.begin() + r * shape[1] + box[1].begin,
               whole.begin() + r * shape[1] + box[1].end);
  return out;
}

/// Writes `piece` (the elements of `box`, row-major) into `whole`.
void paste(std::vector<float> &whole, const std::vector<int64_t> &shape,
           const std::vector<muon::Range> &box,
           const std::vector<float> &piece) {
  if (box.empty())
    return;
  if (shape.size() == 1) {
    std::copy(piece.begin(), piece.end(), whole.begin() + box[0].begin);
    return;
  }
  size_t at = 0;
  int64_t width = box[1].size();
  for (int64_t r = box[0].begin; r < box[0].end; ++r, at += width)
    std::copy(piece.begin() + at, piece.begin() + at + width,
              whole.begin() + r * shape[1] + box[1].begin);
}

/// The whole weights, pasted together from every rank's shard.
void allGatherWeights(DataParallel &dp, const Tensors<float> &shards,
                      const std::vector<std::vector<std::vector<muon::Range>>>
                          &boxes,
                      Tensors<float> &full) {
  const std::vector<trainer::ParamShape> &shapes = trainer::paramShapes();
  for (size_t p = 0; p < shapes.size(); ++p) {
    std::vector<std::vector<float>> pieces = dp.allGather(shards[p]);
    for (int r = 0; r < dp.size; ++r)
      paste(full[p], shapes[p].shape, boxes[p][r], pieces[r]);
  }
}

uint64_t fnv(const Tensors<float> &tensors) {
  uint64_t h = kFnvOffsetBasis;
  for (const std::vector<float> &t : tensors)
    h = fnv1a(t.data(), t.size() * 4, h);
  return h;
}

/// Finite differences in f64 against the hand-written backward pass.
int checkGradients(const std::vector<int> &text, uint64_t seed) {
  Tensors<float> start = trainer::initialParams(seed);
  Tensors<double> params, grads;
  for (const std::vector<float> &t : start) {
    params.emplace_back(t.begin(), t.end());
    grads.emplace_back(t.size(), 0.0);
  }
  std::vector<int64_t> positions =
      trainer::batchPositions(seed, 0, 0, 4, static_cast<int64_t>(text.size()));
  trainer::lossAndGradient(params, text, positions, grads);
  double worst = 0;
  for (size_t p = 0; p < params.size(); ++p)
    for (size_t k = 0; k < 5; ++k) {
      size_t i = (k * 7919 + p * 104729) % params[p].size();
      double keep = params[p][i], h = 1e-5;
      Tensors<double> scratch = grads;
      params[p][i] = keep + h;
      double up = trainer::lossAndGradient(params, text, positions, scratch);
      params[p][i] = keep - h;
      double down = trainer::lossAndGradient(params, text, positions, scratch);
      params[p][i] = keep;
      double numeric = (up - down) / (2 * h), analytic = grads[p][i];
      worst = std::max(worst, std::fabs(numeric - analytic) /
                                  std::max(1e-6, std::fabs(numeric)));
    }
  std::printf("gradient check: largest relative error %.2e over %zu "
              "parameters\n",
              worst, params.size());
  return worst < 1e-4 ? 0 : 1;
}

int train(const Options &o, Communicator &comm, DataParallel &dp) {
  const bool lead = dp.rank == 0;
  auto fail = [&](const std::string &message) {
    std::fprintf(stderr, "muon-train-example: rank %d: %s\n", dp.rank,
                 message.c_str());
    return 1;
  };
  StatusOr<std::string> data =
      readInputFile(o.data, limits::kMaxTextFileBytes, "the training text");
  if (!data.ok())
    return fail(data.status().message());
  const std::vector<int> text = trainer::encode(*data);

  // The optimizer, from the plan compiled ahead of time for this layout, on
  // the CPU opened by name (one BLAS thread: the ranks share the cores).
  std::unique_ptr<Device> device;
  if (Status s = createDevice("cpu", {{"blas_threads", "1"}}, device); !s.ok())
    return fail(s.message());
  std::unique_ptr<Optimizer> opt;
  if (Status s = Optimizer::load(o.plan, comm, *device, {}, opt); !s.ok())
    return fail(s.message());
  const muon::Plan &plan = opt->plan();
  const std::vector<trainer::ParamShape> &shapes = trainer::paramShapes();
  // Every rank's box of every parameter, for the trainer's own exchanges.
  std::vector<std::vector<std::vector<muon::Range>>> boxes(shapes.size());
  for (size_t p = 0; p < shapes.size(); ++p) {
    const muon::PlanParam &pp = plan.params[p];
    if (pp.name != shapes[p].name || pp.layout.shape != shapes[p].shape)
      return fail("the plan '" + o.plan + "' is not for this model");
    for (int r = 0; r < dp.size; ++r)
      boxes[p].push_back(
          pp.layout.localBox(plan.mesh, plan.mesh.coordsOfRank(r)));
  }

  // This rank's shards: the optimizer updates them in place.
  Tensors<float> full = trainer::initialParams(o.seed);
  Tensors<float> shards, shardGrads;
  for (size_t p = 0; p < shapes.size(); ++p) {
    const ParamSlot &slot = *opt->param(shapes[p].name);
    shards.push_back(cut(full[p], shapes[p].shape, slot.box));
    shardGrads.emplace_back(shards.back().size(), 0.0f);
    if (Status s = opt->bind(slot.name, shards[p].data(), shardGrads[p].data(),
                             DType::F32, slot.elements);
        !s.ok())
      return fail(s.message());
  }
  if (!o.resume.empty())
    if (Status s = opt->loadCheckpoint(o.resume, true); !s.ok())
      return fail(s.message());
  const int64_t first = opt->stepsTaken();
  if (lead && first)
    std::printf("resumed from '%s' after step %lld\n", o.resume.c_str(),
                static_cast<long long>(first));

  // This rank's groups of the global batch.
  const int perRank = kGroups / dp.size;
  const int firstGroup = dp.rank * perRank;
  const float scale = 1.0f / (kGroups * kGroupPositions);
  double loss = 0;
  for (int64_t step = first; step < o.steps; ++step) {
    // All-gather: the full weights from every rank's shard.
    allGatherWeights(dp, shards, boxes, full);
    // Forward and backward on this rank's groups, one gradient per group.
    std::vector<Tensors<float>> groupGrads(perRank);
    std::vector<double> groupLoss(kGroups, 0.0);
    for (int g = 0; g < perRank; ++g) {
      for (const std::vector<float> &t : full)
        groupGrads[g].emplace_back(t.size(), 0.0f);
      std::vector<int64_t> positions = trainer::batchPositions(
          o.seed, step, firstGroup + g, kGroupPositions,
          static_cast<int64_t>(text.size()));
      groupLoss[firstGroup + g] =
          trainer::lossAndGradient(full, text, positions, groupGrads[g]);
    }
    // Reduce-scatter: each rank gets every group's gradient of its shard
    // and sums them in group order (the same sums on any layout).
    for (size_t p = 0; p < shapes.size(); ++p) {
      std::vector<std::vector<float>> toRank(dp.size);
      for (int r = 0; r < dp.size; ++r)
        for (int g = 0; g < perRank; ++g) {
          std::vector<float> part =
              cut(groupGrads[g][p], shapes[p].shape, boxes[p][r]);
          toRank[r].insert(toRank[r].end(), part.begin(), part.end());
        }
      std::vector<std::vector<float>> fromRank = dp.allToAll(toRank);
      std::vector<float> &grad = shardGrads[p];
      std::fill(grad.begin(), grad.end(), 0.0f);
      size_t n = grad.size();
      for (int g = 0; g < kGroups; ++g) {
        const std::vector<float> &from = fromRank[g / perRank];
        size_t at = static_cast<size_t>(g % perRank) * n;
        for (size_t e = 0; e < n; ++e)
          grad[e] += from[at + e];
      }
      for (float &v : grad)
        v *= scale;
    }
    // The loss of the whole batch: each group's from its rank.
    std::vector<float> mine(groupLoss.begin() + firstGroup,
                            groupLoss.begin() + firstGroup + perRank);
    std::vector<std::vector<float>> losses = dp.allGather(mine);
    loss = 0;
    for (const std::vector<float> &l : losses)
      for (float v : l)
        loss += v;
    loss /= kGroups * kGroupPositions;

    // The schedule: every group's lr from its starting value (the plan's),
    // set on every rank alike before the step.
    const double factor = lrFactor(o, step);
    for (const muon::PlanGroup &g : plan.groups)
      if (Status s = opt->setGroupLr(g.name, factor * g.number("lr"));
          !s.ok())
        return fail(s.message());
    StepResult result;
    if (Status s = opt->step(result); !s.ok())
      return fail(s.message());
    if (lead && ((step + 1) % o.printEvery == 0 || step + 1 == o.steps ||
                 step == 0))
      std::printf("step %lld/%lld  loss %.9g  lr x%.4f\n",
                  static_cast<long long>(step + 1),
                  static_cast<long long>(o.steps), loss, factor);
    std::fflush(stdout);
    if (step + 1 == o.stopAfter) {
      if (Status s = opt->saveCheckpoint(o.checkpointDir, true); !s.ok())
        return fail(s.message());
      if (lead)
        std::printf("checkpoint after step %lld in '%s'; stopping\n",
                    static_cast<long long>(step + 1),
                    o.checkpointDir.c_str());
      return 0;
    }
  }
  // The final weights, whole, as every layout must have them.
  allGatherWeights(dp, shards, boxes, full);
  if (lead)
    std::printf("final loss %.9g  parameters fnv %016llx  (%d rank%s, %s)\n",
                loss, static_cast<unsigned long long>(fnv(full)), dp.size,
                dp.size == 1 ? "" : "s", o.layout.c_str());
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  // OpenBLAS's fast kernels on a CPU newer than it (a no-op elsewhere).
  muon::runtime::cpu::restartWithPreferredBlasKernels(argv);
  Options o = parse(argc, argv);
  if (!o.writeSpec.empty()) {
    if (o.output.empty())
      usage("--write-spec needs --output");
    std::ofstream out(o.output);
    out << specFor(o.writeSpec);
    return out ? 0 : 1;
  }
  if (o.checkGradients) {
    StatusOr<std::string> data =
        readInputFile(o.data, limits::kMaxTextFileBytes, "the training text");
    if (!data.ok()) {
      std::fprintf(stderr, "muon-train-example: %s\n",
                   data.status().message().c_str());
      return 1;
    }
    return checkGradients(trainer::encode(*data), o.seed);
  }
  registerBuiltBackends();
  if (o.ranks == 1) {
    std::unique_ptr<Communicator> comm;
    if (Status s = createProcessGroup("single", {}, comm); !s.ok()) {
      std::fprintf(stderr, "muon-train-example: %s\n", s.message().c_str());
      return 2;
    }
    DataParallel dp(0, 1);
    return train(o, *comm, dp);
  }
  if (!cpu::launchedByMpirun()) {
    // Run this program on its ranks.
    cpu::EndingSignalsBlocked blocked;
    cpu::PrivateDir dir("muon-train");
    if (dir.path().empty()) {
      std::fprintf(stderr, "muon-train-example: %s\n", dir.status().message().c_str());
      return 2;
    }
    std::vector<std::string> command = {cpu::selfPath()};
    for (int i = 1; i < argc; ++i)
      command.push_back(argv[i]);
    cpu::MpirunResult run =
        cpu::runMpirun("mpirun", o.ranks, command, dir.path());
    if (run.status < 0 || run.status == 127) {
      std::fprintf(stderr, "muon-train-example: cannot start mpirun %s\n",
                   run.error.c_str());
      return 2;
    }
    return run.signal ? 128 + run.signal : run.status;
  }
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  int code = 2;
  if (size != o.ranks) {
    if (rank == 0)
      std::fprintf(stderr,
                   "muon-train-example: layout %s needs %d ranks, mpirun "
                   "started %d\n",
                   o.layout.c_str(), o.ranks, size);
  } else {
    // The optimizer gets a communicator of its own (MPI's process group
    // over a duplicate of the world): its traffic never mixes with the
    // trainer's.
    std::unique_ptr<Communicator> comm;
    Status s = createProcessGroup(
        "mpi", {{"comm", std::to_string(MPI_Comm_c2f(MPI_COMM_WORLD))}}, comm);
    if (s.ok()) {
      DataParallel dp(rank, size);
      code = train(o, *comm, dp);
    } else {
      std::fprintf(stderr, "muon-train-example: rank %d: %s\n", rank,
                   s.message().c_str());
    }
  }
  MPI_Finalize();
  return code;
}
