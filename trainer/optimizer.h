// Optimizers (AdamW, SGD with momentum) and the warm-up + cosine learning-rate schedule.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace mltrain {

enum class OptimizerKind { kAdamW, kSgdMomentum };

/// Parses "adamw" or "sgd"; throws std::invalid_argument naming the value otherwise.
OptimizerKind ParseOptimizerKind(const std::string& name);
std::string OptimizerKindName(OptimizerKind kind);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kAdamW;
  double lr = 1e-3;              ///< peak learning rate
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  ///< AdamW moments (Kingma & Ba 2015)
  double momentum = 0.9;         ///< SGD heavy-ball momentum
  double weight_decay = 1e-4;    ///< AdamW: decoupled (Loshchilov & Hutter 2019); SGD: L2 added to the gradient
  int64_t warmup_steps = 0;      ///< linear warm-up from lr/warmup_steps to lr
  int64_t total_steps = 1;       ///< end of the cosine decay
  double min_lr_ratio = 0.0;     ///< the decay ends at lr * min_lr_ratio
};

/// Learning rate for optimizer step `step` (0-based): linear warm-up over warmup_steps, then
/// half-cosine decay to lr*min_lr_ratio at total_steps (SGDR, Loshchilov & Hutter 2017, one cycle).
double LearningRateAt(const OptimizerConfig& config, int64_t step);

/// Optimizer state for a flat parameter buffer: first moment (or SGD momentum) and second moment.
/// Step() updates a contiguous element range so a rank can own one shard of the state (ZeRO-1).
class Optimizer {
 public:
  Optimizer(OptimizerConfig config, size_t parameter_count);

  const OptimizerConfig& config() const { return config_; }
  /// Applies update number `step` (0-based; the bias correction uses step+1) to
  /// params[begin,end) from grads[begin,end). Buffers hold the full parameter_count elements.
  void Step(std::span<float> params, std::span<const float> grads, int64_t step, size_t begin, size_t end);

  std::vector<float>& first_moment() { return m_; }
  std::vector<float>& second_moment() { return v_; }
  const std::vector<float>& first_moment() const { return m_; }
  const std::vector<float>& second_moment() const { return v_; }

 private:
  OptimizerConfig config_;
  std::vector<float> m_, v_;
};

}  // namespace mltrain
