//===- PlanBinaryTest.cpp - The sliced binary plan file -------------------===//
//
// A rank's part equals the corresponding part of the whole plan; a rank
// reads only the header, the shared section, its index entry and its own
// section (so damage elsewhere does not stop it); the read limit holds;
// damaged or hostile files are refused with a message, never a crash.
//
//===----------------------------------------------------------------------===//
#include "PlanModel.h"

#include "PlanRead.h"
#include "muon/Plan/PlanBinary.h"
#include "muon/Plan/PlanFile.h"
#include "muon/Plan/Validate.h"
#include "muon/Planner/Schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <unistd.h>

using namespace muon;

namespace {
/// Slices compare through their JSON rendering (every field) and their
/// whole-plan matrix indices.
void expectSameSlice(const Plan &a, const Plan &b) {
  EXPECT_EQ(a.sliceRank, b.sliceRank);
  EXPECT_EQ(a.matrixIds, b.matrixIds);
  EXPECT_EQ(a.totalMatrices, b.totalMatrices);
  EXPECT_EQ(renderPlan(a), renderPlan(b));
}

uint64_t u64At(const std::string &bytes, size_t at) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[at + i]))
         << (8 * i);
  return v;
}

/// (offset, size) of rank r's section, from the index.
std::pair<uint64_t, uint64_t> sectionOf(const std::string &bytes, int64_t r) {
  uint64_t index = u64At(bytes, 64);
  return {u64At(bytes, index + 24 * r), u64At(bytes, index + 24 * r + 8)};
}

#define EXPECT_CONTAINS(haystack, needle)                                      \
  EXPECT_NE((haystack).find(needle), std::string::npos)                        \
      << "'" << (haystack) << "' lacks '" << (needle) << "'"
} // namespace

TEST(PlanBinary, WholeRoundTripsToTheSamePlan) {
  Plan plan = planModel();
  std::string bytes = renderPlanBinary(plan);
  ASSERT_TRUE(isPlanBinary(bytes));
  Plan back;
  std::string error;
  ASSERT_TRUE(take(parsePlanBinary(bytes), back, error)) << error;
  EXPECT_EQ(renderPlan(back), renderPlan(plan));
  EXPECT_EQ(renderPlanBinary(back), bytes);
  // And through JSON.
  Plan fromJson;
  ASSERT_TRUE(take(parsePlan(renderPlan(plan)), fromJson, error)) << error;
  EXPECT_EQ(renderPlanBinary(fromJson), bytes);
}

TEST(PlanBinary, NorMuonIsAFlagBitAndItsBeta2) {
  // NorMuon on group 0: flag bit 3 and beta2 after adjust_lr, nothing else
  // changes; a plan without it is unchanged (bit 3 clear, no beta2); bits
  // above 3 are refused.
  Plan off = planModel(), on = planModel();
  ASSERT_FALSE(off.groups[0].flag("normuon"));
  on.groups[0].setFlag("normuon", true);
  on.groups[0].setNumber("normuon_beta2", 0.9);
  std::string a = renderPlanBinary(off), b = renderPlanBinary(on);
  Plan back;
  std::string error;
  ASSERT_TRUE(take(parsePlanBinary(b), back, error)) << error;
  EXPECT_TRUE(back.groups[0].flag("normuon"));
  EXPECT_EQ(back.groups[0].number("normuon_beta2"), 0.9);
  EXPECT_EQ(renderPlan(back), renderPlan(on));
  EXPECT_EQ(b.size(), a.size() + 8);
  // The flags byte precedes adjust_lr ("original", length 8).
  const std::string adjust = std::string(1, '\x08') + "original";
  size_t atA = a.find(adjust), at = b.find(adjust);
  ASSERT_NE(at, std::string::npos);
  ASSERT_GT(at, 0u);
  --at;
  --atA;
  EXPECT_EQ(static_cast<uint8_t>(a[atA]), 1); // nesterov, decoupled
  EXPECT_EQ(static_cast<uint8_t>(b[at]), 1 | 8);
  b[at] = static_cast<char>(static_cast<uint8_t>(b[at]) | 16);
  resealPlanBinary(b);
  EXPECT_FALSE(take(parsePlanBinary(b), back, error));
  EXPECT_NE(error.find("bits above 3 are not defined"), std::string::npos)
      << error;
}

