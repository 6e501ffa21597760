// Optimizers (AdamW, SGD with momentum) and the warm-up + cosine learning-rate schedule.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trainer/kernels_math.h"

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

/// The per-step AdamW constants for update number `step` (0-based): the scheduled learning rate,
/// bias corrections 1 - beta^(step+1). Shared by the CPU loop and the CUDA kernel.
math::AdamWStep AdamWConstants(const OptimizerConfig& config, int64_t step);

/// Optimizer state for the elements [state_begin, state_end) of a flat parameter buffer: first
/// moment (or SGD momentum) and second moment (AdamW only). With the full range every rank holds
/// all the state; with a block per rank (ZeRO-1, Rajbhandari et al. 2020) each rank updates and
/// stores only its shard.
class Optimizer {
 public:
  /// state_end defaults to parameter_count. Throws std::invalid_argument on a bad range.
  Optimizer(OptimizerConfig config, size_t parameter_count, size_t state_begin = 0, size_t state_end = SIZE_MAX);
  size_t state_begin() const { return state_begin_; }
  size_t state_end() const { return state_end_; }

  const OptimizerConfig& config() const { return config_; }
  /// Applies update number `step` (0-based; the bias correction uses step+1) to
  /// params[begin,end) from grads[begin,end), a range inside [state_begin, state_end). Parameter
  /// and gradient buffers hold the full parameter_count elements; the moments hold the state range.
  void Step(std::span<float> params, std::span<const float> grads, int64_t step, size_t begin, size_t end);

  std::vector<float>& first_moment() { return m_; }
  std::vector<float>& second_moment() { return v_; }
  const std::vector<float>& first_moment() const { return m_; }
  const std::vector<float>& second_moment() const { return v_; }

 private:
  OptimizerConfig config_;
  size_t state_begin_ = 0, state_end_ = 0;
  std::vector<float> m_, v_;
};

}  // namespace mltrain
