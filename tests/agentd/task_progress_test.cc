// Status files are the users': a FIFO, a symlink or a read that hangs must never hold up the
// node's heartbeats (issue 13). The reads happen on TaskProgressCache's own thread.
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <fstream>
#include <mutex>

#include "agentd/agent.h"
#include "agentd/task_progress.h"
#include "fake_schedd.h"
#include "support.h"

using namespace mlsched;
using namespace mlsched::agent;
using namespace mlsched::agent::testing;
using namespace std::chrono_literals;

TEST_CASE("ReadTaskProgress reads step and checkpoint time and refuses what is not a small regular file", "[agentd][security]") {
  TempDir dir;
  std::ofstream(dir.Str("ok.json")) << R"({"step": 12, "last_checkpoint_unix_s": 1700000000, "other": "x"})";
  auto ok = ReadTaskProgress(dir.Str("ok.json"));
  REQUIRE(ok);
  CHECK(*ok == TaskProgress{12, 1700000000});
  std::ofstream(dir.Str("compute.json")) << R"({"step": 3, "compute_s": 12.5})";
  CHECK(ReadTaskProgress(dir.Str("compute.json"))->compute_ms == 12500);
  std::ofstream(dir.Str("negative.json")) << R"({"step": 3, "compute_s": -4})";
  CHECK(ReadTaskProgress(dir.Str("negative.json"))->compute_ms == -1);  // not told
  std::ofstream(dir.Str("text.json")) << R"({"step": "twelve", "last_checkpoint_unix_s": 1.5})";
  auto text = ReadTaskProgress(dir.Str("text.json"));
  REQUIRE(text);
  CHECK(*text == TaskProgress{});  // non-integers are ignored
  std::ofstream(dir.Str("bad.json")) << "{";
  CHECK_FALSE(ReadTaskProgress(dir.Str("bad.json")));
  CHECK_FALSE(ReadTaskProgress(dir.Str("missing.json")));
  REQUIRE(mkfifo(dir.Str("fifo.json").c_str(), 0600) == 0);
  auto t0 = std::chrono::steady_clock::now();
  CHECK_FALSE(ReadTaskProgress(dir.Str("fifo.json")));
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
}

TEST_CASE("a read that hangs holds up neither Get nor other tasks' figures", "[agentd][security]") {
  std::mutex mu;
  std::condition_variable cv;
  bool release = false;
  std::atomic<int> hung_reads{0};
  TaskKey stuck{1, 1, 0}, fine{2, 1, 0};
  TaskProgressCache cache([&] { return std::vector<TaskKey>{fine, stuck}; },
                          [&](const TaskKey& k) -> std::optional<TaskProgress> {
                            if (k == fine) return TaskProgress{5, 0};
                            ++hung_reads;
                            std::unique_lock lk(mu);
                            cv.wait(lk, [&] { return release; });
                            return TaskProgress{9, 0};
                          },
                          10ms);
  cache.Start();
  auto deadline = std::chrono::steady_clock::now() + 5s;
  while (hung_reads == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  REQUIRE(hung_reads == 1);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) CHECK(cache.Get(stuck) == TaskProgress{});
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  {
    std::lock_guard lk(mu);
    release = true;
  }
  cv.notify_all();
  while (cache.Get(stuck).step != 9 && std::chrono::steady_clock::now() < deadline) std::this_thread::sleep_for(5ms);
  CHECK(cache.Get(stuck).step == 9);
  CHECK(cache.Get(fine).step == 5);
  cache.Stop();
}

TEST_CASE("the cache keeps the last good figures over a bad read and forgets tasks that ended", "[agentd]") {
  std::vector<TaskKey> running{{1, 1, 0}};
  std::optional<TaskProgress> next = TaskProgress{3, 100};
  TaskProgressCache cache([&] { return running; }, [&](const TaskKey&) { return next; }, 1h);
  cache.RefreshOnce();
  CHECK(cache.Get({1, 1, 0}) == TaskProgress{3, 100});
  next = std::nullopt;  // e.g. read mid-write
  cache.RefreshOnce();
  CHECK(cache.Get({1, 1, 0}) == TaskProgress{3, 100});
  running.clear();
  cache.RefreshOnce();
  CHECK(cache.Get({1, 1, 0}) == TaskProgress{});
}

TEST_CASE("a task whose status file is a FIFO does not stop the node's heartbeats", "[agentd][security][session]") {
  TempDir dir;
  FakeSchedd schedd(dir.Str("schedd.sock"));
  AgentConfig cfg;
  cfg.servers = {"unix:" + dir.Str("schedd.sock")};
  cfg.node.name = "n1";
  cfg.node.cpu_millis = 2000;
  cfg.node.memory_bytes = 1LL << 30;
  cfg.node.address = "127.0.0.1";
  cfg.work_dir = dir.Str("work");
  cfg.kill_grace = 1s;
  cfg.cgroups = CgroupMode::kOff;
  cfg.allow_root_jobs = true;  // the jobs are the test's own uid: root's in CI
  Agent agent(cfg);
  agent.Start();
  REQUIRE(schedd.WaitFor([](const v1::AgentMessage& m) { return m.has_register_(); }));
  auto launch = [&](int64_t job, const std::string& cmd) {
    v1::SchedulerMessage m;
    auto* p = m.mutable_prepare();
    p->set_job_id(job);
    p->set_attempt(1);
    p->set_user("root");
    p->set_uid(getuid());
    p->set_gid(getgid());
    p->set_world_size(1);
    p->set_local_world_size(1);
    p->set_master_addr("127.0.0.1");
    for (const char* a : {"/bin/sh", "-c"}) p->mutable_spec()->add_argv(a);
    p->mutable_spec()->add_argv(cmd);
    p->mutable_spec()->set_workdir(dir.Str());
    p->add_tasks()->set_rank(0);
    REQUIRE(schedd.Send(m));
    auto r = schedd.WaitFor([&](const v1::AgentMessage& a) { return a.has_prepare_result() && a.prepare_result().job_id() == job; });
    REQUIRE(r);
    REQUIRE(r->prepare_result().ok());
    v1::SchedulerMessage c;
    c.mutable_commit()->set_job_id(job);
    c.mutable_commit()->set_attempt(1);
    REQUIRE(schedd.Send(c));
    REQUIRE(schedd.WaitFor([&](const v1::AgentMessage& a) { return a.has_task_started() && a.task_started().job_id() == job; }));
  };
  launch(1, "rm -f \"$MLSCHED_STATUS_FILE\"; mkfifo \"$MLSCHED_STATUS_FILE\" && exec sleep 30");
  launch(2, "echo '{\"step\": 7, \"last_checkpoint_unix_s\": 1700000000}' > \"$MLSCHED_STATUS_FILE\" && exec sleep 30");
  // Heartbeats (every second from the fake schedd's settings) keep coming and carry job 2's progress.
  auto progress_of_2 = [](const v1::AgentMessage& m) {
    if (!m.has_heartbeat()) return false;
    for (const auto& t : m.heartbeat().running())
      if (t.job_id() == 2 && t.step() == 7 && t.last_checkpoint_time() == 1700000000) return true;
    return false;
  };
  REQUIRE(schedd.WaitFor(progress_of_2, 10s));
  size_t before = schedd.Count([](const v1::AgentMessage& m) { return m.has_heartbeat(); });
  std::this_thread::sleep_for(3500ms);
  CHECK(schedd.Count([](const v1::AgentMessage& m) { return m.has_heartbeat(); }) >= before + 2);
  agent.Shutdown();
}
