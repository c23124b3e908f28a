//===- CheckpointTest.cpp - Checkpoints and state dicts across world sizes ===//
//
// Plans compiled in process (Muon::Compiler) for one model at two world
// sizes, run with ranks as threads (LocalCommunicator): a checkpoint saved
// on 64 ranks loads on 48 with each rank reading little more than its own
// state, a resume on the same layout opens only the rank's own file, and
// state dicts of 4 ranks load on 2 as the checkpoint files do.
//
//===----------------------------------------------------------------------===//
#include "StatusTesting.h"
#include "CheckpointTestSupport.h"
#include "OneRankOptimizer.h"
#include "muon/Compiler/Compile.h"
#include "muon/Plan/Algorithm.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/ElementMath.h"
#include "muon/Runtime/LocalCommunicator.h"
#include "muon/Runtime/Optimizer.h"
#include "muon/Runtime/Testing/Synthetic.h"
#include "muon/Support/OutputFile.h"

#include <nlohmann/json.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <unistd.h>

using namespace muon;
using namespace muon::compiler;
using namespace muon::runtime;
using muon::testing::addParam;
using muon::testing::compileFor;
using muon::testing::OneRank;
using muon::testing::onEveryRank;
using muon::testing::randomValues;
using muon::testing::sameDicts;
using muon::testing::scratchDir;

