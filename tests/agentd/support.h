// Helpers shared by the agentd tests: temp directories, polling waits, small file utilities.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>

namespace mlsched::agent::testing {

/// A fresh directory under /tmp (short, so Unix socket paths fit), removed on destruction.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::random_device rd;
    path = std::filesystem::path("/tmp") / ("agt-" + std::to_string(rd() % 1000000000));
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  std::string Str(const std::string& rel = "") const { return rel.empty() ? path.string() : (path / rel).string(); }
};

/// Polls `pred` every 10 ms until it holds or `timeout` passes.
inline bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout = std::chrono::seconds(5)) {
  auto end = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < end) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

/// Whole contents of a file, or "" if it cannot be read.
inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

/// True when no process is left in process group `pgid`.
inline bool GroupGone(pid_t pgid) { return kill(-pgid, 0) != 0 && errno == ESRCH; }

}  // namespace mlsched::agent::testing
