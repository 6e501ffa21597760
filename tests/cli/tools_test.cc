// The built tools' contract without a server: --help, usage errors (exit 2) and an unreachable
// schedd (exit 3), with messages on stderr prefixed by the tool's name.
#include <sys/wait.h>

#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

namespace fs = std::filesystem;

namespace {

struct Result {
  int exit_code = -1;
  std::string out, err;
};

std::string Slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A scratch directory removed when the test binary exits.
struct ScratchDir {
  fs::path path = fs::temp_directory_path() / ("mlsched-cli-tools-" + std::to_string(std::random_device()()));
  ScratchDir() { fs::create_directories(path); }
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Runs `cmd` (a shell command line built from trusted test strings) with stdin from /dev/null.
Result Run(const std::string& cmd) {
  static const ScratchDir scratch;
  const fs::path& dir = scratch.path;
  std::string line = "cd " + dir.string() + " && MLSCHED_SERVER=unix:" + (dir / "no-schedd.sock").string() + " " + cmd +
                     " </dev/null >" + (dir / "out").string() + " 2>" + (dir / "err").string();
  int status = std::system(line.c_str());
  Result r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = Slurp(dir / "out");
  r.err = Slurp(dir / "err");
  return r;
}

const std::string kMlsub = MLSCHED_MLSUB_BIN, kMlq = MLSCHED_MLQ_BIN, kMlcancel = MLSCHED_MLCANCEL_BIN,
                  kMladmin = MLSCHED_MLADMIN_BIN;

}  // namespace

TEST_CASE("every tool documents its exit codes in --help", "[cli][tools]") {
  for (const auto& tool : {kMlsub, kMlq, kMlcancel, kMladmin}) {
    auto r = Run(tool + " --help");
    INFO(tool);
    CHECK(r.exit_code == 0);
    CHECK_THAT(r.out, Catch::Contains("Exit codes:") && Catch::Contains("3  schedd unreachable"));
  }
}

TEST_CASE("usage errors exit 2 with the tool's name and what was wrong", "[cli][tools]") {
  auto r = Run(kMlsub + " -n 0 --wrap true");
  CHECK(r.exit_code == 2);
  CHECK(r.err == "mlsub: --ntasks must be >= 1 (got 0)\n");
  r = Run("printf '#!/bin/sh\\n#MLSUB -n 2\\n#MLSUB --gpus-per-tsk 1\\necho hi\\n' > job.sh && " + kMlsub + " job.sh");
  CHECK(r.exit_code == 2);
  CHECK(r.err == "mlsub: job.sh:3: unknown option '--gpus-per-tsk' in #MLSUB directive\n");
  r = Run(kMlsub + " --bogus");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::StartsWith("mlsub: unknown option '--bogus'"));
  r = Run(kMlq + " -t bogus");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::StartsWith("mlq: --states: unknown job state 'BOGUS'"));
  r = Run(kMlq + " --frobnicate");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::StartsWith("mlq: "));
  r = Run(kMlq + " -o '%Y'");
  CHECK(r.exit_code == 2);
  r = Run(kMlcancel);
  CHECK(r.exit_code == 2);
  CHECK(r.err == "mlcancel: nothing to cancel: give job ids or a filter (-u, -t, -n, -p)\n");
  r = Run(kMlcancel + " -s NOPE 4");
  CHECK(r.exit_code == 2);
  r = Run(kMladmin);
  CHECK(r.exit_code == 2);
  r = Run(kMladmin + " show job x");
  CHECK(r.exit_code == 2);
  CHECK(r.err == "mladmin: 'x' is not a job id\n");
  r = Run(kMladmin + " drain n1");  // --reason is required
  CHECK(r.exit_code == 2);
  r = Run(kMladmin + " policy check");  // FILE is required
  CHECK(r.exit_code == 2);
  r = Run(kMlq + " --explain x");
  CHECK(r.exit_code == 2);
  CHECK(r.err == "mlq: --explain: 'x' is not a job id\n");
  r = Run(kMlq + " --explain 4 --start");
  CHECK(r.exit_code == 2);
}

TEST_CASE("mladmin policy check needs no schedd: 0 with a summary, 1 with FILE:LINE:COL errors", "[cli][tools]") {
  auto r = Run(kMladmin + " policy check " MLSCHED_SOURCE_DIR "/policies/default.toml");
  CHECK(r.exit_code == 0);
  CHECK(r.out == MLSCHED_SOURCE_DIR "/policies/default.toml: OK: 1 partition (default), 1 QoS (normal), 0 accounts, "
                 "queue multifactor, backfill easy\n");
  r = Run("printf '[scheduler]\\nqueue_order = \"lifo\"\\n' > bad.toml && " + kMladmin + " policy check bad.toml");
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::StartsWith("bad.toml:2:") && Catch::Contains("lifo") &&
                        Catch::EndsWith("mladmin: bad.toml is not a valid policy (1 error)\n"));
  CHECK(r.out.empty());
}

TEST_CASE("mlsub retries an unreachable schedd with backoff and then exits 3", "[cli][tools]") {
  auto r = Run("MLSCHED_SUBMIT_RETRY=1 " + kMlsub + " --wrap true");
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.err, Catch::Contains("; retrying in 0.25 s") && Catch::Contains("; retrying in 0.5 s") &&
                        Catch::Contains("mlsub: cannot reach schedd at unix:"));
}

TEST_CASE("an unreachable schedd exits 3 and names the address", "[cli][tools]") {
  for (const auto& [tool, args] : std::vector<std::pair<std::string, std::string>>{
           {kMlsub, "--wrap true"}, {kMlq, ""}, {kMlcancel, "5"}, {kMladmin, "nodes"}, {kMladmin, "policy reload"},
           {kMlq, "--explain 5"}}) {
    auto r = Run("MLSCHED_SUBMIT_RETRY=0 " + tool + " " + args);
    INFO(tool);
    CHECK(r.exit_code == 3);
    CHECK_THAT(r.err, Catch::Contains(": cannot reach schedd at unix:") && Catch::Contains("no-schedd.sock"));
  }
  auto r = Run(kMlq + " --server unix:/nonexistent/other.sock");
  CHECK(r.exit_code == 3);
  CHECK_THAT(r.err, Catch::StartsWith("mlq: cannot reach schedd at unix:/nonexistent/other.sock"));
}

TEST_CASE("a bad list of schedd replicas is a usage error for every tool", "[cli][tools][ha]") {
  for (const auto& [tool, args] : std::vector<std::pair<std::string, std::string>>{
           {kMlsub, "--wrap true"}, {kMlq, ""}, {kMlcancel, "5"}, {kMladmin, "ha status"}}) {
    auto r = Run("MLSCHED_SERVER=a:7000,unix:/run/s.sock " + tool + " " + args);
    INFO(tool);
    CHECK(r.exit_code == 2);
    CHECK_THAT(r.err, Catch::Contains("server list 'a:7000,unix:/run/s.sock': unix:/run/s.sock: a Unix socket"));
  }
  auto r = Run(kMlq + " --server a:1,,b:2");
  CHECK(r.exit_code == 2);
  CHECK(r.err == "mlq: server list 'a:1,,b:2': empty entry\n");
}
