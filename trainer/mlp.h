// A multi-layer perceptron classifier (ReLU hidden layers, softmax cross-entropy) on OpenBLAS sgemm.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mltrain {

/// Sums over a batch: the cross-entropy loss (nats) and the number of correct argmax predictions.
struct BatchStats {
  double loss_sum = 0;
  int64_t correct = 0;
};

/// Arithmetic of the matrix products: fp32 throughout, or bf16 inputs with fp32 accumulation (what
/// tensor cores do): weights, layer inputs and back-propagated gradients are rounded to bf16
/// (round-to-nearest-even, math::RoundBf16) before each product; master weights, biases, the
/// loss, the gradient buffer and the optimizer stay fp32.
enum class Precision { kFp32, kBf16 };

/// Parses "fp32" or "bf16"; throws std::invalid_argument naming the value otherwise.
Precision ParsePrecision(const std::string& name);
std::string PrecisionName(Precision p);

/// Offsets of one dense layer's tensors inside the flat parameter buffer.
struct LayerLayout {
  int in = 0, out = 0;
  size_t weight_offset = 0;  ///< out x in, row-major
  size_t bias_offset = 0;    ///< out
};

/// MLP with layer sizes {input, hidden..., classes}, e.g. {784, 256, 128, 10}.
/// All parameters live in one flat fp32 buffer (per layer: weights then biases) so the gradient is
/// one buffer for the all-reduce and one tensor for checkpoints. Not thread-safe (owns scratch).
class Mlp {
 public:
  /// Throws std::invalid_argument when fewer than two sizes are given or a size is < 1.
  explicit Mlp(std::vector<int> layer_sizes, Precision precision = Precision::kFp32);
  Precision precision() const { return precision_; }

  const std::vector<int>& layer_sizes() const { return sizes_; }
  const std::vector<LayerLayout>& layers() const { return layers_; }
  size_t parameter_count() const { return parameter_count_; }

  /// He/Kaiming-uniform weights (bound sqrt(6/fan_in), He et al. 2015) and zero biases, drawn from
  /// a SplitMix64 stream seeded by `seed` (identical on every rank and platform).
  void Initialize(std::span<float> params, uint64_t seed) const;

  /// Forward and backward pass over n samples (x: n x input row-major, y: n labels).
  /// Adds grad_scale * d(sum of per-sample losses)/d(params) into `grad` (which is not cleared), so
  /// calling it per micro-batch with grad_scale = 1/global_batch accumulates the mean gradient.
  BatchStats ForwardBackward(std::span<const float> params, const float* x, const uint8_t* y, int n,
                             float grad_scale, std::span<float> grad);

  /// Forward pass only, over n samples, processed in chunks of at most 1024.
  BatchStats Evaluate(std::span<const float> params, const float* x, const uint8_t* y, int64_t n);

 private:
  /// Logits of n samples into acts_.back(); with bf16, also fills xq_ and wq_ (rounded operands).
  void Forward(const float* params, const float* x, int n);
  /// Loss and accuracy of the logits in acts_.back(); unless grad_scale is 0, the scaled loss
  /// gradient w.r.t. the logits goes to delta_.
  BatchStats Loss(const uint8_t* y, int n, float grad_scale);

  std::vector<int> sizes_;
  Precision precision_ = Precision::kFp32;
  std::vector<LayerLayout> layers_;
  size_t parameter_count_ = 0;
  std::vector<std::vector<float>> acts_;  // per layer output (post-ReLU for hidden, logits for last)
  std::vector<float> delta_, delta_prev_;
  std::vector<float> xq_, wq_;  // bf16-rounded input and weights (Precision::kBf16 only)
};

}  // namespace mltrain
