// The agent with several schedd replicas (high availability): it follows a follower's leader hint,
// refuses a deposed leader's messages (epoch fencing, also after a restart), and stops its tasks
// after --cutoff-timeout without any controller, reporting their exits once one is back.
#include <catch2/catch.hpp>

#include <csignal>
#include <filesystem>
#include <fstream>

#include "agentd/metrics.h"
#include "freezing_proxy.h"
#include "session_support.h"

using namespace mlsched;
using namespace mlsched::agent;
using namespace mlsched::agent::testing;
using namespace std::chrono_literals;

namespace {

size_t Occurrences(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

void WriteFile(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

v1::SchedulerMessage Stamped(v1::SchedulerMessage m, int64_t epoch) {
  m.set_epoch(epoch);
  return m;
}

}  // namespace

TEST_CASE("a message with an epoch below the highest seen is refused and not acted upon", "[session][ha]") {
  LogCapture logs;
  TempDir dir;
  FakeSchedd schedd(dir.Str("schedd.sock"), {}, /*epoch=*/5);
  NodeIdentity node;
  node.name = "n1";
  node.pool = "spot";
  AgentMetrics metrics(node);
  Agent agent(Config(dir));
  agent.SetMetrics(&metrics);
  agent.Start();
  REQUIRE(schedd.WaitFor(Registers()));
  REQUIRE(WaitUntil([&] { return agent.Connected(); }));
  CHECK(agent.Epoch() == 5);
  int32_t pid = Launch(schedd, dir, 1, "exec sleep 60");  // stamped with epoch 5: acted upon

  // A deposed leader (epoch 3): no prepare, no abort, no kill.
  REQUIRE(schedd.Send(Stamped(Prepare(dir, 2, 1, "true", {{}}), 3)));
  REQUIRE(schedd.Send(Stamped(Abort(1, 1), 3)));
  v1::SchedulerMessage kill_msg;
  kill_msg.mutable_signal()->set_job_id(1);
  kill_msg.mutable_signal()->set_attempt(1);
  kill_msg.mutable_signal()->set_kill(true);
  REQUIRE(schedd.Send(Stamped(kill_msg, 3)));
  std::this_thread::sleep_for(600ms);
  CHECK(schedd.Count(PrepareResult(2)) == 0);
  CHECK_FALSE(std::filesystem::exists(dir.Str("work/jobs/2.1")));
  CHECK(kill(pid, 0) == 0);
  CHECK(schedd.Count(Exited(1, 0)) == 0);
  const std::string text = logs.Text();
  CHECK(Occurrences(text, "refusing messages of schedd") == 1);  // once per stream
  CHECK(text.find("with epoch 3: this agent has seen epoch 5") != std::string::npos);
  CHECK_THAT(metrics.Render(true, 1), Catch::Contains("mlsched_agent_stale_epoch_messages_total{node=\"n1\",pool=\"spot\"} 3"));

  // The current leader's abort is carried out; a newer epoch is adopted.
  REQUIRE(schedd.Send(Stamped(Abort(1, 1), 7)));
  REQUIRE(schedd.WaitFor(Exited(1, 0)));
  CHECK(WaitUntil([&] { return GroupGone(pid); }, 3s));
  CHECK(agent.Epoch() == 7);
  CHECK(ReadFile(dir.Str("work/epoch")) == "7\n");
}

TEST_CASE("the highest epoch survives an agent restart and a deposed leader cannot register the node", "[session][ha]") {
  LogCapture logs;
  TempDir dir;
  const std::string sock = dir.Str("schedd.sock");
  {
    FakeSchedd leader(sock, {}, 9);
    Agent agent(Config(dir));
    agent.Start();
    REQUIRE(WaitUntil([&] { return agent.Connected(); }));
    CHECK(agent.Epoch() == 9);
  }
  CHECK(ReadFile(dir.Str("work/epoch")) == "9\n");
  auto deposed = std::make_unique<FakeSchedd>(sock, std::vector<v1::RunningTask>{}, 4);
  Agent agent(Config(dir));
  agent.Start();
  CHECK(agent.Epoch() == 9);  // loaded before connecting
  REQUIRE(deposed->WaitFor(Registers()));
  REQUIRE(WaitUntil([&] { return deposed->Count(Registers()) >= 2; }, 3s));  // closed, tried again
  CHECK_FALSE(agent.Connected());
  CHECK(logs.Text().find("a deposed leader; closing the stream") != std::string::npos);
  deposed.reset();
  FakeSchedd leader(sock, {}, 10);
  REQUIRE(WaitUntil([&] { return agent.Connected(); }, 5s));
  CHECK(agent.Epoch() == 10);
}

TEST_CASE("cut off longer than --cutoff-timeout the agent stops its tasks and reports them later", "[session][ha]") {
  LogCapture logs;
  TempDir dir;
  const std::string sock = dir.Str("schedd.sock");
  auto schedd = std::make_unique<FakeSchedd>(sock);
  auto cfg = Config(dir);
  cfg.cutoff_timeout = 2s;
  Agent agent(cfg);
  agent.Start();
  auto reg = schedd->WaitFor(Registers());
  REQUIRE(reg);
  // Seconds after the last heartbeat by which every task is gone, rounded up: keepalive (ping +
  // answer timeout, how long a silent partition takes to notice) + the bound + the kill grace.
  const auto gone = cfg.keepalive_time + cfg.keepalive_timeout + cfg.cutoff_timeout + cfg.kill_grace;
  CHECK(reg->register_().cutoff_timeout_s() == (gone.count() + 999) / 1000);
  CHECK(reg->register_().cutoff_timeout_s() > 2 + (cfg.kill_grace.count() + 999) / 1000);
  // A task that checkpoints on SIGTERM and exits 75 (preempted), as mltrain does.
  const int32_t pid = Launch(*schedd, dir, 70,
                             "trap 'echo term > term.txt; exit 75' TERM; echo ready > ready.txt; "
                             "while :; do sleep 0.05; done");
  REQUIRE(WaitUntil([&] { return !ReadFile(dir.Str("ready.txt")).empty(); }));
  const auto cut = std::chrono::steady_clock::now();  // the agent notices the end after this
  schedd->Stop();
  REQUIRE(WaitUntil([&] { return !agent.Connected(); }));
  std::this_thread::sleep_for(1s);
  CHECK(ReadFile(dir.Str("term.txt")).empty());  // not before the bound
  REQUIRE(WaitUntil([&] { return ReadFile(dir.Str("term.txt")) == "term\n"; }, 5s));
  CHECK(std::chrono::steady_clock::now() - cut >= 2s);
  CHECK(WaitUntil([&] { return GroupGone(pid); }, 3s));
  CHECK(logs.Text().find("asking 1 task(s) to checkpoint and stop as in a preemption") != std::string::npos);

  schedd = std::make_unique<FakeSchedd>(sock);  // a controller is back
  auto ex = schedd->WaitFor(Exited(70, 0));
  REQUIRE(ex);
  CHECK(ex->task_exited().exit_code() == 75);
  CHECK_FALSE(ex->task_exited().signaled());
}

TEST_CASE("without --cutoff-timeout tasks keep running while cut off", "[session][ha]") {
  TempDir dir;
  const std::string sock = dir.Str("schedd.sock");
  auto schedd = std::make_unique<FakeSchedd>(sock);
  Agent agent(Config(dir));
  agent.Start();
  auto reg = schedd->WaitFor(Registers());
  REQUIRE(reg);
  CHECK(reg->register_().cutoff_timeout_s() == 0);
  const int32_t pid = Launch(*schedd, dir, 71, "exec sleep 60");
  schedd->Stop();
  std::this_thread::sleep_for(2500ms);
  CHECK(kill(pid, 0) == 0);
}

TEST_CASE("a follower's answer sends the agent to the leader it names", "[session][ha]") {
  TempDir dir;
  FakeSchedd leader(dir.Str("leader.sock"), {}, 3);
  FakeSchedd other(dir.Str("other.sock"), {}, 3);  // listed before the leader: skipped by the hint
  FakeSchedd follower(dir.Str("follower.sock"));
  follower.SetFollowerOf("unix:" + dir.Str("leader.sock"));
  auto cfg = Config(dir);
  cfg.servers = {"unix:" + dir.Str("follower.sock"), "unix:" + dir.Str("other.sock"), "unix:" + dir.Str("leader.sock")};
  Agent agent(cfg);
  agent.Start();
  REQUIRE(leader.WaitFor(Registers()));
  REQUIRE(WaitUntil([&] { return agent.Connected(); }));
  CHECK(follower.Refused() == 1);
  CHECK(other.Count(Registers()) == 0);
  CHECK(agent.Server() == "unix:" + dir.Str("leader.sock"));
  Launch(leader, dir, 80, "true");
}

TEST_CASE("a dead member and a hint outside the list are passed over", "[session][ha]") {
  TempDir dir;
  FakeSchedd leader(dir.Str("leader.sock"));
  FakeSchedd follower(dir.Str("follower.sock"));
  follower.SetFollowerOf("unix:" + dir.Str("elsewhere.sock"));
  FakeSchedd elsewhere(dir.Str("elsewhere.sock"));  // answers, but is not in the list
  auto cfg = Config(dir);
  cfg.servers = {"unix:" + dir.Str("dead.sock"), "unix:" + dir.Str("follower.sock"), "unix:" + dir.Str("leader.sock")};
  Agent agent(cfg);
  agent.Start();
  REQUIRE(leader.WaitFor(Registers()));
  REQUIRE(WaitUntil([&] { return agent.Connected(); }));
  CHECK(follower.Refused() >= 1);
  CHECK(elsewhere.Count(Registers()) == 0);
}

TEST_CASE("a replica that stops answering is noticed by keepalive and the agent moves on", "[session][ha]") {
  TempDir dir;
  FakeSchedd first(dir.Str("first.sock"));
  FakeSchedd second(dir.Str("second.sock"));
  FreezingProxy stopped(dir.Str("proxy.sock"), dir.Str("first.sock"));  // "first" as the agent reaches it
  auto cfg = Config(dir);
  cfg.servers = {"unix:" + dir.Str("proxy.sock"), "unix:" + dir.Str("second.sock")};
  cfg.keepalive_time = 2s;  // agentd --keepalive-time 2 --keepalive-timeout 2
  cfg.keepalive_timeout = 2s;
  Agent agent(cfg);
  agent.Start();
  REQUIRE(first.WaitFor(Registers()));
  REQUIRE(WaitUntil([&] { return agent.Connected(); }));
  stopped.Freeze();  // as SIGSTOP: connections stay open, nothing answers
  const auto frozen = std::chrono::steady_clock::now();
  REQUIRE(second.WaitFor(Registers(), 10s));
  CHECK(std::chrono::steady_clock::now() - frozen < 8s);  // keepalive 2 s + 2 s, then the next member
  CHECK(WaitUntil([&] { return agent.Connected(); }));
}

TEST_CASE("a stopped replica is passed over when connecting", "[session][ha]") {
  TempDir dir;
  FakeSchedd first(dir.Str("first.sock"));
  FakeSchedd second(dir.Str("second.sock"));
  FreezingProxy stopped(dir.Str("proxy.sock"), dir.Str("first.sock"));
  stopped.Freeze();
  auto cfg = Config(dir);
  cfg.servers = {"unix:" + dir.Str("proxy.sock"), "unix:" + dir.Str("second.sock")};
  cfg.connect_timeout = 2s;
  Agent agent(cfg);
  const auto start = std::chrono::steady_clock::now();
  agent.Start();
  REQUIRE(second.WaitFor(Registers(), 10s));
  CHECK(std::chrono::steady_clock::now() - start < 6s);
  CHECK(first.Count(Registers()) == 0);
}

TEST_CASE("the epoch file is written durably and a bad one counts as epoch 0", "[session][ha]") {
  TempDir dir;
  EpochFile file(dir.Str());
  CHECK(file.Load() == 0);  // none yet
  CHECK(file.Store(123456789012).empty());
  CHECK(file.Load() == 123456789012);
  CHECK(ReadFile(dir.Str("epoch")) == "123456789012\n");
  CHECK_FALSE(std::filesystem::exists(dir.Str("epoch.tmp")));
  WriteFile(dir.Str("epoch"), "12x\n");
  CHECK(file.Load() == 0);
  WriteFile(dir.Str("epoch"), std::string(kMaxEpochFileBytes + 1, '1'));
  CHECK(file.Load() == 0);
  std::filesystem::remove(dir.Str("epoch"));
  WriteFile(dir.Str("elsewhere"), "99\n");
  std::filesystem::create_symlink(dir.Str("elsewhere"), dir.Str("epoch"));
  CHECK(file.Load() == 0);  // never followed
  CHECK(file.Store(7).empty());  // replaces the link, not its target
  CHECK(ReadFile(dir.Str("elsewhere")) == "99\n");
  CHECK(file.Load() == 7);
}
