#include "trainer/config.h"

#include <cstdlib>
#include <stdexcept>

namespace mltrain {

CheckpointInterval ParseCheckpointInterval(const std::string& text) {
  CheckpointInterval out;
  if (text.empty() || text == "0") return out;
  char* end = nullptr;
  double value = std::strtod(text.c_str(), &end);
  std::string unit(end);
  if (end == text.c_str() || value <= 0) throw std::invalid_argument("--checkpoint-every '" + text + "' must be a positive number of steps or seconds (e.g. 500 or 30s)");
  if (unit.empty()) {
    if (value != static_cast<double>(static_cast<int64_t>(value))) throw std::invalid_argument("--checkpoint-every '" + text + "': steps must be an integer");
    out.steps = static_cast<int64_t>(value);
  } else if (unit == "s") {
    out.seconds = value;
  } else if (unit == "m") {
    out.seconds = value * 60;
  } else {
    throw std::invalid_argument("--checkpoint-every '" + text + "': unknown unit '" + unit + "' (use s or m)");
  }
  return out;
}

std::vector<int> ParseHiddenSizes(const std::string& text) {
  std::vector<int> sizes;
  size_t pos = 0;
  while (pos <= text.size() && !text.empty()) {
    size_t comma = text.find(',', pos);
    std::string item = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 1 || v > 1'000'000) throw std::invalid_argument("--hidden '" + text + "': '" + item + "' is not a layer size");
    sizes.push_back(static_cast<int>(v));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return sizes;
}

std::vector<int> TrainerConfig::Layers(int features, int classes) const {
  std::vector<int> layers{features};
  layers.insert(layers.end(), hidden.begin(), hidden.end());
  layers.push_back(classes);
  return layers;
}

Device ParseDevice(const std::string& name, int cuda_devices) {
  if (name == "cpu") return Device::kCpu;
  if (name == "cuda") return Device::kCuda;
  if (name == "auto") return cuda_devices > 0 ? Device::kCuda : Device::kCpu;
  throw std::invalid_argument("--device '" + name + "': expected cpu, cuda or auto");
}

std::string DeviceName(Device d) { return d == Device::kCuda ? "cuda" : "cpu"; }

nlohmann::json TrainerConfig::ToJson(int features, int classes) const {
  return {{"layers", Layers(features, classes)},
          {"optimizer", OptimizerKindName(optimizer.kind)},
          {"lr", optimizer.lr},
          {"weight_decay", optimizer.weight_decay},
          {"warmup_steps", optimizer.warmup_steps},
          {"epochs", epochs},
          {"batch_size", batch_size},
          {"seed", seed},
          {"train_limit", train_limit}};
}

void TrainerConfig::Validate(int world_size) const {
  auto fail = [](const std::string& m) { throw std::invalid_argument(m); };
  if (epochs < 1) fail("--epochs must be >= 1");
  if (batch_size < 1) fail("--batch-size must be >= 1");
  if (grad_accum < 1) fail("--grad-accum must be >= 1");
  if (batch_size < static_cast<int64_t>(world_size) * grad_accum)
    fail("--batch-size " + std::to_string(batch_size) + " is smaller than WORLD_SIZE x --grad-accum (" +
         std::to_string(world_size * grad_accum) + "): some micro-batches would be empty");
  if (!(optimizer.lr > 0)) fail("--lr must be > 0");
  if (optimizer.weight_decay < 0) fail("--weight-decay must be >= 0");
  if (optimizer.warmup_steps < 0) fail("--warmup-steps must be >= 0");
  if (keep_checkpoints < 1) fail("--keep-checkpoints must be >= 1");
  if (log_every < 1) fail("--log-every must be >= 1");
  if (train_limit < 0 || test_limit < 0) fail("--train-limit/--test-limit must be >= 0");
  if (rendezvous_timeout_s <= 0 || collective_timeout_s <= 0) fail("timeouts must be > 0 seconds");
  if (test_faults.hang_at_step < 0) fail("--test-hang-at-step must be >= 0");
  if (!(test_faults.slow_factor >= 1 && test_faults.slow_factor <= 1000)) fail("--test-slow-factor must be in [1, 1000]");
  if (test_faults.Any() && test_faults.rank < 0 && test_faults.node.empty())
    fail("--test-hang-at-step/--test-slow-factor need --test-fault-rank or --test-fault-node");
}

}  // namespace mltrain
