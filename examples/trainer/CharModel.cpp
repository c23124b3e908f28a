//===- CharModel.cpp - A small character-level language model -------------===//
#include "CharModel.h"

#include <algorithm>
#include <cmath>

namespace trainer {

const std::string &alphabet() {
  static const std::string letters = "\n !',-.:;?abcdefghijklmnopqrstuvwxyz";
  return letters;
}

int vocabulary() { return static_cast<int>(alphabet().size()); }

std::vector<int> encode(const std::string &text) {
  std::vector<int> out;
  out.reserve(text.size());
  for (char c : text) {
    char lower = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
    size_t at = alphabet().find(lower);
    out.push_back(at == std::string::npos ? 1 : static_cast<int>(at));
  }
  return out;
}

const std::vector<ParamShape> &paramShapes() {
  static const std::vector<ParamShape> shapes = {
      {"embed", {vocabulary(), kEmbed}, "adamw"},
      {"w1", {kHidden, kContext * kEmbed}, "muon"},
      {"b1", {kHidden}, "adamw"},
      {"w2", {kHidden, kHidden}, "muon"},
      {"b2", {kHidden}, "adamw"},
      {"norm", {kHidden}, "adamw"},
      {"head", {vocabulary(), kHidden}, "adamw"},
  };
  return shapes;
}

int64_t elementsOf(const ParamShape &p) {
  int64_t n = 1;
  for (int64_t d : p.shape)
    n *= d;
  return n;
}

static uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/// Uniform in [-1, 1), from a hash (no state to keep in step).
static float uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  uint64_t h = mix(mix(mix(seed) ^ stream) ^ index);
  return static_cast<float>(static_cast<int64_t>(h >> 40) - (1 << 23)) /
         static_cast<float>(1 << 23);
}

Tensors<float> initialParams(uint64_t seed) {
  Tensors<float> params;
  const std::vector<ParamShape> &shapes = paramShapes();
  for (size_t p = 0; p < shapes.size(); ++p) {
    const ParamShape &s = shapes[p];
    std::vector<float> v(elementsOf(s));
    if (s.name == "norm") {
      std::fill(v.begin(), v.end(), 1.0f);
    } else if (s.name[0] == 'b') {
      std::fill(v.begin(), v.end(), 0.0f);
    } else {
      // Fan-in scaling keeps the activations in tanh's useful range.
      float scale = s.shape.size() == 2 && s.name != "embed"
                        ? std::sqrt(3.0f / static_cast<float>(s.shape[1]))
                        : 1.0f;
      for (size_t i = 0; i < v.size(); ++i)
        v[i] = scale * uniform(seed, p, i);
    }
    params.push_back(std::move(v));
  }
  return params;
}

std::vector<int64_t> batchPositions(uint64_t seed, int64_t step, int group,
                                    int count, int64_t textLength) {
  std::vector<int64_t> positions;
  uint64_t range = static_cast<uint64_t>(textLength - kContext);
  for (int i = 0; i < count; ++i)
    positions.push_back(
        kContext + static_cast<int64_t>(
                       mix(mix(mix(seed ^ 0xD47A) ^ step) ^
                           (static_cast<uint64_t>(group) << 20 | i)) %
                       range));
  return positions;
}

