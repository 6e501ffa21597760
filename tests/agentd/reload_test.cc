// The reload in place: the state file between the two images (format, hostile contents) and the
// supervisor's side (Detach leaves the tasks running, Adopt takes real children back and refuses
// any other process).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "agentd/orphans.h"
#include "agentd/reload_state.h"
#include "agentd/supervisor.h"
#include "support.h"

using namespace mlsched::agent;
using namespace mlsched::agent::testing;

namespace {

ReloadState Sample() {
  ReloadState s;
  s.disconnected_since_ms = 123456;
  s.attempts.push_back({{7, 2}, 29500, "", std::string("\x00\x01prepare\xff", 10)});
  s.attempts.push_back({{8, 1}, 0, "sha256:" + std::string(64, 'e'), ""});
  s.tasks.push_back({{7, 2, 0}, 4242, 1 << 20});
  s.tasks.push_back({{7, 2, 3}, 4243, -1});
  s.tasks.push_back({{8, 1, 0}, 4250, 0});
  return s;
}

std::string Error(const std::string& text) {
  auto r = ParseReloadState(text);
  return r ? "" : r.error;
}

struct Exits {
  std::mutex mu;
  std::map<TaskKey, ExitReport> exited;
  std::map<TaskKey, pid_t> started;
  TaskDriver::StartedFn on_started = [this](const TaskKey& k, pid_t p) { std::lock_guard lk(mu); started[k] = p; };
  TaskDriver::ExitedFn on_exited = [this](const TaskKey& k, pid_t, const ExitReport& r) {
    std::lock_guard lk(mu);
    exited[k] = r;
  };
  std::optional<ExitReport> Wait(const TaskKey& k) {
    if (!WaitUntil([&] { std::lock_guard lk(mu); return exited.count(k) > 0; })) return std::nullopt;
    std::lock_guard lk(mu);
    return exited[k];
  }
};

LaunchRequest Sleeper(const TempDir& dir, const std::string& cmd) {
  LaunchRequest r;
  r.executable = "/bin/sh";
  r.argv = {"sh", "-c", cmd};
  r.env = {"PATH=/usr/bin:/bin"};
  r.workdir = dir.Str();
  r.stdout_path = r.stderr_path = dir.Str("out.txt");
  return r;
}

}  // namespace

TEST_CASE("reload state: what one image writes the next reads back", "[reload]") {
  const ReloadState s = Sample();
  auto r = ParseReloadState(FormatReloadState(s));
  REQUIRE(r);
  CHECK(r.value->disconnected_since_ms == 123456);
  REQUIRE(r.value->attempts.size() == 2);
  CHECK(r.value->attempts[0].key == AttemptKey{7, 2});
  CHECK(r.value->attempts[0].master_port == 29500);
  CHECK(r.value->attempts[0].prepare == s.attempts[0].prepare);  // binary bytes intact
  CHECK(r.value->attempts[1].prepare.empty());
  CHECK(r.value->attempts[0].image_digest.empty());
  CHECK(r.value->attempts[1].image_digest == "sha256:" + std::string(64, 'e'));
  REQUIRE(r.value->tasks.size() == 3);
  CHECK(r.value->tasks[1].key == TaskKey{7, 2, 3});
  CHECK(r.value->tasks[1].pid == 4243);
  CHECK(r.value->tasks[0].max_rss_bytes == 1 << 20);
  ReloadState connected;
  auto c = ParseReloadState(FormatReloadState(connected));
  REQUIRE(c);
  CHECK_FALSE(c.value->disconnected_since_ms);
  CHECK(c.value->tasks.empty());
}

TEST_CASE("reload state: a damaged or forged file is refused with the line and the reason", "[reload]") {
  const std::string good = FormatReloadState(Sample());
  const std::string head = "mlsched-agentd-reload 1\n";
  CHECK(Error("") == "empty reload state");
  CHECK(Error("mlsched-agentd-reload 2\nend\n").find("line 1: not a reload state of this version") == 0);
  CHECK(Error(good.substr(0, good.size() - 4)) == "reload state ends without 'end' (cut short)");
  CHECK(Error(good + "task 7 2 9 99 0\n") == "line 9: text after 'end'");
  CHECK(Error(head + "task 7 2 0 4242 0\nend\n").find("line 2: task 7.2/0 of an attempt not listed") == 0);
  CHECK(Error(head + "attempt 7 2 0 - 00\nattempt 7 2 0 - 00\nend\n") == "line 3: attempt 7.2 listed twice");
  CHECK(Error(head + "attempt 7 2 0 - 00\ntask 7 2 0 10 0\ntask 7 2 0 11 0\nend\n") == "line 4: task 7.2/0 listed twice");
  // pids: never 0 (the caller's group), 1 (init) or negative (a process group)
  for (const char* pid : {"0", "1", "-5", "x", "99999999999"})
    CHECK(Error(head + "attempt 7 2 0 - 00\ntask 7 2 0 " + pid + " 0\nend\n").find("line 3: bad pid") == 0);
  CHECK(Error(head + "attempt 7 2 70000 - 00\nend\n").find("line 2: bad master port") == 0);
  CHECK(Error(head + "attempt 0 2 0 - 00\nend\n").find("line 2: bad attempt key") == 0);
  CHECK(Error(head + "attempt 7 2 0 - 0g\nend\n") == "line 2: prepare is not hexadecimal");
  CHECK(Error(head + "attempt 7 2 0 - abc\nend\n") == "line 2: prepare is not hexadecimal");
  CHECK(Error(head + "disconnected 5\ndisconnected 6\nend\n").find("line 3: bad or repeated 'disconnected'") == 0);
  CHECK(Error(head + "task  7 2 0 10 0\nend\n").find("line 2: unknown line") == 0);  // fields at single spaces
  CHECK(Error(head + "rm -rf /\nend\n").find("line 2: unknown line") == 0);
  CHECK(Error(head + "attempt 7 2 0 sha256:abc 00\nend\n").find("line 2: bad image digest") == 0);
  CHECK(Error(head + "attempt 7 2 0 sha256:" + std::string(64, 'G') + " 00\nend\n").find("line 2: bad image digest") == 0);
  CHECK(Error(head + "attempt 7 2 0 ../../etc " + "00\nend\n").find("line 2: bad image digest") == 0);
  CHECK(Error(head + "attempt 7 2 0 - " + std::string(2 * kMaxReloadPrepareBytes + 2, 'a') + "\nend\n")
            .find("line 2: prepare of") == 0);
}

