// CudaEngine: the model of trainer/mlp.h on one CUDA device (trainer/engine.h), and the CUDA build's
// MakeCudaEngine, CudaDeviceCount, CudaBuilt and CreateCudaCommunicator (no_cuda.cc has the stubs).
//
// Same maths as the CPU engine (Mlp + Optimizer): fp32 master weights, gradient and moments; per
// layer one GEMM (cuBLAS, fp32 accumulation) and one fused bias + ReLU (+ bf16 rounding) kernel;
// backward: bias gradient from the fp32 delta, then (bf16) the delta rounded for the two GEMMs.
// Every element-wise step calls the __host__ __device__ functions of trainer/kernels_math.h, the
// ones the CPU path runs. Compiled with --fmad=false, so those steps give the CPU's bits; the GEMMs
// and the softmax's exp/log (CUDA's, not glibc's) differ from OpenBLAS/glibc in the last bits.
//
// Streams: all work runs in order on one compute stream; SaveParams/SaveMoments copy on a second
// stream. GradBuffer()/ParamBuffer() return only after the compute stream drained, so NCCL (its own
// stream) may read and write them; the NCCL communicator returns only after its stream drained.
//
// Not run on a GPU yet: written and compiled (-Werror) on a machine without one.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/cuda/cuda_util.h"
#include "trainer/engine.h"
#include "trainer/kernels_math.h"
#include "trainer/nccl_communicator.h"

namespace mltrain {
namespace {

using cuda::DeviceArray;
using cuda::PinnedArray;

void CheckBlas(cublasStatus_t status, const char* call) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string(call) + ": " + cublasGetStatusName(status) + " (" + cublasGetStatusString(status) + ")");
}
#define MLTRAIN_CUBLAS_CHECK(call) CheckBlas((call), #call)

// ---- Kernels: launch geometry and indexing only; the maths is kernels_math.h's. ----

constexpr int kThreads = 256;

/// Blocks for a grid-stride loop over n elements (at most 65535 blocks; the loop covers the rest).
unsigned Blocks(size_t n) {
  return static_cast<unsigned>(std::clamp<size_t>((n + kThreads - 1) / kThreads, 1, 65535));
}

#define MLTRAIN_GRID_LOOP(i, n) \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<size_t>(gridDim.x) * blockDim.x)

/// out[i] = bf16 bits of in[i] (round to nearest even).
__global__ void CastBf16Kernel(const float* in, uint16_t* out, size_t n) {
  MLTRAIN_GRID_LOOP(i, n) out[i] = math::Bf16Bits(in[i]);
}

/// The GEMM's epilogue on z (rows x cols, row-major): z += bias (per column); hidden layers then
/// ReLU, and with zq (bf16) rounding: z holds the rounded value, zq its bf16 bits (next GEMM's input).
__global__ void BiasActKernel(float* z, const float* bias, size_t count, int cols, bool relu, uint16_t* zq) {
  MLTRAIN_GRID_LOOP(i, count) {
    float v = z[i] + bias[i % static_cast<size_t>(cols)];
    if (relu) v = math::Relu(v);
    if (zq != nullptr) {
      const uint16_t b = math::Bf16Bits(v);
      zq[i] = b;
      v = math::Bf16ToFloat(b);
    }
    z[i] = v;
  }
}

/// db[o] += sum over rows of d[r][o], one thread per column adding the rows in order (the CPU's
/// order, so the same fp32 sum); with dq, also writes the bf16 bits of every d element.
__global__ void BiasGradKernel(const float* d, int rows, int cols, float* db, uint16_t* dq) {
  const int o = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (o >= cols) return;
  float acc = db[o];
  for (int r = 0; r < rows; ++r) {
    const size_t i = static_cast<size_t>(r) * cols + o;
    acc += d[i];
    if (dq != nullptr) dq[i] = math::Bf16Bits(d[i]);
  }
  db[o] = acc;
}