template <typename T>
T lossAndGradient(const Tensors<T> &params, const std::vector<int> &text,
                  const std::vector<int64_t> &positions, Tensors<T> &grads) {
  const int V = vocabulary(), D = kEmbed, H = kHidden, In = kContext * kEmbed;
  const std::vector<T> &embed = params[0], &w1 = params[1], &b1 = params[2],
                       &w2 = params[3], &b2 = params[4], &norm = params[5],
                       &head = params[6];
  std::vector<T> &gEmbed = grads[0], &gw1 = grads[1], &gb1 = grads[2],
                 &gw2 = grads[3], &gb2 = grads[4], &gNorm = grads[5],
                 &gHead = grads[6];
  std::vector<T> x(In), h1(H), h2(H), y(H), logits(V), dy(H), dh2(H), da2(H),
      dh1(H), da1(H), dx(In);
  T total = 0;
  for (int64_t pos : positions) {
    // Forward.
    for (int j = 0; j < kContext; ++j) {
      int c = text[pos - kContext + j];
      for (int e = 0; e < D; ++e)
        x[j * D + e] = embed[c * D + e];
    }
    for (int i = 0; i < H; ++i) {
      T a = b1[i];
      for (int k = 0; k < In; ++k)
        a += w1[i * In + k] * x[k];
      h1[i] = std::tanh(a);
    }
    for (int i = 0; i < H; ++i) {
      T a = b2[i];
      for (int k = 0; k < H; ++k)
        a += w2[i * H + k] * h1[k];
      h2[i] = std::tanh(a);
    }
    T meanSquare = 0;
    for (int i = 0; i < H; ++i)
      meanSquare += h2[i] * h2[i];
    meanSquare /= H;
    const T rms = std::sqrt(meanSquare + T(1e-6));
    for (int i = 0; i < H; ++i)
      y[i] = norm[i] * h2[i] / rms;
    T top = -INFINITY;
    for (int v = 0; v < V; ++v) {
      T l = 0;
      for (int k = 0; k < H; ++k)
        l += head[v * H + k] * y[k];
      logits[v] = l;
      top = std::max(top, l);
    }
    T sum = 0;
    for (int v = 0; v < V; ++v) {
      logits[v] = std::exp(logits[v] - top);
      sum += logits[v];
    }
    const int next = text[pos];
    total += std::log(sum) - std::log(logits[next]);
    // Backward: logits become d(loss)/d(logits) = softmax - onehot.
    for (int v = 0; v < V; ++v)
      logits[v] = logits[v] / sum - (v == next ? T(1) : T(0));
    std::fill(dy.begin(), dy.end(), T(0));
    for (int v = 0; v < V; ++v)
      for (int k = 0; k < H; ++k) {
        gHead[v * H + k] += logits[v] * y[k];
        dy[k] += head[v * H + k] * logits[v];
      }
    // RMSNorm: y = g * h / r, r = sqrt(mean(h^2) + eps).
    T dot = 0;
    for (int i = 0; i < H; ++i) {
      gNorm[i] += dy[i] * h2[i] / rms;
      dot += dy[i] * norm[i] * h2[i];
    }
    for (int i = 0; i < H; ++i)
      dh2[i] = norm[i] * dy[i] / rms - h2[i] * dot / (H * rms * rms * rms);
    for (int i = 0; i < H; ++i) {
      da2[i] = dh2[i] * (T(1) - h2[i] * h2[i]);
      gb2[i] += da2[i];
    }
    std::fill(dh1.begin(), dh1.end(), T(0));
    for (int i = 0; i < H; ++i)
      for (int k = 0; k < H; ++k) {
        gw2[i * H + k] += da2[i] * h1[k];
        dh1[k] += w2[i * H + k] * da2[i];
      }
    for (int i = 0; i < H; ++i) {
      da1[i] = dh1[i] * (T(1) - h1[i] * h1[i]);
      gb1[i] += da1[i];
    }
    std::fill(dx.begin(), dx.end(), T(0));
    for (int i = 0; i < H; ++i)
      for (int k = 0; k < In; ++k) {
        gw1[i * In + k] += da1[i] * x[k];
        dx[k] += w1[i * In + k] * da1[i];
      }
    for (int j = 0; j < kContext; ++j) {
      int c = text[pos - kContext + j];
      for (int e = 0; e < D; ++e)
        gEmbed[c * D + e] += dx[j * D + e];
    }
  }
  return total;
}

template float lossAndGradient<float>(const Tensors<float> &,
                                      const std::vector<int> &,
                                      const std::vector<int64_t> &,
                                      Tensors<float> &);
template double lossAndGradient<double>(const Tensors<double> &,
                                        const std::vector<int> &,
                                        const std::vector<int64_t> &,
                                        Tensors<double> &);

} // namespace trainer
