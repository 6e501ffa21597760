// End-to-end: real schedd + agentd processes on a Unix socket, driven with mlsub/mlq/mlcancel.
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
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
                         "echo \"$RANK $WORLD_SIZE $LOCAL_RANK $MASTER_ADDR $MASTER_PORT $MLSCHED_JOB_ID "
                         "$MLSCHED_RENDEZVOUS_TOKEN\" > rank-$RANK.txt"});
  REQUIRE(c.WaitState(id, "COMPLETED"));
  std::set<std::string> ranks, rest;
  std::string token;
  for (int r = 0; r < 3; ++r) {
    std::istringstream in(ReadFile(out / ("rank-" + std::to_string(r) + ".txt")));
    std::string rank, world, local, addr, port, job;
    in >> rank >> world >> local >> addr >> port >> job >> token;
    ranks.insert(rank);
    rest.insert(world + " " + addr + " " + port + " " + job + " " + token);
    CHECK(local == "0");  // one task per node
  }
  CHECK(ranks == std::set<std::string>{"0", "1", "2"});
  REQUIRE(rest.size() == 1);  // same world size, master, job and rendezvous secret everywhere
  CHECK(rest.begin()->rfind("3 127.0.0.1 ", 0) == 0);
  CHECK(token.size() == 64);
  auto job = c.Job(id);
  CHECK(job["tasks"] == 3);
  CHECK(job["exit_code"] == 0);
  // The secret shows up nowhere else: not in mlq, nor in the daemons' debug logs or state.
  CHECK(job.dump().find(token) == std::string::npos);
  CHECK(c.Tool("mlq", {"--all", "--json"}).out.find(token) == std::string::npos);
  auto shown = c.Tool("mladmin", {"show", "job", std::to_string(id), "--json"});
  CHECK(shown.exit_code == 0);
  CHECK(shown.out.find(token) == std::string::npos);
  for (const auto& f : fs::recursive_directory_iterator(c.Dir())) {
    if (!f.is_regular_file() || f.path().parent_path() == out) continue;
    INFO(f.path());
    CHECK(ReadFile(f.path()).find(token) == std::string::npos);
  }
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