/// d[i] = ReLU'(a[i]) * d[i], a the layer's (post-ReLU) output.
__global__ void ReluBackwardKernel(float* d, const float* a, size_t n) {
  MLTRAIN_GRID_LOOP(i, n) d[i] = math::ReluBackward(d[i], a[i]);
}

/// One thread per sample: loss and argmax of the row's logits; unless dz is null, the scaled loss
/// gradient w.r.t. the logits into dz.
__global__ void SoftmaxXentKernel(const float* logits, const uint8_t* y, int rows, int classes, float grad_scale, float* dz,
                                  double* loss, uint8_t* correct) {
  const int r = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (r >= rows) return;
  const size_t row = static_cast<size_t>(r) * classes;
  const math::XentRow x = math::SoftmaxXentRow(logits + row, classes, y[r], grad_scale, dz != nullptr ? dz + row : nullptr);
  loss[r] = x.loss;
  correct[r] = x.argmax == y[r] ? 1 : 0;
}

/// AdamW on params[begin, begin + n); moments are indexed by parameter index - state_begin.
__global__ void AdamWKernel(math::AdamWStep s, const float* g, float* p, float* m, float* v, size_t begin, size_t n,
                            size_t state_begin) {
  MLTRAIN_GRID_LOOP(k, n) {
    const size_t i = begin + k;
    math::AdamWUpdate(s, g[i], p[i], m[i - state_begin], v[i - state_begin]);
  }
}

/// SGD with momentum on params[begin, begin + n), momentum indexed like AdamWKernel's moments.
__global__ void SgdKernel(float lr, float mu, float wd, const float* g, float* p, float* m, size_t begin, size_t n,
                          size_t state_begin) {
  MLTRAIN_GRID_LOOP(k, n) {
    const size_t i = begin + k;
    math::SgdMomentumUpdate(lr, mu, wd, g[i], p[i], m[i - state_begin]);
  }
}

/// Fails on a bad launch configuration (errors of the kernel itself surface at the next sync).
void CheckLaunch(const char* kernel) { cuda::Check(cudaGetLastError(), kernel); }

// ---- RAII for the runtime's and cuBLAS's handles ----

struct StreamDeleter {
  void operator()(cudaStream_t s) const { cudaStreamDestroy(s); }
};
struct EventDeleter {
  void operator()(cudaEvent_t e) const { cudaEventDestroy(e); }
};
struct BlasDeleter {
  void operator()(cublasHandle_t h) const { cublasDestroy(h); }
};
using StreamPtr = std::unique_ptr<CUstream_st, StreamDeleter>;
using EventPtr = std::unique_ptr<CUevent_st, EventDeleter>;
using BlasPtr = std::unique_ptr<cublasContext, BlasDeleter>;

StreamPtr NewStream() {
  cudaStream_t s = nullptr;
  MLTRAIN_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return StreamPtr(s);
}

class CudaEngine final : public ComputeEngine {
 public:
  explicit CudaEngine(const EngineOptions& o);
  ~CudaEngine() override {
    if (compute_) cudaStreamSynchronize(compute_.get());  // best effort; errors were reported before
  }
  std::string Describe() const override {
    return "cuda:" + std::to_string(device_) + " " + PrecisionName(shape_.precision()) + " (" + device_name_ + ")";
  }
  size_t parameter_count() const override { return P_; }
  void LoadParams(std::span<const float> params) override;
  void SaveParams(std::span<float> params) override;
  void LoadMoments(std::span<const float> first, std::span<const float> second) override;
  void SaveMoments(std::vector<float>* first, std::vector<float>* second) override;
  void ZeroGrad() override {
    MLTRAIN_CUDA_CHECK(cudaMemsetAsync(grad_.get(), 0, (P_ + extras_) * sizeof(float), compute_.get()));
  }
  BatchStats ForwardBackward(const float* x, const uint8_t* y, int n, float grad_scale) override;
  std::span<float> GradBuffer() override {
    Sync();
    return {grad_.get(), P_ + extras_};
  }
  std::span<float> ParamBuffer() override {
    Sync();
    weights_stale_ = true;  // the caller may write the parameters (ZeRO-1 all-gather)
    return {params_.get(), P_};
  }
  void SetExtras(std::span<const float> extras) override;
  void GetExtras(std::span<float> extras) override;
  void OptimizerStep(int64_t step, size_t begin, size_t end) override;
  BatchStats Evaluate(const float* x, const uint8_t* y, int64_t n) override;

