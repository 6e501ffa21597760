// The launch-side attacks of issue 29, against real daemons: a user probing root's directories
// through a job's working directory (and a missing one requeued forever), and a local user
// squatting the rendezvous port of another user's 2-task job. Each must fail to do harm.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <regex>
#include <thread>

#include "tests/e2e/cluster.h"

using namespace mlsched;
using namespace mlsched::e2e;
namespace fs = std::filesystem;

namespace {

constexpr uint32_t kNobody = 65534;

bool CanSwitchUsers() { return ::geteuid() == 0 && std::system("command -v setpriv >/dev/null 2>&1") == 0; }

/// A TCP socket listening on 127.0.0.1:`port` as a squatter would: SO_REUSEADDR, bind, listen.
/// -1 when the port cannot be taken.
int Squat(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 16) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

TEST_CASE("a working directory the user cannot reach fails the job once, telling nothing of what root sees",
          "[e2e][security]") {
  if (!CanSwitchUsers()) {
    WARN("SKIPPED: cannot switch to uid 65534 (needs root and setpriv)");
    return;
  }
  Cluster c("", Transport::kTls);
  c.StartAgent("n1", 2);
  const fs::path secret = c.Dir() / "root-only";  // as /root: root's, 0700
  fs::create_directories(secret / "existing");
  fs::permissions(secret, fs::perms::owner_all);
  auto submit_as_nobody = [&](const fs::path& workdir) {
    RunResult r = c.ToolAs(kNobody, "mlsub", {"--parsable", "-D", workdir.string(), "--wrap", "true"});
    INFO(r.err);
    REQUIRE(r.exit_code == 0);
    return std::stoll(r.out);
  };
  const int64_t there = submit_as_nobody(secret / "existing"), absent = submit_as_nobody(secret / "missing");
  REQUIRE(c.WaitState(there, "FAILED"));
  REQUIRE(c.WaitState(absent, "FAILED"));
  std::this_thread::sleep_for(std::chrono::seconds(3));  // (a requeue backoff is 1 s here)
  std::string reasons[2];
  int i = 0;
  for (int64_t id : {there, absent}) {
    auto job = c.Job(id);
    INFO(job.dump());
    CHECK(job.value("state", "") == "FAILED");  // once: never requeued
    CHECK(job.value("attempt", 0) == 1);
    CHECK(job.value("requeue_count", -1) == 0);
    reasons[i++] = std::regex_replace(job.value("reason", ""), std::regex("root-only/(existing|missing)"), "root-only/DIR");
  }
  CHECK(reasons[0] == reasons[1]);  // the same words whether the directory exists or not
  CHECK_THAT(reasons[0], Catch::Contains("chdir to working directory") && Catch::Contains("Permission denied"));
  CHECK_FALSE(fs::exists(secret / "missing"));
}

#ifdef MLSCHED_MLTRAIN_BIN
namespace {

/// A 2-task mltrain job (a few steps on 512 samples). On attempt 1, rank 0 first writes its
/// MASTER_PORT to PORT_FILE and waits for GO_FILE when those are given: the window in which a
/// squatter could act between the agent's reservation and rank 0's start.
fs::path TrainScript(const Cluster& c, const std::string& port_file = "", const std::string& go_file = "") {
  fs::path script = c.Dir() / "train.sh";
  std::ofstream(script) << "#!/bin/sh\n"
                        << (port_file.empty() ? ""
                                              : "if [ \"$RANK\" = 0 ] && [ \"$MLSCHED_ATTEMPT\" = 1 ]; then\n"
                                                "  echo \"$MASTER_PORT\" > " + port_file + ".tmp && mv " + port_file +
                                                    ".tmp " + port_file + "\n"
                                                "  while [ ! -e " + go_file + " ]; do sleep 0.05; done\n"
                                                "fi\n")
                        << "exec " << MLSCHED_MLTRAIN_BIN
                        << " --train-limit 512 --test-limit 200 --hidden 32 --batch-size 64 --epochs 1 --max-steps 3"
                           " --threads 1 --log-every 1000 --rendezvous-timeout 30\n";
  return script;
}

bool HaveData() {
  if (fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz")) return true;
  WARN("SKIPPED: dataset-fashion-mnist is not installed");
  return false;
}

}  // namespace

TEST_CASE("a squatter on the port the old formula gave a 2-task job no longer hurts it", "[e2e][security][rendezvous]") {
  if (!HaveData()) return;
  Cluster c;
  c.StartAgent("n1", 1);
  c.StartAgent("n2", 1);
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  // Job ids are public and sequential: the next one is the probe's + 1. The old MASTER_PORT of its
  // first attempt was 20000 + (id * 7919 + 1 * 104729) mod 12000.
  const int64_t probe = c.Submit({"-H", "-D", out.string(), "--wrap", "true"});
  const int64_t next = probe + 1;
  const int squatter = Squat(20000 + static_cast<int>((next * 7919 + 104729) % 12000));
  REQUIRE(squatter >= 0);
  const int64_t id = c.Submit({"-n", "2", "-c", "1", "-D", out.string(), TrainScript(c).string()});
  REQUIRE(id == next);
  REQUIRE(c.WaitState(id, "COMPLETED", 90));
  auto job = c.Job(id);
  CHECK(job.value("attempt", 0) == 1);
  CHECK(job.value("requeue_count", -1) == 0);
  ::close(squatter);
}

TEST_CASE("a squatter that takes the reserved port before rank 0 listens makes the job requeue, never fail",
          "[e2e][security][rendezvous]") {
  if (!HaveData()) return;
  Cluster c;
  c.StartAgent("n1", 1);
  c.StartAgent("n2", 1);
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  const std::string port_file = (out / "port").string(), go_file = (out / "go").string();
  const int64_t id = c.Submit({"-n", "2", "-c", "1", "-D", out.string(), TrainScript(c, port_file, go_file).string()});
  // Rank 0 of attempt 1 is between the agent's reservation and its own listen(): take the port.
  REQUIRE(WaitFor([&] { return !ReadFile(port_file).empty(); }, 60));
  const int port = std::stoi(ReadFile(port_file));
  CHECK(port >= 1024);
  const int squatter = Squat(port);  // possible only because the reservation does not listen
  REQUIRE(squatter >= 0);
  std::ofstream(go_file) << "go\n";
  REQUIRE(c.WaitState(id, "COMPLETED", 120));  // FAILED is final: reaching COMPLETED means it never failed
  auto job = c.Job(id);
  INFO(job.dump());
  CHECK(job.value("attempt", 0) == 2);
  CHECK(job.value("requeue_count", -1) == 1);
  const std::string log = ReadFile(out / ("mlsched-" + std::to_string(id) + ".out"));
  CHECK_THAT(log, Catch::Contains("already listens on the port") && Catch::Contains("exit 75"));
  ::close(squatter);
}
#endif