namespace {

/// Bytes of state a rank holds: what it would read to load its own state.
int64_t stateBytes(const StateDict &dict) {
  int64_t bytes = 0;
  for (const StatePiece &p : dict.pieces)
    for (const auto &[name, data] : p.states)
      bytes += static_cast<int64_t>(data.size()) * 4;
  return bytes;
}

/// Per rank, what one run of `plan` does: optionally load (from a
/// checkpoint directory, or from a state dict), take steps [first, last),
/// optionally save after the last; every rank's state dict (with values)
/// at the end, its I/O counters, and the parameters, whole.
struct RunResult {
  std::vector<StateDict> dicts;
  std::vector<StateDict> loaded; // right after the load
  std::vector<CheckpointIoCounters> io;
  std::vector<std::vector<float>> whole;
  std::vector<std::string> errors;
};

struct RunOptions {
  std::string loadDir;
  const StateDict *loadDict = nullptr;
  int64_t firstStep = 0, lastStep = 0;
  std::string saveDir;
};

RunResult run(const Plan &plan, const RunOptions &o) {
  RunResult out;
  int64_t world = plan.worldSize;
  out.dicts.resize(world);
  out.loaded.resize(world);
  out.io.resize(world);
  out.errors.resize(world);
  out.whole = wholeTensors(plan);
  std::mutex mutex;
  onEveryRank(world, [&](int64_t r, Communicator &comm) {
    cpu::CpuDevice device;
    std::string &error = out.errors[r];
    std::unique_ptr<Optimizer> opt;
    error = Optimizer::create(plan, comm, device, {60.0}, opt).message();
    if (!opt)
      return;
    SyntheticModel model(*opt, device, 31, summandCounts(plan));
    if (!o.loadDir.empty() &&
        !(error = opt->loadCheckpoint(o.loadDir, true).message()).empty())
      return;
    if (o.loadDict &&
        !(error = opt->loadStateDict(*o.loadDict, true).message()).empty())
      return;
    out.io[r] = opt->checkpointIo();
    if (!(error = opt->stateDict(true, out.loaded[r]).message()).empty())
      return;
    for (int64_t s = o.firstStep; s < o.lastStep; ++s) {
      model.makeGradients(s, 1, {});
      StepResult result;
      if (!(error = opt->step(result).message()).empty())
        return;
    }
    if (!o.saveDir.empty() &&
        !(error = opt->saveCheckpoint(o.saveDir, true).message()).empty())
      return;
    if (!(error = opt->stateDict(true, out.dicts[r]).message()).empty())
      return;
    std::lock_guard<std::mutex> lock(mutex);
    model.copyInto(out.whole);
  });
  return out;
}

void expectNoErrors(const RunResult &r, const char *what) {
  for (size_t k = 0; k < r.errors.size(); ++k)
    EXPECT_EQ(r.errors[k], "") << what << ", rank " << k;
}

/// Every rank's pieces of every state, whole: what the ranks' state dicts
/// say each global element holds (checking that replicas agree).
using WholeStates = std::map<std::pair<std::string, std::string>,
                             std::pair<std::vector<float>, std::vector<char>>>;
WholeStates assemble(const Plan &plan, const std::vector<StateDict> &dicts) {
  std::map<std::string, const PlanParam *> params;
  for (const PlanParam &p : plan.params)
    params[p.name] = &p;
  WholeStates whole;
  for (const StateDict &d : dicts)
    for (const StatePiece &piece : d.pieces) {
      const std::vector<int64_t> &shape = params.at(piece.param)->layout.shape;
      int64_t elements = 1;
      for (int64_t n : shape)
        elements *= n;
      for (const auto &[name, data] : piece.states) {
        auto &[values, seen] = whole[{piece.param, name}];
        values.resize(elements);
        seen.resize(elements);
        forEachElement(shape, piece.box, [&](int64_t local, int64_t global) {
          if (seen[global]) {
            EXPECT_EQ(values[global], data[local])
                << "replicas of " << piece.param << "." << name << " differ at "
                << global;
          }
          values[global] = data[local];
          seen[global] = 1;
        });
      }
    }
  return whole;
}

/// The model of the 64-to-48 test: Muon matrices split unevenly over the
/// ranks (by rows; a stack split on its middle dim, so that some ranks hold
/// none of it; a matrix split by columns, so that a piece is many short
/// runs), AdamW parameters split by rows, and replicated parameters of both
/// groups. The AdamW embedding carries most of the state, so that a
/// rank's state is large against the 4 KiB chunks checkpoints hash and
/// read by.
Model scaleModel() {
  Model model;
  addParam(model, "w_in", {200, 96}, {Placement::shard(0)});
  addParam(model, "w_out", {96, 130}, {Placement::shard(0)});
  addParam(model, "stack", {3, 40, 24}, {Placement::shard(1)});
  addParam(model, "w_col", {64, 100}, {Placement::shard(1)});
  addParam(model, "emb", {160000, 32}, {Placement::shard(0)}, "adamw");
  addParam(model, "bias", {130}, {Placement::shard(0)});
  addParam(model, "norm", {96}, {});
  addParam(model, "w_rep", {24, 24}, {});
  model.muon.setNumber("lr", 0.02);
  return model;
}

TEST(CheckpointScale, SavedOn64RanksLoadsOn48ReadingOnlyWhatEachNeeds) {
  Model model = scaleModel();
  Plan plan64 = compileFor(model, 64), plan48 = compileFor(model, 48);
  std::string dir = scratchDir("scale");

  // Two steps on 64 ranks, then a checkpoint with the parameter values.
  RunResult saved = run(plan64, {"", nullptr, 0, 2, dir});
  expectNoErrors(saved, "64 ranks saving");
  if (HasFailure())
    return;
  WholeStates expected = assemble(plan64, saved.dicts);

  // 48 ranks load it and take the third step.
  RunResult loaded = run(plan48, {dir, nullptr, 2, 3, ""});
  expectNoErrors(loaded, "48 ranks loading");
  if (HasFailure())
    return;

  // Each rank's state is what the 64 ranks saved at its elements.
  for (int64_t r = 0; r < 48; ++r) {
    const StateDict &d = loaded.loaded[r];
    EXPECT_EQ(d.steps, 2);
    for (const StatePiece &piece : d.pieces) {
      const PlanParam *param = nullptr;
      for (const PlanParam &p : plan48.params)
        if (p.name == piece.param)
          param = &p;
      ASSERT_TRUE(param);
      EXPECT_EQ(piece.states.size(), param->orthogonalized() ? 2u : 3u)
          << piece.param;
      if (!param->orthogonalized()) {
        EXPECT_EQ(piece.step, 2) << piece.param;
      }
      for (const auto &[name, data] : piece.states) {
        const auto &[values, seen] = expected.at({piece.param, name});
        int64_t mismatches = 0;
        forEachElement(
            param->layout.shape, piece.box, [&](int64_t local, int64_t global) {
              mismatches += !seen[global] || values[global] != data[local];
            });
        EXPECT_EQ(mismatches, 0)
            << "rank " << r << ", " << piece.param << "." << name;
      }
    }
  }

  // No rank reads more than its own state plus 10% (the manifest aside).
  int64_t maxRead = 0, sumRead = 0, maxOwn = 0, sumOwn = 0, maxFiles = 0,
          sumFiles = 0;
  double maxRatio = 0, sumRatio = 0;
  for (int64_t r = 0; r < 48; ++r) {
    const CheckpointIoCounters &io = loaded.io[r];
    int64_t own = stateBytes(loaded.loaded[r]);
    double ratio = static_cast<double>(io.rankFileBytes) / own;
    EXPECT_LE(io.rankFileBytes, own + own / 10)
        << "rank " << r << " read " << io.rankFileBytes << " bytes for " << own
        << " bytes of state";
    EXPECT_EQ(io.manifestBytes, loaded.io[0].manifestBytes);
    maxRead = std::max(maxRead, io.rankFileBytes);
    sumRead += io.rankFileBytes;
    maxOwn = std::max(maxOwn, own);
    sumOwn += own;
    maxFiles = std::max(maxFiles, io.filesOpened);
    sumFiles += io.filesOpened;
    maxRatio = std::max(maxRatio, ratio);
    sumRatio += ratio;
  }
  int64_t saveTotal = 0;
  for (const StateDict &d : saved.dicts)
    saveTotal += stateBytes(d);
  std::printf("64 -> 48 ranks: checkpoint of %lld bytes of state (64 rank "
              "files), manifest %lld bytes\n"
              "  per rank (max / mean): own state %lld / %.0f bytes, read "
              "from rank files %lld / %.0f bytes, read / own %.4f / %.4f, "
              "files opened %lld / %.2f\n",
              static_cast<long long>(saveTotal),
              static_cast<long long>(loaded.io[0].manifestBytes),
              static_cast<long long>(maxOwn), sumOwn / 48.0,
              static_cast<long long>(maxRead), sumRead / 48.0, maxRatio,
              sumRatio / 48.0, static_cast<long long>(maxFiles),
              sumFiles / 48.0);

  // The third step on 48 ranks is the single-device reference's third step.
  cpu::CpuDevice device;
  std::vector<std::vector<float>> reference;
  std::string error;
  ASSERT_OK_AND_ASSIGN(reference, runReference(plan64, device, 31, 3, 1, {}));
  for (size_t i = 0; i < plan48.params.size(); ++i)
    EXPECT_EQ(loaded.whole[i], reference[i]) << plan48.params[i].name;

  // A resume on the same 64-rank layout: each rank opens only its own file
  // and reads its own state, the file's header and 8 bytes of hash per 4
  // KiB chunk.
  RunResult resumed = run(plan64, {dir, nullptr, 2, 2, ""});
  expectNoErrors(resumed, "64 ranks resuming");
  int64_t maxExtra = 0, maxOpened = 0, minOpened = 64;
  for (int64_t r = 0; r < 64 && !HasFailure(); ++r) {
    const CheckpointIoCounters &io = resumed.io[r];
    int64_t own = stateBytes(resumed.loaded[r]);
    EXPECT_EQ(io.filesOpened, 1) << "rank " << r;
    EXPECT_GE(io.rankFileBytes, own) << "rank " << r;
    EXPECT_LE(io.rankFileBytes, own + own / 400 + 1024) << "rank " << r;
    maxExtra = std::max(maxExtra, io.rankFileBytes - own);
    maxOpened = std::max(maxOpened, io.filesOpened);
    minOpened = std::min(minOpened, io.filesOpened);
    // Bit for bit what the rank saved.
    ASSERT_EQ(resumed.loaded[r].pieces.size(), saved.dicts[r].pieces.size());
    for (size_t k = 0; k < saved.dicts[r].pieces.size(); ++k)
      EXPECT_EQ(resumed.loaded[r].pieces[k].states,
                saved.dicts[r].pieces[k].states)
          << "rank " << r << ", " << saved.dicts[r].pieces[k].param;
  }
  std::printf("64 -> 64 ranks (same layout): files opened per rank %lld to "
              "%lld; at most %lld bytes read beyond the rank's own state "
              "(its file's header and chunk hashes)\n",
              static_cast<long long>(minOpened),
              static_cast<long long>(maxOpened),
              static_cast<long long>(maxExtra));
  removeTree(dir);
}

/// A small model with a Muon parameter and an AdamW parameter whose
/// gradients are partial sums over the mesh (one summand per rank), beside
/// FSDP-split ones.
Model partialModel() {
  Model model;
  addParam(model, "w", {12, 8}, {Placement::shard(0)});
  addParam(model, "p", {6, 10}, {Placement::partial()});
  addParam(model, "b", {10}, {Placement::shard(0)});
  addParam(model, "g", {7}, {Placement::partial()});
  model.muon.setNumber("lr", 0.02);
  return model;
}

TEST(StateDict, FourRankDictsLoadOnTwoRanksAsTheFilesDo) {
  Model model = partialModel();
  Plan plan4 = compileFor(model, 4), plan2 = compileFor(model, 2);
  std::string dir = scratchDir("dicts");
  RunResult four = run(plan4, {"", nullptr, 0, 2, dir});
  expectNoErrors(four, "4 ranks");
  if (HasFailure())
    return;
  // Every rank's state dict, concatenated: pieces of the 4-rank layout.
  StateDict all;
  all.steps = four.dicts[0].steps;
  for (const StateDict &d : four.dicts)
    all.pieces.insert(all.pieces.end(), d.pieces.begin(), d.pieces.end());
  EXPECT_EQ(all.steps, 2);

  RunResult fromFiles = run(plan2, {dir, nullptr, 2, 4, ""});
  RunResult fromDicts = run(plan2, {"", &all, 2, 4, ""});
  expectNoErrors(fromFiles, "2 ranks from the files");
  expectNoErrors(fromDicts, "2 ranks from the state dicts");
  if (HasFailure())
    return;
  // What was loaded, and where two more steps lead, bit for bit.
  EXPECT_TRUE(sameDicts(fromFiles.loaded, fromDicts.loaded));
  EXPECT_TRUE(sameDicts(fromFiles.dicts, fromDicts.dicts));
  EXPECT_EQ(fromFiles.whole, fromDicts.whole);
  // The loaded state is the 4 ranks' re-cut: rank 0 holds the partial
  // Muon parameter's momentum summed over the 4 saved summands, rank 1
  // none (2 summands now: only their total matters).
  const StatePiece *p0 = nullptr, *p1 = nullptr;
  for (const StatePiece &piece : fromDicts.loaded[0].pieces)
    if (piece.param == "p")
      p0 = &piece;
  for (const StatePiece &piece : fromDicts.loaded[1].pieces)
    if (piece.param == "p")
      p1 = &piece;
  ASSERT_TRUE(p0 && p1);
  EXPECT_EQ(p0->summands, 2);
  std::vector<float> total(60, 0.0f);
  for (const StateDict &d : four.dicts)
    for (const StatePiece &piece : d.pieces)
      if (piece.param == "p") {
        EXPECT_EQ(piece.summands, 4);
        for (size_t e = 0; e < total.size(); ++e)
          total[e] += piece.states.at("momentum")[e];
      }
  EXPECT_EQ(p0->states.at("momentum"), total);
  EXPECT_EQ(p1->states.at("momentum"), std::vector<float>(60, 0.0f));
  // The parameters without partial gradients go on as on one device.
  cpu::CpuDevice device;
  std::vector<std::vector<float>> reference;
  std::string error;
  ASSERT_OK_AND_ASSIGN(reference, runReference(plan2, device, 31, 4, 1, {}));
  EXPECT_EQ(fromDicts.whole[0], reference[0]); // w
  EXPECT_EQ(fromDicts.whole[2], reference[2]); // b
  removeTree(dir);
}

TEST(StateDict, LoadingIsAllOrNothing) {
  Model model = partialModel();
  Plan plan4 = compileFor(model, 4), plan2 = compileFor(model, 2);
  RunResult four = run(plan4, {"", nullptr, 0, 1, ""});
  expectNoErrors(four, "4 ranks");
  if (HasFailure())
    return;
  // Without rank 3's piece of 'w', the 2-rank layout's rank 1 lacks the
  // rows rank 3 held; rank 0 has all it needs.
  StateDict partial;
  partial.steps = 1;
  for (int64_t r = 0; r < 4; ++r)
    for (const StatePiece &piece : four.dicts[r].pieces)
      if (r != 3 || piece.param != "w")
        partial.pieces.push_back(piece);
  StateDict foreign = partial;
  foreign.pieces[0].param = "nope";
  StateDict shortData = partial;
  shortData.pieces[0].states.begin()->second.pop_back();
  StateDict wrongGroup = partial;
  for (StatePiece &piece : wrongGroup.pieces)
    if (piece.param == "b")
      piece.states["momentum"] = piece.states.at("exp_avg");

  std::vector<std::string> errors(2);
  onEveryRank(2, [&](int64_t r, Communicator &comm) {
    cpu::CpuDevice device;
    std::string error;
    std::unique_ptr<Optimizer> opt;
    error = Optimizer::create(plan2, comm, device, {60.0}, opt).message();
    ASSERT_TRUE(opt) << error;
    SyntheticModel synthetic(*opt, device, 31, summandCounts(plan2));
    StateDict before, after;
    ASSERT_TRUE((error = opt->stateDict(true, before).message()).empty())
        << error;
    bool ok = (errors[r] = opt->loadStateDict(partial, true).message()).empty();
    EXPECT_EQ(ok, r == 0) << errors[r];
    if (r == 1) {
      // Nothing changed on the rank that failed.
      ASSERT_TRUE((error = opt->stateDict(true, after).message()).empty())
          << error;
      EXPECT_TRUE(sameDicts({before}, {after}));
      EXPECT_EQ(opt->stepsTaken(), 0);
    }
    // Pieces that do not fit the model are refused on every rank.
    EXPECT_FALSE((error = opt->loadStateDict(foreign, true).message()).empty());
    EXPECT_NE(error.find("piece 0 ('nope' [0:3, 0:8]): no parameter 'nope' "
                         "in this model"),
              std::string::npos)
        << error;
    EXPECT_FALSE(
        (error = opt->loadStateDict(shortData, true).message()).empty());
    EXPECT_NE(error.find("piece 0 ('w' [0:3, 0:8]): its "), std::string::npos)
        << error;
    EXPECT_FALSE(
        (error = opt->loadStateDict(wrongGroup, true).message()).empty());
    EXPECT_NE(error.find("state 'momentum' for 'b', an AdamW parameter"),
              std::string::npos)
        << error;
  });
  EXPECT_EQ(errors[1],
            "loading a state dict: the state dict does not cover the "
            "momentum of rank 1's piece [6:12, 0:8] of 'w'; nothing was "
            "changed");
}

// The per-element slots come from one table (ElementState.h): every piece
// carries exactly its algorithm's slots, and a load refuses, by the slot's
// name, a piece without one of them or with another algorithm's. A slot
// added to the table is checked here without a line of this test changing.
TEST(StateDict, EveryPieceCarriesItsAlgorithmsSlotsOfTheTable) {
  Model model = partialModel();
  Plan plan = compileFor(model, 2);
  RunResult two = run(plan, {"", nullptr, 0, 2, ""});
  expectNoErrors(two, "2 ranks");
  if (HasFailure())
    return;
  StateDict all;
  all.steps = two.dicts[0].steps;
  for (const StateDict &d : two.dicts)
    all.pieces.insert(all.pieces.end(), d.pieces.begin(), d.pieces.end());
  std::map<std::string, AlgorithmId> algorithmOfParam;
  for (const PlanParam &p : plan.params)
    algorithmOfParam[p.name] = p.algorithm;
  for (const StatePiece &piece : all.pieces) {
    std::set<std::string> names, expected = {"values"};
    for (const auto &[name, data] : piece.states)
      names.insert(name);
    for (const ElementSlot &slot : elementSlots())
      if (slot.algorithm == algorithmOfParam.at(piece.param))
        expected.insert(slot.name);
    EXPECT_EQ(names, expected) << piece.param;
    // AdamW pieces count their steps; Muon's take none.
    EXPECT_EQ(piece.step, algorithmOfParam.at(piece.param) == kMuon ? 0 : 2)
        << piece.param;
  }
  // One broken dict per slot of the model's two algorithms (Muon's "p",
  // AdamW's "g"): the slot missing from every piece of the parameter of its
  // algorithm, and the slot given to the other.
  struct Broken {
    StateDict dict;
    std::string expected;
  };
  std::vector<Broken> broken;
  for (const ElementSlot &slot : elementSlots()) {
    if (slot.algorithm != kMuon && slot.algorithm != kAdamW)
      continue; // no parameter of its algorithm here
    const bool muon = slot.algorithm == kMuon;
    const char *own = muon ? "p" : "g", *other = muon ? "g" : "p";
    Broken &missing = broken.emplace_back(Broken{all, ""});
    for (StatePiece &piece : missing.dict.pieces)
      if (piece.param == own)
        piece.states.erase(slot.name);
    missing.expected =
        slot.perSummand
            ? std::string("has no ") + slot.name + " for '" + own + "'"
            : std::string("does not cover the ") + slot.name;
    Broken &foreign = broken.emplace_back(Broken{all, ""});
    for (StatePiece &piece : foreign.dict.pieces)
      if (piece.param == other)
        piece.states[slot.name] = piece.states.at("values");
    foreign.expected = std::string("state '") + slot.name + "' for '" + other +
                       "', " + (muon ? "an AdamW" : "a Muon") +
                       " parameter";
  }
  onEveryRank(2, [&](int64_t r, Communicator &comm) {
    cpu::CpuDevice device;
    std::unique_ptr<Optimizer> opt;
    std::string error =
        Optimizer::create(plan, comm, device, {60.0}, opt).message();
    ASSERT_TRUE(opt) << error;
    SyntheticModel synthetic(*opt, device, 31, summandCounts(plan));
    ASSERT_TRUE((error = opt->loadStateDict(all, true).message()).empty())
        << error;
    for (const Broken &b : broken) {
      error = opt->loadStateDict(b.dict, true).message();
      EXPECT_NE(error.find(b.expected), std::string::npos)
          << "rank " << r << ": expected '" << b.expected << "' in '" << error
          << "'";
    }
  });
}

TEST(CheckpointFormat, RefusesOldDamagedTruncatedAndMisplacedFiles) {
  Model model = partialModel();
  Plan plan4 = compileFor(model, 4), plan2 = compileFor(model, 2);
  std::string dir = scratchDir("format");
  RunResult four = run(plan4, {"", nullptr, 0, 1, dir});
  expectNoErrors(four, "4 ranks");
  if (HasFailure())
    return;
  std::string manifestPath = dir + "/checkpoint.json";
  std::string manifest;
  {
    std::ifstream in(manifestPath);
    std::stringstream text;
    text << in.rdbuf();
    manifest = text.str();
  }
  auto loadEverywhere = [&](const char *what) {
    RunResult r = run(plan4, {dir, nullptr, 0, 0, ""});
    for (int64_t k = 0; k < 4; ++k)
      EXPECT_NE(r.errors[k].find("; nothing was changed"), std::string::npos)
          << what << ", rank " << k << ": " << r.errors[k];
    return r.errors;
  };
  // The previous formats (no manifest_hash line): a clear refusal.
  for (const char *format : {"muon-checkpoint/1", "muon-checkpoint/2"}) {
    std::string old = manifest;
    old.resize(old.rfind("  \"manifest_hash\""));
    old.resize(old.size() - 2); // the comma after the last field
    old += "\n}\n";
    old.replace(old.find("muon-checkpoint/3"), 17, format);
    std::ofstream(manifestPath) << old;
    std::vector<std::string> errors = loadEverywhere(format);
    EXPECT_NE(errors[0].find(std::string("is in the older format ") + format),
              std::string::npos)
        << errors[0];
  }
  std::ofstream(manifestPath) << manifest;
  // A flipped bit in the data of rank 1's momentum of 'w', found through
  // the manifest: on 2 ranks only rank 0 reads it, and both name it.
  {
    nlohmann::json index = nlohmann::json::parse(manifest);
    std::string file;
    int64_t offset = -1;
    for (const nlohmann::json &piece : index["files"][1]["pieces"])
      if (piece["param"] == "w") {
        file = dir + "/" + index["files"][1]["name"].get<std::string>();
        offset = piece["states"]["momentum"]["offset"].get<int64_t>() + 5;
      }
    ASSERT_GE(offset, 0);
    auto flip = [&] {
      std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
      f.seekg(offset);
      char c = static_cast<char>(f.get() ^ 0x10);
      f.seekp(offset);
      f.put(c);
    };
    flip();
    RunResult two = run(plan2, {dir, nullptr, 0, 0, ""});
    for (int64_t k = 0; k < 2; ++k)
      EXPECT_NE(two.errors[k].find("-rank-1.bin' is damaged: the momentum "
                                   "state of 'w' [3:6, 0:8] does not match "
                                   "its checksum; nothing was changed"),
                std::string::npos)
          << "rank " << k << ": " << two.errors[k];
    EXPECT_EQ(two.errors[1].rfind("loading a checkpoint: rank 0: ", 0), 0u)
        << two.errors[1];
    flip();
    two = run(plan2, {dir, nullptr, 0, 0, ""});
    expectNoErrors(two, "2 ranks, the bit flipped back");
  }
  // Rank 2's file cut short: the ranks that read it find it, and every
  // other rank's error names it too.
  size_t at = manifest.find("-rank-2.bin");
  size_t start = manifest.rfind("state-", at);
  std::string victim = dir + "/" + manifest.substr(start, at + 11 - start);
  ASSERT_EQ(::truncate(victim.c_str(), 100), 0) << victim;
  std::vector<std::string> errors = loadEverywhere("truncated");
  for (int64_t k = 0; k < 4; ++k)
    EXPECT_NE(errors[k].find("-rank-2.bin' is damaged or foreign: it has 100 "
                             "bytes, the manifest says "),
              std::string::npos)
        << "rank " << k << ": " << errors[k];
  // One rank's file under another rank's name.
  std::string rank1 = victim;
  rank1.replace(rank1.find("-rank-2.bin"), 11, "-rank-1.bin");
  std::string copy = "cp '" + rank1 + "' '" + victim + "'";
  ASSERT_EQ(std::system(copy.c_str()), 0);
  errors = loadEverywhere("misplaced");
  EXPECT_NE(errors[0].find("-rank-2.bin' is damaged or foreign"),
            std::string::npos)
      << errors[0];
  removeTree(dir);
}

} // namespace

