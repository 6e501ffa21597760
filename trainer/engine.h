// Where the model's maths runs: the host (OpenBLAS, CpuEngine, cpu_engine.cc) or one CUDA device
// (cuBLAS and the kernels of trainer/cuda/cuda_engine.cu, CudaEngine). The trainer sees flat fp32
// buffers only: the parameters (P elements), the gradient (P elements followed by `extras` scalars
// the trainer reduces with it) and the optimizer moments of the state range [state_begin,
// state_end) (ZeRO-1 shard or all).
// On CUDA GradBuffer()/ParamBuffer() are device memory, to be handed to the NCCL communicator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "trainer/communicator.h"
#include "trainer/mlp.h"
#include "trainer/optimizer.h"

namespace mltrain {

/// The model, its gradient and its optimizer on one device. Not thread-safe.
class ComputeEngine {
 public:
  virtual ~ComputeEngine() = default;
  /// For logs: "cpu fp32 (OpenBLAS, 2 threads)", "cuda:0 bf16 (NVIDIA H100 80GB HBM3)".
  virtual std::string Describe() const = 0;
  virtual size_t parameter_count() const = 0;

  /// Replaces the parameters with host values (P elements), e.g. after initialization or resume.
  virtual void LoadParams(std::span<const float> params) = 0;
  /// Copies the parameters to host memory (P elements); waits for pending device work.
  virtual void SaveParams(std::span<float> params) = 0;
  /// Replaces the moments of the state range with host values (second may be empty for SGD).
  virtual void LoadMoments(std::span<const float> first, std::span<const float> second) = 0;
  /// Host copies of the moments of the state range.
  virtual void SaveMoments(std::vector<float>* first, std::vector<float>* second) = 0;

  /// Zeroes the gradient and the extras.
  virtual void ZeroGrad() = 0;
  /// Adds grad_scale * d(sum of the n samples' losses)/d(params) to the gradient; x: n x features
  /// host floats, y: n host labels. Returns the batch's loss sum and correct count.
  virtual BatchStats ForwardBackward(const float* x, const uint8_t* y, int n, float grad_scale) = 0;
  /// The buffer reduced each step: P gradient elements, then the extras (device memory on CUDA;
  /// returned after the engine's queued work finished, so another stream, NCCL's, may use it).
  virtual std::span<float> GradBuffer() = 0;
  /// The parameter buffer, for the ZeRO-1 all-gather (device memory on CUDA, after the engine's
  /// queued work finished; the engine assumes the caller writes it before the next forward pass).
  virtual std::span<float> ParamBuffer() = 0;
  /// Writes / reads the extras (host values) after the gradient in GradBuffer().
  virtual void SetExtras(std::span<const float> extras) = 0;
  virtual void GetExtras(std::span<float> extras) = 0;
  /// Optimizer update number `step` (0-based) of params[begin, end) from the (reduced) gradient.
  virtual void OptimizerStep(int64_t step, size_t begin, size_t end) = 0;
  /// Loss sum and correct count over n host samples (forward only).
  virtual BatchStats Evaluate(const float* x, const uint8_t* y, int64_t n) = 0;
};

/// What the trainer asks of an engine.
struct EngineOptions {
  std::vector<int> layers;          ///< {features, hidden..., classes}
  Precision precision = Precision::kFp32;
  OptimizerConfig optimizer;        ///< total_steps filled in
  size_t state_begin = 0, state_end = SIZE_MAX;  ///< optimizer state range (ZeRO-1 shard)
  size_t extras = 0;                ///< trailing scalars of the gradient buffer
  int threads = 1;                  ///< OpenBLAS threads (CPU)
  int device = 0;                   ///< CUDA device ordinal (CUDA)
};

/// The host engine: Mlp (OpenBLAS sgemm; bf16 emulated with fp32 accumulation) and Optimizer.
std::unique_ptr<ComputeEngine> MakeCpuEngine(const EngineOptions& options);

/// The CUDA engine on options.device (cuBLAS GEMMs with bf16 or fp32 inputs and fp32 accumulation,
/// the element-wise kernels of trainer/kernels_math.h). Throws std::runtime_error "no CUDA device
/// visible" when there is none, and "this mltrain was built without CUDA" in a CPU-only build.
std::unique_ptr<ComputeEngine> MakeCudaEngine(const EngineOptions& options);

/// Number of CUDA devices visible to this process (0 in a CPU-only build or without a driver).
int CudaDeviceCount();

/// True when this mltrain was built with the CUDA path (MLSCHED_WITH_CUDA, nvcc, cuBLAS, NCCL).
bool CudaBuilt();

/// The communicator for CUDA engines: NCCL on `device` for world_size > 1 (collectives on device
/// memory; Broadcast and AllGatherWord take host memory), the single-rank no-op communicator
/// otherwise. Throws std::runtime_error in a CPU-only build.
std::unique_ptr<Communicator> CreateCudaCommunicator(const RendezvousEnv& env, const CommunicatorOptions& options,
                                                     int device);

}  // namespace mltrain