TEST_CASE("cgroups: a task over --mem-per-task fails its job with OutOfMemory, an escaped forger dies on cancel",
          "[e2e][cgroup]") {
  Cluster c;
  c.StartAgent("a1", 2);
  auto nodes = c.Nodes();
  REQUIRE(nodes.size() == 1);
  const std::string isolation = nodes[0].value("isolation", "");
  CHECK_FALSE(isolation.empty());
  WARN("mladmin nodes:\n" << c.Tool("mladmin", {"nodes"}).out);
  if (geteuid() != 0 || isolation.find("memory") == std::string::npos || access("/usr/bin/python3", X_OK) != 0) {
    WARN("SKIPPED: needs root, the memory controller and /usr/bin/python3 (isolation: " << isolation << ")");
    return;
  }
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  int64_t hog = c.Submit({"--mem-per-task", "64M", "-D", out.string(), "--wrap",
                          "exec /usr/bin/python3 -c \"x = b'a' * (300 << 20)\""});
  REQUIRE(c.WaitState(hog, "FAILED", 30));
  auto job = c.Job(hog);
  WARN("mlq --json reason: " << job.value("reason", ""));
  CHECK(job.value("reason", "").rfind("OutOfMemory: rank 0: OUT_OF_MEMORY: task used more than its 64 MiB memory limit", 0) ==
        0);
  CHECK(job.value("exit_code", 0) == 137);

  // A daemon that leaves its job's process group and claims to belong to another running job.
  int64_t victim = c.Submit({"-D", out.string(), "--wrap", "sleep 300"});
  REQUIRE(c.WaitState(victim, "RUNNING"));
  int64_t forger = c.Submit({"-D", out.string(), "--wrap",
                             "(MLSCHED_JOB_ID=" + std::to_string(victim) +
                                 " MLSCHED_ATTEMPT=1 MLSCHED_TASK_ID=0 setsid sleep 300 & echo $! > daemon.pid); sleep 300"});
  REQUIRE(WaitFor([&] { return !ReadFile(out / "daemon.pid").empty(); }, 20));
  pid_t daemon = std::stoi(ReadFile(out / "daemon.pid"));
  CHECK(Alive(daemon));
  CHECK(c.Tool("mlcancel", {std::to_string(forger)}).exit_code == 0);
  REQUIRE(c.WaitState(forger, "CANCELLED", 20));
  CHECK(WaitFor([&] { return !Alive(daemon); }, 5));
  CHECK(c.State(victim) == "RUNNING");
  CHECK(c.Tool("mlcancel", {std::to_string(victim)}).exit_code == 0);
  REQUIRE(c.WaitState(victim, "CANCELLED", 20));
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

TEST_CASE("agentd reloaded in place (SIGHUP) keeps its tasks: same pids, signals and exits still theirs, nothing "
          "requeued", "[e2e][reload]") {
  Cluster c;
  c.StartAgent("a1", 4);
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  // Each task records its pid and runs until its file appears; then exits with its own code.
  auto wait_for = [&](const std::string& name, int code) {
    return c.Submit({"-n", "1", "-D", out.string(), "--wrap",
                     "echo $$ >> pid-" + name + "-$MLSCHED_ATTEMPT; while [ ! -e go-" + name +
                         " ]; do sleep 0.1; done; exit " + std::to_string(code)});
  };
  int64_t failing = wait_for("a", 3), cancelled = wait_for("b", 0), racing = wait_for("c", 0);
  std::map<std::string, pid_t> pids;
  REQUIRE(WaitFor([&] {
    for (auto n : {"a", "b", "c"})
      if (ReadFile(out / ("pid-" + std::string(n) + "-1")).empty()) return false;
    return true;
  }, 20));
  for (auto n : {"a", "b", "c"}) pids[n] = std::stoi(ReadFile(out / ("pid-" + std::string(n) + "-1")));
  const pid_t agent = c.AgentPid("a1");
  const fs::path log = c.Dir() / "a1.log";
  auto adoptions = [&] {
    const std::string text = ReadFile(log);
    size_t n = 0;
    for (size_t at = text.find("adopted after a reload"); at != std::string::npos;
         at = text.find("adopted after a reload", at + 1))
      ++n;
    return n;
  };
  // Task c ends at about the moment of the reload: whichever image reaps it reports it.
  std::ofstream(out / "go-c").put('\n');
  REQUIRE(kill(agent, SIGHUP) == 0);
  REQUIRE(WaitFor([&] { return adoptions() >= 2; }, 20));
  REQUIRE(c.WaitState(racing, "COMPLETED", 20));
  CHECK(Alive(agent));  // the same process, a new image
  CHECK(Alive(pids["a"]));
  CHECK(Alive(pids["b"]));
  // A second reload: the tasks forked before the first and a new one forked after it.
  int64_t later = wait_for("d", 0);
  REQUIRE(WaitFor([&] { return !ReadFile(out / "pid-d-1").empty(); }, 20));
  const size_t before = adoptions();
  REQUIRE(kill(agent, SIGHUP) == 0);
  REQUIRE(WaitFor([&] { return adoptions() >= before + 3; }, 20));
  // Registered again, the node is up and schedd kept every job running.
  REQUIRE(WaitFor([&] {
    for (const auto& n : c.Nodes())
      if (n["name"] == "a1") return n["state"] != "DOWN";
    return false;
  }, 20));
  for (const auto& n : c.Nodes())  // the version the new image registered (mladmin nodes --json)
    if (n["name"] == "a1") CHECK(n.value("agent_version", "").find('.') != std::string::npos);
  // A third reload while schedd is down (the agent cut off, its disconnection carried across the
  // exec): the tasks are adopted, and the restarted schedd gets them back at the registration.
  c.StopSchedd(SIGKILL);
  const size_t third = adoptions();
  REQUIRE(kill(agent, SIGHUP) == 0);
  REQUIRE(WaitFor([&] { return adoptions() >= third + 3; }, 20));
  c.StartSchedd();
  REQUIRE(WaitFor([&] {
    for (const auto& n : c.Nodes())
      if (n["name"] == "a1") return n["state"] != "DOWN";
    return false;
  }, 20));
  for (int64_t id : {failing, cancelled, later}) CHECK(c.State(id) == "RUNNING");
  // Signals still reach an adopted task; exits are still theirs.
  CHECK(c.Tool("mlcancel", {std::to_string(cancelled)}).exit_code == 0);
  REQUIRE(c.WaitState(cancelled, "CANCELLED", 20));
  CHECK(WaitFor([&] { return !Alive(pids["b"]); }, 10));
  std::ofstream(out / "go-a").put('\n');
  std::ofstream(out / "go-d").put('\n');
  REQUIRE(c.WaitState(failing, "FAILED", 20));
  CHECK(c.Job(failing).value("exit_code", 0) == 3);
  REQUIRE(c.WaitState(later, "COMPLETED", 20));
  for (int64_t id : {failing, cancelled, racing, later}) CHECK(c.Job(id).value("attempt", 0) == 1);
  for (auto n : {"a", "b", "c", "d"}) {  // each ran once: one pid line, no second attempt
    CHECK(Lines(ReadFile(out / ("pid-" + std::string(n) + "-1"))).size() == 1);
    CHECK_FALSE(fs::exists(out / ("pid-" + std::string(n) + "-2")));
  }
  CHECK(Alive(agent));
}

TEST_CASE("an unconfirmed mlsub names its submission key, submitting again under it stores the job once", "[e2e]") {
  Cluster c;
  c.StartAgent("a1", 1);
  // schedd unreachable (no retries): the outcome is unknown, and mlsub says how to settle it.
  setenv("MLSCHED_RETRY", "0", 1);
  auto lost = c.Tool("mlsub", {"--server", "unix:" + (c.Dir() / "no-schedd.sock").string(), "--wrap", "true"});
  unsetenv("MLSCHED_RETRY");
  CHECK(lost.exit_code == 3);
  const std::string marker = "--submission-key ";
  const auto at = lost.err.find(marker);
  REQUIRE(at != std::string::npos);
  const std::string key = lost.err.substr(at + marker.size(), 32);
  CHECK(key.find_first_not_of("0123456789abcdef") == std::string::npos);
  // A refusal is schedd's answer, not an unknown outcome: no key offered.
  auto refused = c.Tool("mlsub", {"-n", "0", "--wrap", "true"});
  CHECK(refused.exit_code != 0);
  CHECK(refused.err.find(marker) == std::string::npos);
  // The same submission again under the key: stored once, then the same job on every repeat.
  // (-D: the job's output goes to the cluster's directory, not wherever the test was started)
  const std::string dir = c.Dir().string();
  auto first = c.Tool("mlsub", {"--parsable", "--submission-key", key, "-D", dir, "--wrap", "sleep 1"});
  REQUIRE(first.exit_code == 0);
  auto again = c.Tool("mlsub", {"--parsable", "--submission-key", key, "-D", dir, "--wrap", "sleep 1"});
  REQUIRE(again.exit_code == 0);
  CHECK(again.out == first.out);
  CHECK(Lines(c.Tool("mlq", {"-h", "-o", "%i", "--all"}).out).size() == 1);
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

TEST_CASE("mladmin policy check and reload keep a broken policy out, mlq --explain and --start show why a job waits",
          "[e2e]") {
  const std::string policy = R"(default_partition = "batch"
[scheduler]
queue_order = "multifactor"
[backfill]
mode = "easy"
[priority]
weight_age = 1000
weight_fairshare = 10000
[[partitions]]
name = "batch"
)";
  Cluster c(policy);
  c.StartAgent("a1", 1);

  // check: a broken copy is refused with FILE:LINE:COL and exit 1; the good file passes.
  fs::path broken = c.Dir() / "broken.toml";
  std::string broken_text = policy;
  broken_text.replace(broken_text.find("mode = \"easy\""), 13, "mode = \"eventually\"");
  std::ofstream(broken) << broken_text;
  auto r = c.Tool("mladmin", {"policy", "check", broken.string()});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::StartsWith(broken.string() + ":5:") && Catch::Contains("is not a valid policy"));
  r = c.Tool("mladmin", {"policy", "check", c.PolicyFile()});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains(": OK: 1 partition (batch), 0 QoS, 0 accounts, queue multifactor, backfill easy"));
  CHECK(c.Tool("mladmin", {"policy", "check"}).exit_code == 2);

  // A running blocker and a pending job behind it.
  fs::path out = c.Dir() / "out";
  fs::create_directories(out);
  int64_t blocker = c.Submit({"-c", "1", "-t", "10:00", "-D", out.string(), "--wrap", "sleep 300"});
  REQUIRE(c.WaitState(blocker, "RUNNING"));
  int64_t waiting = c.Submit({"-c", "1", "-t", "5:00", "-D", out.string(), "-J", "waiter", "--wrap", "true"});
  REQUIRE(WaitFor([&] { return c.Job(waiting).value("reason", "") == "Resources"; }, 10));

  r = c.Tool("mlq", {"--explain", std::to_string(waiting)});
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("(waiter)") && Catch::Contains(": PENDING") && Catch::Contains("Reason:         Resources") &&
                        Catch::Contains("Queue order:    multifactor") && Catch::Contains("FACTOR") &&
                        Catch::Contains("fairshare") && Catch::Contains("PRIORITY"));
  auto explain = [&] {
    auto e = c.Tool("mlq", {"--explain", std::to_string(waiting), "--json"});
    REQUIRE(e.exit_code == 0);
    return nlohmann::json::parse(e.out);
  };
  auto j = explain();
  CHECK(j["state"] == "PENDING");
  CHECK(j["reason"] == "Resources");
  CHECK(j["weights"]["fairshare"] == 10000);
  CHECK(j["factors"]["fairshare"].get<double>() >= 0);
  CHECK(j["factors"]["fairshare"].get<double>() <= 1);
  CHECK(j["factors"]["age"].get<double>() >= 0);
  CHECK(j["fairshare_factor"] == j["factors"]["fairshare"]);
  CHECK(WaitFor([&] { return c.Job(waiting).value("expected_start", 0) > 0; }, 10));  // EASY plans its start
  r = c.Tool("mlq", {"--start"});
  CHECK(r.exit_code == 0);
  CHECK_THAT(r.out, Catch::Contains("START_TIME") && Catch::Contains("(Resources)"));
  CHECK_THAT(r.out, !Catch::Contains(" R "));  // only pending jobs
  r = c.Tool("mlq", {"--explain", "999999"});
  CHECK(r.exit_code == 1);
  r = c.Tool("mlq", {"--explain", "x"});
  CHECK(r.exit_code == 2);

  // reload: a broken file keeps the running policy (exit 1, errors shown); schedd keeps serving.
  fs::copy_file(broken, c.PolicyFile(), fs::copy_options::overwrite_existing);
  r = c.Tool("mladmin", {"policy", "reload"});
  CHECK(r.exit_code == 1);
  CHECK_THAT(r.err, Catch::StartsWith(c.PolicyFile() + ":5:") && Catch::Contains("keeps the running policy"));
  CHECK(c.Tool("mlq", {}).exit_code == 0);
  CHECK(explain()["weights"]["fairshare"] == 10000);
  if (geteuid() == 0) {
    auto other = Run({"setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", MLSCHED_MLADMIN_BIN, "policy",
                      "reload"});
    CHECK(other.exit_code == 1);
    CHECK_THAT(other.err, Catch::Contains("policy reload needs root or an operator"));
  }

  // A fixed file is taken (exit 0) and used from then on.
  std::string fixed = policy;
  fixed.replace(fixed.find("weight_fairshare = 10000"), 24, "weight_fairshare = 500");
  std::ofstream(c.PolicyFile(), std::ios::trunc) << fixed;
  r = c.Tool("mladmin", {"policy", "reload"});
  INFO(r.err);
  CHECK(r.exit_code == 0);
  CHECK(r.out == "Policy reloaded from " + c.PolicyFile() + "\n");
  CHECK(explain()["weights"]["fairshare"] == 500);
  CHECK(c.State(waiting) == "PENDING");  // accepted jobs survive reloads
  REQUIRE(c.Tool("mlcancel", {std::to_string(blocker)}).exit_code == 0);
  CHECK(c.WaitState(waiting, "COMPLETED", 30));
}
