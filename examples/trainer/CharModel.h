//===- CharModel.h - A small character-level language model -----*- C++ -*-===//
//
// An MLP language model that reads the last `kContext` characters and
// predicts the next one, with its forward and backward passes written by
// hand:
//
//   x      = concat(embed[c_1], ..., embed[c_k])         (k*D)
//   h1     = tanh(w1 x + b1)                              (H)   w1: Muon
//   h2     = tanh(w2 h1 + b2)                             (H)   w2: Muon
//   y      = norm * h2 / rms(h2)                          (H)   RMSNorm
//   logits = head y                                       (V)
//   loss   = -log softmax(logits)[next]
//
// The two hidden matrices are Muon's; the embedding, the biases, the norm
// gain and the output head are AdamW's, as in the usual Muon recipe.
// Computation is templated on the scalar: training runs in f32, the
// gradient check in f64.
//
//===----------------------------------------------------------------------===//
#ifndef MUON_EXAMPLES_TRAINER_CHARMODEL_H
#define MUON_EXAMPLES_TRAINER_CHARMODEL_H

#include <cstdint>
#include <string>
#include <vector>

namespace trainer {

constexpr int kContext = 8, kEmbed = 16, kHidden = 128;

/// The characters the model knows; others read as a space.
const std::string &alphabet();
int vocabulary();
/// The text as alphabet indices.
std::vector<int> encode(const std::string &text);

/// One parameter: its name, shape and optimizer ("muon" or "adamw", the
/// spec's params[i].optimizer).
struct ParamShape {
  std::string name;
  std::vector<int64_t> shape;
  const char *optimizer;
};
/// The model's parameters, in the order every vector below keeps.
const std::vector<ParamShape> &paramShapes();
int64_t elementsOf(const ParamShape &p);

/// Whole parameter tensors (row-major), one per paramShapes() entry.
template <typename T> using Tensors = std::vector<std::vector<T>>;

/// Deterministic initial values (the same for any seed on every rank).
Tensors<float> initialParams(uint64_t seed);

/// The `count` training positions (indices of the predicted character) of
/// group `group` of step `step`: the same whatever the number of ranks.
std::vector<int64_t> batchPositions(uint64_t seed, int64_t step, int group,
                                    int count, int64_t textLength);

/// Adds the gradient of the summed loss over `positions` to `grads` (same
/// shapes as `params`, zeroed by the caller) and returns that summed loss.
template <typename T>
T lossAndGradient(const Tensors<T> &params, const std::vector<int> &text,
                  const std::vector<int64_t> &positions, Tensors<T> &grads);

} // namespace trainer

#endif // MUON_EXAMPLES_TRAINER_CHARMODEL_H
