#include "trainer/checkpoint.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <set>
#include <stdexcept>

#include "trainer/log.h"
#include "trainer/sampler.h"

namespace mltrain {
namespace {

const std::string kFormat(kCheckpointFormat);

std::string ShardKey(int64_t step, int rank) { return StepDir(step) + "/shard-" + std::to_string(rank); }
std::string ManifestKey(int64_t step) { return StepDir(step) + "/manifest.json"; }

std::span<const uint8_t> AsBytes(const std::string& s) { return {reinterpret_cast<const uint8_t*>(s.data()), s.size()}; }

double UnixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

std::string StepDir(int64_t step) { return "step-" + std::to_string(step); }

int64_t ParseStepDir(const std::string& key) {
  if (key.rfind("step-", 0) != 0) return -1;
  size_t slash = key.find('/');
  std::string digits = key.substr(5, slash == std::string::npos ? std::string::npos : slash - 5);
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

CheckpointManager::CheckpointManager(ObjectStore& store, Communicator& comm, int keep_last)
    : store_(store), comm_(comm), keep_last_(std::max(1, keep_last)) {}

CheckpointManager::ShardWrite CheckpointManager::WriteShard(const TrainingState& state) {
  const int rank = comm_.rank(), world = comm_.world_size();
  const int64_t total = static_cast<int64_t>(state.params.size());
  SampleRange block = BlockRange(total, rank, world);
  ShardWrite out;
  try {
    std::vector<ShardTensor> tensors;
    auto slice = [&](const char* name, const std::vector<float>& buf, int64_t offset) {
      if (buf.empty()) return;
      if (block.begin < offset || block.end - offset > static_cast<int64_t>(buf.size()))
        throw std::invalid_argument(std::string(name) + " does not cover this rank's shard");
      tensors.push_back({name, block.begin, total, std::vector<float>(buf.begin() + (block.begin - offset), buf.begin() + (block.end - offset))});
    };
    slice("params", state.params, 0);
    slice("first_moment", state.first_moment, state.moment_offset);
    slice("second_moment", state.second_moment, state.moment_offset);
    std::vector<uint8_t> blob = EncodeShard(tensors, {{"format", kFormat}, {"step", std::to_string(state.step)}, {"rank", std::to_string(rank)}});
    store_.Put(ShardKey(state.step, rank), blob);
    out = {true, Crc32(blob), blob.size()};
  } catch (const std::exception& e) {
    LogWarn("checkpoint step " + std::to_string(state.step) + ": writing shard " + std::to_string(rank) + " to " + store_.Describe() + " failed: " + e.what());
  }
  return out;
}

bool CheckpointManager::Commit(const TrainingState& state, const ShardWrite& mine) {
  const int rank = comm_.rank(), world = comm_.world_size();
  const int64_t total = static_cast<int64_t>(state.params.size());
  const uint64_t word = mine.ok ? ((uint64_t{1} << 32) | mine.crc32) : 0, size = mine.bytes;
  std::vector<uint64_t> words = comm_.AllGatherWord(word);
  std::vector<uint64_t> sizes = comm_.AllGatherWord(size);
  bool all_ok = std::all_of(words.begin(), words.end(), [](uint64_t w) { return (w >> 32) == 1; });
  uint8_t committed = 0;
  if (rank == 0 && all_ok) {
    try {
      nlohmann::json manifest = {{"format", kFormat},          {"step", state.step},
                                 {"epoch", state.epoch},       {"sample_cursor", state.sample_cursor},
                                 {"seed", state.seed},         {"world_size", world},
                                 {"parameter_count", total},   {"config", state.config},
                                 {"written_unix_s", UnixSeconds()}};
      for (int r = 0; r < world; ++r) {
        SampleRange b = BlockRange(total, r, world);
        manifest["shards"].push_back({{"key", "shard-" + std::to_string(r)}, {"rank", r}, {"begin", b.begin}, {"end", b.end},
                                      {"bytes", sizes[r]}, {"crc32", static_cast<uint32_t>(words[r] & 0xffffffffu)}});
      }
      store_.Put(ManifestKey(state.step), AsBytes(manifest.dump(2)));
      store_.Put("LATEST", AsBytes(StepDir(state.step)));
      committed = 1;
      Prune(state.step);
    } catch (const std::exception& e) {
      LogWarn("checkpoint step " + std::to_string(state.step) + ": committing the manifest failed: " + e.what());
    }
  } else if (rank == 0) {
    LogWarn("checkpoint step " + std::to_string(state.step) + " not committed: a shard write failed");
  }
  comm_.Broadcast(std::span<uint8_t>(&committed, 1), 0);
  return committed == 1;
}

std::vector<int64_t> CheckpointManager::CommittedSteps() {
  std::set<int64_t> steps;
  for (const std::string& key : store_.List("step-")) {
    int64_t step = ParseStepDir(key);
    if (step >= 0 && key == ManifestKey(step)) steps.insert(step);
  }
  return {steps.begin(), steps.end()};
}

void CheckpointManager::Prune(int64_t newest_step) {
  std::vector<int64_t> committed = CommittedSteps();
  std::set<int64_t> keep;
  for (auto it = committed.rbegin(); it != committed.rend() && static_cast<int>(keep.size()) < keep_last_; ++it) keep.insert(*it);
  std::map<int64_t, std::vector<std::string>> by_step;
  for (const std::string& key : store_.List("step-")) {
    int64_t step = ParseStepDir(key);
    if (step >= 0 && step < newest_step && keep.count(step) == 0) by_step[step].push_back(key);
  }
  for (auto& [step, keys] : by_step) {
    // Manifest first: a half-deleted checkpoint must never look committed.
    std::stable_partition(keys.begin(), keys.end(), [&](const std::string& k) { return k == ManifestKey(step); });
    for (const std::string& key : keys) store_.Delete(key);
  }
}

std::optional<TrainingState> CheckpointManager::TryLoadStep(int64_t step, const nlohmann::json& expected) {
  auto manifest_blob = store_.Get(ManifestKey(step));
  if (!manifest_blob) {
    LogWarn("skipping " + store_.Describe() + "/" + StepDir(step) + ": no manifest (incomplete checkpoint)");
    return std::nullopt;
  }
  std::string error;
  std::optional<CheckpointManifest> manifest = ParseManifest(*manifest_blob, &error);
  if (!manifest) {
    LogWarn("skipping " + StepDir(step) + ": " + error);
    return std::nullopt;
  }
  const nlohmann::json& config = manifest->config;
  if (config.value("layers", nlohmann::json()) != expected.value("layers", nlohmann::json()) ||
      config.value("optimizer", "") != expected.value("optimizer", ""))
    throw std::runtime_error("checkpoint " + store_.Describe() + "/" + StepDir(step) + " was written for layers " +
                             config.value("layers", nlohmann::json()).dump() + " with " + config.value("optimizer", "?") +
                             "; this run has " + expected.value("layers", nlohmann::json()).dump() + " with " +
                             expected.value("optimizer", "?") + " (use another --checkpoint-url)");
  std::vector<ShardTensor> pieces;
  for (const ManifestShard& shard : manifest->shards) {
    const std::string key = StepDir(step) + "/" + shard.key;  // shard.key is confined (IsSafeShardKey)
    auto blob = store_.Get(key);
    if (!blob || blob->size() != shard.bytes || Crc32(*blob) != shard.crc32) {
      LogWarn("skipping " + StepDir(step) + ": shard " + key + (blob ? " fails its size/CRC-32 check" : " is missing"));
      return std::nullopt;
    }
    try {
      for (ShardTensor& t : DecodeShard(*blob)) pieces.push_back(std::move(t));
    } catch (const std::runtime_error& e) {
      LogWarn("skipping " + StepDir(step) + ": shard " + key + " is malformed: " + e.what());
      return std::nullopt;
    }
  }
  std::map<std::string, std::vector<float>> tensors;
  try {
    tensors = AssembleTensors(std::move(pieces), manifest->parameter_count);
  } catch (const std::runtime_error& e) {
    LogWarn("skipping " + StepDir(step) + ": " + e.what());
    return std::nullopt;
  }
  if (tensors.count("params") == 0) {
    LogWarn("skipping " + StepDir(step) + ": no parameters");
    return std::nullopt;
  }
  TrainingState state;
  state.step = manifest->step;
  state.epoch = manifest->epoch;
  state.sample_cursor = manifest->sample_cursor;
  state.seed = manifest->seed;
  state.config = config;
  state.params = std::move(tensors["params"]);
  if (tensors.count("first_moment")) state.first_moment = std::move(tensors["first_moment"]);
  if (tensors.count("second_moment")) state.second_moment = std::move(tensors["second_moment"]);
  return state;
}

std::optional<TrainingState> CheckpointManager::Load(const nlohmann::json& expected_config) {
  std::vector<int64_t> candidates;
  if (auto latest = store_.Get("LATEST")) {
    int64_t step = ParseStepDir(std::string(latest->begin(), latest->end()));
    if (step >= 0) candidates.push_back(step);
    else LogWarn("ignoring malformed LATEST pointer in " + store_.Describe());
  }
  std::set<int64_t> all;
  for (const std::string& key : store_.List("step-")) {
    int64_t step = ParseStepDir(key);
    if (step >= 0) all.insert(step);
  }
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    if (std::find(candidates.begin(), candidates.end(), *it) == candidates.end()) candidates.push_back(*it);
  }
  for (int64_t step : candidates) {
    try {
      if (auto state = TryLoadStep(step, expected_config)) return state;
    } catch (const nlohmann::json::exception& e) {
      LogWarn("skipping " + StepDir(step) + ": malformed checkpoint: " + e.what());
    }
  }
  return std::nullopt;
}

}  // namespace mltrain
