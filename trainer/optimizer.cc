#include "trainer/optimizer.h"

#include <algorithm>
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

namespace {
// The update loops over [begin, end): the bulk of the optimizer's time, vectorized (this file is
// built with -O3 -fno-math-errno -ffp-contract=off, see CMakeLists.txt) and cloned for AVX-512, AVX2 and baseline
// x86-64, picked at load time. Vector sqrt and division are correctly rounded, so every clone gives
// the same bits as the scalar loop.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MLTRAIN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define MLTRAIN_CLONES
#endif

MLTRAIN_CLONES void AdamWRange(const math::AdamWStep st, const float* __restrict g, float* __restrict p,
                               float* __restrict m, float* __restrict v, size_t n) {
  for (size_t i = 0; i < n; ++i) math::AdamWUpdate(st, g[i], p[i], m[i], v[i]);
}

MLTRAIN_CLONES void SgdRange(float lr, float mu, float wd, const float* __restrict g, float* __restrict p,
                             float* __restrict m, size_t n) {
  for (size_t i = 0; i < n; ++i) math::SgdMomentumUpdate(lr, mu, wd, g[i], p[i], m[i]);
}

}  // namespace

math::AdamWStep AdamWConstants(const OptimizerConfig& c, int64_t step) {
  const double t = static_cast<double>(step + 1);
  return math::AdamWStep{static_cast<float>(LearningRateAt(c, step)), static_cast<float>(c.beta1),
                         static_cast<float>(c.beta2), static_cast<float>(1.0 - std::pow(c.beta1, t)),
                         static_cast<float>(1.0 - std::pow(c.beta2, t)), static_cast<float>(c.eps),
                         static_cast<float>(c.weight_decay)};
}

Optimizer::Optimizer(OptimizerConfig config, size_t parameter_count, size_t state_begin, size_t state_end)
    : config_(config), state_begin_(state_begin), state_end_(std::min(state_end, parameter_count)) {
  if (state_begin_ > state_end_) throw std::invalid_argument("Optimizer: state range begins after it ends");
  const size_t n = state_end_ - state_begin_;
  m_.assign(n, 0.0f);
  v_.assign(config.kind == OptimizerKind::kAdamW ? n : 0, 0.0f);
}

void Optimizer::Step(std::span<float> params, std::span<const float> grads, int64_t step, size_t begin, size_t end) {
  if (end > params.size() || end > grads.size() || begin < state_begin_ || end > state_end_ || begin > end)
    throw std::invalid_argument("Optimizer::Step: range out of bounds");
  const size_t off = state_begin_;  // moments are indexed by parameter index - state_begin
  const float lr = static_cast<float>(LearningRateAt(config_, step));
  const float wd = static_cast<float>(config_.weight_decay);
  if (config_.kind == OptimizerKind::kAdamW) {
    AdamWRange(AdamWConstants(config_, step), grads.data() + begin, params.data() + begin, m_.data() + (begin - off),
               v_.data() + (begin - off), end - begin);
  } else {
    SgdRange(lr, static_cast<float>(config_.momentum), wd, grads.data() + begin, params.data() + begin,
             m_.data() + (begin - off), end - begin);
  }
}

}  // namespace mltrain
