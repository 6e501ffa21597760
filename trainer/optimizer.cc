#include "trainer/optimizer.h"

#include <cmath>
#include <numbers>
#include <stdexcept>

namespace mltrain {

OptimizerKind ParseOptimizerKind(const std::string& name) {
  if (name == "adamw") return OptimizerKind::kAdamW;
  if (name == "sgd") return OptimizerKind::kSgdMomentum;
  throw std::invalid_argument("unknown optimizer '" + name + "' (expected adamw or sgd)");
}

std::string OptimizerKindName(OptimizerKind kind) { return kind == OptimizerKind::kAdamW ? "adamw" : "sgd"; }

double LearningRateAt(const OptimizerConfig& c, int64_t step) {
  if (c.warmup_steps > 0 && step < c.warmup_steps) {
    return c.lr * static_cast<double>(step + 1) / static_cast<double>(c.warmup_steps);
  }
  int64_t decay_steps = c.total_steps - c.warmup_steps;
  if (decay_steps <= 0) return c.lr;
  double progress = std::min(1.0, static_cast<double>(step - c.warmup_steps) / static_cast<double>(decay_steps));
  double cosine = 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
  return c.lr * (c.min_lr_ratio + (1.0 - c.min_lr_ratio) * cosine);
}

Optimizer::Optimizer(OptimizerConfig config, size_t parameter_count)
    : config_(config), m_(parameter_count, 0.0f), v_(config.kind == OptimizerKind::kAdamW ? parameter_count : 0, 0.0f) {}

void Optimizer::Step(std::span<float> params, std::span<const float> grads, int64_t step, size_t begin, size_t end) {
  if (end > params.size() || end > grads.size() || end > m_.size() || begin > end)
    throw std::invalid_argument("Optimizer::Step: range out of bounds");
  const float lr = static_cast<float>(LearningRateAt(config_, step));
  const float wd = static_cast<float>(config_.weight_decay);
  if (config_.kind == OptimizerKind::kAdamW) {
    const float b1 = static_cast<float>(config_.beta1), b2 = static_cast<float>(config_.beta2);
    const double t = static_cast<double>(step + 1);
    const float bc1 = static_cast<float>(1.0 - std::pow(config_.beta1, t));
    const float bc2 = static_cast<float>(1.0 - std::pow(config_.beta2, t));
    const float eps = static_cast<float>(config_.eps);
    for (size_t i = begin; i < end; ++i) {
      float g = grads[i];
      m_[i] = b1 * m_[i] + (1.0f - b1) * g;
      v_[i] = b2 * v_[i] + (1.0f - b2) * g * g;
      float mhat = m_[i] / bc1, vhat = v_[i] / bc2;
      params[i] -= lr * (mhat / (std::sqrt(vhat) + eps) + wd * params[i]);
    }
  } else {
    const float mu = static_cast<float>(config_.momentum);
    for (size_t i = begin; i < end; ++i) {
      float g = grads[i] + wd * params[i];
      m_[i] = mu * m_[i] + g;
      params[i] -= lr * m_[i];
    }
  }
}

}  // namespace mltrain
