//===- CheckpointIntegrityTest.cpp - Damaged state is refused ------------===//
//===//
//
// Every way a checkpoint or a state dict can be damaged, edited, mixed with
// another or replaced by something that is not a file is refused on 1 and
// on 4 ranks (threads, LocalCommunicator), with a message that names the
// place, and the state every rank had before is untouched (its state dict
// with values, its step count and its groups' settings, bit for bit):
//  - a flipped bit in each kind of manifest field (strings, hex hashes,
//    integers, numbers, booleans, keys, structure, whitespace, the hash
//    line itself), and every single-bit flip of a whole manifest;
//  - entries swapped in the manifest, its hash made to match (as an editor
//    would): the chunk hashes are keyed by what each state is;
//  - files of two checkpoints mixed;
//  - a FIFO, a directory, /dev/zero or an oversized file in place of the
//    manifest or a rank file;
//  - well-formed state that no run makes: a negative second moment (AdamW's
//    exp_avg_sq, NorMuon's normuon_v), a NaN momentum, step counts that
//    disagree, through checkpoints (written with the format's own encoder)
//    and through state dicts.
//
//===----------------------------------------------------------------------===//
#include "CheckpointTestSupport.h"
#include "OneRankOptimizer.h"
#include "StatusTesting.h"

#include "muon/Plan/GroupSettings.h"
#include "muon/Runtime/CheckpointFormat.h"
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/Testing/Synthetic.h"
#include "muon/Support/Limits.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <sys/stat.h>
#include <unistd.h>

using namespace muon;
using namespace muon::compiler;
using namespace muon::runtime;
using muon::testing::addParam;
using muon::testing::compileFor;
using muon::testing::onEveryRank;
using muon::testing::readBytes;
using muon::testing::sameDicts;
using muon::testing::scratchDir;
using muon::testing::writeBytes;

