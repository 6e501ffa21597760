// The compute engines (trainer/engine.h): the CUDA engine's entry points without a device, and,
// where a CUDA device is visible, the CUDA engine against the CPU engine on the same batch (these
// cases pass with a warning elsewhere; gpu_check.sh runs them on GPU machines).
// The tests read device buffers only through SaveParams (after an SGD step with lr 1 and no
// momentum, params' = params - grad), so they need no CUDA headers.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "trainer/engine.h"
#include "trainer/sampler.h"

using namespace mltrain;

namespace {

EngineOptions SmallOptions(Precision precision, OptimizerKind kind) {
  EngineOptions o;
  o.layers = {20, 16, 8, 5};
  o.precision = precision;
  o.optimizer.kind = kind;
  o.optimizer.lr = kind == OptimizerKind::kSgdMomentum ? 1.0 : 1e-2;
  o.optimizer.momentum = 0.0;
  o.optimizer.weight_decay = 0.0;
  o.optimizer.total_steps = 10;
  o.extras = 3;
  return o;
}

/// ||a - b|| / ||b||.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

std::vector<float> InitialParams() {
  Mlp shape({20, 16, 8, 5});
  std::vector<float> params(shape.parameter_count());
  shape.Initialize(params, 11);
  return params;
}

struct Batch {
  std::vector<float> x;
  std::vector<uint8_t> y;
};

Batch RandomBatch(int n, int features, int classes, uint64_t seed) {
  SplitMix64 rng(seed);
  Batch b;
  for (int i = 0; i < n * features; ++i) b.x.push_back(static_cast<float>(rng.NextUnit() * 2 - 1));
  for (int i = 0; i < n; ++i) b.y.push_back(static_cast<uint8_t>(rng.NextBelow(static_cast<uint64_t>(classes))));
  return b;
}

/// Loads the same initial parameters, runs two micro-batches and one optimizer step over
/// [begin, end); returns the parameters afterwards and the summed batch stats.
std::vector<float> OneStep(ComputeEngine& e, const Batch& b, size_t begin, size_t end, BatchStats* stats) {
  std::vector<float> params = InitialParams();
  e.LoadParams(params);
  e.ZeroGrad();
  const int n = static_cast<int>(b.y.size()), half = n / 2;
  const float scale = 1.0f / static_cast<float>(n);
  BatchStats s1 = e.ForwardBackward(b.x.data(), b.y.data(), half, scale);
  BatchStats s2 = e.ForwardBackward(b.x.data() + static_cast<size_t>(half) * 20, b.y.data() + half, n - half, scale);
  stats->loss_sum = s1.loss_sum + s2.loss_sum;
  stats->correct = s1.correct + s2.correct;
  e.OptimizerStep(0, begin, end);
  e.SaveParams(params);
  return params;
}

}  // namespace

TEST_CASE("CUDA engine entry points say why there is no GPU engine", "[trainer][engine]") {
  if (CudaDeviceCount() > 0) {
    WARN("a CUDA device is visible: covered by the CUDA-vs-CPU cases");
    return;
  }
  EngineOptions o = SmallOptions(Precision::kBf16, OptimizerKind::kAdamW);
  if (CudaBuilt()) {
    CHECK_THROWS_WITH(MakeCudaEngine(o), Catch::Contains("no CUDA device visible"));
  } else {
    CHECK_THROWS_WITH(MakeCudaEngine(o), Catch::Contains("built without CUDA"));
  }
}

TEST_CASE("CUDA engine matches the CPU engine on one step", "[trainer][engine][cuda]") {
  if (CudaDeviceCount() == 0) {
    WARN("SKIPPED: no CUDA device visible");
    return;
  }
  for (Precision precision : {Precision::kFp32, Precision::kBf16}) {
    for (OptimizerKind kind : {OptimizerKind::kSgdMomentum, OptimizerKind::kAdamW}) {
      INFO("precision " << PrecisionName(precision) << ", optimizer " << OptimizerKindName(kind));
      EngineOptions o = SmallOptions(precision, kind);
      auto cpu = MakeCpuEngine(o);
      auto gpu = MakeCudaEngine(o);
      CHECK(gpu->Describe().rfind("cuda:0 " + PrecisionName(precision) + " (", 0) == 0);
      const size_t P = cpu->parameter_count();
      REQUIRE(gpu->parameter_count() == P);
      Batch b = RandomBatch(37, 20, 5, 3);
      BatchStats sc, sg;
      std::vector<float> pc = OneStep(*cpu, b, 0, P, &sc), pg = OneStep(*gpu, b, 0, P, &sg);
      CHECK(sg.loss_sum == Approx(sc.loss_sum).epsilon(precision == Precision::kBf16 ? 1e-3 : 1e-5));
      CHECK(std::abs(sg.correct - sc.correct) <= 1);
      if (kind == OptimizerKind::kSgdMomentum) {
        // SGD with lr 1 and no momentum or decay: params - params' is the gradient.
        const std::vector<float> p0 = InitialParams();
        std::vector<float> gc(P), gg(P);
        for (size_t i = 0; i < P; ++i) {
          gc[i] = p0[i] - pc[i];
          gg[i] = p0[i] - pg[i];
        }
        CHECK(RelativeError(gg, gc) < (precision == Precision::kBf16 ? 2e-2 : 1e-4));
      } else {
        // AdamW's first step moves each parameter by about lr * sign(grad): compare the parameters.
        CHECK(RelativeError(pg, pc) < 1e-2);
      }
      BatchStats ec = cpu->Evaluate(b.x.data(), b.y.data(), 37), eg = gpu->Evaluate(b.x.data(), b.y.data(), 37);
      CHECK(eg.loss_sum == Approx(ec.loss_sum).epsilon(precision == Precision::kBf16 ? 1e-2 : 1e-4));
    }
  }
}

TEST_CASE("CUDA engine: extras, moments and a ZeRO-1 state range round-trip", "[trainer][engine][cuda]") {
  if (CudaDeviceCount() == 0) {
    WARN("SKIPPED: no CUDA device visible");
    return;
  }
  EngineOptions o = SmallOptions(Precision::kFp32, OptimizerKind::kAdamW);
  Mlp shape(o.layers);
  const size_t P = shape.parameter_count();
  o.state_begin = P / 3;
  o.state_end = 2 * P / 3;
  auto gpu = MakeCudaEngine(o);
  std::vector<float> extras = {1.5f, -2.0f, 7.0f}, back(3);
  gpu->ZeroGrad();
  gpu->SetExtras(extras);
  gpu->GetExtras(back);
  CHECK(back == extras);
  CHECK(gpu->GradBuffer().size() == P + 3);
  const size_t state = o.state_end - o.state_begin;
  std::vector<float> m(state), v(state), m2, v2;
  for (size_t i = 0; i < state; ++i) {
    m[i] = static_cast<float>(i) * 0.5f;
    v[i] = static_cast<float>(i) + 1.0f;
  }
  gpu->LoadMoments(m, v);
  gpu->SaveMoments(&m2, &v2);
  CHECK(m2 == m);
  CHECK(v2 == v);
  Batch b = RandomBatch(16, 20, 5, 9);
  BatchStats s;
  const std::vector<float> before = InitialParams();
  std::vector<float> after = OneStep(*gpu, b, o.state_begin, o.state_end, &s);
  for (size_t i = 0; i < P; ++i) {
    const bool owned = i >= o.state_begin && i < o.state_end;
    if (!owned) CHECK(after[i] == before[i]);
  }
  CHECK_THROWS(gpu->OptimizerStep(1, 0, P));  // outside the state range
}