 private:
  void Sync() { MLTRAIN_CUDA_CHECK(cudaStreamSynchronize(compute_.get())); }
  /// Grows the per-batch buffers to n samples.
  void Reserve(int n);
  /// Copies n samples to the device, runs the forward pass, the loss (gradient into delta_ unless
  /// grad_scale is 0) and queues the per-row loss/correct copies to the host (read after Sync()).
  void ForwardLoss(const float* x, const uint8_t* y, int n, float grad_scale);
  void Backward(int n);
  BatchStats SumRows(int n) const;
  /// C (m x n, column-major, ldc) = op(A) * op(B) + beta * C; A and B bf16 or fp32 (precision),
  /// C fp32, fp32 accumulation.
  void Gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* a, int lda, const void* b, int ldb,
            float beta, float* c, int ldc);
  /// Device -> host through the copy stream, after everything queued on the compute stream so far.
  void CopyOut(const float* device, size_t count, float* host);
  /// Host -> device on the compute stream through the pinned staging buffer; returns when done.
  void CopyIn(const float* host, size_t count, float* device);

  Mlp shape_;  // layout and precision only (its host scratch is never used)
  bool bf16_ = false;
  OptimizerConfig optimizer_;
  size_t P_ = 0, extras_ = 0, state_begin_ = 0, state_end_ = 0;
  int device_ = 0;
  std::string device_name_;
  StreamPtr compute_, copy_;
  EventPtr queued_;  // recorded on compute_ before a copy-out
  BlasPtr blas_;
  DeviceArray<float> params_, grad_, m_, v_;
  DeviceArray<uint16_t> wq_;  // bf16 bits of params_ (whole buffer; biases unused)
  bool weights_stale_ = true; // wq_ no longer matches params_
  // Per-batch scratch (grow-only): input, per-layer outputs and their bf16 copies, deltas, stats.
  int capacity_ = 0;
  DeviceArray<float> x_, delta_, delta_prev_;
  DeviceArray<uint16_t> xq_, deltaq_;
  std::vector<DeviceArray<float>> acts_;
  std::vector<DeviceArray<uint16_t>> actsq_;
  DeviceArray<uint8_t> y_, correct_;
  DeviceArray<double> loss_;
  PinnedArray<float> x_host_, staging_;
  PinnedArray<uint8_t> y_host_, correct_host_;
  PinnedArray<double> loss_host_;
};

CudaEngine::CudaEngine(const EngineOptions& o)
    : shape_(o.layers, o.precision),
      bf16_(o.precision == Precision::kBf16),
      optimizer_(o.optimizer),
      P_(shape_.parameter_count()),
      extras_(o.extras),
      state_begin_(o.state_begin),
      state_end_(std::min(o.state_end, shape_.parameter_count())),
      device_(o.device),
      acts_(shape_.layers().size()),
      actsq_(shape_.layers().size()) {
  if (state_begin_ > state_end_) throw std::invalid_argument("CudaEngine: state range begins after it ends");
  const int devices = CudaDeviceCount();
  if (device_ < 0 || device_ >= devices)
    throw std::runtime_error("CUDA device " + std::to_string(device_) + " does not exist (" + std::to_string(devices) + " visible)");
  MLTRAIN_CUDA_CHECK(cudaSetDevice(device_));
  cudaDeviceProp prop{};
  MLTRAIN_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  device_name_ = prop.name;
  compute_ = NewStream();
  copy_ = NewStream();
  cudaEvent_t event = nullptr;
  MLTRAIN_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  queued_.reset(event);
  cublasHandle_t handle = nullptr;
  MLTRAIN_CUBLAS_CHECK(cublasCreate(&handle));
  blas_.reset(handle);
  MLTRAIN_CUBLAS_CHECK(cublasSetStream(handle, compute_.get()));
  // Default math mode: bf16 GEMMs may use tensor cores; fp32 GEMMs ask for CUBLAS_COMPUTE_32F_PEDANTIC (no TF32).
  params_.Reserve(P_);
  grad_.Reserve(P_ + extras_);
  const size_t state = state_end_ - state_begin_;
  m_.Reserve(std::max<size_t>(state, 1));
  v_.Reserve(std::max<size_t>(state, 1));
  MLTRAIN_CUDA_CHECK(cudaMemsetAsync(m_.get(), 0, state * sizeof(float), compute_.get()));
  MLTRAIN_CUDA_CHECK(cudaMemsetAsync(v_.get(), 0, state * sizeof(float), compute_.get()));
  MLTRAIN_CUDA_CHECK(cudaMemsetAsync(params_.get(), 0, P_ * sizeof(float), compute_.get()));
  if (bf16_) wq_.Reserve(P_);
  staging_.Reserve(std::max<size_t>({P_, state, extras_, 1}));
  ZeroGrad();
  Sync();
}