//===----------------------------------------------------------------------===//
// NorMuon (arXiv 2510.05491): its per-matrix step against a reference
// written from the paper's formulas, distributed runs equal to one rank,
// and its per-row state ("normuon_v") through checkpoints, state dicts and a
// reshard from 4 ranks to 2.
//===----------------------------------------------------------------------===//

namespace {

/// Matrices of each shape class: wide, tall, a stack of three, split by
/// rows, by columns, by the stack's middle dim, and replicated; an AdamW
/// parameter beside them.
Model normuonModel(bool normuon) {
  Model model;
  addParam(model, "wide", {24, 40}, {Placement::shard(0)});
  addParam(model, "tall", {44, 20}, {Placement::shard(1)});
  addParam(model, "stack", {3, 20, 12}, {Placement::shard(1)});
  addParam(model, "rep", {12, 12}, {});
  addParam(model, "emb", {64, 8}, {Placement::shard(0)}, "adamw");
  model.muon.setNumber("lr", 0.02);
  model.muon.ns.nsDtype = "f32";
  model.muon.setFlag("normuon", normuon);
  model.muon.setNumber("normuon_beta2", 0.9);
  return model;
}

/// NorMuon from the paper (Algorithm 1, with dion's rescale to the
/// orthogonalized update's norm), in double, on one rows x cols matrix O:
/// v = beta2 v + (1 - beta2) mean_j O_ij^2; N = O / (sqrt(v) + 1e-8);
/// returns N * ||O||_F / ||N||_F.
std::vector<double> referenceNormuon(const std::vector<double> &o, int64_t rows,
                                     int64_t cols, double beta2,
                                     std::vector<double> &v) {
  std::vector<double> n(o.size());
  double normO = 0, normN = 0;
  for (int64_t i = 0; i < rows; ++i) {
    double mean = 0;
    for (int64_t j = 0; j < cols; ++j)
      mean += o[i * cols + j] * o[i * cols + j] / cols;
    v[i] = beta2 * v[i] + (1 - beta2) * mean;
    for (int64_t j = 0; j < cols; ++j) {
      n[i * cols + j] = o[i * cols + j] / (std::sqrt(v[i]) + 1e-8);
      normO += o[i * cols + j] * o[i * cols + j];
      normN += n[i * cols + j] * n[i * cols + j];
    }
  }
  for (double &x : n)
    x *= std::sqrt(normO) / std::sqrt(normN);
  return n;
}

} // namespace

