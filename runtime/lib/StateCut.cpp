//===- StateCut.cpp - Optimizer state cut from pieces of any layout -------===//
#include "StateCut.h"

#include "muon/Plan/Algorithm.h"

#include <algorithm>
#include <cstring>
#include <set>

namespace muon::runtime::statecut {

namespace {

/// Copies the overlap of `srcBox` (data `src`, row-major) into `dstBox`
/// (data `dst`), skipping elements `covered` marks, and marks what it
/// covers; returns how many elements it newly covered. With `add`, values
/// are added instead of written. With null `src` and `dst`, only covers.
/// With null `covered`, nothing is skipped or marked (the caller knows
/// nothing is covered yet). A run nothing covered yet (the usual case) is
/// one memcpy.
int64_t cutOverlap(const float *src, const std::vector<Range> &srcBox,
                   float *dst, const std::vector<Range> &dstBox, char *covered,
                   bool add) {
  int64_t fresh = 0;
  forEachRun(srcBox, dstBox, [&](int64_t from, int64_t to, int64_t run) {
    char *c = covered ? covered + to : nullptr;
    if (!c || !std::memchr(c, 1, run)) {
      if (dst && add)
        for (int64_t j = 0; j < run; ++j)
          dst[to + j] += src[from + j];
      else if (dst)
        std::memcpy(dst + to, src + from, run * sizeof(float));
      if (c)
        std::memset(c, 1, run);
      fresh += run;
      return;
    }
    for (int64_t j = 0; j < run; ++j)
      if (!c[j]) {
        c[j] = 1;
        if (dst)
          dst[to + j] = add ? dst[to + j] + src[from + j] : src[from + j];
        ++fresh;
      }
  });
  return fresh;
}

/// Whether the piece's step count comes from where `state` comes from.
bool carriesStep(int state) {
  return state != valuesSlot() && elementSlots()[state].carriesStep;
}

/// Whether box `outer` holds all of box `inner`.
bool contains(const std::vector<Range> &outer,
              const std::vector<Range> &inner) {
  for (size_t d = 0; d < outer.size(); ++d)
    if (inner[d].begin < outer[d].begin || inner[d].end > outer[d].end)
      return false;
  return true;
}

} // namespace

int valuesSlot() { return static_cast<int>(elementSlots().size()); }

int slotCount() { return valuesSlot() + 1; }

const char *slotName(int slot) {
  return slot == valuesSlot() ? "values" : elementSlots()[slot].name;
}

std::string slotNames(AlgorithmId algorithm) {
  const std::string names = elementSlotNames(algorithm);
  return names.empty() ? "values" : names + " or values";
}

bool intersect(const std::vector<Range> &a, const std::vector<Range> &b,
               std::vector<Range> &out) {
  out.resize(a.size());
  for (size_t d = 0; d < a.size(); ++d) {
    out[d] = {std::max(a[d].begin, b[d].begin), std::min(a[d].end, b[d].end)};
    if (out[d].begin >= out[d].end)
      return false;
  }
  return true;
}

int slotNamed(AlgorithmId algorithm, std::string_view name) {
  if (name == "values")
    return valuesSlot();
  if (int slot = elementSlotOf(algorithm, name); slot >= 0)
    return slot;
  // Another algorithm's slot: checkSource names it as such.
  for (size_t s = 0; s < elementSlots().size(); ++s)
    if (name == elementSlots()[s].name)
      return static_cast<int>(s);
  return -1;
}

int64_t summandCount(const Plan &plan, int64_t param) {
  int64_t summands = 1;
  for (int64_t axis : plan.params[param].layout.partialAxes)
    summands *= plan.mesh.shape[axis];
  return summands;
}

std::string boxText(const std::vector<Range> &box) {
  std::string text = "[";
  for (size_t d = 0; d < box.size(); ++d)
    text += (d ? ", " : "") + std::to_string(box[d].begin) + ":" +
            std::to_string(box[d].end);
  return text + "]";
}

Status checkSource(const Plan &plan, const Source &source,
                 const std::string &where) {
  const PlanParam &param = plan.params[source.param];
  auto bad = [&](const std::string &reason) {
    return invalidArgument(where + ": " + reason);
  };
  if (source.box.size() != param.layout.shape.size())
    return bad("a box of " + std::to_string(source.box.size()) +
               " dim(s) for '" + param.name + "', which has " +
               std::to_string(param.layout.shape.size()));
  for (size_t d = 0; d < source.box.size(); ++d)
    if (source.box[d].begin < 0 || source.box[d].begin >= source.box[d].end ||
        source.box[d].end > param.layout.shape[d])
      return bad("the box " + boxText(source.box) + " is empty or outside '" +
                 param.name + "'");
  if (source.summands < 1 || source.summand < 0 ||
      source.summand >= source.summands)
    return bad("summand " + std::to_string(source.summand) + " of " +
               std::to_string(source.summands));
  const PlanGroup &group = plan.groups[param.group];
  const Algorithm &algorithm = algorithmOf(param.algorithm);
  for (int s = 0; s < valuesSlot(); ++s)
    if (source.has[s] && !keepsSlot(group, elementSlots()[s]))
      return bad(std::string("state '") + elementSlots()[s].name + "' for '" +
                 param.name + "', " +
                 (param.algorithm == kAdamW ? "an " : "a ") + algorithm.title +
                 " parameter");
  return okStatus();
}

Status checkSplits(const Plan &plan, const std::vector<Source> &sources,
                 const std::string &what, std::vector<int64_t> &splits) {
  splits.assign(plan.params.size(), 0);
  for (const Source &s : sources)
    for (int slot = 0; slot < valuesSlot(); ++slot) {
      if (!s.has[slot] || !elementSlots()[slot].perSummand)
        continue;
      int64_t &split = splits[s.param];
      if (split && split != s.summands) {
        return invalidArgument(what + " has inconsistent " + elementSlots()[slot].name +
                " for '" + plan.params[s.param].name + "': split into " +
                std::to_string(split) + " and " + std::to_string(s.summands) +
                " summands");
      }
      split = s.summands;
    }
  return okStatus();
}

Status cut(const Plan &plan, int64_t rank, const std::vector<ParamSlot> &slots,
         const std::vector<Source> &sources, const std::vector<int64_t> &splits,
         bool withParameters, const std::string &what, StateDict *local,
         std::vector<std::vector<bool>> *used) {
  // The sources of each parameter, in order: no scan of every source for
  // every piece.
  std::vector<std::vector<size_t>> byParam(plan.params.size());
  for (size_t k = 0; k < sources.size(); ++k)
    byParam[sources[k].param].push_back(k);
  if (used)
    used->assign(sources.size(), std::vector<bool>(slotCount(), false));
  if (local)
    local->pieces.clear();
  std::vector<char> covered;
  for (size_t i = 0; i < slots.size(); ++i) {
    const ParamSlot &slot = slots[i];
    if (!slot.elements)
      continue;
    StatePiece *piece = nullptr;
    if (local) {
      piece = &local->pieces.emplace_back();
      piece->param = slot.name;
      piece->box = slot.box;
      piece->summand = slot.summand;
      piece->summands = summandCount(plan, i);
    }
    // Covers `state` of the piece from the sources (of `summand`, or any
    // when negative), writing or adding into `out`; returns the elements
    // covered. The first source a state comes from gives AdamW's step.
    auto fill = [&](int state, int64_t summand, float *out, bool add) {
      int64_t got = 0;
      bool tracking = false;
      for (size_t k : byParam[i]) {
        const Source &src = sources[k];
        // A state that was not read cannot be copied (a source list built
        // for copying holds data for every state it has).
        if (!src.has[state] || (out && !src.data[state]) ||
            (summand >= 0 && src.summand != summand))
          continue;
        // The first source that covers the whole piece needs no record of
        // what is covered (a piece as large as 1 GB would need 256 MB).
        bool whole = got == 0 && contains(src.box, slot.box);
        if (!whole && !tracking) {
          covered.assign(slot.elements, 0);
          tracking = true;
        }
        int64_t fresh =
            cutOverlap(out ? src.data[state] : nullptr, src.box, out, slot.box,
                       whole ? nullptr : covered.data(), add);
        if (!fresh)
          continue;
        if (used)
          (*used)[k][state] = true;
        if (piece && got == 0 && carriesStep(state))
          piece->step = src.step;
        got += fresh;
        if (got == slot.elements)
          break;
      }
      return got;
    };
    // The piece's zeroed data for `state` (null without `local`).
    auto output = [&](int state) -> float * {
      if (!piece)
        return nullptr;
      std::vector<float> &data = piece->states[slotName(state)];
      data.assign(slot.elements, 0.0f);
      return data.data();
    };
    auto uncovered = [&](int state, const std::string &note) {
      return invalidArgument(what + " does not cover the " + slotName(state) + " of rank " +
              std::to_string(rank) + "'s piece " + boxText(slot.box) + " of '" +
              slot.name + "'" + note);
    };
    // Covers `state` by writing. When the first source it would come from
    // has exactly the piece's box and storage to give, the piece takes
    // that storage instead of a copy (a resume on the same layout).
    auto take = [&](int state, int64_t summand) {
      for (size_t k : byParam[i]) {
        const Source &src = sources[k];
        if (!piece || !src.has[state] || !src.data[state] ||
            (summand >= 0 && src.summand != summand))
          continue;
        if (!src.own[state] || !(src.box == slot.box))
          break;
        piece->states[slotName(state)] = std::move(*src.own[state]);
        if (used)
          (*used)[k][state] = true;
        if (carriesStep(state))
          piece->step = src.step;
        return true;
      }
      return fill(state, summand, output(state), false) == slot.elements;
    };
    const PlanGroup &group = plan.groups[plan.params[i].group];
    for (int state = 0; state < valuesSlot(); ++state) {
      const ElementSlot &kind = elementSlots()[state];
      if (!keepsSlot(group, kind))
        continue;
      if (!kind.perSummand) {
        if (!take(state, -1))
          return uncovered(state, "");
        continue;
      }
      int64_t saved = splits[i];
      if (!saved) {
        return invalidArgument(what + " has no " + kind.name + " for '" + slot.name + "'");
      }
      if (saved == summandCount(plan, i)) {
        if (!take(state, slot.summand))
          return uncovered(state, "");
        continue;
      }
      // The slot is linear in the gradient, so only the summands' total
      // matters: summand 0 takes it all (each saved summand added once),
      // the others start from zero.
      float *out = output(state);
      for (int64_t k = 0; slot.summand == 0 && k < saved; ++k)
        if (fill(state, k, out, true) != slot.elements)
          return uncovered(state, " (saved summand " + std::to_string(k) + ")");
    }
    if (withParameters && !take(valuesSlot(), -1))
      return uncovered(valuesSlot(), "");
  }
  return okStatus();
}

} // namespace muon::runtime::statecut
