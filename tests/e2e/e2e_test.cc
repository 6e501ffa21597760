// End-to-end: real schedd + agentd processes on a Unix socket, driven with mlsub/mlq/mlcancel.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <set>
#include <sstream>
#include <thread>

#include "tests/e2e/cluster.h"

using namespace mlsched::e2e;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> Lines(const std::string& s) {
  std::vector<std::string> out;
  std::istringstream in(s);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) out.push_back(l);
  return out;
}

}  // namespace

TEST_CASE("a 3-task gang starts on three agents with distinct ranks and one rendezvous", "[e2e]") {
  Cluster c;
  for (auto n : {"a1", "a2", "a3"}) c.StartAgent(n, 1);
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  int64_t id = c.Submit({"-n", "3", "-c", "1", "-D", out.string(), "-J", "env-check", "--wrap",
                         "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $MASTER_ADDR $MASTER_PORT $MLSCHED_JOB_ID\" > rank-$RANK.txt"});
  REQUIRE(c.WaitState(id, "COMPLETED"));
  std::set<std::string> ranks, rest;
  for (int r = 0; r < 3; ++r) {
    std::istringstream in(ReadFile(out / ("rank-" + std::to_string(r) + ".txt")));
    std::string rank, world, local, addr, port, job;
    in >> rank >> world >> local >> addr >> port >> job;
    ranks.insert(rank);
    rest.insert(world + " " + addr + " " + port + " " + job);
    CHECK(local == "0");  // one task per node
  }
  CHECK(ranks == std::set<std::string>{"0", "1", "2"});
  REQUIRE(rest.size() == 1);  // same world size, master and job everywhere
  CHECK(rest.begin()->rfind("3 127.0.0.1 ", 0) == 0);
  auto job = c.Job(id);
  CHECK(job["tasks"] == 3);
  CHECK(job["exit_code"] == 0);
}

TEST_CASE("a gang larger than free capacity waits with reason Resources, starting none of its tasks", "[e2e]") {
  Cluster c;
  for (auto n : {"a1", "a2", "a3"}) c.StartAgent(n, 1);
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  int64_t blocker = c.Submit({"-n", "1", "-D", out.string(), "--wrap", "sleep 300"});
  REQUIRE(c.WaitState(blocker, "RUNNING"));
  int64_t gang = c.Submit({"-n", "3", "-D", out.string(), "--wrap", "touch started-$RANK; sleep 1"});
  REQUIRE(WaitFor([&] { return c.Job(gang).value("reason", "") == "Resources"; }, 10));
  std::this_thread::sleep_for(std::chrono::seconds(1));
  CHECK(c.State(gang) == "PENDING");
  for (int r = 0; r < 3; ++r) CHECK_FALSE(fs::exists(out / ("started-" + std::to_string(r))));
  REQUIRE(c.Tool("mlcancel", {std::to_string(blocker)}).exit_code == 0);
  REQUIRE(c.WaitState(gang, "COMPLETED", 30));
  for (int r = 0; r < 3; ++r) CHECK(fs::exists(out / ("started-" + std::to_string(r))));
}

TEST_CASE("mlcancel kills every rank and leaves no process behind", "[e2e]") {
  Cluster c;
  for (auto n : {"a1", "a2", "a3"}) c.StartAgent(n, 1);
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  // Each rank forks a child too: the whole process group must die.
  int64_t id = c.Submit({"-n", "3", "-D", out.string(), "--wrap",
                         "sleep 300 & echo $! > child-$RANK; echo $$ > pid-$RANK; wait"});
  REQUIRE(c.WaitState(id, "RUNNING"));
  std::vector<pid_t> pids;
  REQUIRE(WaitFor([&] {
    for (int r = 0; r < 3; ++r)
      for (auto f : {"pid-", "child-"})
        if (ReadFile(out / (f + std::to_string(r))).empty()) return false;
    return true;
  }, 15));
  for (int r = 0; r < 3; ++r)
    for (auto f : {"pid-", "child-"}) pids.push_back(std::stoi(ReadFile(out / (f + std::to_string(r)))));
  for (pid_t p : pids) CHECK(Alive(p));
  auto r = c.Tool("mlcancel", {std::to_string(id)});
  CHECK(r.exit_code == 0);
  REQUIRE(c.WaitState(id, "CANCELLED", 20));
  for (pid_t p : pids) CHECK_FALSE(Alive(p));
}

