// Security test fixtures: a private munged (own key, own socket, in a temp dir) and a private
// cluster CA with certificates made by scripts/mlsched-certs.sh, so tests exercise the same MUNGE
// and TLS paths as a production cluster without touching the host's /etc/munge or /etc/mlsched.
#pragma once

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>

namespace mlsched::testing {

/// A fresh temp directory, removed on destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix) {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() / (prefix + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

/// True when `cmd` (a shell command) exits 0.
inline bool Sh(const std::string& cmd) { return std::system(cmd.c_str()) == 0; }

/// A munged of its own: key made by mungekey, socket in a directory every user may traverse (so a
/// test can encode as another uid), stopped on destruction. `ok()` is false when munged is missing.
class PrivateMunged {
 public:
  explicit PrivateMunged(const std::filesystem::path& dir, const std::string& key_file = "") : dir_(dir) {
    std::filesystem::create_directories(dir_);
    ::chmod(dir_.c_str(), 0711);
    key_ = key_file.empty() ? (dir_ / "munge.key").string() : key_file;
    if (key_file.empty() && !Sh("mungekey --create --keyfile=" + key_ + " 2>/dev/null")) return;
    ok_ = Sh("munged --force --socket=" + Socket() + " --key-file=" + key_ + " --pid-file=" + (dir_ / "munged.pid").string() +
             " --log-file=" + (dir_ / "munged.log").string() + " --seed-file=" + (dir_ / "munged.seed").string() +
             " 2>/dev/null");
    for (int i = 0; ok_ && i < 100 && !std::filesystem::exists(Socket()); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ~PrivateMunged() {
    std::ifstream in(dir_ / "munged.pid");
    pid_t pid = 0;
    if (in >> pid && pid > 0) ::kill(pid, SIGTERM);
  }
  bool ok() const { return ok_; }
  std::string Socket() const { return (dir_ / "munge.sock").string(); }
  std::string KeyFile() const { return key_; }

 private:
  std::filesystem::path dir_;
  std::string key_;
  bool ok_ = false;
};

/// The repository's scripts/mlsched-certs.sh (MLSCHED_SOURCE_DIR is a compile definition).
inline std::string CertScript() { return std::string(MLSCHED_SOURCE_DIR) + "/scripts/mlsched-certs.sh"; }

/// A cluster CA in `dir` with schedd's certificate (localhost, 127.0.0.1) and node certificates.
inline bool MakeCluster(const std::filesystem::path& dir, const std::vector<std::string>& nodes) {
  std::string d = dir.string();
  if (!Sh("bash " + CertScript() + " " + d + " ca >/dev/null && bash " + CertScript() + " " + d + " schedd localhost >/dev/null"))
    return false;
  for (const auto& n : nodes)
    if (!Sh("bash " + CertScript() + " " + d + " node " + n + " >/dev/null")) return false;
  return true;
}

/// True when the tests may switch to another uid (root, setpriv present).
inline bool CanSwitchUsers() { return ::geteuid() == 0 && Sh("command -v setpriv >/dev/null 2>&1"); }

}  // namespace mlsched::testing
