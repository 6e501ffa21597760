// Helpers shared by the trainer tests: temporary directories, free ports, child processes.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace mltrain::testing {

/// A fresh directory under the system temp dir, removed on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

/// A TCP port that was free a moment ago on 127.0.0.1.
int FreePort();

/// A child process running `argv` with extra environment variables, stdout+stderr to `log_path`.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, const std::string& log_path);
  ~Child();  // SIGKILLs a child still running
  pid_t pid() const { return pid_; }
  void Signal(int sig) const { ::kill(pid_, sig); }
  /// Exit code (128+signal when killed), or -1 when it did not exit within timeout_s.
  int Wait(double timeout_s);
  bool running() const { return !exited_; }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  int code_ = -1;
};

std::string ReadFile(const std::string& path);

/// A random 64-hex-digit rendezvous token, drawn once per test process (every rank of every run
/// started by this process shares it, as the ranks of one attempt do).
const std::string& TestRendezvousToken();

/// Env of rank `rank` of `world` ranks for a rendezvous at 127.0.0.1:port, with
/// MLSCHED_RENDEZVOUS_TOKEN = TestRendezvousToken().
std::map<std::string, std::string> RankEnv(int rank, int world, int port, const std::string& job = "test-job");

}  // namespace mltrain::testing