TEST(PlanBinary, TableOnlySettingsTravelInTheTailByName) {
  // A setting without a slot of its own (extra_scale_factor) is written in
  // the group's settings tail, by name, only when not at its default, and
  // flagged by bit 7 of the algorithm byte; an unknown name and an empty
  // tail are refused, naming the group.
  Plan off = planModel(), on = planModel();
  on.groups[0].setNumber("extra_scale_factor", 0.25);
  const std::string name = "extra_scale_factor";
  std::string a = renderPlanBinary(off), b = renderPlanBinary(on);
  EXPECT_EQ(a.find(name), std::string::npos);
  const size_t at = b.find(std::string(1, static_cast<char>(name.size())) + name);
  ASSERT_NE(at, std::string::npos);
  EXPECT_EQ(b.size(), a.size() + 1 + 1 + name.size() + 8); // count, str, f64
  Plan back;
  std::string error;
  ASSERT_TRUE(take(parsePlanBinary(b), back, error)) << error;
  EXPECT_EQ(back.groups[0].number("extra_scale_factor"), 0.25);
  EXPECT_EQ(renderPlan(back), renderPlan(on));
  EXPECT_EQ(renderPlanBinary(back), b);
  // The group's algorithm byte follows its name.
  const std::string group = std::string(1, static_cast<char>(
                                               on.groups[0].name.size())) +
                            on.groups[0].name;
  const size_t algorithm = b.find(group) + group.size();
  EXPECT_EQ(static_cast<uint8_t>(b[algorithm]), 0x81);
  EXPECT_EQ(static_cast<uint8_t>(a[a.find(group) + group.size()]), 0x01);

  std::string unknown = b;
  unknown[at + name.size()] = 'q'; // "extra_scale_factoq"
  resealPlanBinary(unknown);
  EXPECT_FALSE(take(parsePlanBinary(unknown), back, error));
  EXPECT_NE(error.find("groups[0]"), std::string::npos) << error;
  EXPECT_NE(error.find("setting 'extra_scale_factoq' in the tail is not a "
                       "Muon group's setting"),
            std::string::npos)
      << error;
  std::string empty = b;
  ASSERT_EQ(empty[at - 1], '\x01'); // the tail's count
  empty[at - 1] = '\x00';
  resealPlanBinary(empty);
  EXPECT_FALSE(take(parsePlanBinary(empty), back, error));
  EXPECT_NE(error.find("an empty settings tail"), std::string::npos) << error;
}

namespace {
/// A writer fed every transfer of `plan`, as renderPlanBinary feeds one.
std::unique_ptr<PlanBinaryWriter> fedWriter(const Plan &plan) {
  auto writer = std::make_unique<PlanBinaryWriter>();
  writer->begin(plan);
  for (size_t e = 0; e < plan.exchanges.size(); ++e)
    for (const Transfer &t : plan.exchanges[e].transfers)
      writer->add(static_cast<int64_t>(e),
                  plan.exchanges[e].phase == Exchange::Phase::Gather, t);
  return writer;
}

std::string readAll(int fd) {
  std::string bytes;
  char buffer[4096];
  ssize_t n;
  while ((n = read(fd, buffer, sizeof buffer)) > 0)
    bytes.append(buffer, static_cast<size_t>(n));
  return bytes;
}
} // namespace

