// mltrain's settings (from the command line) and their validation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/dataset.h"
#include "trainer/mlp.h"
#include "trainer/optimizer.h"

namespace mltrain {

/// When to checkpoint: every `steps` optimizer steps, or every `seconds` of wall time (decided by
/// rank 0 and carried in the all-reduce so all ranks agree). Both zero: only at the end/on stop.
struct CheckpointInterval {
  int64_t steps = 0;
  double seconds = 0;
};

/// Parses "500" (steps), "30s" or "5m" (wall time); throws std::invalid_argument naming the value.
CheckpointInterval ParseCheckpointInterval(const std::string& text);

/// Parses "256,128" into hidden layer sizes; throws std::invalid_argument naming the value.
std::vector<int> ParseHiddenSizes(const std::string& text);

/// Where the model's maths runs (trainer/engine.h).
enum class Device { kCpu, kCuda };

/// Parses "cpu", "cuda" or "auto"; "auto" is cuda when `cuda_devices` > 0, else cpu. Throws
/// std::invalid_argument naming the value otherwise.
Device ParseDevice(const std::string& name, int cuda_devices);
std::string DeviceName(Device d);

/// Test-only faults (the gang watchdog's end-to-end tests; never for real work): the target rank,
/// or every rank on the node named `node` (MLSCHED_NODE), hangs outside every collective before
/// step `hang_at_step` (and, resumed past it, before its first step), ignoring SIGTERM as a
/// wedged rank would; or computes `slow_factor` times longer per step.
struct TestFaults {
  int rank = -1;            ///< the rank to fault (-1: none by rank)
  std::string node;         ///< the node whose ranks fault ("": none by node)
  int64_t hang_at_step = 0; ///< 0: no hang
  double slow_factor = 1;   ///< >= 1; 1: no slowdown
  bool Any() const { return hang_at_step > 0 || slow_factor > 1; }
  /// True when the faults apply to `rank` running on node `this_node`.
  bool Applies(int my_rank, const std::string& this_node) const {
    return Any() && (my_rank == rank || (!node.empty() && node == this_node));
  }
};

struct TrainerConfig {
  // Data
  std::string data_dir = kDefaultFashionMnistDir;
  int64_t train_limit = 0;  ///< use only the first N training samples (0: all)
  int64_t test_limit = 0;   ///< evaluate on the first N test samples (0: all)
  // Model and optimization
  std::vector<int> hidden = {256, 128};
  int64_t epochs = 20;
  int64_t batch_size = 128;   ///< global batch (all ranks, all micro-batches) per optimizer step
  int64_t grad_accum = 1;     ///< micro-batches per rank per step
  int64_t max_steps = 0;      ///< stop (with a checkpoint) after this global step; 0: run all epochs
  bool zero1 = false;         ///< shard the optimizer state over ranks (ZeRO-1)
  OptimizerConfig optimizer;  ///< total_steps is filled in from epochs
  uint64_t seed = 1234;
  Precision precision = Precision::kFp32;  ///< GEMM inputs: fp32, or bf16 with fp32 accumulation
  Device device = Device::kCpu;
  int cuda_device = 0;      ///< CUDA device ordinal (LOCAL_RANK under agentd/torchrun)
  // Checkpoints
  std::string checkpoint_url;  ///< empty: no checkpoints
  CheckpointInterval checkpoint_every;
  int keep_checkpoints = 3;
  bool async_checkpoints = true;  ///< upload shards on a background thread while training goes on
  size_t multipart_threshold = 64u << 20;  ///< bytes; larger S3 shards use multipart upload
  size_t multipart_part_size = 8u << 20;   ///< bytes per multipart part
  // Reporting
  std::string metrics_out;
  std::string loss_log;     ///< rank 0 appends "step loss" per step (for exact-resume checks)
  std::string status_file;  ///< MLSCHED_STATUS_FILE
  std::string stop_reason_file;  ///< MLSCHED_STOP_REASON_FILE: why a SIGTERM came ("resize", "eviction", ...)
  int64_t log_every = 100;  ///< steps between progress lines
  // Runtime
  int threads = 0;          ///< OpenBLAS threads per rank (0: cores / LOCAL_WORLD_SIZE)
  double rendezvous_timeout_s = 60;
  double collective_timeout_s = 60;
  std::string allreduce_algorithm = "ring";
  bool shm_allreduce = true;  ///< same-host ranks all-reduce through shared memory
  TestFaults test_faults;
  std::string node_name;      ///< MLSCHED_NODE (agentd), for test_faults.node

  /// Full layer sizes {784, hidden..., 10}.
  std::vector<int> Layers(int features, int classes) const;
  /// Settings recorded in checkpoint manifests (model, optimizer, batch, seed).
  nlohmann::json ToJson(int features, int classes) const;
  /// Throws std::invalid_argument naming the first bad setting.
  void Validate(int world_size) const;
};

}  // namespace mltrain
