// The shared element-wise maths (trainer/kernels_math.h) that the CPU path and the CUDA kernels
// both call: bf16 rounding against hand-computed bit patterns (ties, subnormals, inf, NaN),
// softmax cross-entropy, the optimizer updates, and the bf16 emulation of the CPU model.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "trainer/kernels_math.h"
#include "trainer/mlp.h"
#include "trainer/optimizer.h"

using namespace mltrain;
using mltrain::math::Bf16Bits;

namespace {
float F(uint32_t bits) { return math::BitsFloat(bits); }
}  // namespace

TEST_CASE("bf16 rounding is round-to-nearest-even on the bits", "[trainer][bf16]") {
  CHECK(Bf16Bits(1.0f) == 0x3F80);
  CHECK(Bf16Bits(F(0x3F807FFF)) == 0x3F80);  // just below half an ulp: down
  CHECK(Bf16Bits(F(0x3F808000)) == 0x3F80);  // exactly half, kept bit even: stays
  CHECK(Bf16Bits(F(0x3F808001)) == 0x3F81);  // just above half: up
  CHECK(Bf16Bits(F(0x3F818000)) == 0x3F82);  // exactly half, kept bit odd: up to even
  CHECK(Bf16Bits(F(0xBF808000)) == 0xBF80);  // the sign does not change the rule
  CHECK(Bf16Bits(F(0xBF818000)) == 0xBF82);
  CHECK(Bf16Bits(F(0x3FFF8000)) == 0x4000);  // the carry ripples into the exponent: 1.99609375 -> 2
  CHECK(Bf16Bits(0.0f) == 0x0000);
  CHECK(Bf16Bits(-0.0f) == 0x8000);
  // pi = 0x40490FDB -> 0x4049 (3.140625), 1/3 = 0x3EAAAAAB -> 0x3EAB (0.333984375)
  CHECK(Bf16Bits(3.14159265f) == 0x4049);
  CHECK(math::RoundBf16(1.0f / 3.0f) == 0.333984375f);
}