// Straight into a file (each rank's section written as it is made, the
// header and index last, with pwrite) or into a pipe (in order): the same
// bytes as in memory.
TEST(PlanBinary, FinishToAFileOrAPipeWritesTheSameBytes) {
  Plan plan = planModel();
  std::string bytes = renderPlanBinary(plan);
  char path[] = "/tmp/muon-plan-bin-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  Status toFile = fedWriter(plan)->finishTo(plan, fd, /*seekable=*/true);
  ASSERT_TRUE(toFile.ok()) << toFile.text();
  ASSERT_EQ(lseek(fd, 0, SEEK_SET), 0);
  EXPECT_EQ(readAll(fd), bytes);
  close(fd);
  unlink(path);

  int pipeFds[2];
  ASSERT_EQ(pipe(pipeFds), 0);
  Status toPipe =
      fedWriter(plan)->finishTo(plan, pipeFds[1], /*seekable=*/false);
  ASSERT_TRUE(toPipe.ok()) << toPipe.text();
  close(pipeFds[1]);
  EXPECT_EQ(readAll(pipeFds[0]), bytes);
  close(pipeFds[0]);

  // A transfer of a matrix its ends do not hold (there is no matrix 9):
  // refused, nothing written, the reason given.
  PlanBinaryWriter writer;
  writer.begin(plan);
  writer.add(0, true, {1, 0, 0, {2, 4}, {0, 4}, 0});
  writer.add(0, true, {3, 2, 9, {6, 8}, {0, 4}, 0});
  ASSERT_EQ(pipe(pipeFds), 0);
  Status refused = writer.finishTo(plan, pipeFds[1], false);
  EXPECT_EQ(refused.code(), StatusCode::Internal);
  EXPECT_CONTAINS(refused.message(),
                  "names a matrix one of its ends does not hold");
  close(pipeFds[1]);
  EXPECT_EQ(readAll(pipeFds[0]), "");
  close(pipeFds[0]);
}

// The writer orders each rank's matrices by (round, place in the round)
// with a counting sort where rounds list matrices ascending, as compiled
// plans do; a plan file may list a round in another order, which must
// survive too.
TEST(PlanBinary, RoundOrderIsKept) {
  Plan plan = planModel(/*maxRounds=*/1);
  ASSERT_EQ(plan.rounds.size(), 1u);
  ASSERT_EQ(plan.rounds[0], (std::vector<int64_t>{0, 1}));
  for (bool reversed : {false, true}) {
    if (reversed)
      std::reverse(plan.rounds[0].begin(), plan.rounds[0].end());
    ASSERT_TRUE(validatePlan(plan).ok()) << json::describe(validatePlan(plan));
    std::string bytes = renderPlanBinary(plan);
    Plan back;
    std::string error;
    ASSERT_TRUE(take(parsePlanBinary(bytes), back, error)) << error;
    EXPECT_EQ(back.rounds, plan.rounds) << "reversed " << reversed;
    EXPECT_EQ(renderPlan(back), renderPlan(plan));
    for (int64_t r = 0; r < plan.worldSize; ++r) {
      Plan slice;
      ASSERT_TRUE(take(parsePlanSlice(bytes, r), slice, error)) << error;
      expectSameSlice(slice, slicePlan(plan, r));
    }
  }
}

