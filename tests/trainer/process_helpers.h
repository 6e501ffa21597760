// Running the mltrain binary as N local ranks and reading back its checkpoints.
#pragma once

#include <cmath>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/trainer/test_util.h"
#include "trainer/checkpoint.h"

namespace mltrain::testing {

/// Small, fast settings: 512 training samples, one hidden layer of 32, global batch 64.
inline std::vector<std::string> SmallRunArgs(const std::string& checkpoint_dir) {
  return {MLTRAIN_BINARY, "--train-limit", "512", "--test-limit", "200", "--hidden", "32", "--batch-size", "64",
          "--epochs", "4", "--warmup-steps", "3", "--threads", "1", "--log-every", "1000", "--lr", "0.002",
          "--checkpoint-url", "file://" + checkpoint_dir};
}

/// Starts `world` ranks of `args` (+ extra) on a fresh port; logs to log_prefix.R.log.
inline std::vector<std::unique_ptr<Child>> StartRanks(int world, std::vector<std::string> args, const std::vector<std::string>& extra,
                                                      const std::string& log_prefix, const std::string& job = "test-job") {
  args.insert(args.end(), extra.begin(), extra.end());
  int port = FreePort();
  std::vector<std::unique_ptr<Child>> ranks;
  for (int r = 0; r < world; ++r) {
    auto env = RankEnv(r, world, port, job);
    if (world == 1) env = {{"WORLD_SIZE", "1"}};
    env["MLSCHED_STATUS_FILE"] = log_prefix + "." + std::to_string(r) + ".status.json";
    ranks.push_back(std::make_unique<Child>(args, env, log_prefix + "." + std::to_string(r) + ".log"));
  }
  return ranks;
}

/// Runs `world` ranks to completion; returns every rank's exit code.
inline std::vector<int> RunRanks(int world, const std::vector<std::string>& args, const std::vector<std::string>& extra,
                                 const std::string& log_prefix, double timeout_s = 60) {
  auto ranks = StartRanks(world, args, extra, log_prefix);
  std::vector<int> codes;
  for (auto& r : ranks) codes.push_back(r->Wait(timeout_s));
  return codes;
}

/// The newest committed checkpoint in a directory (fails the test when there is none).
inline TrainingState LoadLatest(const std::string& dir) {
  LocalDirStore store(dir);
  SingleRankCommunicator comm;
  CheckpointManager ckpt(store, comm, 100);
  auto state = ckpt.Load({{"layers", {784, 32, 10}}, {"optimizer", "adamw"}});
  if (!state) throw std::runtime_error("no checkpoint in " + dir);
  return *state;
}

/// ||a - b|| / ||b|| over two equally long vectors.
inline double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0, norm = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    norm += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(diff / std::max(norm, 1e-30));
}

inline std::string DescribeLogs(const std::string& log_prefix, int world) {
  std::string out;
  for (int r = 0; r < world; ++r) out += "--- rank " + std::to_string(r) + " ---\n" + ReadFile(log_prefix + "." + std::to_string(r) + ".log");
  return out;
}

}  // namespace mltrain::testing