void CudaEngine::Reserve(int n) {
  if (n <= capacity_) return;
  const std::vector<int>& sizes = shape_.layer_sizes();
  const size_t rows = static_cast<size_t>(n);
  const size_t widest = static_cast<size_t>(*std::max_element(sizes.begin() + 1, sizes.end()));
  x_.Reserve(rows * sizes.front());
  delta_.Reserve(rows * widest);
  delta_prev_.Reserve(rows * widest);
  if (bf16_) {
    xq_.Reserve(rows * sizes.front());
    deltaq_.Reserve(rows * widest);
  }
  for (size_t l = 0; l < acts_.size(); ++l) {
    acts_[l].Reserve(rows * sizes[l + 1]);
    if (bf16_ && l + 1 < acts_.size()) actsq_[l].Reserve(rows * sizes[l + 1]);
  }
  y_.Reserve(rows);
  correct_.Reserve(rows);
  loss_.Reserve(rows);
  x_host_.Reserve(rows * sizes.front());
  y_host_.Reserve(rows);
  correct_host_.Reserve(rows);
  loss_host_.Reserve(rows);
  capacity_ = n;
}

// Row-major -> cuBLAS (column-major) mapping used by all three products below. A row-major r x c
// matrix M with leading dimension c is, read column-major, the c x r matrix M^T (same memory, ld c).
// So a row-major product C = A * B is computed as the column-major C^T = B^T * A^T: cuBLAS's "A" is
// our right operand. Shapes are row-major as in mlp.cc: input n x in, W out x in, out/delta n x out.
void CudaEngine::Gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* a, int lda, const void* b,
                      int ldb, float beta, float* c, int ldc) {
  const float alpha = 1.0f;
  const cudaDataType ab = bf16_ ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute = bf16_ ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC;
  MLTRAIN_CUBLAS_CHECK(cublasGemmEx(blas_.get(), ta, tb, m, n, k, &alpha, a, ab, lda, b, ab, ldb, &beta, c, CUDA_R_32F, ldc,
                                    compute, CUBLAS_GEMM_DEFAULT));
}