TEST(PlanBinary, EachRankLoadsItsPartOfTheWhole) {
  Plan plan = planModel();
  std::string bytes = renderPlanBinary(plan);
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    Plan slice;
    std::string error;
    SliceLoadStats stats;
    ASSERT_TRUE(take(parsePlanSlice(bytes, r, &stats), slice, error)) << error;
    expectSameSlice(slice, slicePlan(plan, r));
    EXPECT_TRUE(validatePlanSlice(slicePlan(plan, r)).ok());
    // Exactly the header, the shared section, one index entry and its own
    // section.
    uint64_t shared = u64At(bytes, 40);
    EXPECT_EQ(stats.bytesRead,
              static_cast<int64_t>(96 + shared + 24 + sectionOf(bytes, r).second));
    EXPECT_GT(stats.heldBytes, 0);
    // Its transfers are the whole plan's with it at one end, in order.
    for (size_t e = 0; e < plan.exchanges.size(); ++e) {
      std::vector<Transfer> want;
      for (const Transfer &t : plan.exchanges[e].transfers)
        if (t.src == r || t.dst == r)
          want.push_back(t);
      ASSERT_EQ(slice.exchanges[e].transfers.size(), want.size());
      for (size_t i = 0; i < want.size(); ++i) {
        const Transfer &t = slice.exchanges[e].transfers[i];
        EXPECT_EQ(t.src, want[i].src);
        EXPECT_EQ(t.dst, want[i].dst);
        EXPECT_EQ(slice.matrixIds[t.matrix], want[i].matrix);
        EXPECT_TRUE(t.rows == want[i].rows && t.cols == want[i].cols);
      }
      // The all-to-all-v arguments are the whole plan's.
      RankExchangeView whole = rankExchangeViews(plan.exchanges[e], 4)[r];
      RankExchangeView part = rankExchangeView(slice.exchanges[e], r);
      ASSERT_EQ(whole.send.size(), part.send.size());
      ASSERT_EQ(whole.recv.size(), part.recv.size());
      EXPECT_EQ(whole.sendElements, part.sendElements);
      EXPECT_EQ(whole.recvElements, part.recvElements);
      for (size_t i = 0; i < whole.send.size(); ++i)
        EXPECT_TRUE(whole.send[i].peer == part.send[i].peer &&
                    whole.send[i].elements == part.send[i].elements &&
                    whole.send[i].offset == part.send[i].offset);
    }
  }
}

TEST(PlanBinary, RanksDoNotReadOtherRanksSections) {
  Plan plan = planModel();
  std::string bytes = renderPlanBinary(plan);
  // Wreck rank 3's section: ranks 0..2 still load theirs, rank 3 and the
  // whole-plan reader refuse.
  auto [offset, size] = sectionOf(bytes, 3);
  for (uint64_t i = 0; i < size; ++i)
    bytes[offset + i] = '\xff';
  std::string error;
  for (int64_t r = 0; r < 3; ++r) {
    Plan slice;
    EXPECT_TRUE(take(parsePlanSlice(bytes, r), slice, error)) << error;
  }
  Plan slice, whole;
  // A damaged file is told from a plan that does not fit by its code.
  StatusCode code = StatusCode::Ok;
  EXPECT_FALSE(take(parsePlanSlice(bytes, 3), slice, error, &code));
  EXPECT_CONTAINS(error, "rank 3's section: checksum mismatch");
  EXPECT_EQ(code, StatusCode::DataLoss);
  EXPECT_FALSE(take(parsePlanBinary(bytes), whole, error, &code));
  EXPECT_CONTAINS(error, "rank 3's section: checksum mismatch");
  EXPECT_EQ(code, StatusCode::DataLoss);
}

TEST(PlanBinary, ReadLimitIsEnforced) {
  Plan plan = planModel();
  std::string bytes = renderPlanBinary(plan);
  Plan slice;
  std::string error;
  EXPECT_FALSE(take(parsePlanSlice(bytes, 1, nullptr, 100), slice, error));
  EXPECT_CONTAINS(error, "rank 1's part of the plan is ");
  EXPECT_CONTAINS(error, "above the read limit of 100 bytes");
  SliceLoadStats stats;
  EXPECT_TRUE(take(parsePlanSlice(bytes, 1, &stats), slice, error));
  EXPECT_TRUE(
      take(parsePlanSlice(bytes, 1, nullptr, stats.bytesRead), slice, error));
}

TEST(PlanBinary, FileLoadMatchesMemory) {
  Plan plan = planModel();
  std::string bytes = renderPlanBinary(plan);
  char path[] = "/tmp/muon-plan-binary-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()),
            static_cast<ssize_t>(bytes.size()));
  close(fd);
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    Plan fromFile, fromMemory;
    std::string error;
    SliceLoadStats a, b;
    ASSERT_TRUE(take(loadPlanSlice(path, r, &a), fromFile, error)) << error;
    ASSERT_TRUE(take(parsePlanSlice(bytes, r, &b), fromMemory, error)) << error;
    expectSameSlice(fromFile, fromMemory);
    EXPECT_EQ(fromFile.fileId, fromMemory.fileId);
    EXPECT_EQ(a.bytesRead, b.bytesRead);
  }
  Plan slice;
  std::string error;
  StatusCode code = StatusCode::Ok;
  EXPECT_FALSE(take(loadPlanSlice(path, 4), slice, error, &code));
  EXPECT_CONTAINS(error, "rank 4 is not in the plan's world of 4 ranks");
  EXPECT_EQ(code, StatusCode::InvalidArgument);
  unlink(path);
  EXPECT_FALSE(take(loadPlanSlice(path, 0), slice, error, &code));
  EXPECT_CONTAINS(error, "cannot read the plan file");
  EXPECT_EQ(code, StatusCode::NotFound);
}