namespace {

/// Two Muon matrices of one shape (so that their states can trade places
/// byte for byte), an AdamW matrix with both moments and an AdamW vector,
/// every one split by rows over the ranks.
Model integrityModel(bool normuon = false) {
  Model model;
  addParam(model, "w1", {8, 6}, {Placement::shard(0)});
  addParam(model, "w2", {8, 6}, {Placement::shard(0)});
  // With NorMuon, a matrix for each of 4 ranks to own (and keep rows for).
  if (normuon) {
    addParam(model, "w3", {8, 6}, {Placement::shard(0)});
    addParam(model, "w4", {8, 6}, {Placement::shard(0)});
  }
  addParam(model, "head", {8, 5}, {Placement::shard(0)}, "adamw");
  addParam(model, "bias", {12}, {Placement::shard(0)}, "adamw");
  model.muon.setNumber("lr", 0.02);
  model.muon.setFlag("normuon", normuon);
  return model;
}

constexpr uint64_t kSeed = 7;

/// A plan's state after `steps` steps of the synthetic model: every rank's
/// state dict (with values), concatenated, and a checkpoint of it in `dir`.
struct Saved {
  std::string dir;
  StateDict all;
  std::vector<StateDict> ranks;
};

Saved saveAfter(const Plan &plan, int64_t steps, const std::string &dir) {
  Saved saved{dir, {}, std::vector<StateDict>(plan.worldSize)};
  onEveryRank(plan.worldSize, [&](int64_t r, Communicator &comm) {
    cpu::CpuDevice device;
    std::unique_ptr<Optimizer> opt;
    Status s = Optimizer::create(plan, comm, device, {30.0}, opt);
    ASSERT_TRUE(opt) << s.message();
    SyntheticModel model(*opt, device, kSeed, summandCounts(plan));
    for (int64_t k = 0; k < steps; ++k) {
      model.makeGradients(k, 1, {});
      StepResult result;
      ASSERT_TRUE(opt->step(result).ok());
    }
    if (!dir.empty()) {
      EXPECT_TRUE((s = opt->saveCheckpoint(dir, true)).ok()) << s.message();
    }
    EXPECT_TRUE(opt->stateDict(true, saved.ranks[r]).ok());
  });
  saved.all.steps = steps;
  saved.all.groups = saved.ranks[0].groups;
  for (const StateDict &d : saved.ranks) {
    saved.all.pieces.insert(saved.all.pieces.end(), d.pieces.begin(),
                            d.pieces.end());
    saved.all.rowStates.insert(saved.all.rowStates.end(), d.rowStates.begin(),
                               d.rowStates.end());
  }
  return saved;
}

/// Every setting of every group, as numbers (names as their hash).
std::vector<double> settingsOf(const std::vector<PlanGroup> &groups) {
  std::vector<double> out;
  for (const PlanGroup &g : groups)
    for (const GroupSetting &s : groupSettings())
      if (s.algorithm == g.algorithm)
        out.push_back(s.kind == GroupSetting::Kind::Name
                          ? static_cast<double>(
                                std::hash<std::string>()(settingName(s, g)))
                          : settingValue(s, g));
  return out;
}

using Load = std::function<Status(Optimizer &)>;

/// On every rank of `plan`: an optimizer one step in (another state than
/// any saved one), then `load`, which must fail with `expected` in the
/// message (and, for a checkpoint, "nothing was changed"), leaving the
/// state, the step count and the groups' settings as they were.
void expectRefused(const Plan &plan, const std::string &label,
                   const std::string &expected, const Load &load,
                   bool collective) {
  const int64_t world = plan.worldSize;
  std::vector<std::string> errors(world);
  onEveryRank(world, [&](int64_t r, Communicator &comm) {
    cpu::CpuDevice device;
    std::unique_ptr<Optimizer> opt;
    Status s = Optimizer::create(plan, comm, device, {30.0}, opt);
    ASSERT_TRUE(opt) << s.message();
    SyntheticModel model(*opt, device, kSeed + 1, summandCounts(plan));
    model.makeGradients(0, 1, {});
    StepResult result;
    ASSERT_TRUE(opt->step(result).ok());
    StateDict before, after;
    ASSERT_TRUE(opt->stateDict(true, before).ok());
    const std::vector<double> settings = settingsOf(opt->groups());
    Status status = load(*opt);
    errors[r] = status.message();
    EXPECT_FALSE(status.ok()) << label << ", rank " << r << ": accepted";
    ASSERT_TRUE(opt->stateDict(true, after).ok());
    EXPECT_TRUE(sameDicts({before}, {after}))
        << label << ", rank " << r << ": the state changed";
    EXPECT_EQ(opt->stepsTaken(), 1) << label << ", rank " << r;
    EXPECT_EQ(settingsOf(opt->groups()), settings) << label << ", rank " << r;
  });
  for (int64_t r = 0; r < world; ++r) {
    EXPECT_NE(errors[r].find(expected), std::string::npos)
        << label << " on " << world << " rank(s), rank " << r << ": expected '"
        << expected << "' in '" << errors[r] << "'";
    if (collective) {
      EXPECT_NE(errors[r].find("; nothing was changed"), std::string::npos)
          << label << ", rank " << r << ": " << errors[r];
    }
  }
}

void expectCheckpointRefused(const Plan &plan, const std::string &label,
                             const std::string &dir,
                             const std::string &expected) {
  expectRefused(
      plan, label, expected,
      [&](Optimizer &opt) { return opt.loadCheckpoint(dir, true); }, true);
}

void expectDictRefused(const Plan &plan, const std::string &label,
                       const StateDict &dict, const std::string &expected) {
  expectRefused(
      plan, label, expected,
      [&](Optimizer &opt) { return opt.loadStateDict(dict, true); }, false);
}

/// A fresh copy of the checkpoint in `from`.
std::string copyOf(const std::string &from, const std::string &name) {
  std::string to = scratchDir(name);
  EXPECT_EQ(std::system(("cp -r '" + from + "' '" + to + "'").c_str()), 0);
  return to;
}

std::string rankFile(const std::string &dir, int64_t rank) {
  std::string manifest = readBytes(dir + "/checkpoint.json");
  std::string suffix = "-rank-" + std::to_string(rank) + ".bin";
  size_t at = manifest.find(suffix);
  size_t start = manifest.rfind("state-", at);
  return dir + "/" + manifest.substr(start, at + suffix.size() - start);
}

/// The offset of the `nth` (from 0) occurrence of `needle` in `text`, at or
/// after `from`, plus `delta`; fails the test when there is none.
size_t offsetOf(const std::string &text, const std::string &needle,
                size_t delta, size_t from = 0) {
  size_t at = text.find(needle, from);
  EXPECT_NE(at, std::string::npos) << "no '" << needle << "'";
  return at == std::string::npos ? 0 : at + delta;
}

/// The worlds every case runs on.
constexpr int64_t kWorlds[] = {1, 4};

class CheckpointIntegrity : public ::testing::Test {
protected:
  /// For each world: the plan and a checkpoint after two steps.
  struct World {
    Plan plan;
    Saved saved;
  };
  std::vector<World> worlds;