TEST(NorMuon, OneRankMatchesAReferenceFromThePaper) {
  // Muon and NorMuon on the same gradients (no weight decay): their
  // momentum and Newton-Schulz outputs O agree, so Muon's step says what O
  // was (-delta / adjusted lr), and NorMuon's step must be the reference's
  // normalization of it, step after step (the EMA carried).
  Model plain = normuonModel(false), nor = normuonModel(true);
  plain.muon.setNumber("weight_decay", 0);
  nor.muon.setNumber("weight_decay", 0);
  Plan planPlain = compileFor(plain, 1), planNor = compileFor(nor, 1);
  ASSERT_TRUE(planNor.groups[0].flag("normuon"));
  OneRank a(planPlain), b(planNor);
  ASSERT_TRUE(a.opt && b.opt);
  const muon::PlanGroup &settings = planNor.groups[0];
  // The reference's state per matrix.
  std::map<int64_t, std::vector<double>> v;
  for (int64_t step = 0; step < 3; ++step) {
    for (size_t i = 0; i < planNor.params.size(); ++i) {
      std::vector<float> g =
          randomValues(static_cast<int64_t>(a.grads[i].size()),
                                1000 * (step + 1) + i);
      a.grads[i] = g;
      b.grads[i] = g;
    }
    std::vector<std::vector<float>> beforeA = a.values, beforeB = b.values;
    StepResult result;
    ASSERT_TRUE(a.opt->step(result).ok());
    ASSERT_TRUE(b.opt->step(result).ok());
    double worst = 0;
    for (size_t k = 0; k < planNor.matrices.size(); ++k) {
      const PlanMatrix &m = planNor.matrices[k];
      const double alr = adjustedLr(settings, m.rows, m.cols);
      const int64_t size = m.rows * m.cols,
                    at = std::max<int64_t>(m.slice, 0) * size;
      std::vector<double> o(size);
      for (int64_t e = 0; e < size; ++e)
        o[e] = -(static_cast<double>(a.values[m.paramIndex][at + e]) -
                 beforeA[m.paramIndex][at + e]) /
               alr;
      v[k].resize(m.rows, 0.0);
      std::vector<double> n = referenceNormuon(o, m.rows, m.cols, 0.9, v[k]);
      double largest = 0, diff = 0, muonDiff = 0;
      for (int64_t e = 0; e < size; ++e) {
        double got = -(static_cast<double>(b.values[m.paramIndex][at + e]) -
                       beforeB[m.paramIndex][at + e]) /
                     alr;
        largest = std::max(largest, std::abs(n[e]));
        diff = std::max(diff, std::abs(got - n[e]));
        muonDiff = std::max(muonDiff, std::abs(o[e] - n[e]));
      }
      // Within f32 rounding of the recovered updates; and NorMuon is not
      // Muon (the rows are renormalized; least so for a wide matrix, whose
      // orthogonalized rows have nearly equal norms already).
      EXPECT_LT(diff, 1e-4 * largest) << m.label() << " step " << step;
      EXPECT_GT(muonDiff, 10 * diff) << m.label() << " step " << step;
      if (::testing::Test::HasFailure() || getenv("NORMUON_VERBOSE"))
        std::printf("%s step %lld: reference diff %.3g, Muon diff %.3g, "
                    "largest %.3g\n",
                    m.label().c_str(), static_cast<long long>(step), diff,
                    muonDiff, largest);
      worst = std::max(worst, diff / largest);
    }
    EXPECT_LT(worst, 1e-4);
  }
  // The optimizer's own state is the reference's EMA, in f32.
  StateDict dict;
  ASSERT_TRUE(b.opt->stateDict(false, dict).ok());
  ASSERT_EQ(dict.rowStates.size(), planNor.matrices.size());
  for (size_t k = 0; k < planNor.matrices.size(); ++k) {
    const RowStatePiece &row = dict.rowStates[k];
    EXPECT_EQ(row.param, planNor.matrices[k].param);
    ASSERT_EQ(row.values.size(), v[k].size());
    for (size_t i = 0; i < row.values.size(); ++i)
      EXPECT_NEAR(row.values[i], v[k][i], 2e-3 * v[k][i]) << k << " " << i;
  }
}

