// The element-wise maths of mltrain, once: every function here is compiled by g++ for the CPU path
// and by nvcc for the CUDA kernels (trainer/cuda/), so the two paths cannot drift apart and CPU
// unit tests cover everything but launch geometry and library calls. No allocation, no library
// calls beyond <cmath>/CUDA maths builtins; scalars in, scalars out.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define MLTRAIN_HD __host__ __device__ __forceinline__
#else
#define MLTRAIN_HD inline
#endif

namespace mltrain::math {

/// The bits of a float (memcpy, which nvcc and g++ both lower to a register move).
MLTRAIN_HD uint32_t FloatBits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  return u;
}
MLTRAIN_HD float BitsFloat(uint32_t u) {
  float x;
  std::memcpy(&x, &u, sizeof(x));
  return x;
}

/// bfloat16 bits of `x` rounded to nearest, ties to even (what tensor cores and
/// __float2bfloat16_rn do): add 0x7FFF plus the lowest kept bit, then truncate the low 16 bits.
/// NaN stays a quiet NaN with its sign; +-inf stays inf; values that round past the largest finite
/// bf16 (3.3895e38) become inf; fp32 subnormals round like any other value (bf16 keeps fp32's
/// exponent range, so they stay subnormal or become 0 / the smallest normal).
MLTRAIN_HD uint16_t Bf16Bits(float x) {
  uint32_t u = FloatBits(x);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0)
    return static_cast<uint16_t>((u >> 16) | 0x0040u);  // NaN: keep sign, force quiet
  u += 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>(u >> 16);
}

/// The float a bf16 bit pattern stands for (exact).
MLTRAIN_HD float Bf16ToFloat(uint16_t b) { return BitsFloat(static_cast<uint32_t>(b) << 16); }

/// `x` rounded to bf16 precision and returned as a float (Bf16ToFloat(Bf16Bits(x))).
MLTRAIN_HD float RoundBf16(float x) { return Bf16ToFloat(Bf16Bits(x)); }

/// ReLU, max(x, 0); NaN propagates as 0 never does: ReLU(NaN) = NaN.
MLTRAIN_HD float Relu(float x) { return x > 0.0f ? x : (x != x ? x : 0.0f); }

/// ReLU's backward pass given the layer's output a = ReLU(z): the incoming gradient where a > 0,
/// else 0 (the subgradient at 0 is 0, as in PyTorch).
MLTRAIN_HD float ReluBackward(float grad, float activation) { return activation > 0.0f ? grad : 0.0f; }

/// Result of softmax cross-entropy over one sample's logits.
struct XentRow {
  double loss = 0;   ///< -log softmax(z)[label], nats
  int argmax = 0;    ///< predicted class (first maximum)
};

/// Softmax cross-entropy for one sample: z[0..classes) logits, `label` in [0, classes). Unless dz
/// is null, writes dL/dz * grad_scale = (softmax(z) - onehot(label)) * grad_scale into it (dz may
/// alias z).
/// Computed in double after subtracting max(z), so it neither overflows nor underflows for any
/// finite logits.
MLTRAIN_HD XentRow SoftmaxXentRow(const float* z, int classes, int label, float grad_scale, float* dz) {
  XentRow r;
  float zmax = z[0];
  for (int c = 1; c < classes; ++c)
    if (z[c] > zmax) {
      zmax = z[c];
      r.argmax = c;
    }
  double sum = 0;
  for (int c = 0; c < classes; ++c) sum += exp(static_cast<double>(z[c] - zmax));
  const double log_sum = log(sum) + zmax;
  r.loss = log_sum - z[label];
  if (!dz) return r;
  for (int c = 0; c < classes; ++c) {
    const double p = exp(static_cast<double>(z[c]) - log_sum);
    dz[c] = static_cast<float>(p - (c == label ? 1.0 : 0.0)) * grad_scale;
  }
  return r;
}

/// Constants of one AdamW step (Loshchilov & Hutter 2019, decoupled weight decay), computed once
/// per step on the host: lr, betas, bias corrections 1 - beta^t for t = step + 1, eps, decay.
struct AdamWStep {
  float lr, beta1, beta2, bias1, bias2, eps, weight_decay;
};

/// One AdamW update of one parameter: m, v moments (updated in place), gradient g.
/// p -= lr * (m_hat / (sqrt(v_hat) + eps) + wd * p).
MLTRAIN_HD void AdamWUpdate(const AdamWStep& s, float g, float& p, float& m, float& v) {
  m = s.beta1 * m + (1.0f - s.beta1) * g;
  v = s.beta2 * v + (1.0f - s.beta2) * g * g;
  const float mhat = m / s.bias1, vhat = v / s.bias2;
  p -= s.lr * (mhat / (sqrtf(vhat) + s.eps) + s.weight_decay * p);
}

/// One SGD step with heavy-ball momentum and L2 decay added to the gradient:
/// m = mu * m + (g + wd * p); p -= lr * m.
MLTRAIN_HD void SgdMomentumUpdate(float lr, float momentum, float weight_decay, float g, float& p, float& m) {
  m = momentum * m + (g + weight_decay * p);
  p -= lr * m;
}

}  // namespace mltrain::math
