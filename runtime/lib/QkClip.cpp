//===- QkClip.cpp - QK-clip (MuonClip) after the update -------------------===//
//
// MuonClip (Kimi K2, arXiv 2507.20534): after each step's update, the query
// heads whose largest attention logit of the step exceeded the threshold
// get their rows of W_q and W_k scaled by sqrt(threshold / max logit). The
// logits are a step input; every rank needs the same ones, and a
// data-parallel trainer measures them on its own part of the batch, so the
// step takes the largest per head over the ranks (one small control
// all-gather). The rescale itself is local: a row's head is its global row
// divided by the head's row count, so each rank scales the rows of the
// pieces it holds, with nothing exchanged, and every layout gives the same
// bits as one rank.
//
//===----------------------------------------------------------------------===//
#include "muon/Runtime/ElementMath.h"
#include "muon/Runtime/StepExecutor.h"

#include <cstring>
#include <limits>

namespace muon::runtime {

void StepExecutor::setQkMaxLogits(int64_t layer, std::vector<float> logits) {
  qkLogits[layer] = std::move(logits);
}

Status StepExecutor::agreeOnQkLogits(std::vector<std::vector<float>> &maxima) {
  // Every layer's heads in plan order; a layer this rank did not set sends
  // -inf, which no rank's value is below.
  const float none = -std::numeric_limits<float>::infinity();
  std::vector<float> mine;
  for (size_t l = 0; l < planRef.qkClip.size(); ++l) {
    const int64_t heads = planRef.qkClip[l].numHeads;
    if (qkLogits[l].empty())
      mine.insert(mine.end(), heads, none);
    else
      mine.insert(mine.end(), qkLogits[l].begin(), qkLogits[l].end());
  }
  std::vector<char> bytes(mine.size() * sizeof(float));
  std::memcpy(bytes.data(), mine.data(), bytes.size());
  ++lastCounters.controlCollectives;
  StatusOr<std::vector<std::vector<char>>> gathered =
      comm.allGatherBytes(bytes, options.timeoutSeconds);
  if (!gathered.ok())
    return gathered.status().withContext(
        "QK-clip: sharing the attention logits: ");
  const std::vector<std::vector<char>> &all = *gathered;
  for (const std::vector<char> &theirs : all)
    if (theirs.size() != bytes.size())
      return Status(StatusCode::Internal, "QK-clip: a rank sent " +
                                              std::to_string(theirs.size()) +
                                              " bytes of logits, expected " +
                                              std::to_string(bytes.size()));
  std::vector<float> largest = mine;
  for (const std::vector<char> &theirs : all)
    for (size_t i = 0; i < largest.size(); ++i) {
      float v;
      std::memcpy(&v, theirs.data() + i * sizeof(float), sizeof(float));
      largest[i] = std::max(largest[i], v);
    }
  maxima.assign(planRef.qkClip.size(), {});
  size_t at = 0;
  for (size_t l = 0; l < planRef.qkClip.size(); ++l) {
    const int64_t heads = planRef.qkClip[l].numHeads;
    // Set on some rank: then on every head (a rank sets a layer whole).
    if (largest[at] != none)
      maxima[l].assign(largest.begin() + at, largest.begin() + at + heads);
    at += heads;
  }
  for (std::vector<float> &logits : qkLogits)
    logits.clear();
  return okStatus();
}

void StepExecutor::scaleRows(int64_t param, const std::vector<float> &factors) {
  // QK-clip's per-element step ("qk_clip"), the factors in device memory.
  static const ElementStep *const rescale = findElementStep(QkClipOp::kName);
  LocalParam &local = locals[param];
  const int64_t rows = static_cast<int64_t>(factors.size());
  DeviceBuffer onDevice;
  if (Status s = allocate(onDevice, rows * 4, "QK-clip's factors"); !s.ok()) {
    stepFailure = s; // reported with the step's device errors
    return;
  }
  device.copyToDevice(onDevice.data(), factors.data(), rows * 4);
  ElementOperands o;
  o.values = local.values;
  o.type = local.dtype;
  o.input = onDevice.floats();
  o.rowLength = local.elements / rows;
  o.n = local.elements;
  device.runElementStep(
      *rescale, o,
      rescale->scalars({currentGroups[planRef.params[param].group]}));
}

int64_t
StepExecutor::applyQkClip(const std::vector<std::vector<float>> &maxima) {
  int64_t clipped = 0;
  for (size_t l = 0; l < planRef.qkClip.size(); ++l) {
    const QkClipLayer &layer = planRef.qkClip[l];
    const std::vector<float> &logits = maxima[l];
    if (logits.empty())
      continue;
    // Query heads by their own logit; a key head by the largest of the
    // query heads that share it (its strongest clip), so that every head's
    // logits end at or below the threshold.
    const int64_t group = layer.numHeads / layer.numKvHeads;
    std::vector<float> queryFactor(layer.numHeads), keyFactor(layer.numKvHeads);
    for (int64_t h = 0; h < layer.numHeads; ++h) {
      queryFactor[h] = qkClipFactor(layer.threshold, logits[h]);
      clipped += queryFactor[h] != 1.0f;
    }
    for (int64_t j = 0; j < layer.numKvHeads; ++j) {
      float largest = logits[j * group];
      for (int64_t h = j * group; h < (j + 1) * group; ++h)
        largest = std::max(largest, logits[h]);
      keyFactor[j] = qkClipFactor(layer.threshold, largest);
    }
    for (auto [param, factors] : {std::pair{qkParams[l].first, &queryFactor},
                                  std::pair{qkParams[l].second, &keyFactor}}) {
      // A parameter the step left out (no gradient) stays as it was.
      LocalParam &local = locals[param];
      if (!local.elements || isSkipped(param))
        continue;
      const int64_t headRows = planRef.params[param].layout.shape[0] /
                               static_cast<int64_t>(factors->size());
      const Range rows = local.box[0];
      std::vector<float> rowFactor(rows.size());
      bool any = false;
      for (int64_t r = rows.begin; r < rows.end; ++r) {
        rowFactor[r - rows.begin] = (*factors)[r / headRows];
        any |= rowFactor[r - rows.begin] != 1.0f;
      }
      if (any)
        scaleRows(param, rowFactor);
    }
  }
  return clipped;
}

} // namespace muon::runtime
