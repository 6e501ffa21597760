// The agent against an in-process fake schedd: register, prepare, commit, task exits, abort,
// signals, fencing on re-registration, reconnection with buffered exits, eviction, shutdown.
#include <pwd.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <catch2/catch.hpp>

#include <algorithm>
#include <sstream>

#include "agentd/agent.h"
#include "http_stub.h"
#include "session_support.h"

using namespace mlsched;
using namespace mlsched::agent;
using namespace mlsched::agent::testing;
using namespace std::chrono_literals;

TEST_CASE("every rank gets the attempt's rendezvous token, which the agent never logs", "[session]") {
  LogCapture logs;  // outlives the agent, whose threads log into it
  TempDir dir;
  FakeSchedd schedd(dir.Str("schedd.sock"));
  Agent agent(Config(dir));
  agent.Start();
  REQUIRE(schedd.WaitFor(Registers()));
  const std::string token = "70c3" + std::string(60, 'b');
  auto m = Prepare(dir, 50, 1, "printf %s \"$MLSCHED_RENDEZVOUS_TOKEN\" > token-$RANK.txt", {{0}, {1}});
  m.mutable_prepare()->set_rendezvous_token(token);
  REQUIRE(schedd.Send(m));
  auto r = schedd.WaitFor(PrepareResult(50));
  REQUIRE(r);
  REQUIRE(r->prepare_result().ok());
  REQUIRE(schedd.Send(Commit(50, 1)));
  REQUIRE(schedd.WaitFor(Exited(50, 0)));
  REQUIRE(schedd.WaitFor(Exited(50, 1)));
  CHECK(ReadFile(dir.Str("token-0.txt")) == token);
  CHECK(ReadFile(dir.Str("token-1.txt")) == token);
  // A prepare that fails is logged with its error; the token is not part of it.
  m.mutable_prepare()->set_job_id(51);
  m.mutable_prepare()->mutable_spec()->set_workdir("no/such/dir");  // not absolute
  REQUIRE(schedd.Send(m));
  auto refused = schedd.WaitFor(PrepareResult(51));
  REQUIRE(refused);
  CHECK_FALSE(refused->prepare_result().ok());
  CHECK(refused->prepare_result().error().find(token) == std::string::npos);
  const std::string text = logs.Text();
  CHECK(text.find("prepared 2 task(s)") != std::string::npos);  // the capture saw the agent's logs
  CHECK(text.find(token) == std::string::npos);
}