  void SetUp() override {
    for (int64_t world : kWorlds) {
      Plan plan = compileFor(integrityModel(), world);
      Saved saved =
          saveAfter(plan, 2, scratchDir("integrity-" + std::to_string(world)));
      worlds.push_back({std::move(plan), std::move(saved)});
    }
  }
  void TearDown() override {
    for (const World &w : worlds)
      removeTree(w.saved.dir);
  }

  /// Damages a copy of each world's checkpoint with `damage(dir, world)`
  /// and expects every rank to refuse it with `expected`.
  void expectDamageRefused(
      const std::string &label, const std::string &expected,
      const std::function<void(const std::string &, const World &)> &damage) {
    for (const World &w : worlds) {
      std::string dir = copyOf(w.saved.dir, "damaged");
      damage(dir, w);
      expectCheckpointRefused(w.plan, label, dir, expected);
      removeTree(dir);
    }
  }
};

void flipBit(const std::string &path, size_t offset, int bit) {
  std::string bytes = readBytes(path);
  ASSERT_LT(offset, bytes.size());
  bytes[offset] = static_cast<char>(bytes[offset] ^ (1 << bit));
  writeBytes(path, bytes);
}

TEST_F(CheckpointIntegrity, AFlippedBitInAnyKindOfManifestFieldIsRefused) {
  // (what, where in the manifest's text, which bit).
  struct Flip {
    const char *what;
    std::function<size_t(const std::string &)> at;
    int bit;
  };
  auto inHead = [](const char *needle, size_t delta) {
    return [=](const std::string &t) {
      return offsetOf(t, needle, delta, t.find("{\"param\":\"head\""));
    };
  };
  auto after = [](const char *needle) {
    return [=](const std::string &t) {
      return offsetOf(t, needle, std::string(needle).size());
    };
  };
  const std::vector<Flip> flips = {
      {"the format (a string)", after("\"muon-checkpoint/"), 0},
      {"the checkpoint id (hex)", after("\"checkpoint_id\": \""), 0},
      {"the step count (an integer)", after("\"steps\": "), 0},
      {"whether values were saved (a boolean)", after("\"parameters\": "), 5},
      {"a group's weight decay (a number)",
       [](const std::string &t) {
         size_t at = offsetOf(t, "\"weight_decay\":", 15,
                              t.find("\"algorithm\":\"adamw\""));
         return t.find_first_of(",}", at) - 1; // its last digit
       },
       0},
      {"a group's name", after("{\"name\":\"adamw"), 1},
      {"a piece's parameter", inHead("\"head\"", 2), 2},
      {"a piece's box", inHead("\"box\":[[", 8), 0},
      {"a piece's AdamW step", inHead("\"step\":", 7), 0},
      {"a state's offset", inHead("\"offset\":", 9), 1},
      {"a state's chunk-table hash", inHead("\"hash\":\"", 8), 0},
      {"a rank file's name", after("\"name\":\"state-"), 0},
      {"a key", after("\"summan"), 1},
      {"the structure ('[' to '{')",
       [](const std::string &t) { return offsetOf(t, "\"files\": [", 9); }, 5},
      {"whitespace (a newline)", [](const std::string &) { return 1; }, 0},
      {"the manifest_hash value", after("\"manifest_hash\": \""), 0},
      {"the manifest_hash key", after("\"manifest"), 0},
      {"the closing brace", [](const std::string &t) { return t.size() - 2; },
       0},
  };
  for (const Flip &flip : flips)
    expectDamageRefused(std::string("a flipped bit in ") + flip.what,
                        "checkpoint.json",
                        [&](const std::string &dir, const World &) {
                          std::string path = dir + "/checkpoint.json";
                          flipBit(path, flip.at(readBytes(path)), flip.bit);
                        });
}

// Not only the field kinds above: every single-bit flip anywhere in a
// manifest is refused by the reader, and at its first check (the hash).
TEST_F(CheckpointIntegrity, EverySingleBitFlipOfAManifestIsRefused) {
  const World &w = worlds.back();
  const std::string manifest = readBytes(w.saved.dir + "/checkpoint.json");
  ASSERT_OK(checkpoint::decodeManifest(manifest, "m", w.plan));
  std::string resealed = manifest;
  checkpoint::resealManifest(resealed);
  EXPECT_EQ(resealed, manifest);
  int64_t accepted = 0, byHash = 0;
  for (size_t at = 0; at < manifest.size(); ++at)
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = manifest;
      damaged[at] = static_cast<char>(damaged[at] ^ (1 << bit));
      StatusOr<checkpoint::Manifest> decoded =
          checkpoint::decodeManifest(damaged, "m", w.plan);
      if (decoded.ok())
        ++accepted;
      byHash += decoded.status().message().find("manifest_hash") !=
                std::string::npos;
    }
  EXPECT_EQ(accepted, 0);
  EXPECT_EQ(byHash, static_cast<int64_t>(manifest.size()) * 8);
}