TEST_CASE("bf16 rounding of subnormals, overflow, infinities and NaN", "[trainer][bf16]") {
  // bf16 keeps fp32's exponent: fp32 subnormals round at bit 16 like everything else.
  CHECK(Bf16Bits(F(0x00000001)) == 0x0000);  // 2^-149 is far below half of bf16's 2^-133
  CHECK(Bf16Bits(F(0x00008000)) == 0x0000);  // exactly half of the smallest bf16 subnormal: to even (0)
  CHECK(Bf16Bits(F(0x00008001)) == 0x0001);
  CHECK(Bf16Bits(F(0x00018000)) == 0x0002);  // half between 1 and 2 ulps: to even (2)
  CHECK(Bf16Bits(F(0x007FFFFF)) == 0x0080);  // the largest fp32 subnormal becomes the smallest normal
  CHECK(Bf16Bits(F(0x80008001)) == 0x8001);
  CHECK(Bf16Bits(F(0x7F7F7FFF)) == 0x7F7F);  // rounds down to the largest finite bf16 (3.3895e38)
  CHECK(Bf16Bits(std::numeric_limits<float>::max()) == 0x7F80);  // past max + half ulp: inf
  CHECK(Bf16Bits(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(Bf16Bits(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(Bf16Bits(F(0x7FC00000)) == 0x7FC0);  // quiet NaN
  CHECK(Bf16Bits(F(0x7F800001)) == 0x7FC0);  // a NaN whose payload sits in the dropped bits stays NaN
  CHECK(Bf16Bits(F(0xFF800001)) == 0xFFC0);  // with its sign
  CHECK(std::isnan(math::RoundBf16(std::nanf(""))));
  CHECK(math::Bf16ToFloat(0x7F7F) == F(0x7F7F0000));
}

TEST_CASE("bf16 rounding agrees with nearest-value search on many floats", "[trainer][bf16]") {
  // For every tested x: the result is one of the two bf16 neighbours, the nearer one, and on a tie
  // the one with an even last bit.
  uint32_t state = 12345;
  for (int i = 0; i < 200000; ++i) {
    state = state * 1664525u + 1013904223u;
    uint32_t bits = state % 0x7F7F0000u;  // finite, positive, below the largest finite bf16
    float x = F(bits);
    float lo = F(bits & 0xFFFF0000u), hi = F((bits & 0xFFFF0000u) + 0x10000u);
    float r = math::RoundBf16(x);
    double dlo = static_cast<double>(x) - lo, dhi = static_cast<double>(hi) - x;
    float want = dlo < dhi ? lo : dhi < dlo ? hi : (((bits >> 16) & 1u) == 0 ? lo : hi);
    INFO("x bits " << std::hex << bits);
    REQUIRE(r == want);
  }
}

TEST_CASE("ReLU and its backward pass", "[trainer][bf16]") {
  CHECK(math::Relu(2.5f) == 2.5f);
  CHECK(math::Relu(-1.0f) == 0.0f);
  CHECK(math::Relu(0.0f) == 0.0f);
  CHECK(std::isnan(math::Relu(std::nanf(""))));
  CHECK(math::ReluBackward(3.0f, 0.5f) == 3.0f);
  CHECK(math::ReluBackward(3.0f, 0.0f) == 0.0f);
}

TEST_CASE("softmax cross-entropy of one row: loss, argmax and gradient", "[trainer][bf16]") {
  const float z[3] = {1.0f, 2.0f, 3.0f};
  float dz[3];
  auto r = math::SoftmaxXentRow(z, 3, 0, 0.5f, dz);
  const double s = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  CHECK(r.loss == Approx(std::log(s) - 1.0).epsilon(1e-12));
  CHECK(r.argmax == 2);
  CHECK(dz[0] == Approx((std::exp(1.0) / s - 1.0) * 0.5).epsilon(1e-6));
  CHECK(dz[1] == Approx(std::exp(2.0) / s * 0.5).epsilon(1e-6));
  CHECK(dz[2] == Approx(std::exp(3.0) / s * 0.5).epsilon(1e-6));
  // Huge logits neither overflow nor lose the gradient.
  const float big[2] = {1e30f, -1e30f};
  auto b = math::SoftmaxXentRow(big, 2, 1, 1.0f, dz);
  CHECK(std::isfinite(b.loss));
  CHECK(dz[0] == 1.0f);
  CHECK(dz[1] == -1.0f);
  CHECK(math::SoftmaxXentRow(z, 3, 2, 1.0f, nullptr).argmax == 2);  // no gradient wanted
}

TEST_CASE("AdamW and SGD updates follow their formulas", "[trainer][bf16]") {
  OptimizerConfig c;
  c.lr = 0.1;
  c.weight_decay = 0.01;
  c.total_steps = 1;
  math::AdamWStep st = AdamWConstants(c, 0);
  CHECK(st.bias1 == Approx(0.1f));
  CHECK(st.bias2 == Approx(0.001f));
  float p = 1.0f, m = 0, v = 0;
  math::AdamWUpdate(st, 0.5f, p, m, v);
  CHECK(m == Approx(0.05f).epsilon(1e-4));
  CHECK(v == Approx(0.00025f).epsilon(1e-4));  // 1 - 0.999f is 0.00100005 in fp32
  // First step: m_hat = g, v_hat = g^2, so p -= lr * (sign(g) + wd * p).
  CHECK(p == Approx(1.0f - 0.1f * (0.5f / (0.5f + 1e-8f) + 0.01f * 1.0f)));
  float q = 2.0f, mom = 1.0f;
  math::SgdMomentumUpdate(0.1f, 0.9f, 0.01f, 0.5f, q, mom);
  CHECK(mom == Approx(0.9f + 0.5f + 0.02f));
  CHECK(q == Approx(2.0f - 0.1f * 1.42f));
}

TEST_CASE("bf16 emulation: products see bf16 operands and accumulate in fp32", "[trainer][bf16]") {
  // One layer, 3 inputs, 2 classes: the bf16 logits equal fp32 arithmetic on rounded operands.
  Mlp fp32({3, 2}), bf16({3, 2}, Precision::kBf16);
  std::vector<float> params = {1.001f, -0.3337f, 0.77777f, 0.1f, 0.2f, 0.30001f, 0.01f, -0.02f};
  std::vector<float> x = {0.12345f, -1.5f, 2.71828f};
  std::vector<uint8_t> y = {1};
  std::vector<float> g32(params.size(), 0.0f), g16(params.size(), 0.0f);
  auto s32 = fp32.ForwardBackward(params, x.data(), y.data(), 1, 1.0f, g32);
  auto s16 = bf16.ForwardBackward(params, x.data(), y.data(), 1, 1.0f, g16);
  // The loss from hand-rounded operands.
  double z[2];
  for (int o = 0; o < 2; ++o) {
    double acc = 0;
    for (int i = 0; i < 3; ++i) acc += static_cast<double>(math::RoundBf16(params[o * 3 + i])) * math::RoundBf16(x[i]);
    z[o] = static_cast<float>(acc) + params[6 + o];
  }
  const double zmax = std::max(z[0], z[1]);
  const double want = std::log(std::exp(z[0] - zmax) + std::exp(z[1] - zmax)) + zmax - z[1];
  CHECK(s16.loss_sum == Approx(want).epsilon(1e-6));
  CHECK(s16.loss_sum != s32.loss_sum);  // the rounding is really applied
  // Gradients stay close to fp32's (within bf16's ~3 significant digits).
  for (size_t i = 0; i < params.size(); ++i) CHECK(g16[i] == Approx(g32[i]).epsilon(0.02).margin(1e-3));
  CHECK_THROWS_WITH(ParsePrecision("fp16"), "unknown precision 'fp16' (expected fp32 or bf16)");
}