TEST_CASE("register, prepare, commit and task exits", "[session]") {
  TempDir dir;
  FakeSchedd schedd(dir.Str("schedd.sock"));
  Agent agent(Config(dir));
  agent.Start();
  auto reg = schedd.WaitFor(Registers());
  REQUIRE(reg);
  const auto& r = reg->register_();
  CHECK(r.name() == "n1");
  CHECK(r.pool() == v1::POOL_SPOT);
  CHECK(r.capacity().cpu_millis() == 4000);
  CHECK(r.capacity().gpus(0).type() == "h100");
  CHECK(r.capacity().gpus(0).count() == 2);
  CHECK(r.address() == "127.0.0.1");
  CHECK(r.running_size() == 0);
  CHECK(r.root_jobs() == (geteuid() == 0));  // --allow-root-jobs (Config), and it is root
  REQUIRE(WaitUntil([&] { return agent.Connected(); }));

  const std::string cmd = "echo $RANK $WORLD_SIZE $LOCAL_RANK $CUDA_VISIBLE_DEVICES $MASTER_ADDR:$MASTER_PORT "
                          "$MLSCHED_JOB_NAME > env-$RANK.txt; exit $((RANK + 3))";
  REQUIRE(schedd.Send(Prepare(dir, 7, 1, cmd, {{0}, {1}})));
  auto pr = schedd.WaitFor(PrepareResult(7));
  REQUIRE(pr);
  CHECK(pr->prepare_result().ok());
  CHECK(pr->prepare_result().error().empty());
  const int32_t port = pr->prepare_result().master_port();  // rank 0 is here: the port it reserved
  CHECK(port > 0);
  std::this_thread::sleep_for(200ms);
  CHECK(schedd.Count(Started(7, 0)) == 0);  // prepare starts nothing
  CHECK_FALSE(std::filesystem::exists(dir.Str("env-0.txt")));

  // A second gang asking for a reserved GPU is refused.
  REQUIRE(schedd.Send(Prepare(dir, 8, 1, "true", {{1}})));
  auto refused = schedd.WaitFor(PrepareResult(8));
  REQUIRE(refused);
  CHECK_FALSE(refused->prepare_result().ok());
  CHECK(refused->prepare_result().error() == "GPU 1 is held by job 7 attempt 1 rank 1");

  REQUIRE(schedd.Send(Commit(7, 1, port)));
  for (int rank : {0, 1}) {
    REQUIRE(schedd.WaitFor(Started(7, rank)));
    auto ex = schedd.WaitFor(Exited(7, rank));
    REQUIRE(ex);
    CHECK(ex->task_exited().exit_code() == rank + 3);
    CHECK_FALSE(ex->task_exited().signaled());
  }
  const std::string master = "127.0.0.1:" + std::to_string(port);
  CHECK(ReadFile(dir.Str("env-0.txt")) == "0 2 0 0 " + master + " test\n");
  CHECK(ReadFile(dir.Str("env-1.txt")) == "1 2 1 1 " + master + " test\n");
  CHECK(std::filesystem::exists(dir.Str("job-7-0.out")));

  // Repeats are idempotent: prepare answers ok again, commit starts nothing.
  REQUIRE(schedd.Send(Prepare(dir, 7, 1, cmd, {{0}, {1}})));
  REQUIRE(schedd.Send(Commit(7, 1, port)));
  REQUIRE(WaitUntil([&] { return schedd.Count(PrepareResult(7)) == 2; }));
  std::this_thread::sleep_for(200ms);
  CHECK(schedd.Count(Started(7, 0)) == 1);

  // A commit for an attempt never prepared here is answered with an error.
  REQUIRE(schedd.Send(Commit(9, 1)));
  auto unknown = schedd.WaitFor(Exited(9, -1));
  REQUIRE(unknown);
  CHECK(unknown->task_exited().error().find("never prepared") != std::string::npos);

  // Heartbeats arrive every second.
  REQUIRE(schedd.WaitFor([](const v1::AgentMessage& m) { return m.has_heartbeat(); }, 3s));
}

TEST_CASE("without --allow-root-jobs a root job is refused at prepare, naming the flag, and the node registers so",
          "[session][root-jobs]") {
  TempDir dir;
  FakeSchedd schedd(dir.Str("schedd.sock"));
  AgentConfig cfg = Config(dir);
  cfg.allow_root_jobs = false;  // the default
  Agent agent(cfg);
  agent.Start();
  auto reg = schedd.WaitFor(Registers());
  REQUIRE(reg);
  CHECK_FALSE(reg->register_().root_jobs());
  REQUIRE(WaitUntil([&] { return agent.Connected(); }));
  auto prep = Prepare(dir, 60, 1, "touch " + dir.Str("ran-as-root"), {{}});
  prep.mutable_prepare()->set_user("root");
  prep.mutable_prepare()->set_uid(0);
  prep.mutable_prepare()->set_gid(0);
  REQUIRE(schedd.Send(prep));
  auto pr = schedd.WaitFor(PrepareResult(60));
  REQUIRE(pr);
  CHECK_FALSE(pr->prepare_result().ok());
  CHECK_THAT(pr->prepare_result().error(), Catch::Contains("--allow-root-jobs"));
  REQUIRE(schedd.Send(Commit(60, 1)));  // a commit regardless starts nothing
  auto ex = schedd.WaitFor(Exited(60, -1));
  REQUIRE(ex);
  CHECK_THAT(ex->task_exited().error(), Catch::Contains("never prepared"));
  CHECK_FALSE(std::filesystem::exists(dir.Str("ran-as-root")));
  agent.Shutdown();
}

TEST_CASE("abort drops a reservation or terminates running tasks", "[session]") {
  TempDir dir;
  FakeSchedd schedd(dir.Str("schedd.sock"));
  Agent agent(Config(dir));
  agent.Start();
  REQUIRE(schedd.WaitFor(Registers()));

  REQUIRE(schedd.Send(Prepare(dir, 10, 1, "true", {{0}})));
  REQUIRE(schedd.WaitFor(PrepareResult(10)));
  REQUIRE(schedd.Send(Abort(10, 1)));
  REQUIRE(schedd.Send(Prepare(dir, 11, 1, "true", {{0}})));  // GPU 0 is free again
  auto ok = schedd.WaitFor(PrepareResult(11));
  REQUIRE(ok);
  CHECK(ok->prepare_result().ok());

  int32_t pid = Launch(schedd, dir, 12, "sleep 60 & exec sleep 60");
  REQUIRE(schedd.Send(Abort(12, 1)));
  auto ex = schedd.WaitFor(Exited(12, 0));
  REQUIRE(ex);
  CHECK(ex->task_exited().signaled());
  CHECK(ex->task_exited().exit_code() == 128 + SIGTERM);
  CHECK(WaitUntil([&] { return GroupGone(pid); }, 2s));
}

