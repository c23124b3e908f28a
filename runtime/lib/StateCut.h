//===- StateCut.h - Optimizer state cut from pieces of any layout -*- C++
//-*-===//
//
// The one implementation of re-cutting saved optimizer state to a rank's
// pieces. Optimizer::loadStateDict runs it on pieces in memory;
// Optimizer::loadCheckpoint runs it twice: on the manifest's index alone
// (no data) to choose which saved states to read, then on what it read.
// Internal to the runtime (StateDict.cpp, Checkpoint.cpp).
//
//===----------------------------------------------------------------------===//
#ifndef MUON_RUNTIME_LIB_STATECUT_H
#define MUON_RUNTIME_LIB_STATECUT_H

#include "muon/Plan/ElementState.h"
#include "muon/Runtime/Optimizer.h"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace muon::runtime::statecut {

/// The states a piece can hold: the element slots (elementSlots(), by
/// index), then the parameter's values (valuesSlot()); slotCount() in all.
int valuesSlot();
int slotCount();
/// elementSlots()' names, then "values".
const char *slotName(int slot);
/// "exp_avg, exp_avg_sq or values": an algorithm's, for messages.
std::string slotNames(AlgorithmId algorithm);
/// "values", else `algorithm`'s slot called `name`, else another
/// algorithm's (which checkSource refuses, naming it), else -1.
int slotNamed(AlgorithmId algorithm, std::string_view name);

/// A saved piece as the cut sees it.
struct Source {
  int64_t param = -1; // index into Plan::params
  std::vector<Range> box;
  int64_t summand = 0, summands = 1;
  int64_t step = 0; // the piece's step count (AdamW's)
  /// Per state (slotCount()): whether the piece holds it.
  std::vector<bool> has = std::vector<bool>(slotCount(), false);
  /// The states' data, row-major over `box`; null when not read (the cut
  /// then only chooses).
  std::vector<const float *> data =
      std::vector<const float *>(slotCount(), nullptr);
  /// Where the data is a vector the cut may take over (the caller's
  /// buffer, no longer needed): a piece whose box this source has exactly
  /// takes it instead of a copy. Null: the data is only lent.
  std::vector<std::vector<float> *> own =
      std::vector<std::vector<float> *>(slotCount(), nullptr);
};

/// The overlap of boxes `a` and `b` (one range per dim, the same dims) in
/// `out`; false when it is empty.
bool intersect(const std::vector<Range> &a, const std::vector<Range> &b,
               std::vector<Range> &out);

/// Calls `fn(from, to, length)` for every run of the overlap of boxes `a`
/// and `b` (a stretch along the innermost dim, contiguous in both), in
/// row-major order: `from` and `to` are the run's element offsets in `a`'s
/// and `b`'s row-major data. Nothing when they do not overlap.
template <typename Fn>
void forEachRun(const std::vector<Range> &a, const std::vector<Range> &b,
                Fn fn) {
  const size_t rank = a.size();
  std::vector<Range> overlap;
  if (!intersect(a, b, overlap))
    return;
  std::vector<int64_t> aStride(rank), bStride(rank), at(rank);
  int64_t aSize = 1, bSize = 1, runs = 1;
  for (size_t d = rank; d-- > 0;) {
    aStride[d] = aSize;
    bStride[d] = bSize;
    aSize *= a[d].size();
    bSize *= b[d].size();
    at[d] = overlap[d].begin;
    if (d + 1 < rank)
      runs *= overlap[d].size();
  }
  const int64_t length = rank ? overlap[rank - 1].size() : 1;
  for (int64_t n = 0; n < runs; ++n) {
    int64_t from = 0, to = 0;
    for (size_t d = 0; d < rank; ++d) {
      from += (at[d] - a[d].begin) * aStride[d];
      to += (at[d] - b[d].begin) * bStride[d];
    }
    fn(from, to, length);
    // The next run: every dim but the innermost, odometer-style.
    for (size_t d = rank > 1 ? rank - 1 : 0; d-- > 0;) {
      if (++at[d] < overlap[d].end)
        break;
      at[d] = overlap[d].begin;
    }
  }
}

/// How many partial summands parameter `param`'s gradient has in `plan`.
int64_t summandCount(const Plan &plan, int64_t param);
/// "[0:2, 4:8]".
std::string boxText(const std::vector<Range> &box);

/// Checks one piece against the model: a box inside the parameter's
/// shape, a summand in range, states its group keeps.
/// `where` names the piece in `error`.
Status checkSource(const Plan &plan, const Source &source,
                 const std::string &where);
/// Checks what only the whole set shows: every parameter's per-summand
/// slots (ElementSlot::perSummand: momentum) are split into one number of
/// summands, which `splits` gets per parameter (0: none saved). `what`
/// names the set.
Status checkSplits(const Plan &plan, const std::vector<Source> &sources,
                 const std::string &what, std::vector<int64_t> &splits);

/// Cuts the state of every local piece (`slots`, a rank's parameters) out
/// of `sources`, tried in order: an element an earlier source covered is
/// not taken from a later one, and a source is used only if it covers
/// something new. A per-summand slot (momentum): with as many summands as
/// saved, each piece takes its own summand's; otherwise summand 0 takes the
/// saved summands' total and the others zeros. Other slots (AdamW's
/// moments) and values: any summand. `splits` is checkSplits' result for the whole set the sources
/// were chosen from. Every element of every state must be covered; `what`
/// names the sources in `error` ("the checkpoint in 'dir'").
///
/// With `local`, the data is copied (or taken, see Source::own) into it:
/// one piece per slot with elements, in order, with the step count left as
/// it was. With `used`
/// (one entry per source), the (source, state) pairs that contribute are
/// marked; without `local` the sources need no data.
Status cut(const Plan &plan, int64_t rank, const std::vector<ParamSlot> &slots,
         const std::vector<Source> &sources, const std::vector<int64_t> &splits,
         bool withParameters, const std::string &what, StateDict *local,
         std::vector<std::vector<bool>> *used);

} // namespace muon::runtime::statecut

#endif // MUON_RUNTIME_LIB_STATECUT_H