/// Swaps, in the manifest's text, the place of state `slotA` of the first
/// piece of `paramA` with that of `slotB` of the first piece of `paramB`
/// (both in rank file 0's index), then makes the manifest's hash match.
void swapStates(const std::string &dir, const std::string &paramA,
                const std::string &slotA, const std::string &paramB,
                const std::string &slotB) {
  std::string path = dir + "/checkpoint.json";
  std::string text = readBytes(path);
  auto refAt = [&](const std::string &param, const std::string &slot) {
    size_t piece = offsetOf(text, "{\"param\":\"" + param + "\"", 0);
    size_t begin = offsetOf(text, "\"" + slot + "\":{", slot.size() + 3, piece);
    return std::make_pair(begin, text.find('}', begin) + 1);
  };
  auto [a0, a1] = refAt(paramA, slotA);
  auto [b0, b1] = refAt(paramB, slotB);
  ASSERT_TRUE(a1 <= b0 || b1 <= a0);
  if (a0 > b0) {
    std::swap(a0, b0);
    std::swap(a1, b1);
  }
  text = text.substr(0, a0) + text.substr(b0, b1 - b0) +
         text.substr(a1, b0 - a1) + text.substr(a0, a1 - a0) + text.substr(b1);
  checkpoint::resealManifest(text);
  writeBytes(path, text);
}