TEST_CASE("signal: plain signals and kill with a grace period", "[session]") {
  TempDir dir;
  FakeSchedd schedd(dir.Str("schedd.sock"));
  Agent agent(Config(dir));
  agent.Start();
  REQUIRE(schedd.WaitFor(Registers()));
  int32_t pid = Launch(schedd, dir, 13,
                       "trap 'echo usr1 >> sig.txt' USR1; trap '' TERM; echo ready > ready.txt; "
                       "while :; do sleep 0.05; done");
  REQUIRE(WaitUntil([&] { return !ReadFile(dir.Str("ready.txt")).empty(); }));
  v1::SchedulerMessage sig;
  sig.mutable_signal()->set_job_id(13);
  sig.mutable_signal()->set_attempt(1);
  sig.mutable_signal()->set_signal(SIGUSR1);
  REQUIRE(schedd.Send(sig));
  REQUIRE(WaitUntil([&] { return ReadFile(dir.Str("sig.txt")) == "usr1\n"; }));
  sig.mutable_signal()->set_kill(true);
  sig.mutable_signal()->set_grace_s(1);
  REQUIRE(schedd.Send(sig));
  auto ex = schedd.WaitFor(Exited(13, 0), 4s);
  REQUIRE(ex);
  CHECK(ex->task_exited().exit_code() == 128 + SIGKILL);  // SIGTERM was ignored; SIGKILL after 1 s
  CHECK(WaitUntil([&] { return GroupGone(pid); }, 2s));
}

TEST_CASE("schedd restart: tasks keep running, exits are buffered, stale attempts are fenced", "[session]") {
  TempDir dir;
  const std::string sock = dir.Str("schedd.sock");
  auto schedd = std::make_unique<FakeSchedd>(sock);
  Agent agent(Config(dir));
  agent.Start();
  REQUIRE(schedd->WaitFor(Registers()));
  int32_t kept = Launch(*schedd, dir, 20, "exec sleep 60");
  int32_t stale = Launch(*schedd, dir, 21, "exec sleep 60");
  int32_t quick = Launch(*schedd, dir, 22, "sleep 0.3");

  schedd->Stop();  // schedd crashes
  REQUIRE(WaitUntil([&] { return !agent.Connected(); }));
  std::this_thread::sleep_for(600ms);  // job 22 exits while nobody listens
  CHECK(kill(kept, 0) == 0);
  CHECK(kill(stale, 0) == 0);
  CHECK(WaitUntil([&] { return GroupGone(quick); }, 3s));

  v1::RunningTask keep;
  keep.set_job_id(20);
  keep.set_attempt(1);
  keep.set_rank(0);
  schedd = std::make_unique<FakeSchedd>(sock, std::vector<v1::RunningTask>{keep});
  auto reg = schedd->WaitFor(Registers());
  REQUIRE(reg);
  std::set<int64_t> reported;
  for (const auto& t : reg->register_().running()) reported.insert(t.job_id());
  CHECK(reported == std::set<int64_t>{20, 21});

  auto buffered = schedd->WaitFor(Exited(22, 0));
  REQUIRE(buffered);
  CHECK(buffered->task_exited().exit_code() == 0);
  auto fenced = schedd->WaitFor(Exited(21, 0));
  REQUIRE(fenced);
  CHECK(fenced->task_exited().signaled());
  CHECK(WaitUntil([&] { return GroupGone(stale); }, 2s));
  CHECK(kill(kept, 0) == 0);
  // The register came first, then the buffered exit.
  auto all = schedd->Received();
  REQUIRE_FALSE(all.empty());
  CHECK(all.front().has_register_());

  // The kept task is still controlled through the new stream.
  REQUIRE(schedd->Send(Abort(20, 1)));
  REQUIRE(schedd->WaitFor(Exited(20, 0)));
  CHECK(WaitUntil([&] { return GroupGone(kept); }, 2s));
}