TEST(NorMuon, FourAndTwoRanksEqualOneBitForBit) {
  Model model = normuonModel(true);
  for (int64_t world : {2, 4}) {
    Plan plan = compileFor(model, world);
    RunResult r = run(plan, {"", nullptr, 0, 3, ""});
    expectNoErrors(r, "distributed");
    cpu::CpuDevice device;
    std::vector<std::vector<float>> reference, muon;
    std::string error;
    ASSERT_OK_AND_ASSIGN(reference, runReference(plan, device, 31, 3, 1, {}));
    EXPECT_EQ(r.whole, reference) << world << " ranks";
    // Zero redundancy: each matrix's rows are kept once, by its owner.
    std::map<std::pair<std::string, int64_t>, int> kept;
    for (int64_t rank = 0; rank < world; ++rank)
      for (const RowStatePiece &row : r.dicts[rank].rowStates) {
        ++kept[{row.param, row.slice}];
        bool owner = false;
        for (const PlanMatrix &m : plan.matrices)
          if (m.param == row.param && std::max<int64_t>(m.slice, 0) ==
                                          row.slice)
            owner = m.owner == rank;
        EXPECT_TRUE(owner) << row.param << "[" << row.slice << "] on rank "
                           << rank;
      }
    EXPECT_EQ(kept.size(), plan.matrices.size());
    for (const auto &[matrix, count] : kept)
      EXPECT_EQ(count, 1) << matrix.first << "[" << matrix.second << "]";
    // And the reference differs from Muon's: NorMuon ran.
    Plan muonPlan = compileFor(normuonModel(false), world);
    ASSERT_OK_AND_ASSIGN(muon, runReference(muonPlan, device, 31, 3, 1, {}));
    EXPECT_NE(muon[0], reference[0]);
  }
}

