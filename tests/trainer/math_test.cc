// MLP gradients, optimizers, the LR schedule and the data order.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

#include "trainer/mlp.h"
#include "trainer/optimizer.h"
#include "trainer/sampler.h"

using namespace mltrain;

namespace {

double LossOf(Mlp& model, const std::vector<float>& params, const std::vector<float>& x, const std::vector<uint8_t>& y) {
  return model.Evaluate(params, x.data(), y.data(), static_cast<int64_t>(y.size())).loss_sum / static_cast<double>(y.size());
}

}  // namespace

TEST_CASE("MLP gradient matches central finite differences", "[trainer][mlp]") {
  Mlp model({6, 7, 5, 4});
  const int n = 9;
  std::vector<float> params(model.parameter_count());
  model.Initialize(params, 42);
  SplitMix64 rng(7);
  for (float& p : params) p += static_cast<float>(rng.NextUnit() * 0.2 - 0.1);  // non-zero biases too
  std::vector<float> x(n * 6);
  for (float& v : x) v = static_cast<float>(rng.NextUnit() * 2 - 1);
  std::vector<uint8_t> y(n);
  for (auto& v : y) v = static_cast<uint8_t>(rng.NextBelow(4));

  std::vector<float> grad(model.parameter_count(), 0.0f);
  model.ForwardBackward(params, x.data(), y.data(), n, 1.0f / n, grad);

  const float h = 1e-3f;
  double worst = 0;
  for (size_t i = 0; i < params.size(); ++i) {
    std::vector<float> plus = params, minus = params;
    plus[i] += h;
    minus[i] -= h;
    double numeric = (LossOf(model, plus, x, y) - LossOf(model, minus, x, y)) / (2.0 * h);
    double err = std::abs(numeric - grad[i]) / std::max({std::abs(numeric), std::abs(static_cast<double>(grad[i])), 1e-2});
    worst = std::max(worst, err);
  }
  CHECK(worst < 2e-2);
}

TEST_CASE("ForwardBackward accumulates: two half batches equal one full batch", "[trainer][mlp]") {
  Mlp model({4, 8, 3});
  std::vector<float> params(model.parameter_count());
  model.Initialize(params, 1);
  std::vector<float> x(8 * 4);
  SplitMix64 rng(3);
  for (float& v : x) v = static_cast<float>(rng.NextUnit());
  std::vector<uint8_t> y{0, 1, 2, 0, 1, 2, 2, 1};
  std::vector<float> full(params.size(), 0.0f), halves(params.size(), 0.0f);
  model.ForwardBackward(params, x.data(), y.data(), 8, 1.0f / 8, full);
  model.ForwardBackward(params, x.data(), y.data(), 4, 1.0f / 8, halves);
  model.ForwardBackward(params, x.data() + 16, y.data() + 4, 4, 1.0f / 8, halves);
  for (size_t i = 0; i < full.size(); ++i) REQUIRE(halves[i] == Approx(full[i]).margin(1e-6));
}

TEST_CASE("MLP rejects bad shapes", "[trainer][mlp]") {
  CHECK_THROWS_AS(Mlp({784}), std::invalid_argument);
  CHECK_THROWS_AS(Mlp({784, 0, 10}), std::invalid_argument);
  Mlp model({3, 2});
  CHECK(model.parameter_count() == 3 * 2 + 2);
}

TEST_CASE("Learning rate warms up linearly, then decays along a cosine", "[trainer][optimizer]") {
  OptimizerConfig c;
  c.lr = 1.0;
  c.warmup_steps = 10;
  c.total_steps = 110;
  c.min_lr_ratio = 0.1;
  CHECK(LearningRateAt(c, 0) == Approx(0.1));
  CHECK(LearningRateAt(c, 9) == Approx(1.0));
  CHECK(LearningRateAt(c, 10) == Approx(1.0));
  CHECK(LearningRateAt(c, 60) == Approx(0.1 + 0.9 * 0.5));
  CHECK(LearningRateAt(c, 110) == Approx(0.1));
  CHECK(LearningRateAt(c, 500) == Approx(0.1));
}

