// agentd as root beside users' files: a user racing symlinks into attempt directories, FIFOs and
// symlinks as status files, symlinks inside trees being removed. Nothing outside the user's reach
// may change owner, mode or contents, and nothing may block.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "agentd/safe_files.h"

using namespace mlsched::agent;
namespace fs = std::filesystem;

namespace {

constexpr uid_t kUser = 65534;

struct Scratch {
  fs::path dir;
  Scratch() {
    std::random_device rd;
    dir = fs::temp_directory_path() / ("mlsched-safe-" + std::to_string(rd()));
    fs::create_directories(dir / "jobs");
    fs::permissions(dir, fs::perms(0711));
    fs::permissions(dir / "jobs", fs::perms(0711));
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("a user racing symlinks into attempt directories never gets root to touch the target", "[agentd][security]") {
  if (geteuid() != 0) {
    WARN("SKIPPED: needs root (agentd's privilege separation is only at stake as root)");
    return;
  }
  Scratch s;
  const fs::path victim = s.dir / "victim";  // stands for /etc/shadow
  std::ofstream(victim) << "root-only secret\n";
  fs::permissions(victim, fs::perms(0600));
  // The attacker, as the task user, swaps `script` in every attempt directory it can enter for a
  // symlink to the victim, as fast as it can.
  pid_t attacker = fork();
  if (attacker == 0) {
    if (setgid(kUser) != 0 || setuid(kUser) != 0) _exit(1);
    const std::string target = victim.string();
    for (auto end = std::chrono::steady_clock::now() + std::chrono::seconds(20); std::chrono::steady_clock::now() < end;) {
      for (int i = 0; i < 400; ++i) {
        std::string d = (s.dir / "jobs" / std::to_string(i)).string();
        unlink((d + "/script").c_str());
        symlink(target.c_str(), (d + "/script").c_str());
        symlink(target.c_str(), (d + "/status-0.json").c_str());
      }
    }
    _exit(0);
  }
  int failures = 0;
  for (int i = 0; i < 400; ++i) {
    std::string d = (s.dir / "jobs" / std::to_string(i)).string();
    if (!CreateAttemptDir(d, "#!/bin/sh\necho hi\n", true, kUser, kUser).empty()) ++failures;
    std::string status;
    ReadRegularFileAt(d, "status-0.json", kMaxStatusFileBytes, &status);
    CHECK(status.find("secret") == std::string::npos);
  }
  kill(attacker, SIGKILL);
  waitpid(attacker, nullptr, 0);
  CHECK(failures == 0);
  struct stat st {};
  REQUIRE(lstat(victim.c_str(), &st) == 0);
  CHECK(st.st_uid == 0);
  CHECK((st.st_mode & 07777) == 0600);
  CHECK(Slurp(victim) == "root-only secret\n");
  // And the attempt directories are the user's, with the script the agent wrote.
  struct stat ds {};
  REQUIRE(stat((s.dir / "jobs/0").c_str(), &ds) == 0);
  CHECK(ds.st_uid == kUser);
  CHECK((ds.st_mode & 07777) == 0700);
}

TEST_CASE("the attempt directory is created fresh, root-only until it is handed over", "[agentd][security]") {
  Scratch s;
  std::string d = (s.dir / "jobs/1").string();
  REQUIRE(CreateAttemptDir(d, "echo hi\n", false, 0, 0).empty());
  CHECK(Slurp(d + "/script") == "echo hi\n");
  CHECK((fs::status(d + "/script").permissions() & fs::perms::all) == fs::perms(0700));
  // An existing directory (or a symlink planted where it should be) is refused, not reused.
  CHECK_THAT(CreateAttemptDir(d, "x", false, 0, 0), Catch::Contains("cannot create"));
  fs::create_symlink(s.dir, s.dir / "jobs/2");
  CHECK_THAT(CreateAttemptDir((s.dir / "jobs/2").string(), "x", false, 0, 0), Catch::Contains("cannot create"));
  CHECK_FALSE(fs::exists(s.dir / "script"));
  CHECK_THAT(CreateAttemptDir((s.dir / "jobs/3").string(), std::string(kMaxScriptBytes + 1, 'x'), false, 0, 0),
             Catch::Contains("exceeds"));
}

TEST_CASE("status files: a FIFO, a symlink, a directory or an oversized file is refused at once", "[agentd][security]") {
  Scratch s;
  fs::path d = s.dir / "jobs/1";
  fs::create_directories(d);
  std::ofstream(s.dir / "secret") << "{\"step\": 42}";
  REQUIRE(mkfifo((d / "fifo.json").c_str(), 0600) == 0);
  fs::create_symlink(s.dir / "secret", d / "link.json");
  fs::create_directories(d / "dir.json");
  std::ofstream(d / "big.json") << std::string(kMaxStatusFileBytes + 1, ' ');
  std::ofstream(d / "ok.json") << "{\"step\": 7}";
  std::string out;
  auto t0 = std::chrono::steady_clock::now();
  CHECK_THAT(ReadRegularFileAt(d.string(), "fifo.json", kMaxStatusFileBytes, &out), Catch::Contains("not a regular file"));
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1));  // no writer opened it: must not block
  CHECK_FALSE(ReadRegularFileAt(d.string(), "link.json", kMaxStatusFileBytes, &out).empty());
  CHECK_FALSE(ReadRegularFileAt(d.string(), "dir.json", kMaxStatusFileBytes, &out).empty());
  CHECK_THAT(ReadRegularFileAt(d.string(), "big.json", kMaxStatusFileBytes, &out), Catch::Contains("larger than"));
  REQUIRE(ReadRegularFileAt(d.string(), "ok.json", kMaxStatusFileBytes, &out).empty());
  CHECK(out == "{\"step\": 7}");
  // The directory itself must not be a symlink either.
  fs::create_symlink(d, s.dir / "jobs/linked");
  CHECK_FALSE(ReadRegularFileAt((s.dir / "jobs/linked").string(), "ok.json", kMaxStatusFileBytes, &out).empty());
}

TEST_CASE("removing an attempt tree unlinks symlinks and never follows them", "[agentd][security]") {
  Scratch s;
  fs::path keep = s.dir / "keep";
  fs::create_directories(keep / "sub");
  std::ofstream(keep / "sub/file") << "keep me";
  fs::path d = s.dir / "jobs/1";
  fs::create_directories(d / "a/b");
  std::ofstream(d / "a/b/f") << "x";
  fs::create_directory_symlink(keep, d / "a/evil");
  fs::create_directory_symlink(keep / "sub", d / "evil2");
  std::ofstream(d / "script") << "x";
  REQUIRE(RemoveTree(d.string()).empty());
  CHECK_FALSE(fs::exists(d));
  CHECK(Slurp(keep / "sub/file") == "keep me");
  CHECK(RemoveTree(d.string()).empty());  // already gone
  // The attempt directory itself replaced by a symlink: the link goes, its target stays.
  fs::create_directory_symlink(keep, d);
  REQUIRE(RemoveTree(d.string()).empty());
  CHECK(Slurp(keep / "sub/file") == "keep me");
}