TEST(PlanBinary, DamagedHeadersAreRefused) {
  Plan plan = planModel();
  std::string bytes = renderPlanBinary(plan);
  Plan out;
  std::string error;
  EXPECT_FALSE(take(parsePlanSlice(bytes.substr(0, 50), 0), out, error));
  EXPECT_CONTAINS(error, "not a binary plan file");
  StatusCode code = StatusCode::Ok;
  EXPECT_FALSE(take(parsePlanSlice(bytes.substr(0, bytes.size() - 1), 0), out,
                    error, &code));
  EXPECT_CONTAINS(error, "truncated or appended to");
  EXPECT_EQ(code, StatusCode::DataLoss);
  std::string other = bytes;
  other[8] = 6; // version 6: after redundant matrices' 5
  EXPECT_FALSE(take(parsePlanSlice(other, 0), out, error, &code));
  EXPECT_CONTAINS(error, "format version 6 is not supported (this reader "
                         "reads muon-plan-bin/2 to 5)");
  EXPECT_EQ(code, StatusCode::InvalidArgument);
  other = bytes;
  other[20] = 1; // world size, under the header checksum
  EXPECT_FALSE(take(parsePlanSlice(other, 0), out, error, &code));
  EXPECT_CONTAINS(error, "header: checksum mismatch");
  EXPECT_EQ(code, StatusCode::DataLoss);
}

TEST(PlanBinary, EveryByteFlipIsRefusedOrHarmless) {
  // Each byte of the file in turn, flipped: every reader either refuses
  // with a message or loads a plan that passes its checks. Never a crash
  // (the AddressSanitizer fuzz build runs the same over random damage).
  Plan plan = planModel();
  std::string bytes = renderPlanBinary(plan);
  for (size_t at = 0; at < bytes.size(); ++at)
    for (unsigned char mask : {0x01, 0x80, 0xff}) {
      std::string damaged = bytes;
      damaged[at] = static_cast<char>(damaged[at] ^ mask);
      // Half the time with the checksums made to match, so that the damage
      // reaches the decoders and the checks behind them.
      if (mask == 0x80)
        resealPlanBinary(damaged);
      std::string error;
      Plan whole;
      if (take(parsePlanBinary(damaged), whole, error))
        EXPECT_TRUE(validatePlan(whole).ok());
      else
        EXPECT_FALSE(error.empty());
      for (int64_t r = 0; r < plan.worldSize; ++r) {
        Plan slice;
        if (take(parsePlanSlice(damaged, r), slice, error))
          EXPECT_TRUE(validatePlanSlice(slice).ok());
        else
          EXPECT_FALSE(error.empty());
      }
    }
}

TEST(PlanBinary, SliceCheckerCatchesWrongParts) {
  Plan plan = planModel();
  // A transfer between two other ranks.
  Plan slice = slicePlan(plan, 1);
  slice.exchanges[0].transfers.push_back(plan.exchanges[0].transfers[1]);
  slice.exchanges[0].transfers.back().matrix = 0;
  EXPECT_CONTAINS(json::describe(validatePlanSlice(slice)),
                  "holds a transfer between");
  // A held matrix missing its scatter.
  slice = slicePlan(plan, 1);
  for (Exchange &ex : slice.exchanges)
    if (ex.phase == Exchange::Phase::Scatter)
      ex.transfers.clear();
  EXPECT_CONTAINS(json::describe(validatePlanSlice(slice)),
                  "never receives its new");
  // A wrong box.
  slice = slicePlan(plan, 1);
  for (Exchange &ex : slice.exchanges)
    for (Transfer &t : ex.transfers)
      t.rows = {0, 2};
  EXPECT_CONTAINS(json::describe(validatePlanSlice(slice)),
                  "does not hold rows [0, 2)");
}

