#include "trainer/mlp.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "trainer/kernels_math.h"
#include "trainer/sampler.h"

namespace mltrain {

Precision ParsePrecision(const std::string& name) {
  if (name == "fp32") return Precision::kFp32;
  if (name == "bf16") return Precision::kBf16;
  throw std::invalid_argument("unknown precision '" + name + "' (expected fp32 or bf16)");
}

std::string PrecisionName(Precision p) { return p == Precision::kBf16 ? "bf16" : "fp32"; }

Mlp::Mlp(std::vector<int> layer_sizes, Precision precision) : sizes_(std::move(layer_sizes)), precision_(precision) {
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

BatchStats Mlp::Loss(const uint8_t* y, int n, float grad_scale) {
  BatchStats stats;
  const int classes = layers_.back().out;
  const float* logits = acts_.back().data();
  if (grad_scale != 0.0f) delta_.resize(static_cast<size_t>(n) * classes);
  for (int i = 0; i < n; ++i) {
    const size_t row = static_cast<size_t>(i) * classes;
    math::XentRow r = math::SoftmaxXentRow(logits + row, classes, y[i], grad_scale,
                                           grad_scale != 0.0f ? delta_.data() + row : nullptr);
    stats.loss_sum += r.loss;
    stats.correct += r.argmax == y[i] ? 1 : 0;
  }
  return stats;
}

void Mlp::Forward(const float* params, const float* x, int n) {
  const bool bf16 = precision_ == Precision::kBf16;
  const float* input = x;
  if (bf16) {
    xq_.resize(static_cast<size_t>(n) * sizes_.front());
    for (size_t i = 0; i < xq_.size(); ++i) xq_[i] = math::RoundBf16(x[i]);
    input = xq_.data();
    wq_.resize(parameter_count_);
    for (const LayerLayout& L : layers_)
      for (size_t i = L.weight_offset; i < L.bias_offset; ++i) wq_[i] = math::RoundBf16(params[i]);
  }
  const float* weights = bf16 ? wq_.data() : params;
  for (size_t l = 0; l < layers_.size(); ++l) {
    const LayerLayout& L = layers_[l];
    std::vector<float>& out = acts_[l];
    out.resize(static_cast<size_t>(n) * L.out);
    // out (n x out) = input (n x in) * W^T (in x out), then one fused pass: + bias, ReLU, rounding.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, L.out, L.in, 1.0f, input, L.in,
                weights + L.weight_offset, L.in, 0.0f, out.data(), L.out);
    const float* bias = params + L.bias_offset;
    const bool hidden = l + 1 < layers_.size();
    for (int i = 0; i < n; ++i) {
      float* row = out.data() + static_cast<size_t>(i) * L.out;
      if (!hidden) {
        for (int o = 0; o < L.out; ++o) row[o] += bias[o];
      } else if (bf16) {
        for (int o = 0; o < L.out; ++o) row[o] = math::RoundBf16(math::Relu(row[o] + bias[o]));
      } else {
        for (int o = 0; o < L.out; ++o) row[o] = math::Relu(row[o] + bias[o]);
      }
    }
    input = out.data();
  }
}

BatchStats Mlp::ForwardBackward(std::span<const float> params, const float* x, const uint8_t* y, int n,
                                float grad_scale, std::span<float> grad) {
  if (params.size() != parameter_count_ || grad.size() < parameter_count_)
    throw std::invalid_argument("ForwardBackward: parameter or gradient buffer has wrong size");
  if (n <= 0) return {};
  const bool bf16 = precision_ == Precision::kBf16;
  Forward(params.data(), x, n);
  BatchStats stats = Loss(y, n, grad_scale);  // delta_ = dL/dlogits * grad_scale
  const float* weights = bf16 ? wq_.data() : params.data();
  for (size_t l = layers_.size(); l-- > 0;) {
    const LayerLayout& L = layers_[l];
    const float* input = l == 0 ? (bf16 ? xq_.data() : x) : acts_[l - 1].data();
    // Bias gradient from the fp32 delta, then (bf16) the delta is rounded for the two products.
    float* db = grad.data() + L.bias_offset;
    for (int i = 0; i < n; ++i) {
      float* d = delta_.data() + static_cast<size_t>(i) * L.out;
      for (int o = 0; o < L.out; ++o) db[o] += d[o];
      if (bf16)
        for (int o = 0; o < L.out; ++o) d[o] = math::RoundBf16(d[o]);
    }
    // dW (out x in) += delta^T (out x n) * input (n x in)
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L.out, L.in, n, 1.0f, delta_.data(), L.out, input, L.in,
                1.0f, grad.data() + L.weight_offset, L.in);
    if (l == 0) break;
    // delta_prev (n x in) = delta (n x out) * W (out x in), masked by ReLU'(pre-activation).
    delta_prev_.resize(static_cast<size_t>(n) * L.in);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, L.in, L.out, 1.0f, delta_.data(), L.out,
                weights + L.weight_offset, L.in, 0.0f, delta_prev_.data(), L.in);
    const float* a = acts_[l - 1].data();
    for (size_t i = 0; i < delta_prev_.size(); ++i) delta_prev_[i] = math::ReluBackward(delta_prev_[i], a[i]);
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
    Forward(params.data(), x + start * sizes_.front(), count);
    BatchStats s = Loss(y + start, count, 0.0f);
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
  }
  return total;
}

}  // namespace mltrain