TEST(NorMuon, StateSurvivesACheckpointAndAReshardFromFourRanksToTwo) {
  Model model = normuonModel(true);
  Plan plan4 = compileFor(model, 4), plan2 = compileFor(model, 2);
  std::string dir = scratchDir("normuon");
  RunResult four = run(plan4, {"", nullptr, 0, 2, dir});
  RunResult straight = run(plan2, {"", nullptr, 0, 4, ""});
  expectNoErrors(four, "4 ranks");
  expectNoErrors(straight, "2 ranks, uninterrupted");
  if (HasFailure())
    return;
  // A reshard: some matrix changes owner.
  int64_t moved = 0;
  for (size_t k = 0; k < plan4.matrices.size(); ++k)
    for (const PlanMatrix &m : plan2.matrices)
      if (m.param == plan4.matrices[k].param &&
          m.slice == plan4.matrices[k].slice && m.owner != plan4.matrices[k].owner)
        ++moved;
  EXPECT_GT(moved, 0);
  // The manifest indexes the row states by parameter and slice.
  std::ifstream in(dir + "/checkpoint.json");
  nlohmann::json manifest = nlohmann::json::parse(in);
  int64_t indexed = 0;
  for (const auto &file : manifest["files"])
    if (file.contains("row_states"))
      for (const auto &row : file["row_states"]) {
        EXPECT_EQ(row["state"], "normuon_v");
        ++indexed;
      }
  EXPECT_EQ(indexed, static_cast<int64_t>(plan4.matrices.size()));
  EXPECT_EQ(manifest["groups"][0]["normuon"], true);
  EXPECT_EQ(manifest["groups"][0]["normuon_beta2"], 0.9);

  // Resumed on 2 ranks from the files and from the 4 ranks' state dicts:
  // both equal the uninterrupted 2-rank run bit for bit.
  StateDict all;
  all.steps = four.dicts[0].steps;
  all.groups = four.dicts[0].groups;
  for (const StateDict &d : four.dicts) {
    all.pieces.insert(all.pieces.end(), d.pieces.begin(), d.pieces.end());
    all.rowStates.insert(all.rowStates.end(), d.rowStates.begin(),
                         d.rowStates.end());
  }
  RunResult fromFiles = run(plan2, {dir, nullptr, 2, 4, ""});
  RunResult fromDicts = run(plan2, {"", &all, 2, 4, ""});
  expectNoErrors(fromFiles, "2 ranks from the files");
  expectNoErrors(fromDicts, "2 ranks from the state dicts");
  if (HasFailure())
    return;
  EXPECT_EQ(fromFiles.whole, straight.whole);
  EXPECT_EQ(fromDicts.whole, straight.whole);
  EXPECT_TRUE(sameDicts(fromFiles.dicts, straight.dicts));
  // The new owners took the saved rows.
  std::map<std::pair<std::string, int64_t>, std::vector<float>> saved, loaded;
  for (const StateDict &d : four.dicts)
    for (const RowStatePiece &row : d.rowStates)
      saved[{row.param, row.slice}] = row.values;
  for (const StateDict &d : fromFiles.loaded)
    for (const RowStatePiece &row : d.rowStates)
      loaded[{row.param, row.slice}] = row.values;
  EXPECT_EQ(loaded, saved);

  // Without the row states the continued run is another one (the state
  // matters), and a dict whose groups say NorMuon must carry them.
  StateDict noRows = all;
  noRows.rowStates.clear();
  noRows.groups.clear();
  RunResult fresh = run(plan2, {"", &noRows, 2, 4, ""});
  expectNoErrors(fresh, "2 ranks without row states");
  EXPECT_NE(fresh.whole[0], straight.whole[0]);
  StateDict missing = all;
  missing.rowStates.pop_back();
  StateDict shortRows = all;
  shortRows.rowStates[0].values.pop_back();
  StateDict badName = all;
  badName.rowStates[0].state = "normuon_w";
  std::vector<std::string> errors(6);
  onEveryRank(2, [&](int64_t r, Communicator &comm) {
    cpu::CpuDevice device;
    std::unique_ptr<Optimizer> opt;
    ASSERT_TRUE(Optimizer::create(plan2, comm, device, {60.0}, opt).ok());
    errors[3 * r] = opt->loadStateDict(missing, false).message();
    errors[3 * r + 1] = opt->loadStateDict(shortRows, false).message();
    errors[3 * r + 2] = opt->loadStateDict(badName, false).message();
  });
  const RowStatePiece &last = all.rowStates.back();
  bool someoneMissed = false;
  for (int64_t r = 0; r < 2; ++r)
    someoneMissed |= errors[3 * r].find("no normuon_v state for matrix " +
                                        last.param) != std::string::npos;
  EXPECT_TRUE(someoneMissed) << errors[0] << " | " << errors[3];
  for (int64_t r = 0; r < 2; ++r) {
    EXPECT_NE(errors[3 * r + 1].find(
                  "row state 0 ('" + all.rowStates[0].param + "' slice " +
                  std::to_string(all.rowStates[0].slice) + "): " +
                  std::to_string(all.rowStates[0].values.size() - 1) +
                  " values; the matrix has " +
                  std::to_string(all.rowStates[0].values.size()) + " rows"),
              std::string::npos)
        << errors[3 * r + 1];
    EXPECT_NE(errors[3 * r + 2].find(
                  "unknown state 'normuon_w' (expected normuon_v)"),
              std::string::npos)
        << errors[3 * r + 2];
  }
  removeTree(dir);
}