TEST(PlanBinary, SeveralNewtonSchulzConfigurationsAreVersion4) {
  // One configuration keeps version 2; two make version 4, which round-trips
  // whole, through JSON and rank by rank.
  EXPECT_EQ(u64At(renderPlanBinary(planModel()), 8) & 0xffffffff,
            kPlanBinaryVersion);
  const Plan plan = nsGroupsPlanModel();
  const std::string bytes = renderPlanBinary(plan);
  EXPECT_EQ(u64At(bytes, 8) & 0xffffffff, kPlanBinaryNsConfigsVersion);
  Plan back;
  std::string error;
  ASSERT_TRUE(take(parsePlanBinary(bytes), back, error)) << error;
  EXPECT_EQ(renderPlan(back), renderPlan(plan));
  EXPECT_EQ(renderPlanBinary(back), bytes);
  Plan fromJson;
  ASSERT_TRUE(take(parsePlan(renderPlan(plan)), fromJson, error)) << error;
  EXPECT_EQ(renderPlanBinary(fromJson), bytes);
  for (int64_t r = 0; r < plan.worldSize; ++r) {
    Plan slice;
    ASSERT_TRUE(take(parsePlanSlice(bytes, r), slice, error)) << error;
    expectSameSlice(slice, slicePlan(plan, r));
  }
  Plan rank0;
  ASSERT_TRUE(take(parsePlanSlice(bytes, 0), rank0, error)) << error;
  ASSERT_EQ(rank0.nsBatches[0].size(), 2u);
  EXPECT_EQ(rank0.nsBatches[0][1].config, 1);
  EXPECT_EQ(rank0.ns.configs[1], otherNsConfig());
}

TEST(PlanBinary, NewtonSchulzConfigurationIndicesAreChecked) {
  const std::string bytes = renderPlanBinary(nsGroupsPlanModel());
  auto refused = [&](std::string changed) {
    resealPlanBinary(changed);
    Plan plan;
    std::string error;
    EXPECT_FALSE(take(parsePlanBinary(changed), plan, error));
    return error;
  };
  // The count: 2, then configuration 0 (5 steps, 5 triples, 3.4445 first).
  double a = 3.4445;
  std::string first(8, '\0');
  std::memcpy(first.data(), &a, 8);
  size_t count = bytes.find(std::string("\x02\x0a\x05", 3) + first);
  ASSERT_NE(count, std::string::npos);
  std::string one = bytes;
  one[count] = 1;
  EXPECT_CONTAINS(refused(one), "1 NS configuration(s) in a version 4 file");
  // Group "b"'s index follows its adjust_lr.
  size_t group = bytes.find(std::string("\x08original\x01", 10));
  ASSERT_NE(group, std::string::npos);
  std::string outside = bytes;
  outside[group + 9] = 5;
  EXPECT_CONTAINS(refused(outside),
                  "NS configuration 5 is out of range [0, 2)");
  // Rank 0's batch of "v" (round 0, 8 x 4, configuration 1, one matrix)
  // made to run configuration 0.
  auto [offset, size] = sectionOf(bytes, 0);
  size_t batch = bytes.find(std::string("\x00\x10\x08\x01\x01", 5), offset);
  ASSERT_LT(batch, offset + size);
  std::string mixed = bytes;
  mixed[batch + 3] = 0;
  EXPECT_CONTAINS(refused(mixed), "matrix 'v' runs Newton-Schulz "
                                  "configuration 1 (group 'b'), not the "
                                  "batch's 0");
  resealPlanBinary(mixed);
  Plan slice;
  std::string error;
  EXPECT_FALSE(take(parsePlanSlice(mixed, 0), slice, error));
  EXPECT_CONTAINS(error, "not the batch's 0");
}