TEST_F(CheckpointIntegrity, SwappedEntriesAreRefusedUnderAMatchingHash) {
  expectDamageRefused(
      "exp_avg and exp_avg_sq of 'head' swapped",
      "state of 'head' [0:", [](const std::string &dir, const World &) {
        swapStates(dir, "head", "exp_avg", "head", "exp_avg_sq");
      });
  expectDamageRefused("the momentum of 'w1' and 'w2' swapped",
                      "does not match its checksum",
                      [](const std::string &dir, const World &) {
                        swapStates(dir, "w1", "momentum", "w2", "momentum");
                      });
  expectDamageRefused("the values of 'w1' and 'w2' swapped",
                      "values state of 'w",
                      [](const std::string &dir, const World &) {
                        swapStates(dir, "w1", "values", "w2", "values");
                      });
  // Fields whose change moves no data: the keyed hashes (and the rank
  // files' headers) still tell.
  for (const World &w : worlds) {
    std::string dir = copyOf(w.saved.dir, "step");
    std::string path = dir + "/checkpoint.json", text = readBytes(path);
    size_t at =
        offsetOf(text, "\"step\":2", 7, text.find("\"param\":\"head\""));
    text[at] = '1';
    checkpoint::resealManifest(text);
    writeBytes(path, text);
    // One piece: its chunks are keyed with step 2. Several: they disagree.
    expectCheckpointRefused(w.plan, "a piece's step changed", dir,
                            w.plan.worldSize == 1
                                ? "state of 'head' [0:8, 0:5] does not match"
                                : "the pieces of 'head' disagree on its step");
    text = readBytes(w.saved.dir + "/checkpoint.json");
    text.replace(offsetOf(text, "\"steps\": 2", 9), 1, "3");
    checkpoint::resealManifest(text);
    writeBytes(path, text);
    expectCheckpointRefused(w.plan, "the step count changed", dir,
                            "differ from the manifest's");
    removeTree(dir);
  }
}

TEST_F(CheckpointIntegrity, FilesOfTwoCheckpointsAreNotMixed) {
  for (const World &w : worlds) {
    // Another save of the same plan and layout: the same file sizes and
    // offsets, other bytes and another id.
    Saved other = saveAfter(w.plan, 3, scratchDir("other"));
    const std::string mine = rankFile(w.saved.dir, 0),
                      theirs = rankFile(other.dir, 0);
    const std::string theirBytes = readBytes(theirs);
    ASSERT_EQ(readBytes(mine).size(), theirBytes.size());
    // Their rank file under this checkpoint's name.
    std::string dir = copyOf(w.saved.dir, "mixed");
    writeBytes(rankFile(dir, 0), theirBytes);
    expectCheckpointRefused(w.plan, "another checkpoint's rank file", dir,
                            "is not rank 0's file of checkpoint");
    // Their data behind this checkpoint's header: the chunk hashes are
    // keyed with the checkpoint id.
    std::string spliced = readBytes(mine);
    uint64_t headerBytes = 0;
    std::memcpy(&headerBytes, spliced.data() + 12, 8);
    const size_t head = (20 + headerBytes + 8 + 63) / 64 * 64;
    spliced.replace(head, std::string::npos, theirBytes.substr(head));
    writeBytes(rankFile(dir, 0), spliced);
    expectCheckpointRefused(w.plan, "another checkpoint's data", dir,
                            "does not match its checksum");
    // Their manifest over these files.
    removeTree(dir);
    dir = copyOf(w.saved.dir, "mixed");
    writeBytes(dir + "/checkpoint.json",
               readBytes(other.dir + "/checkpoint.json"));
    expectCheckpointRefused(w.plan, "another checkpoint's manifest", dir,
                            "is missing");
    removeTree(dir);
    removeTree(other.dir);
  }
}

/// Replaces `path` with something that is not a regular file.
void replaceWith(const std::string &path, const std::string &kind) {
  ASSERT_EQ(::unlink(path.c_str()), 0) << path;
  if (kind == "fifo")
    ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  else if (kind == "directory")
    ASSERT_EQ(::mkdir(path.c_str(), 0700), 0);
  else if (kind == "/dev/zero")
    ASSERT_EQ(::symlink("/dev/zero", path.c_str()), 0);
  else if (kind == "oversized") { // a sparse file just past the limit
    writeBytes(path, "");
    ASSERT_EQ(::truncate(path.c_str(), limits::kMaxTextFileBytes + 1), 0);
  }
}

