// Sharded, resharding checkpoints: step-N/shard-R (safetensors layout), step-N/manifest.json
// written last by rank 0, then the LATEST pointer.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/communicator.h"
#include "trainer/object_store.h"

namespace mltrain {

/// Everything needed to continue training exactly: the flat parameters, the optimizer moments
/// (second moment empty for SGD), the next step, and the run's identity. The data order and the
/// RNG stream are functions of (seed, epoch, global sample cursor), so they need no extra state.
struct TrainingState {
  int64_t step = 0;           ///< optimizer steps done
  int64_t epoch = 0;          ///< epoch of the next step
  int64_t sample_cursor = 0;  ///< global samples consumed = step * global batch
  uint64_t seed = 0;
  std::vector<float> params, first_moment, second_moment;
  /// The moments hold elements [moment_offset, moment_offset + size) of the parameter buffer:
  /// 0 and the full size, or (ZeRO-1) this rank's block when saving.
  int64_t moment_offset = 0;
  nlohmann::json config;      ///< model, optimizer and batch settings (see TrainerConfig::ToJson)
};

/// One tensor of a shard: a 1-D fp32 slice [begin, end) of a flat buffer of `total` elements.
struct ShardTensor {
  std::string name;
  int64_t begin = 0, total = 0;
  std::vector<float> values;
};

/// The "format" of manifests and shard metadata.
inline constexpr std::string_view kCheckpointFormat = "mltrain-checkpoint-v1";

/// Largest JSON header DecodeShard accepts, in bytes (mltrain writes a few hundred; the
/// safetensors format itself allows 100 MB).
inline constexpr uint64_t kMaxShardHeaderBytes = uint64_t{16} << 20;
/// Most tensors one shard may hold (mltrain writes three: params and the two optimizer moments).
inline constexpr size_t kMaxShardTensors = 64;
/// Longest shard key a manifest may name, in bytes.
inline constexpr size_t kMaxShardKeyBytes = 255;
/// Most shards one manifest may list (one per rank).
inline constexpr size_t kMaxManifestShards = size_t{1} << 16;

/// Encodes tensors in the safetensors layout: u64 little-endian header length, a JSON header
/// ({"name": {"dtype":"F32","shape":[n],"data_offsets":[b,e]}, "__metadata__": {...}}, space-padded
/// to 8 bytes), then the raw little-endian data.
std::vector<uint8_t> EncodeShard(const std::vector<ShardTensor>& tensors, const std::map<std::string, std::string>& metadata);
/// Decodes EncodeShard's output; throws std::runtime_error when the blob is truncated or malformed:
/// a header over kMaxShardHeaderBytes or with over kMaxShardTensors tensors, data offsets that are
/// not integers inside the data, or a tensor range [begin, begin + size) outside [0, total). The
/// blob is untrusted (a checkpoint directory or bucket may be writable by others): every check
/// is written so that it cannot overflow.
std::vector<ShardTensor> DecodeShard(std::span<const uint8_t> blob);

/// Joins decoded shard pieces into full tensors of `total` elements each. Only "params",
/// "first_moment" and "second_moment" are accepted; the pieces of each tensor must tile
/// [0, total) exactly (no gap, no overlap), so the buffers allocated are never larger than the data
/// read. Throws std::runtime_error naming the tensor otherwise.
std::map<std::string, std::vector<float>> AssembleTensors(std::vector<ShardTensor> pieces, int64_t total);

/// Whether a manifest's shard key stays inside its step directory: 1 to kMaxShardKeyBytes bytes
/// of '/'-separated components, each non-empty, not "." or "..", of [A-Za-z0-9._-] only (so no
/// absolute path, NUL, backslash or "../").
bool IsSafeShardKey(std::string_view key);

/// One shard as listed in a manifest.
struct ManifestShard {
  std::string key;  ///< relative to the step directory; IsSafeShardKey holds
  uint64_t bytes = 0;
  uint32_t crc32 = 0;
};

/// step-N/manifest.json, validated.
struct CheckpointManifest {
  int64_t step = 0, epoch = 0, sample_cursor = 0, parameter_count = 0;
  uint64_t seed = 0;
  nlohmann::json config;  ///< an object
  std::vector<ManifestShard> shards;
};

/// Parses a manifest. Returns nullopt and sets `*error` when it is not JSON, not this format, a
/// field is missing or of the wrong type or range (integers must be integers that fit), it lists
/// more than kMaxManifestShards shards, or a shard key fails IsSafeShardKey.
std::optional<CheckpointManifest> ParseManifest(std::span<const uint8_t> blob, std::string* error);

/// CRC-32 (zlib) of a blob, recorded per shard in the manifest.
uint32_t Crc32(std::span<const uint8_t> blob);

/// Writes and finds checkpoints under one ObjectStore root. Save() is collective; Load() runs on
/// rank 0 only (the caller broadcasts the state).
class CheckpointManager {
 public:
  /// keep_last: how many committed checkpoints to keep (older ones are deleted after a commit).
  CheckpointManager(ObjectStore& store, Communicator& comm, int keep_last);

  /// This rank's part of one checkpoint write.
  struct ShardWrite {
    bool ok = false;
    uint32_t crc32 = 0;
    uint64_t bytes = 0;
  };

  /// Local (no collectives; safe on a background thread while training goes on): writes this
  /// rank's block (BlockRange over the parameter count) of params and moments as step-N/shard-R.
  /// Failures are logged and reported as ok == false.
  ShardWrite WriteShard(const TrainingState& state);

  /// Collective, after every rank's WriteShard finished: if all succeeded, rank 0 writes
  /// step-N/manifest.json (each shard's size and CRC-32), then LATEST, and prunes old checkpoints.
  /// Returns true on every rank iff the checkpoint was committed; failures are logged, not thrown.
  bool Commit(const TrainingState& state, const ShardWrite& mine);

  /// WriteShard then Commit.
  bool Save(const TrainingState& state) { return Commit(state, WriteShard(state)); }

  /// Rank 0: the newest valid checkpoint (LATEST first, then older manifests, newest first).
  /// Step directories without a valid manifest (ParseManifest), or whose shards are missing,
  /// truncated, fail their CRC, are malformed (DecodeShard) or do not tile the tensors
  /// (AssembleTensors), are skipped with a warning. Throws std::runtime_error when a valid checkpoint belongs to
  /// a different model (`expected_config["layers"]` or optimizer differ).
  std::optional<TrainingState> Load(const nlohmann::json& expected_config);

  /// Step numbers of committed checkpoints (those with a manifest), ascending.
  std::vector<int64_t> CommittedSteps();

 private:
  std::optional<TrainingState> TryLoadStep(int64_t step, const nlohmann::json& expected_config);
  void Prune(int64_t newest_step);

  ObjectStore& store_;
  Communicator& comm_;
  int keep_last_;
};

/// "step-N" for a step number, and the step number of a key below "step-N/", or -1.
std::string StepDir(int64_t step);
int64_t ParseStepDir(const std::string& key);

}  // namespace mltrain
