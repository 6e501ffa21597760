#include "trainer/checkpoint.h"

#include <zlib.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstring>
#include <set>
#include <stdexcept>

#include "trainer/log.h"
#include "trainer/sampler.h"

namespace mltrain {
namespace {

static_assert(std::endian::native == std::endian::little, "checkpoint tensors are written little-endian");

constexpr const char* kFormat = "mltrain-checkpoint-v1";

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

uint32_t Crc32(std::span<const uint8_t> blob) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  return static_cast<uint32_t>(crc32_z(crc, blob.data(), blob.size()));
}

std::vector<uint8_t> EncodeShard(const std::vector<ShardTensor>& tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::json header;
  nlohmann::json meta(metadata);
  uint64_t offset = 0;
  for (const ShardTensor& t : tensors) {
    uint64_t bytes = t.values.size() * sizeof(float);
    header[t.name] = {{"dtype", "F32"}, {"shape", {t.values.size()}}, {"data_offsets", {offset, offset + bytes}}};
    meta[t.name + ".begin"] = std::to_string(t.begin);
    meta[t.name + ".total"] = std::to_string(t.total);
    offset += bytes;
  }
  header["__metadata__"] = meta;
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::vector<uint8_t> out(8 + text.size() + offset);
  uint64_t len = text.size();
  std::memcpy(out.data(), &len, 8);
  std::memcpy(out.data() + 8, text.data(), text.size());
  uint8_t* data = out.data() + 8 + text.size();
  for (const ShardTensor& t : tensors) {
    std::memcpy(data, t.values.data(), t.values.size() * sizeof(float));
    data += t.values.size() * sizeof(float);
  }
  return out;
}

std::vector<ShardTensor> DecodeShard(std::span<const uint8_t> blob) {
  if (blob.size() < 8) throw std::runtime_error("shard is truncated (no header length)");
  uint64_t len = 0;
  std::memcpy(&len, blob.data(), 8);
  if (len > blob.size() - 8) throw std::runtime_error("shard is truncated (header length " + std::to_string(len) + ")");
  nlohmann::json header = nlohmann::json::parse(blob.begin() + 8, blob.begin() + 8 + static_cast<std::ptrdiff_t>(len), nullptr, false);
  if (header.is_discarded() || !header.is_object()) throw std::runtime_error("shard header is not valid JSON");
  const uint64_t data_size = blob.size() - 8 - len;
  const uint8_t* data = blob.data() + 8 + len;
  nlohmann::json meta = header.value("__metadata__", nlohmann::json::object());
  std::vector<ShardTensor> out;
  for (const auto& [name, info] : header.items()) {
    if (name == "__metadata__") continue;
    if (info.value("dtype", "") != "F32") throw std::runtime_error("shard tensor '" + name + "' is not F32");
    uint64_t b = info.at("data_offsets").at(0).get<uint64_t>(), e = info.at("data_offsets").at(1).get<uint64_t>();
    if (b > e || e > data_size || (e - b) % sizeof(float) != 0)
      throw std::runtime_error("shard tensor '" + name + "' has data offsets outside the blob");
    ShardTensor t;
    t.name = name;
    t.values.resize((e - b) / sizeof(float));
    std::memcpy(t.values.data(), data + b, e - b);
    t.begin = std::stoll(meta.at(name + ".begin").get<std::string>());
    t.total = std::stoll(meta.at(name + ".total").get<std::string>());
    if (t.begin < 0 || t.begin + static_cast<int64_t>(t.values.size()) > t.total)
      throw std::runtime_error("shard tensor '" + name + "' has a range outside its buffer");
    out.push_back(std::move(t));
  }
  return out;
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
  nlohmann::json manifest = nlohmann::json::parse(manifest_blob->begin(), manifest_blob->end(), nullptr, false);
  if (manifest.is_discarded() || manifest.value("format", "") != kFormat || !manifest.contains("shards")) {
    LogWarn("skipping " + StepDir(step) + ": manifest.json is not a " + std::string(kFormat) + " manifest");
    return std::nullopt;
  }
  const nlohmann::json& config = manifest["config"];
  if (config.value("layers", nlohmann::json()) != expected.value("layers", nlohmann::json()) ||
      config.value("optimizer", "") != expected.value("optimizer", ""))
    throw std::runtime_error("checkpoint " + store_.Describe() + "/" + StepDir(step) + " was written for layers " +
                             config.value("layers", nlohmann::json()).dump() + " with " + config.value("optimizer", "?") +
                             "; this run has " + expected.value("layers", nlohmann::json()).dump() + " with " +
                             expected.value("optimizer", "?") + " (use another --checkpoint-url)");
  TrainingState state;
  state.step = manifest.at("step").get<int64_t>();
  state.epoch = manifest.at("epoch").get<int64_t>();
  state.sample_cursor = manifest.at("sample_cursor").get<int64_t>();
  state.seed = manifest.at("seed").get<uint64_t>();
  state.config = config;
  const int64_t total = manifest.at("parameter_count").get<int64_t>();
  std::map<std::string, std::vector<float>*> targets{
      {"params", &state.params}, {"first_moment", &state.first_moment}, {"second_moment", &state.second_moment}};
  std::map<std::string, int64_t> covered;
  for (const nlohmann::json& shard : manifest["shards"]) {
    const std::string key = StepDir(step) + "/" + shard.at("key").get<std::string>();
    auto blob = store_.Get(key);
    if (!blob || blob->size() != shard.at("bytes").get<uint64_t>() || Crc32(*blob) != shard.at("crc32").get<uint32_t>()) {
      LogWarn("skipping " + StepDir(step) + ": shard " + key + (blob ? " fails its size/CRC-32 check" : " is missing"));
      return std::nullopt;
    }
    for (ShardTensor& t : DecodeShard(*blob)) {
      auto it = targets.find(t.name);
      if (it == targets.end() || t.total != total) throw std::runtime_error("shard " + key + " has an unexpected tensor '" + t.name + "'");
      if (it->second->empty()) it->second->assign(static_cast<size_t>(total), 0.0f);
      std::copy(t.values.begin(), t.values.end(), it->second->begin() + t.begin);
      covered[t.name] += static_cast<int64_t>(t.values.size());
    }
  }
  for (const auto& [name, count] : covered) {
    if (count != total) {
      LogWarn("skipping " + StepDir(step) + ": tensor " + name + " covers " + std::to_string(count) + " of " + std::to_string(total) + " elements");
      return std::nullopt;
    }
  }
  if (state.params.size() != static_cast<size_t>(total)) {
    LogWarn("skipping " + StepDir(step) + ": no parameters");
    return std::nullopt;
  }
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
