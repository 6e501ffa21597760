#include "trainer/mlp.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "trainer/sampler.h"

namespace mltrain {

Mlp::Mlp(std::vector<int> layer_sizes) : sizes_(std::move(layer_sizes)) {
  if (sizes_.size() < 2) throw std::invalid_argument("MLP needs at least an input and an output size");
  for (size_t i = 0; i < sizes_.size(); ++i) {
    if (sizes_[i] < 1) throw std::invalid_argument("MLP layer " + std::to_string(i) + " has size " + std::to_string(sizes_[i]));
  }
  size_t offset = 0;
  for (size_t l = 0; l + 1 < sizes_.size(); ++l) {
    LayerLayout layer;
    layer.in = sizes_[l];
    layer.out = sizes_[l + 1];
    layer.weight_offset = offset;
    offset += static_cast<size_t>(layer.in) * layer.out;
    layer.bias_offset = offset;
    offset += layer.out;
    layers_.push_back(layer);
  }
  parameter_count_ = offset;
  acts_.resize(layers_.size());
}

void Mlp::Initialize(std::span<float> params, uint64_t seed) const {
  if (params.size() != parameter_count_) throw std::invalid_argument("Initialize: parameter buffer has wrong size");
  SplitMix64 rng(seed);
  for (const LayerLayout& layer : layers_) {
    const float bound = std::sqrt(6.0f / static_cast<float>(layer.in));
    float* w = params.data() + layer.weight_offset;
    for (size_t i = 0; i < static_cast<size_t>(layer.in) * layer.out; ++i) {
      w[i] = static_cast<float>((rng.NextUnit() * 2.0 - 1.0) * bound);
    }
    std::fill_n(params.data() + layer.bias_offset, layer.out, 0.0f);
  }
}

BatchStats Mlp::Forward(const float* params, const float* x, const uint8_t* y, int n) {
  const float* input = x;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerLayout& L = layers_[l];
    std::vector<float>& out = acts_[l];
    out.resize(static_cast<size_t>(n) * L.out);
    const float* bias = params + L.bias_offset;
    for (int i = 0; i < n; ++i) std::copy_n(bias, L.out, out.data() + static_cast<size_t>(i) * L.out);
    // out (n x out) += input (n x in) * W^T (in x out)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, L.out, L.in, 1.0f, input, L.in,
                params + L.weight_offset, L.in, 1.0f, out.data(), L.out);
    if (l + 1 < layers_.size()) {
      for (float& v : out) v = v > 0.0f ? v : 0.0f;
    }
    input = out.data();
  }
  // Softmax cross-entropy on the logits; the last activation buffer becomes probabilities.
  BatchStats stats;
  const int classes = layers_.back().out;
  std::vector<float>& logits = acts_.back();
  for (int i = 0; i < n; ++i) {
    float* z = logits.data() + static_cast<size_t>(i) * classes;
    int argmax = static_cast<int>(std::max_element(z, z + classes) - z);
    float zmax = z[argmax];
    double sum = 0;
    for (int c = 0; c < classes; ++c) sum += std::exp(static_cast<double>(z[c] - zmax));
    double log_sum = std::log(sum) + zmax;
    stats.loss_sum += log_sum - z[y[i]];
    stats.correct += (argmax == y[i]) ? 1 : 0;
    for (int c = 0; c < classes; ++c) z[c] = static_cast<float>(std::exp(static_cast<double>(z[c]) - log_sum));
  }
  return stats;
}

BatchStats Mlp::ForwardBackward(std::span<const float> params, const float* x, const uint8_t* y, int n,
                                float grad_scale, std::span<float> grad) {
  if (params.size() != parameter_count_ || grad.size() < parameter_count_)
    throw std::invalid_argument("ForwardBackward: parameter or gradient buffer has wrong size");
  if (n <= 0) return {};
  BatchStats stats = Forward(params.data(), x, y, n);
  const int classes = layers_.back().out;
  // dL/dlogits = (softmax - onehot) * grad_scale
  delta_.assign(acts_.back().begin(), acts_.back().end());
  for (int i = 0; i < n; ++i) {
    float* d = delta_.data() + static_cast<size_t>(i) * classes;
    d[y[i]] -= 1.0f;
    for (int c = 0; c < classes; ++c) d[c] *= grad_scale;
  }
  for (size_t l = layers_.size(); l-- > 0;) {
    const LayerLayout& L = layers_[l];
    const float* input = l == 0 ? x : acts_[l - 1].data();
    // dW (out x in) += delta^T (out x n) * input (n x in)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L.out, L.in, n, 1.0f, delta_.data(), L.out, input, L.in,
                1.0f, grad.data() + L.weight_offset, L.in);
    float* db = grad.data() + L.bias_offset;
    for (int i = 0; i < n; ++i) {
      const float* d = delta_.data() + static_cast<size_t>(i) * L.out;
      for (int o = 0; o < L.out; ++o) db[o] += d[o];
    }
    if (l == 0) break;
    // delta_prev (n x in) = delta (n x out) * W (out x in), masked by ReLU'(pre-activation).
    delta_prev_.resize(static_cast<size_t>(n) * L.in);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, L.in, L.out, 1.0f, delta_.data(), L.out,
                params.data() + L.weight_offset, L.in, 0.0f, delta_prev_.data(), L.in);
    const std::vector<float>& a = acts_[l - 1];
    for (size_t i = 0; i < delta_prev_.size(); ++i) {
      if (a[i] <= 0.0f) delta_prev_[i] = 0.0f;
    }
    delta_.swap(delta_prev_);
  }
  return stats;
}

BatchStats Mlp::Evaluate(std::span<const float> params, const float* x, const uint8_t* y, int64_t n) {
  if (params.size() != parameter_count_) throw std::invalid_argument("Evaluate: parameter buffer has wrong size");
  BatchStats total;
  constexpr int64_t kChunk = 1024;
  for (int64_t start = 0; start < n; start += kChunk) {
    int count = static_cast<int>(std::min(kChunk, n - start));
    BatchStats s = Forward(params.data(), x + start * sizes_.front(), y + start, count);
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
  }
  return total;
}

}  // namespace mltrain