void CudaEngine::ForwardLoss(const float* x, const uint8_t* y, int n, float grad_scale) {
  const std::vector<LayerLayout>& layers = shape_.layers();
  const int features = shape_.layer_sizes().front(), classes = layers.back().out;
  const size_t in_count = static_cast<size_t>(n) * features;
  Reserve(n);
  for (int i = 0; i < n; ++i)
    if (y[i] >= classes) throw std::invalid_argument("label " + std::to_string(y[i]) + " out of range");
  std::memcpy(x_host_.get(), x, in_count * sizeof(float));
  std::memcpy(y_host_.get(), y, static_cast<size_t>(n));
  cudaStream_t s = compute_.get();
  MLTRAIN_CUDA_CHECK(cudaMemcpyAsync(x_.get(), x_host_.get(), in_count * sizeof(float), cudaMemcpyHostToDevice, s));
  MLTRAIN_CUDA_CHECK(cudaMemcpyAsync(y_.get(), y_host_.get(), static_cast<size_t>(n), cudaMemcpyHostToDevice, s));
  if (bf16_) {
    CastBf16Kernel<<<Blocks(in_count), kThreads, 0, s>>>(x_.get(), xq_.get(), in_count);
    CheckLaunch("CastBf16Kernel(x)");
    if (weights_stale_) {  // once per step: after the update (and the ZeRO-1 all-gather), before the forward pass
      CastBf16Kernel<<<Blocks(P_), kThreads, 0, s>>>(params_.get(), wq_.get(), P_);
      CheckLaunch("CastBf16Kernel(weights)");
      weights_stale_ = false;
    }
  }
  const void* input = bf16_ ? static_cast<const void*>(xq_.get()) : x_.get();
  for (size_t l = 0; l < layers.size(); ++l) {
    const LayerLayout& L = layers[l];
    const void* w = bf16_ ? static_cast<const void*>(wq_.get() + L.weight_offset) : params_.get() + L.weight_offset;
    // out (n x out) = input (n x in) * W^T (in x out). Column-major: out^T (out x n, ld out) =
    // op(W_cm) * input_cm, where W_cm is W read column-major (in x out, ld in) so op = T, and
    // input_cm is input^T (in x n, ld in) so op = N. m = out, n = n, k = in.
    Gemm(CUBLAS_OP_T, CUBLAS_OP_N, L.out, n, L.in, w, L.in, input, L.in, 0.0f, acts_[l].get(), L.out);
    const bool hidden = l + 1 < layers.size();
    const size_t count = static_cast<size_t>(n) * L.out;
    uint16_t* q = bf16_ && hidden ? actsq_[l].get() : nullptr;
    BiasActKernel<<<Blocks(count), kThreads, 0, s>>>(acts_[l].get(), params_.get() + L.bias_offset, count, L.out, hidden, q);
    CheckLaunch("BiasActKernel");
    input = q != nullptr ? static_cast<const void*>(q) : acts_[l].get();
  }
  float* dz = grad_scale != 0.0f ? delta_.get() : nullptr;
  SoftmaxXentKernel<<<Blocks(static_cast<size_t>(n)), kThreads, 0, s>>>(acts_.back().get(), y_.get(), n, classes, grad_scale, dz,
                                                                        loss_.get(), correct_.get());
  CheckLaunch("SoftmaxXentKernel");
  MLTRAIN_CUDA_CHECK(cudaMemcpyAsync(loss_host_.get(), loss_.get(), n * sizeof(double), cudaMemcpyDeviceToHost, s));
  MLTRAIN_CUDA_CHECK(cudaMemcpyAsync(correct_host_.get(), correct_.get(), static_cast<size_t>(n), cudaMemcpyDeviceToHost, s));
}