TEST_F(CheckpointIntegrity, OnlyRegularFilesAreRead) {
  const std::vector<std::pair<std::string, std::string>> kinds = {
      {"fifo", "it is a FIFO (named pipe), not a regular file"},
      {"directory", "it is a directory, not a regular file"},
      {"/dev/zero", "it is a character device, not a regular file"}};
  for (const auto &[kind, expected] : kinds) {
    expectDamageRefused("the manifest replaced by a " + kind,
                        "checkpoint.json': " + expected,
                        [&](const std::string &dir, const World &) {
                          replaceWith(dir + "/checkpoint.json", kind);
                        });
    expectDamageRefused("rank 0's file replaced by a " + kind,
                        "-rank-0.bin': " + expected,
                        [&](const std::string &dir, const World &) {
                          replaceWith(rankFile(dir, 0), kind);
                        });
  }
  expectDamageRefused("a manifest past the size limit",
                      "checkpoint.json': it is larger than the limit of 2^30",
                      [&](const std::string &dir, const World &) {
                        replaceWith(dir + "/checkpoint.json", "oversized");
                      });
}

/// `saved` with `edit(piece)` applied to every piece of parameter `param`.
StateDict edited(const StateDict &saved, const std::string &param,
                 const std::function<void(StatePiece &)> &edit) {
  StateDict out = saved;
  for (StatePiece &piece : out.pieces)
    if (piece.param == param)
      edit(piece);
  return out;
}

/// A checkpoint of `ranks` (one state dict per rank) written with the
/// format's own encoder: well-formed, every hash matching.
void writeCheckpoint(const Plan &plan, const std::vector<StateDict> &ranks,
                     int64_t steps, const std::string &dir) {
  ASSERT_EQ(::mkdir(dir.c_str(), 0700), 0);
  checkpoint::CheckpointHead head{"0123456789abcdef", steps, true};
  std::vector<std::string> indexes;
  for (size_t r = 0; r < ranks.size(); ++r) {
    checkpoint::RankFile file = checkpoint::encodeRankFile(
        plan, head, static_cast<int64_t>(r), ranks[r]);
    writeBytes(dir + "/" + checkpoint::rankFileName(head.id, r),
               file.toBytes());
    indexes.push_back(file.index);
  }
  writeBytes(dir + "/checkpoint.json",
             checkpoint::encodeManifest(plan, head, ranks[0].groups, indexes));
}

TEST_F(CheckpointIntegrity, StateNoRunMakesIsRefused) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  struct Case {
    const char *what, *param;
    std::function<void(StatePiece &)> edit;
    const char *expected;
  };
  const std::vector<Case> cases = {
      {"a negative exp_avg_sq", "head",
       [](StatePiece &p) { p.states.at("exp_avg_sq")[1] = -0.25f; },
       "the exp_avg_sq state of 'head' at ["},
      {"a NaN momentum", "w1",
       [&](StatePiece &p) { p.states.at("momentum")[2] = nan; },
       "the momentum state of 'w1' at ["},
      {"an infinite value", "bias",
       [](StatePiece &p) {
         p.states.at("values")[0] = std::numeric_limits<float>::infinity();
       },
       "the values state of 'bias' at ["},
  };
  for (const World &w : worlds)
    for (const Case &c : cases) {
      // In memory (each rank refuses its own load)...
      expectDictRefused(w.plan, std::string("a state dict with ") + c.what,
                        edited(w.saved.all, c.param, c.edit), c.expected);
      // ...and in a checkpoint whose every hash matches.
      std::vector<StateDict> ranks = w.saved.ranks;
      for (StateDict &d : ranks)
        d = edited(d, c.param, c.edit);
      std::string dir = scratchDir("forged");
      writeCheckpoint(w.plan, ranks, 2, dir);
      expectCheckpointRefused(
          w.plan, std::string("a checkpoint with ") + c.what, dir, c.expected);
      removeTree(dir);
    }
  // The messages say why.
  const World &one = worlds.front();
  expectDictRefused(one.plan, "a negative exp_avg_sq",
                    edited(one.saved.all, "head", cases[0].edit),
                    "is -0.25, below zero (a second moment never is)");
  expectDictRefused(one.plan, "a NaN momentum",
                    edited(one.saved.all, "w1", cases[1].edit),
                    "is nan (it must be finite)");
}