TEST_CASE("a task exit schedd never acknowledged is reported again after its restart and after an agent restart", "[session]") {
  // The exactly-once scenario: the agent sent the exit, schedd crashed before making it durable.
  TempDir dir;
  const std::string sock = dir.Str("schedd.sock");
  auto schedd = std::make_unique<FakeSchedd>(sock);
  auto agent = std::make_unique<Agent>(Config(dir));
  agent->Start();
  REQUIRE(schedd->WaitFor(Registers()));
  Launch(*schedd, dir, 40, "sleep 0.5");  // its task_started is acknowledged
  schedd->SetAck(false);
  auto first = schedd->WaitFor(Exited(40, 0));
  REQUIRE(first);
  CHECK(first->seq() > 0);
  schedd->Stop();  // crashes with the report received but not durable
  REQUIRE(WaitUntil([&] { return !agent->Connected(); }));

  schedd = std::make_unique<FakeSchedd>(sock);
  schedd->SetAck(false);
  REQUIRE(schedd->WaitFor(Registers()));
  auto again = schedd->WaitFor(Exited(40, 0));
  REQUIRE(again);
  CHECK(again->seq() == first->seq());
  CHECK(again->task_exited().exit_code() == 0);
  CHECK(schedd->Count([](const v1::AgentMessage& m) { return m.has_task_started(); }) == 0);  // acknowledged before

  // The agent restarts too: the report waits on disk and goes out first on the next stream.
  agent.reset();
  schedd->Stop();
  schedd = std::make_unique<FakeSchedd>(sock);
  agent = std::make_unique<Agent>(Config(dir));
  agent->Start();
  REQUIRE(schedd->WaitFor(Registers()));
  auto after_restart = schedd->WaitFor(Exited(40, 0));
  REQUIRE(after_restart);
  CHECK(after_restart->seq() == first->seq());
  // Acknowledged now (the fake acks by default): a reconnect does not send it again.
  REQUIRE(WaitUntil([&] { return std::filesystem::is_empty(dir.Str("work/outbox")); }));
  schedd->Stop();
  schedd = std::make_unique<FakeSchedd>(sock);
  REQUIRE(schedd->WaitFor(Registers()));
  std::this_thread::sleep_for(300ms);
  CHECK(schedd->Count([](const v1::AgentMessage& m) { return m.has_task_exited(); }) == 0);
}

TEST_CASE("shutdown terminates tasks and reports their exits", "[session]") {
  TempDir dir;
  FakeSchedd schedd(dir.Str("schedd.sock"));
  auto agent = std::make_unique<Agent>(Config(dir));
  agent->Start();
  REQUIRE(schedd.WaitFor(Registers()));
  int32_t pid = Launch(schedd, dir, 30, "exec sleep 60");
  agent->Shutdown();
  CHECK(WaitUntil([&] { return GroupGone(pid); }, 2s));
  auto ex = schedd.WaitFor(Exited(30, 0), 1s);
  REQUIRE(ex);
  CHECK(ex->task_exited().exit_code() == 128 + SIGTERM);
  CHECK(schedd.WaitEnded(2s));
  CHECK(std::filesystem::is_empty(dir.Str("work/jobs")));  // attempt directories cleaned up
}

TEST_CASE("a second agent cannot share a work directory", "[session]") {
  TempDir dir;
  Agent first(Config(dir));
  first.Start();
  Agent second(Config(dir));
  CHECK_THROWS_WITH(second.Start(), Catch::Contains("in use by another agentd"));
}

TEST_CASE("an eviction notice is relayed to schedd once", "[session][eviction]") {
  TempDir dir;
  HttpStub http;
  http.Set(200, "TRUE");
  FakeSchedd schedd(dir.Str("schedd.sock"));
  auto cfg = Config(dir);
  cfg.eviction_url = http.Url("/computeMetadata/v1/instance/preempted");
  cfg.eviction_interval = 20ms;
  Agent agent(cfg);
  agent.Start();
  auto is_eviction = [](const v1::AgentMessage& m) { return m.has_eviction(); };
  auto notice = schedd.WaitFor(is_eviction);
  REQUIRE(notice);
  CHECK(notice->eviction().source() == "gcp-preempted");
  CHECK(notice->eviction().deadline() >= std::time(nullptr) + kGcpNoticeSeconds - 5);
  std::this_thread::sleep_for(200ms);
  CHECK(schedd.Count(is_eviction) == 1);
}