void CudaEngine::Backward(int n) {
  const std::vector<LayerLayout>& layers = shape_.layers();
  cudaStream_t s = compute_.get();
  for (size_t l = layers.size(); l-- > 0;) {
    const LayerLayout& L = layers[l];
    const void* input = l == 0 ? (bf16_ ? static_cast<const void*>(xq_.get()) : x_.get())
                               : (bf16_ ? static_cast<const void*>(actsq_[l - 1].get()) : acts_[l - 1].get());
    // Bias gradient from the fp32 delta; with bf16 the same pass writes the delta's bf16 copy.
    uint16_t* dq = bf16_ ? deltaq_.get() : nullptr;
    BiasGradKernel<<<Blocks(static_cast<size_t>(L.out)), kThreads, 0, s>>>(delta_.get(), n, L.out, grad_.get() + L.bias_offset, dq);
    CheckLaunch("BiasGradKernel");
    const void* delta = bf16_ ? static_cast<const void*>(deltaq_.get()) : delta_.get();
    // dW (out x in) += delta^T (out x n) * input (n x in). Column-major: dW^T (in x out, ld in) +=
    // input_cm * op(delta_cm), input_cm = input^T (in x n, ld in, op N), delta_cm = delta^T
    // (out x n, ld out) so op = T gives n x out. m = in, n = out, k = n.
    Gemm(CUBLAS_OP_N, CUBLAS_OP_T, L.in, L.out, n, input, L.in, delta, L.out, 1.0f, grad_.get() + L.weight_offset, L.in);
    if (l == 0) break;
    // delta_prev (n x in) = delta (n x out) * W (out x in). Column-major: delta_prev^T (in x n, ld in)
    // = W_cm (in x out, ld in, op N) * delta_cm (out x n, ld out, op N). m = in, n = n, k = out.
    const void* w = bf16_ ? static_cast<const void*>(wq_.get() + L.weight_offset) : params_.get() + L.weight_offset;
    Gemm(CUBLAS_OP_N, CUBLAS_OP_N, L.in, n, L.out, w, L.in, delta, L.out, 0.0f, delta_prev_.get(), L.in);
    const size_t count = static_cast<size_t>(n) * L.in;
    ReluBackwardKernel<<<Blocks(count), kThreads, 0, s>>>(delta_prev_.get(), acts_[l - 1].get(), count);
    CheckLaunch("ReluBackwardKernel");
    delta_.Swap(delta_prev_);
  }
}

BatchStats CudaEngine::SumRows(int n) const {
  BatchStats stats;  // in row order, as the CPU path sums
  for (int i = 0; i < n; ++i) {
    stats.loss_sum += loss_host_.get()[i];
    stats.correct += correct_host_.get()[i];
  }
  return stats;
}

BatchStats CudaEngine::ForwardBackward(const float* x, const uint8_t* y, int n, float grad_scale) {
  if (n <= 0) return {};
  ForwardLoss(x, y, n, grad_scale);
  if (grad_scale != 0.0f) Backward(n);
  Sync();  // the stats are on the host now, and x_host_/y_host_ may be reused
  return SumRows(n);
}

BatchStats CudaEngine::Evaluate(const float* x, const uint8_t* y, int64_t n) {
  BatchStats total;
  constexpr int64_t kChunk = 1024;
  const int64_t features = shape_.layer_sizes().front();
  weights_stale_ = true;  // a span from an earlier ParamBuffer() call may have been written since
  for (int64_t start = 0; start < n; start += kChunk) {
    const int count = static_cast<int>(std::min(kChunk, n - start));
    ForwardLoss(x + start * features, y + start, count, 0.0f);
    Sync();
    const BatchStats s = SumRows(count);
    total.loss_sum += s.loss_sum;
    total.correct += s.correct;
  }
  return total;
}

void CudaEngine::SetExtras(std::span<const float> extras) {
  if (extras.size() != extras_) throw std::invalid_argument("SetExtras: wrong count");
  std::copy(extras.begin(), extras.end(), staging_.get());
  MLTRAIN_CUDA_CHECK(cudaMemcpyAsync(grad_.get() + P_, staging_.get(), extras_ * sizeof(float), cudaMemcpyHostToDevice, compute_.get()));
  Sync();
}

void CudaEngine::GetExtras(std::span<float> extras) {
  if (extras.size() != extras_) throw std::invalid_argument("GetExtras: wrong count");
  CopyOut(grad_.get() + P_, extras_, extras.data());
}

void CudaEngine::OptimizerStep(int64_t step, size_t begin, size_t end) {
  if (end > P_ || begin < state_begin_ || end > state_end_ || begin > end)
    throw std::invalid_argument("CudaEngine::OptimizerStep: range out of bounds");
  const size_t n = end - begin;
  if (n == 0) return;
  cudaStream_t s = compute_.get();
  if (optimizer_.kind == OptimizerKind::kAdamW) {
    const math::AdamWStep st = AdamWConstants(optimizer_, step);
    AdamWKernel<<<Blocks(n), kThreads, 0, s>>>(st, grad_.get(), params_.get(), m_.get(), v_.get(), begin, n, state_begin_);
    CheckLaunch("AdamWKernel");
  } else {
    const float lr = static_cast<float>(LearningRateAt(optimizer_, step));
    SgdKernel<<<Blocks(n), kThreads, 0, s>>>(lr, static_cast<float>(optimizer_.momentum), static_cast<float>(optimizer_.weight_decay),
                                             grad_.get(), params_.get(), m_.get(), begin, n, state_begin_);
    CheckLaunch("SgdKernel");
  }
  weights_stale_ = true;
}

