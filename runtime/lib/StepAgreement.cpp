//===- StepAgreement.cpp - What every rank agrees on around a step ----------===//
//
// The control collectives of a step: before any state changes, one
// all-gather of every rank's status word (unbound storage, a non-finite
// gradient, its group settings' hash, whether its parameters without a
// gradient changed) and the agreement on the parameters a step leaves
// out; after the work, the device errors. QK-clip's logits are agreed on
// in QkClip.cpp.
//
//===----------------------------------------------------------------------===//
#include "Disagreement.h"
#include "StepLayout.h"
#include "muon/Runtime/StepExecutor.h"

#include <algorithm>
#include <cstring>
#include <limits>

namespace muon::runtime {

namespace {
// The agreement before a step: every rank's two words, all-gathered in
// one collective. In the first, the top 24 bits say what stops the rank (0
// nothing, 1 unbound storage, 2 + i a non-finite gradient in parameter i);
// bit 39 says that the rank's list of parameters without a gradient is not
// the one it had at the last agreement on them; the low 39 bits carry its
// group settings' hash (two ranks with different settings collide with
// probability 2^-39). The second is the hash of that list. Lists as before
// keep the last set; changed lists that are the same on every rank (DDP,
// FSDP: every rank holds every parameter) are the set; only lists that
// differ between ranks are exchanged (agreeOnMissingGradients).
constexpr int kStatusShift = 40;
constexpr uint64_t kMissingChanged = uint64_t(1) << 39;
constexpr uint64_t kHashMask = kMissingChanged - 1;
constexpr uint64_t kUnbound = 1, kNonFiniteBase = 2;
constexpr uint64_t kMaxStatus = (uint64_t(1) << (64 - kStatusShift)) - 1;
} // namespace

Status StepExecutor::agreeBeforeStep(StepResult &result) {
  // One agreement before any state changes: every rank bound its storage,
  // set the same group settings, and no gradient holds NaN or Inf.
  uint64_t stop = 0;
  if (!allBound())
    stop = kUnbound;
  for (size_t i = 0; i < locals.size() && stop == 0; ++i) {
    const LocalParam &local = locals[i];
    if (local.elements && local.grad && !isZeroHere(i) &&
        !device.allFinite(local.grad, local.gradType, local.elements))
      stop = std::min<uint64_t>(kNonFiniteBase + i, kMaxStatus);
  }
  const std::vector<int64_t> mine = missingGradients();
  const bool changed = mine != agreedMine;
  ++lastCounters.controlCollectives;
  StatusOr<std::vector<uint64_t>> gathered = comm.allGatherWords(
      {(stop << kStatusShift) | (changed ? kMissingChanged : 0) |
           (groupsHash() & kHashMask),
       listHash(mine)},
      options.timeoutSeconds);
  if (!gathered.ok())
    return gathered.status().withContext("checking gradients for NaN/Inf: ");
  const std::vector<uint64_t> &all = *gathered;
  std::vector<uint64_t> words(all.size() / 2);
  bool sameLists = true;
  for (size_t r = 0; r < words.size(); ++r) {
    words[r] = all[2 * r];
    sameLists = sameLists && all[2 * r + 1] == all[1];
  }
  std::vector<int64_t> unbound, otherSettings;
  int64_t firstBad = -1, badRank = -1;
  bool anyChanged = false;
  for (size_t r = 0; r < words.size(); ++r) {
    uint64_t w = words[r] >> kStatusShift;
    if ((words[r] & kHashMask) != (words[0] & kHashMask))
      otherSettings.push_back(static_cast<int64_t>(r));
    anyChanged = anyChanged || (words[r] & kMissingChanged);
    if (w == kUnbound)
      unbound.push_back(static_cast<int64_t>(r));
    else if (w >= kNonFiniteBase &&
             (firstBad < 0 ||
              static_cast<int64_t>(w - kNonFiniteBase) < firstBad)) {
      firstBad = static_cast<int64_t>(w - kNonFiniteBase);
      badRank = static_cast<int64_t>(r);
    }
  }
  if (!otherSettings.empty()) {
    StatusOr<std::string> d = describeDisagreement(
        comm, settingsOutline(currentGroups), otherSettings,
        options.timeoutSeconds);
    const std::string what = d.ok() && !d->empty() ? " (" + *d + ")" : "";
    return invalidArgument(
        "ranks " + formatRanks(otherSettings) +
        " set group hyper-parameters different from rank 0's" + what +
        "; every rank must set the same values before a step (nothing was "
        "changed)");
  }
  if (!unbound.empty())
    return failedPrecondition("rank " + std::to_string(unbound[0]) +
                              " has not bound every parameter it holds; "
                              "nothing was changed");
  if (!anyChanged)
    skipped = agreedSkipped;
  else if (sameLists && heldEverywhere(mine))
    adoptMissingGradients(mine);
  else
    MUON_RETURN_IF_ERROR(agreeOnMissingGradients(mine));
  result.nonFiniteParam = firstBad;
  result.nonFiniteRank = badRank;
  return okStatus();
}

namespace {
/// Whether rank `rank` holds elements of `param` (as the rank itself
/// decides when it builds its LocalParam): in the parameter's submesh, with
/// a non-empty local box.
bool holds(const Plan &plan, const PlanParam &param, int64_t rank) {
  std::vector<int64_t> coords = plan.mesh.coordsOfRank(rank);
  if (!param.layout.inSubmesh(coords))
    return false;
  for (const Range &r : param.layout.localBox(plan.mesh, coords))
    if (r.size() == 0)
      return false;
  return true;
}
} // namespace

std::vector<int64_t> StepExecutor::missingGradients() const {
  std::vector<int64_t> mine;
  for (size_t i = 0; i < locals.size(); ++i)
    if (locals[i].elements && !locals[i].grad)
      mine.push_back(static_cast<int64_t>(i));
  return mine;
}

uint64_t StepExecutor::listHash(const std::vector<int64_t> &list) {
  // FNV-1a over the indices; 0 for an empty list.
  if (list.empty())
    return 0;
  uint64_t h = 14695981039346656037ull;
  for (int64_t i : list)
    for (int b = 0; b < 8; ++b) {
      h ^= (static_cast<uint64_t>(i) >> (8 * b)) & 0xff;
      h *= 1099511628211ull;
    }
  return h;
}

bool StepExecutor::heldEverywhere(const std::vector<int64_t> &list) {
  if (heldByAll.empty())
    heldByAll.assign(locals.size(), -1);
  for (int64_t i : list) {
    if (heldByAll[i] < 0) {
      heldByAll[i] = 1;
      for (int64_t r = 0; r < planRef.worldSize && heldByAll[i]; ++r)
        heldByAll[i] = holds(planRef, planRef.params[i], r);
    }
    if (!heldByAll[i])
      return false;
  }
  return true;
}

void StepExecutor::adoptMissingGradients(const std::vector<int64_t> &mine) {
  // The same list on every rank, of parameters every rank holds: every
  // holder of each has no gradient, and every other parameter has one
  // everywhere. The set is the list, with no exchange.
  std::vector<bool> none(locals.size(), false);
  for (int64_t i : mine)
    none[i] = true;
  settleMissingGradients(mine, std::move(none));
}

void StepExecutor::settleMissingGradients(const std::vector<int64_t> &mine,
                                          std::vector<bool> none) {
  // Every rank decides alike from the same words or lists: they all
  // remember this agreement, or (refused) none does.
  if (std::find(none.begin(), none.end(), true) == none.end())
    none.clear();
  skipped = none;
  agreedSkipped = std::move(none);
  agreedMine = mine;
}

Status
StepExecutor::agreeOnMissingGradients(const std::vector<int64_t> &mine) {
  // Every rank's parameters without a gradient (of those it holds): their
  // union is the step's set. The one exchange is enough to check that the
  // holders agree: which ranks hold a parameter is the plan's, so a holder
  // that did not name a parameter of the set has its gradient, and the
  // step fails on every rank, naming both sides.
  std::vector<char> bytes(mine.size() * sizeof(int64_t));
  if (!mine.empty())
    std::memcpy(bytes.data(), mine.data(), bytes.size());
  ++lastCounters.controlCollectives;
  StatusOr<std::vector<std::vector<char>>> gathered =
      comm.allGatherBytes(bytes, options.timeoutSeconds);
  if (!gathered.ok())
    return gathered.status().withContext(
        "agreeing on the parameters without a gradient: ");
  const std::vector<std::vector<char>> &every = *gathered;
  const int64_t count = static_cast<int64_t>(locals.size());
  const int64_t ranks = static_cast<int64_t>(every.size());
  // without[i]: the ranks that named parameter i.
  std::vector<std::vector<int64_t>> without(locals.size());
  for (int64_t r = 0; r < ranks; ++r) {
    std::vector<int64_t> list(every[r].size() / sizeof(int64_t));
    if (!list.empty())
      std::memcpy(list.data(), every[r].data(), list.size() * sizeof(int64_t));
    for (int64_t i : list) {
      if (i < 0 || i >= count)
        return Status(StatusCode::Internal,
                      "rank " + std::to_string(r) + " named parameter " +
                          std::to_string(i) +
                          " as without a gradient; the plan has " +
                          std::to_string(count));
      without[i].push_back(r);
    }
  }
  std::vector<bool> none(locals.size(), false);
  for (int64_t i = 0; i < count; ++i) {
    if (without[i].empty())
      continue;
    none[i] = true;
    std::vector<int64_t> with;
    for (int64_t r = 0; r < ranks; ++r)
      if (!std::binary_search(without[i].begin(), without[i].end(), r) &&
          holds(planRef, planRef.params[i], r))
        with.push_back(r);
    if (!with.empty())
      return failedPrecondition(
          "parameter '" + planRef.params[i].name + "' has a gradient on " +
          "ranks " + formatRanks(with) + " only, and none (grad is None) " +
          "on ranks " + formatRanks(without[i]) +
          "; every rank that holds a piece of it must have a gradient, or "
          "none (nothing was changed)");
  }
  settleMissingGradients(mine, std::move(none));
  return okStatus();
}

const StepLayout &StepExecutor::layoutFor(const std::vector<bool> &skip) {
  if (std::find(skip.begin(), skip.end(), true) == skip.end())
    return *wholeLayout;
  if (!partLayout || partSkipped != skip) {
    auto layout = std::make_unique<StepLayout>();
    StepLayout::filter(planRef, *wholeLayout, skip, *layout);
    partLayout = std::move(layout);
    partSkipped = skip;
  }
  return *partLayout;
}

Status StepExecutor::agreeOnDeviceErrors() {
  Status mine = device.takeError();
  if (mine.ok())
    mine = stepFailure;
  stepFailure = okStatus();
  const int64_t none = std::numeric_limits<int64_t>::max();
  ++lastCounters.controlCollectives;
  StatusOr<int64_t> firstFailed =
      comm.allReduceMin(mine.ok() ? none : myRank, options.timeoutSeconds);
  if (!firstFailed.ok())
    return firstFailed.status().withContext(
        "checking the step's device errors: ");
  const int64_t first = *firstFailed;
  if (first == none)
    return okStatus();
  std::string text =
      shareText(comm, first, mine.message(), options.timeoutSeconds);
  return Status(StatusCode::Internal,
                "the device of rank " + std::to_string(first) +
                    " failed during the step, whose updates may be partly "
                    "applied: " +
                    text);
}

} // namespace muon::runtime