TEST_CASE("as root, a batch script runs as the submitting user", "[session]") {
  if (geteuid() != 0) {
    WARN("not root: user switching is not exercised");
    return;
  }
  struct passwd* pw = getpwnam("nobody");
  REQUIRE(pw != nullptr);
  TempDir dir;
  std::filesystem::permissions(dir.path, std::filesystem::perms::all);  // outputs are created as nobody
  FakeSchedd schedd(dir.Str("schedd.sock"));
  Agent agent(Config(dir));
  agent.Start();
  REQUIRE(schedd.WaitFor(Registers()));
  auto m = Prepare(dir, 40, 1, "", {{}});
  auto* p = m.mutable_prepare();
  p->set_user("nobody");
  p->set_uid(pw->pw_uid);
  p->set_gid(pw->pw_gid);
  p->mutable_spec()->clear_argv();
  p->mutable_spec()->set_script("id -u\necho '{\"step\": 1}' > \"$MLSCHED_STATUS_FILE\" && echo status-written\n");
  REQUIRE(schedd.Send(m));
  auto r = schedd.WaitFor(PrepareResult(40));
  REQUIRE(r);
  REQUIRE(r->prepare_result().ok());
  REQUIRE(schedd.Send(Commit(40, 1)));
  auto ex = schedd.WaitFor(Exited(40, 0));
  REQUIRE(ex);
  CHECK(ex->task_exited().exit_code() == 0);
  CHECK(ReadFile(dir.Str("job-40-0.out")) == std::to_string(pw->pw_uid) + "\nstatus-written\n");

  p->set_job_id(41);
  p->set_user("no-such-user-xyz");
  REQUIRE(schedd.Send(m));
  auto refused = schedd.WaitFor(PrepareResult(41));
  REQUIRE(refused);
  CHECK_FALSE(refused->prepare_result().ok());
  CHECK(refused->prepare_result().error().find("'no-such-user-xyz'") != std::string::npos);
}

TEST_CASE("the node registers its isolation, a rank over its memory is reported OUT_OF_MEMORY", "[session][cgroup]") {
  TempDir dir;
  {
    auto cfg = Config(dir);
    cfg.cgroups = CgroupMode::kOff;
    FakeSchedd schedd(dir.Str("schedd.sock"));
    Agent agent(cfg);
    agent.Start();
    auto reg = schedd.WaitFor(Registers());
    REQUIRE(reg);
    CHECK(reg->register_().isolation() == "off");
  }
  FakeSchedd schedd(dir.Str("schedd.sock"));
  Agent agent(Config(dir));
  agent.Start();
  auto reg = schedd.WaitFor(Registers());
  REQUIRE(reg);
  CHECK(reg->register_().isolation() == agent.Isolation());
  if (geteuid() == 0 && DetectCgroups().version == 1) CHECK(agent.Isolation() == DetectCgroups().Summary());
  if (geteuid() != 0) CHECK(agent.Isolation() == "none");  // it cannot create cgroups: said, not fatal
  if (geteuid() != 0 || agent.Isolation().find("memory") == std::string::npos ||
      access("/usr/bin/python3", X_OK) != 0) {
    WARN("SKIPPED: needs root, the memory controller and /usr/bin/python3 (isolation: " << agent.Isolation() << ")");
    return;
  }
  auto m = Prepare(dir, 60, 1, "exec /usr/bin/python3 -c \"x = b'a' * (300 << 20)\"", {{}});
  m.mutable_prepare()->mutable_spec()->set_memory_bytes_per_task(64 << 20);
  REQUIRE(schedd.Send(m));
  auto r = schedd.WaitFor(PrepareResult(60));
  REQUIRE(r);
  REQUIRE(r->prepare_result().ok());
  REQUIRE(schedd.Send(Commit(60, 1)));
  auto ex = schedd.WaitFor(Exited(60, 0), 30s);
  REQUIRE(ex);
  CHECK(ex->task_exited().exit_code() == 128 + SIGKILL);
  CHECK(ex->task_exited().error() ==
        "OUT_OF_MEMORY: task used more than its 64 MiB memory limit (1 process killed by the kernel's OOM killer)");
}