TEST_CASE("AdamW's first step moves each weight by lr against its gradient's sign", "[trainer][optimizer]") {
  OptimizerConfig c;
  c.lr = 0.01;
  c.weight_decay = 0;
  c.total_steps = 1000;
  Optimizer opt(c, 3);
  std::vector<float> p{1.0f, 1.0f, 1.0f}, g{0.5f, -2.0f, 0.0f};
  opt.Step(p, g, 0, 0, 3);
  CHECK(p[0] == Approx(0.99f).epsilon(1e-5));
  CHECK(p[1] == Approx(1.01f).epsilon(1e-5));
  CHECK(p[2] == 1.0f);
  // Decoupled weight decay shrinks the weight even with a zero gradient.
  c.weight_decay = 0.1;
  Optimizer decayed(c, 1);
  std::vector<float> q{2.0f}, zero{0.0f};
  decayed.Step(q, zero, 0, 0, 1);
  CHECK(q[0] == Approx(2.0f - 0.01f * 0.1f * 2.0f));
}

TEST_CASE("SGD with momentum follows the heavy-ball recurrence", "[trainer][optimizer]") {
  OptimizerConfig c;
  c.kind = OptimizerKind::kSgdMomentum;
  c.lr = 0.1;
  c.momentum = 0.9;
  c.weight_decay = 0;
  c.min_lr_ratio = 1.0;  // constant learning rate
  Optimizer opt(c, 1);
  std::vector<float> p{0.0f}, g{1.0f};
  opt.Step(p, g, 0, 0, 1);  // v = 1, p = -0.1
  opt.Step(p, g, 1, 0, 1);  // v = 1.9, p = -0.29
  CHECK(p[0] == Approx(-0.29f));
  CHECK(opt.second_moment().empty());
  CHECK(ParseOptimizerKind("sgd") == OptimizerKind::kSgdMomentum);
  CHECK_THROWS_WITH(ParseOptimizerKind("lion"), Catch::Contains("lion"));
}

TEST_CASE("An optimizer shard (ZeRO-1) updates only its state range", "[trainer][optimizer]") {
  OptimizerConfig c;
  c.total_steps = 10;
  Optimizer full(c, 10), shard(c, 10, 4, 7);
  CHECK(shard.first_moment().size() == 3);
  CHECK(shard.second_moment().size() == 3);
  std::vector<float> p1(10, 1.0f), p2(10, 1.0f), g(10);
  for (int i = 0; i < 10; ++i) g[i] = 0.1f * static_cast<float>(i - 5);
  full.Step(p1, g, 0, 0, 10);
  shard.Step(p2, g, 0, 4, 7);
  for (int i = 0; i < 10; ++i) CHECK(p2[i] == (i >= 4 && i < 7 ? p1[i] : 1.0f));
  CHECK(shard.first_moment()[0] == full.first_moment()[4]);
  CHECK_THROWS_AS(shard.Step(p2, g, 1, 0, 7), std::invalid_argument);
  CHECK_THROWS_AS(Optimizer(c, 10, 8, 5), std::invalid_argument);
}

TEST_CASE("Epoch order is a permutation fixed by seed and epoch", "[trainer][sampler]") {
  auto a = EpochPermutation(5, 0, 1000), b = EpochPermutation(5, 0, 1000), c = EpochPermutation(5, 1, 1000);
  CHECK(a == b);
  CHECK(a != c);
  CHECK(EpochPermutation(6, 0, 1000) != a);
  std::vector<uint32_t> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  std::vector<uint32_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0u);
  CHECK(sorted == iota);
}

TEST_CASE("Rank slices partition every global batch, whatever the world size", "[trainer][sampler]") {
  for (int world = 1; world <= 7; ++world) {
    for (int64_t batch : {7, 64, 100}) {
      if (batch < world) continue;
      int64_t next = 0;
      for (int r = 0; r < world; ++r) {
        SampleRange s = RankSlice(batch, r, world);
        REQUIRE(s.begin == next);  // contiguous, disjoint, in rank order
        REQUIRE(s.size() >= batch / world);
        REQUIRE(s.size() <= batch / world + 1);
        next = s.end;
      }
      REQUIRE(next == batch);
    }
  }
  CHECK_THROWS_AS(BlockRange(10, 3, 3), std::invalid_argument);
}