TEST_F(CheckpointIntegrity, StepCountsMustAgree) {
  for (const World &w : worlds) {
    StateDict ahead =
        edited(w.saved.all, "head", [](StatePiece &p) { p.step = 3; });
    expectDictRefused(w.plan, "an AdamW step past the optimizer's", ahead,
                      "of 'head' has step 3, outside [0, 2]");
    StateDict twice = w.saved.all;
    for (const StatePiece &p : w.saved.all.pieces)
      if (p.param == "head") {
        twice.pieces.push_back(p);
        twice.pieces.back().step = 1;
      }
    expectDictRefused(w.plan, "pieces of one parameter at two steps", twice,
                      "the pieces of 'head' disagree on its step count");
    StateDict negative = w.saved.all;
    negative.steps = -1;
    expectDictRefused(w.plan, "a negative step count", negative,
                      "the optimizer's step count is -1");
  }
}

// Each value read is checked as it is read; what the cut computes from
// them is checked too: momentum saved on 4 summands and loaded on 2 is
// their sum, which overflows here though every saved value is finite.
TEST(CheckpointIntegritySums, AnOverflowingSumOfSummandsIsRefused) {
  Model model;
  addParam(model, "p", {6, 10}, {Placement::partial()});
  addParam(model, "b", {10}, {Placement::shard(0)}, "adamw");
  Plan plan4 = compileFor(model, 4), plan2 = compileFor(model, 2);
  Saved saved = saveAfter(plan4, 2, "");
  std::vector<StateDict> ranks = saved.ranks;
  for (StateDict &d : ranks)
    d = edited(d, "p", [](StatePiece &piece) {
      EXPECT_EQ(piece.summands, 4);
      piece.states.at("momentum")[3] = 3e38f;
    });
  std::string dir = scratchDir("summed");
  writeCheckpoint(plan4, ranks, 2, dir);
  // On 4 ranks each summand loads as it is: accepted.
  onEveryRank(4, [&](int64_t, Communicator &comm) {
    cpu::CpuDevice device;
    std::unique_ptr<Optimizer> opt;
    ASSERT_TRUE(Optimizer::create(plan4, comm, device, {30.0}, opt).ok());
    SyntheticModel synthetic(*opt, device, kSeed, summandCounts(plan4));
    Status s = opt->loadCheckpoint(dir, true);
    EXPECT_TRUE(s.ok()) << s.message();
  });
  expectCheckpointRefused(plan2, "momentum summed past the largest float",
                          dir, "the momentum state of 'p' at [0, 3] is inf");
  removeTree(dir);
}

TEST(CheckpointIntegrityNorMuon, ANegativeRowStateIsRefused) {
  for (int64_t world : kWorlds) {
    Plan plan = compileFor(integrityModel(/*normuon=*/true), world);
    Saved saved = saveAfter(plan, 2, "");
    ASSERT_FALSE(saved.all.rowStates.empty());
    StateDict dict = saved.all;
    for (RowStatePiece &row : dict.rowStates)
      row.values[1] = -1.0f;
    expectDictRefused(plan, "a negative normuon_v", dict,
                      "the normuon_v state of 'w");
    std::vector<StateDict> ranks = saved.ranks;
    for (StateDict &d : ranks)
      for (RowStatePiece &row : d.rowStates)
        row.values[1] = -1.0f;
    std::string dir = scratchDir("normuon-forged");
    writeCheckpoint(plan, ranks, 2, dir);
    expectCheckpointRefused(plan, "a checkpoint with a negative normuon_v", dir,
                            "at row 1 is -1, below zero");
    removeTree(dir);
  }
}

} // namespace