TEST_CASE("schedd killed with SIGKILL and restarted loses nothing and runs nothing twice", "[e2e]") {
  Cluster c;
  for (auto n : {"a1", "a2"}) c.StartAgent(n, 1);
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  int64_t running = c.Submit({"-n", "2", "-D", out.string(), "--wrap", "echo start >> starts-$RANK; sleep 6"});
  REQUIRE(c.WaitState(running, "RUNNING"));
  int64_t pending = c.Submit({"-n", "2", "-D", out.string(), "--wrap", "echo start >> later-$RANK"});
  int64_t held = c.Submit({"-n", "1", "-H", "-D", out.string(), "--wrap", "true"});
  REQUIRE(WaitFor([&] { return fs::exists(out / "starts-0") && fs::exists(out / "starts-1"); }, 10));
  c.StopSchedd(SIGKILL);
  c.StartSchedd();
  CHECK(c.State(running) == "RUNNING");
  CHECK(c.State(pending) == "PENDING");
  CHECK(c.State(held) == "PENDING");
  CHECK(c.Job(held).value("reason", "") == "JobHeldUser");
  REQUIRE(c.WaitState(running, "COMPLETED", 30));
  REQUIRE(c.WaitState(pending, "COMPLETED", 30));
  for (int r = 0; r < 2; ++r) CHECK(Lines(ReadFile(out / ("starts-" + std::to_string(r)))).size() == 1);
  CHECK(c.Job(running)["attempt"] == 1);
}

TEST_CASE("a killed agent's job is requeued and completes on the other agents", "[e2e]") {
  Cluster c;
  for (auto n : {"a1", "a2", "a3"}) c.StartAgent(n, 1);
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  int64_t id = c.Submit({"-n", "2", "-D", out.string(), "--wrap",
                         "echo $MLSCHED_NODE >> nodes-$MLSCHED_ATTEMPT; sleep 3"});
  REQUIRE(c.WaitState(id, "RUNNING"));
  REQUIRE(WaitFor([&] { return Lines(ReadFile(out / "nodes-1")).size() == 2; }, 10));
  std::string victim = Lines(ReadFile(out / "nodes-1"))[0];
  c.KillAgent(victim, SIGKILL);
  REQUIRE(WaitFor([&] { return c.Job(id).value("attempt", 0) >= 2; }, 20));
  REQUIRE(c.WaitState(id, "COMPLETED", 30));
  auto second = Lines(ReadFile(out / "nodes-2"));
  CHECK(second.size() == 2);
  for (const auto& n : second) CHECK(n != victim);
  bool down = false;
  for (const auto& n : c.Nodes())
    if (n["name"] == victim) down = n["state"] == "DOWN";
  CHECK(down);
}

TEST_CASE("bad input gets a clear error and changes nothing", "[e2e]") {
  Cluster c;
  c.StartAgent("a1", 2);
  fs::path script = c.Dir() / "bad.sh";
  std::ofstream(script) << "#!/bin/sh\n#MLSUB -n 2\n#MLSUB --gpus-per-tsk 1\necho hi\n";
  auto r = c.Tool("mlsub", {script.string()});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("bad.sh:3"));
  r = c.Tool("mlsub", {"-p", "nosuch", "--wrap", "true"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("unknown partition 'nosuch'"));
  r = c.Tool("mlsub", {"-n", "0", "--wrap", "true"});
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Catch::Contains("--ntasks must be >= 1 (got 0)"));
  r = c.Tool("mlsub", {"--gpus-per-task", "9", "--wrap", "true"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("rejected"));
  r = c.Tool("mlsub", {"-c", "64", "--wrap", "true"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::Contains("rejected"));
  CHECK(nlohmann::json::parse(c.Tool("mlq", {"--json"}).out).empty());  // nothing was accepted

  int64_t id = c.Submit({"-H", "--wrap", "true"});
  if (geteuid() == 0) {
    // Another user (nobody) may not cancel root's job; the kernel says who is calling.
    auto other = Run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", MLSCHED_MLCANCEL_BIN,
                      std::to_string(id)});
    CHECK(other.exit_code == 1);
    CHECK_THAT(other.err, Catch::Contains("permission denied"));
    CHECK(c.State(id) == "PENDING");
  }
  CHECK(c.Tool("mlcancel", {std::to_string(id)}).exit_code == 0);
  CHECK(c.WaitState(id, "CANCELLED", 5));
}