TEST(NorMuon, PerHeadStateSurvivesAReshardFromFourRanksToTwo) {
  // Per-head Newton-Schulz under NorMuon: each head's block is a matrix
  // with its own rows of state (heads of rows and of columns, a stack of
  // heads); a 4-rank checkpoint resumed on 2 ranks equals the uninterrupted
  // 2-rank run bit for bit, and every head's rows are in the files.
  Model model = normuonModel(true);
  model.params[0].numHeads = 4; // wide: 4 heads of 6 rows
  model.params[1].numHeads = 2; // tall: 2 heads of 10 columns
  model.params[1].headSplitDim = 1;
  model.params[2].numHeads = 2; // stack: 2 heads of 10 rows per slice
  Plan plan4 = compileFor(model, 4), plan2 = compileFor(model, 2);
  ASSERT_EQ(plan4.matrices.size(), 4u + 2u + 6u + 1u);
  std::string dir = scratchDir("normuon-heads");
  RunResult four = run(plan4, {"", nullptr, 0, 2, dir});
  RunResult straight = run(plan2, {"", nullptr, 0, 4, ""});
  RunResult fromFiles = run(plan2, {dir, nullptr, 2, 4, ""});
  expectNoErrors(four, "4 ranks");
  expectNoErrors(straight, "2 ranks, uninterrupted");
  expectNoErrors(fromFiles, "2 ranks from the files");
  if (HasFailure())
    return;
  EXPECT_EQ(fromFiles.whole, straight.whole);
  std::map<std::pair<std::string, int64_t>, size_t> rows;
  for (const StateDict &d : four.dicts)
    for (const RowStatePiece &row : d.rowStates)
      rows[{row.param, row.slice}] = row.values.size();
  EXPECT_EQ(rows.size(), plan4.matrices.size());
  EXPECT_EQ((rows[{"wide", 3}]), 6u);
  EXPECT_EQ((rows[{"tall", 1}]), 44u);
  EXPECT_EQ((rows[{"stack", 5}]), 10u);
}