// The copy-out waits (event) for the compute work queued before it, runs on its own stream, and the
// call blocks until the bytes are on the host. Nothing overlaps today: the trainer queues no GPU
// work while it waits (checkpoints snapshot between steps); the separate stream only lets a caller
// that queues compute work first keep the compute stream busy during the copy.
void CudaEngine::CopyOut(const float* device, size_t count, float* host) {
  if (count == 0) return;
  staging_.Reserve(count);
  MLTRAIN_CUDA_CHECK(cudaEventRecord(queued_.get(), compute_.get()));
  MLTRAIN_CUDA_CHECK(cudaStreamWaitEvent(copy_.get(), queued_.get(), 0));
  MLTRAIN_CUDA_CHECK(cudaMemcpyAsync(staging_.get(), device, count * sizeof(float), cudaMemcpyDeviceToHost, copy_.get()));
  MLTRAIN_CUDA_CHECK(cudaStreamSynchronize(copy_.get()));
  std::memcpy(host, staging_.get(), count * sizeof(float));
}

void CudaEngine::CopyIn(const float* host, size_t count, float* device) {
  if (count == 0) return;
  staging_.Reserve(count);
  Sync();  // staging_ is free: no copy of it is still queued
  std::memcpy(staging_.get(), host, count * sizeof(float));
  MLTRAIN_CUDA_CHECK(cudaMemcpyAsync(device, staging_.get(), count * sizeof(float), cudaMemcpyHostToDevice, compute_.get()));
  Sync();
}

void CudaEngine::LoadParams(std::span<const float> params) {
  if (params.size() != P_) throw std::invalid_argument("LoadParams: wrong parameter count");
  CopyIn(params.data(), P_, params_.get());
  weights_stale_ = true;
}

void CudaEngine::SaveParams(std::span<float> params) {
  if (params.size() != P_) throw std::invalid_argument("SaveParams: wrong parameter count");
  CopyOut(params_.get(), P_, params.data());
}

void CudaEngine::LoadMoments(std::span<const float> first, std::span<const float> second) {
  const size_t state = state_end_ - state_begin_;
  const size_t second_size = optimizer_.kind == OptimizerKind::kAdamW ? state : 0;
  if (first.size() != state || second.size() != second_size) throw std::invalid_argument("LoadMoments: wrong state size");
  CopyIn(first.data(), state, m_.get());
  CopyIn(second.data(), second_size, v_.get());
}

void CudaEngine::SaveMoments(std::vector<float>* first, std::vector<float>* second) {
  const size_t state = state_end_ - state_begin_;
  first->assign(state, 0.0f);
  second->assign(optimizer_.kind == OptimizerKind::kAdamW ? state : 0, 0.0f);
  CopyOut(m_.get(), first->size(), first->data());
  CopyOut(v_.get(), second->size(), second->data());
}

}  // namespace

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver, no device, ...: clear the error, report none
    return 0;
  }
  return count;
}

bool CudaBuilt() { return true; }

std::unique_ptr<ComputeEngine> MakeCudaEngine(const EngineOptions& options) {
  if (CudaDeviceCount() == 0)
    throw std::runtime_error("no CUDA device visible (check nvidia-smi and CUDA_VISIBLE_DEVICES)");
  return std::make_unique<CudaEngine>(options);
}

std::unique_ptr<Communicator> CreateCudaCommunicator(const RendezvousEnv& env, const CommunicatorOptions& options, int device) {
  if (env.world_size == 1) return CreateCommunicator(env, options);  // single rank: collectives are no-ops
  return std::make_unique<NcclCommunicator>(env, options, device);
}

}  // namespace mltrain