TEST_CASE("reload: Detach leaves the tasks running, a second supervisor adopts them, signals and reaps them",
          "[reload][process]") {
  TempDir dir;
  Exits first;
  const TaskKey done{1, 1, 0}, killed{1, 1, 1}, exits_between{1, 1, 2};
  std::map<TaskKey, pid_t> pids;
  {
    // The loop on this thread, as agentd's main thread: a task's parent-death signal follows the
    // thread that forked it, and this one lives on (a loop thread of its own would take the tasks
    // with it when Detach() ends it).
    ProcessSupervisor sup(first.on_started, first.on_exited);
    sup.RunOnCaller();
    sup.Start();
    bool spawned = false;
    std::thread control([&] {
      spawned = sup.Spawn(done, Sleeper(dir, "while [ ! -e go ]; do sleep 0.05; done; exit 7")) &&
                sup.Spawn(killed, Sleeper(dir, "exec sleep 60")) &&
                sup.Spawn(exits_between, Sleeper(dir, "while [ ! -e go2 ]; do sleep 0.05; done; exit 5"));
      WaitUntil([&] { std::lock_guard lk(first.mu); return first.started.size() == 3; });
      sup.Detach();
    });
    sup.Run();  // returns at Detach()
    control.join();
    REQUIRE(spawned);
    for (const auto& r : sup.Running()) pids[r.key] = r.pid;
  }  // destroyed: Stop() after Detach() kills nothing
  REQUIRE(pids.size() == 3);
  for (const auto& [k, pid] : pids) CHECK(kill(pid, 0) == 0);
  CHECK(first.exited.empty());
  { std::ofstream(dir.Str("go2")).put('\n'); }  // ends while no supervisor watches it
  REQUIRE(WaitUntil([&] { return ParentPid(pids[exits_between]) == getpid() && ReadFile("/proc/" + std::to_string(pids[exits_between]) + "/stat").find(") Z") != std::string::npos; }));

  Exits second;
  ProcessSupervisor next(second.on_started, second.on_exited);
  for (const auto& [k, pid] : pids) REQUIRE(next.Adopt(k, pid, -1).empty());
  CHECK_FALSE(next.Adopt(done, pids[done], -1).empty());  // once
  next.Start();
  auto between = second.Wait(exits_between);
  REQUIRE(between);
  CHECK(between->exit_code == 5);
  CHECK(next.Running().size() == 2);
  REQUIRE(next.Terminate(killed, std::chrono::milliseconds(2000)));
  auto k = second.Wait(killed);
  REQUIRE(k);
  CHECK(k->exit_code == 128 + SIGTERM);
  CHECK(k->signaled);
  { std::ofstream(dir.Str("go")).put('\n'); }
  auto d = second.Wait(done);
  REQUIRE(d);
  CHECK(d->exit_code == 7);
  CHECK(second.started.empty());  // adopted tasks are not started again
  CHECK(next.Size() == 0);
}

TEST_CASE("reload: Adopt refuses a process that is not this agentd's child", "[reload][process]") {
  Exits e;
  ProcessSupervisor sup(e.on_started, e.on_exited);
  // init, this process's parent, itself, and a pid that does not exist
  for (pid_t pid : {pid_t{1}, getppid(), getpid(), pid_t{0x3ffffffe}}) {
    const std::string err = sup.Adopt({1, 1, 0}, pid, -1);
    CAPTURE(pid);
    CHECK(err.find("is not a child of this agentd") != std::string::npos);
  }
  // a grandchild (the child of a child): not ours either
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t child = fork();
  if (child == 0) {
    pid_t g = fork();
    if (g == 0) {
      sleep(30);
      _exit(0);
    }
    ssize_t n = write(fds[1], &g, sizeof g);
    (void)n;
    waitpid(g, nullptr, 0);
    _exit(0);
  }
  pid_t grandchild = 0;
  REQUIRE(read(fds[0], &grandchild, sizeof grandchild) == sizeof grandchild);
  CHECK(sup.Adopt({1, 1, 1}, grandchild, -1).find("is not a child of this agentd") != std::string::npos);
  kill(grandchild, SIGKILL);
  waitpid(child, nullptr, 0);
  close(fds[0]);
  close(fds[1]);
  CHECK(sup.Running().empty());
}