TEST(NorMuon, GroupOptionsChangeBeta2ButNotTheChoice) {
  Plan plan = compileFor(normuonModel(true), 1);
  OneRank one(plan);
  ASSERT_TRUE(one.opt);
  muon::PlanGroup s = one.opt->groups()[0];
  s.setFlag("normuon", false);
  Status status = one.opt->setGroupSettings("muon", s);
  EXPECT_EQ(status.message(),
            "group 'muon' is NorMuon in the plan; normuon cannot change "
            "between steps (it decides which matrices keep per-row state: "
            "compile the plan with it)");
  s.setFlag("normuon", true);
  s.setNumber("normuon_beta2", 1.0);
  status = one.opt->setGroupSettings("muon", s);
  EXPECT_NE(status.message().find("normuon_beta2: expected a number in [0, "
                                  "1), got 1"),
            std::string::npos)
      << status.message();
  s.setNumber("normuon_beta2", 0.5);
  EXPECT_TRUE(one.opt->setGroupSettings("muon", s).ok());
  EXPECT_EQ(one.opt->groups()[0].number("normuon_beta2"), 0.5);
  EXPECT_TRUE(one.opt->groups()[0].flag("normuon"));
}

TEST(NorMuon, ADamagedRowStateIsRefused) {
  Model model = normuonModel(true);
  Plan plan4 = compileFor(model, 4), plan2 = compileFor(model, 2);
  std::string dir = scratchDir("normuon-damage");
  RunResult four = run(plan4, {"", nullptr, 0, 1, dir});
  expectNoErrors(four, "4 ranks");
  if (HasFailure())
    return;
  std::ifstream in(dir + "/checkpoint.json");
  nlohmann::json manifest = nlohmann::json::parse(in);
  std::string file, what;
  int64_t offset = -1;
  for (const auto &f : manifest["files"])
    if (f.contains("row_states") && offset < 0) {
      file = dir + "/" + f["name"].get<std::string>();
      offset = f["row_states"][0]["offset"].get<int64_t>();
      what = f["row_states"][0]["param"].get<std::string>();
    }
  ASSERT_GE(offset, 0);
  {
    std::fstream io(file, std::ios::in | std::ios::out | std::ios::binary);
    io.seekg(offset);
    char byte = 0;
    io.read(&byte, 1);
    byte ^= 0x40;
    io.seekp(offset);
    io.write(&byte, 1);
  }
  RunResult two = run(plan2, {dir, nullptr, 1, 2, ""});
  for (const std::string &error : two.errors) {
    EXPECT_NE(error.find("is damaged: the normuon_v state of " + what),
              std::string::npos)
        << error;
    EXPECT_NE(error.find("nothing was changed"), std::string::npos) << error;
  }
  removeTree(dir);
}
