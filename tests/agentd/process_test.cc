// Real processes: launching in an own process group, exit codes, launch errors, signals,
// SIGTERM -> SIGKILL escalation with nothing left behind, and the parent-death signal.
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <condition_variable>
#include <map>
#include <mutex>

#include "agentd/orphans.h"
#include "agentd/supervisor.h"
#include "support.h"

using namespace mlsched::agent;
using namespace mlsched::agent::testing;
using namespace std::chrono_literals;

namespace {

LaunchRequest Shell(const TempDir& dir, const std::string& cmd, const std::string& out = "out.txt") {
  LaunchRequest r;
  r.executable = "/bin/sh";
  r.argv = {"sh", "-c", cmd};
  r.env = {"PATH=/usr/bin:/bin", "GREETING=hello"};
  r.workdir = dir.Str();
  r.stdout_path = dir.Str(out);
  r.stderr_path = dir.Str(out);
  return r;
}

// Records the supervisor's callbacks.
struct Recorder {
  std::mutex mu;
  std::map<TaskKey, pid_t> started;
  std::map<TaskKey, ExitReport> exited;
  ProcessSupervisor sup{[this](const TaskKey& k, pid_t p) { std::lock_guard lk(mu); started[k] = p; },
                        [this](const TaskKey& k, pid_t, const ExitReport& r) { std::lock_guard lk(mu); exited[k] = r; }};
  Recorder() { sup.Start(); }
  bool Exited(const TaskKey& k) {
    return WaitUntil([&] { std::lock_guard lk(mu); return exited.count(k) > 0; });
  }
  pid_t Started(const TaskKey& k) {
    WaitUntil([&] { std::lock_guard lk(mu); return started.count(k) > 0; });
    std::lock_guard lk(mu);
    return started.count(k) ? started[k] : 0;
  }
  ExitReport Report(const TaskKey& k) {
    std::lock_guard lk(mu);
    return exited[k];
  }
};

}  // namespace

TEST_CASE("a task runs in its own session with its environment and output file", "[process]") {
  TempDir dir;
  Recorder rec;
  TaskKey k{1, 1, 0};
  REQUIRE(rec.sup.Spawn(k, Shell(dir, "echo $GREETING; echo err >&2; echo $(ps -o sid= -p $$) $$ > sid.txt; exit 3")));
  REQUIRE(rec.Exited(k));
  auto r = rec.Report(k);
  CHECK(r.exit_code == 3);
  CHECK_FALSE(r.signaled);
  CHECK(r.error.empty());
  CHECK(ReadFile(dir.Str("out.txt")) == "hello\nerr\n");
  pid_t pid = rec.Started(k);
  std::string sid = ReadFile(dir.Str("sid.txt"));
  if (!sid.empty()) CHECK(sid == std::to_string(pid) + " " + std::to_string(pid) + "\n");  // session leader
  CHECK(rec.sup.Size() == 0);
}

TEST_CASE("ranks append to a shared output file and stderr can be split", "[process]") {
  TempDir dir;
  Recorder rec;
  for (int rank = 0; rank < 3; ++rank) rec.sup.Spawn({2, 1, rank}, Shell(dir, "echo rank-" + std::to_string(rank)));
  auto split = Shell(dir, "echo to-out; echo to-err >&2", "split.out");
  split.stderr_path = dir.Str("split.err");
  rec.sup.Spawn({2, 1, 3}, split);
  for (int rank = 0; rank < 4; ++rank) REQUIRE(rec.Exited({2, 1, rank}));
  std::string out = ReadFile(dir.Str("out.txt"));
  for (int rank = 0; rank < 3; ++rank) CHECK(out.find("rank-" + std::to_string(rank) + "\n") != std::string::npos);
  CHECK(ReadFile(dir.Str("split.out")) == "to-out\n");
  CHECK(ReadFile(dir.Str("split.err")) == "to-err\n");
}

TEST_CASE("launch failures are reported with shell-like exit codes", "[process]") {
  TempDir dir;
  Recorder rec;
  auto missing = Shell(dir, "true");
  missing.executable = dir.Str("no-such-program");
  rec.sup.Spawn({3, 1, 0}, missing);
  auto bad_dir = Shell(dir, "true");
  bad_dir.workdir = dir.Str("no-such-dir");
  rec.sup.Spawn({3, 1, 1}, bad_dir);
  auto bad_out = Shell(dir, "true");
  bad_out.stdout_path = dir.Str("no-dir/out.txt");
  rec.sup.Spawn({3, 1, 2}, bad_out);
  for (int rank = 0; rank < 3; ++rank) REQUIRE(rec.Exited({3, 1, rank}));
  CHECK(rec.Report({3, 1, 0}).exit_code == 127);
  CHECK(rec.Report({3, 1, 0}).error.find("exec " + dir.Str("no-such-program")) != std::string::npos);
  CHECK(rec.Report({3, 1, 1}).error.find("chdir") != std::string::npos);
  CHECK(rec.Report({3, 1, 2}).error.find("open stdout file") != std::string::npos);
  std::lock_guard lk(rec.mu);
  CHECK(rec.started.empty());  // never reported as started
}

TEST_CASE("terminate kills the whole process group, escalating to SIGKILL", "[process]") {
  TempDir dir;
  Recorder rec;
  // The task ignores SIGTERM and leaves a grandchild in its group.
  TaskKey k{4, 1, 0};
  rec.sup.Spawn(k, Shell(dir, "trap '' TERM; sleep 60 & echo ready > ready.txt; while :; do sleep 0.05; done"));
  pid_t pid = rec.Started(k);
  REQUIRE(pid > 0);
  REQUIRE(WaitUntil([&] { return !ReadFile(dir.Str("ready.txt")).empty(); }));
  CHECK(getpgid(pid) == pid);
  CHECK_FALSE(GroupGone(pid));
  auto t0 = std::chrono::steady_clock::now();
  REQUIRE(rec.sup.Terminate(k, 300ms));
  REQUIRE(rec.Exited(k));
  CHECK(std::chrono::steady_clock::now() - t0 >= 250ms);  // SIGTERM was ignored: it took the grace
  CHECK(rec.Report(k).signaled);
  CHECK(rec.Report(k).exit_code == 128 + SIGKILL);
  CHECK(WaitUntil([&] { return GroupGone(pid); }, 2s));
}

TEST_CASE("a task that honours SIGTERM ends before the grace period", "[process]") {
  TempDir dir;
  Recorder rec;
  TaskKey k{5, 1, 0};
  rec.sup.Spawn(k, Shell(dir, "exec sleep 60"));
  pid_t pid = rec.Started(k);
  REQUIRE(pid > 0);
  REQUIRE(rec.sup.Terminate(k, 10s));
  REQUIRE(rec.Exited(k));
  CHECK(rec.Report(k).exit_code == 128 + SIGTERM);
  CHECK(WaitUntil([&] { return GroupGone(pid); }, 2s));
  CHECK_FALSE(rec.sup.Terminate(k, 1s));  // already gone
}

TEST_CASE("signals reach the task's process group - leftovers die with the leader", "[process]") {
  TempDir dir;
  Recorder rec;
  TaskKey k{6, 1, 0};
  rec.sup.Spawn(k, Shell(dir, "sleep 60 & trap 'echo usr1 > sig.txt; exit 0' USR1; echo ready > ready.txt; "
                              "while :; do sleep 0.05; done"));
  pid_t pid = rec.Started(k);
  REQUIRE(WaitUntil([&] { return !ReadFile(dir.Str("ready.txt")).empty(); }));
  REQUIRE(rec.sup.Signal(k, SIGUSR1));
  REQUIRE(rec.Exited(k));
  CHECK(ReadFile(dir.Str("sig.txt")) == "usr1\n");
  CHECK(rec.Report(k).exit_code == 0);
  CHECK(WaitUntil([&] { return GroupGone(pid); }, 2s));  // the background sleep was killed too
}

TEST_CASE("tasks die with the agent (parent-death signal)", "[process]") {
  TempDir dir;
  // The orphaned task would be re-parented to us: reap it here to see how it died.
  REQUIRE(prctl(PR_SET_CHILD_SUBREAPER, 1) == 0);
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  pid_t agent = fork();
  REQUIRE(agent >= 0);
  if (agent == 0) {  // a stand-in agent: start a task, report its pid, vanish without clean-up
    close(fds[0]);
    pid_t task = 0;
    ProcessSupervisor sup([&](const TaskKey&, pid_t p) { task = p; }, [](const TaskKey&, pid_t, const ExitReport&) {});
    sup.Start();
    sup.Spawn({7, 1, 0}, Shell(dir, "exec sleep 60"));
    while (task == 0) usleep(1000);
    ssize_t n = write(fds[1], &task, sizeof task);
    _exit(n == sizeof task ? 0 : 1);
  }
  close(fds[1]);
  pid_t task = 0;
  REQUIRE(read(fds[0], &task, sizeof task) == static_cast<ssize_t>(sizeof task));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(agent, &status, 0) == agent);
  REQUIRE(waitpid(task, &status, 0) == task);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK(WaitUntil([&] { return GroupGone(task); }, 2s));
  prctl(PR_SET_CHILD_SUBREAPER, 0);
}

TEST_CASE("as root, tasks run as the submitting user", "[process]") {
  if (geteuid() != 0) {
    WARN("not root: user switching is not exercised");
    return;
  }
  struct passwd* pw = getpwnam("nobody");
  REQUIRE(pw != nullptr);
  TempDir dir;
  std::filesystem::permissions(dir.path, std::filesystem::perms::all);
  Recorder rec;
  auto req = Shell(dir, "id -u; id -g");
  req.switch_user = true;
  req.uid = pw->pw_uid;
  req.gid = pw->pw_gid;
  req.groups = {pw->pw_gid};
  rec.sup.Spawn({8, 1, 0}, req);
  REQUIRE(rec.Exited({8, 1, 0}));
  CHECK(rec.Report({8, 1, 0}).exit_code == 0);
  CHECK(ReadFile(dir.Str("out.txt")) == std::to_string(pw->pw_uid) + "\n" + std::to_string(pw->pw_gid) + "\n");
  struct stat st{};
  REQUIRE(stat(dir.Str("out.txt").c_str(), &st) == 0);
  CHECK(st.st_uid == pw->pw_uid);  // output files are created as the user
}

TEST_CASE("descendants that escape the process group die when their task ends", "[process]") {
  TempDir dir;
  std::mutex mu;
  std::map<TaskKey, ExitReport> exited;
  ProcessSupervisor sup([](const TaskKey&, pid_t) {},
                        [&](const TaskKey& k, pid_t, const ExitReport& r) { std::lock_guard lk(mu); exited[k] = r; },
                        /*adopt_orphans=*/true);
  sup.Start();
  // A double fork into a new session: the daemon leaves the task's process group and its parent.
  auto req = Shell(dir, "(setsid sleep 60 & echo $! > daemon.pid); sleep 2");
  req.env.push_back("MLSCHED_JOB_ID=9");
  req.env.push_back("MLSCHED_ATTEMPT=1");
  req.env.push_back("MLSCHED_TASK_ID=0");
  sup.Spawn({9, 1, 0}, req);
  REQUIRE(WaitUntil([&] { return !ReadFile(dir.Str("daemon.pid")).empty(); }));
  pid_t daemon = std::stoi(ReadFile(dir.Str("daemon.pid")));
  std::this_thread::sleep_for(600ms);  // at least one orphan scan while the task still runs
  CHECK(kill(daemon, 0) == 0);         // kept: its task is alive
  CHECK(getsid(daemon) == daemon);     // it really left the task's session
  REQUIRE(WaitUntil([&] { std::lock_guard lk(mu); return exited.count({9, 1, 0}) > 0; }));
  CHECK(WaitUntil([&] { return kill(daemon, 0) != 0 && errno == ESRCH; }, 2s));  // killed and reaped
}

TEST_CASE("a task stays listed as running until its exit report is handed over", "[process]") {
  // The exit callback (cgroup removal, a container's teardown, queueing the report) may take a
  // while; a heartbeat built meanwhile must still list the task, or schedd counts it as vanished.
  TempDir dir;
  std::mutex mu;
  std::condition_variable cv;
  bool in_callback = false, release = false;
  ProcessSupervisor sup([](const TaskKey&, pid_t) {},
                        [&](const TaskKey&, pid_t, const ExitReport&) {
                          std::unique_lock lk(mu);
                          in_callback = true;
                          cv.notify_all();
                          cv.wait(lk, [&] { return release; });
                        });
  sup.Start();
  // Whatever a failed check does, the callback is let go before `sup` is destroyed.
  struct Release {
    std::mutex& mu;
    std::condition_variable& cv;
    bool& release;
    ~Release() {
      {
        std::lock_guard lk(mu);
        release = true;
      }
      cv.notify_all();
    }
  } let_go{mu, cv, release};
  const TaskKey k{7, 1, 0};
  REQUIRE(sup.Spawn(k, Shell(dir, "exit 0")));
  {
    std::unique_lock lk(mu);
    REQUIRE(cv.wait_for(lk, std::chrono::seconds(10), [&] { return in_callback; }));
  }
  auto running = sup.Running();
  REQUIRE(running.size() == 1);
  CHECK(running[0].key == k);
  CHECK(sup.Size() == 1);
  {
    std::lock_guard lk(mu);
    release = true;
  }
  cv.notify_all();
  REQUIRE(sup.WaitIdle(std::chrono::seconds(10)));
  CHECK(sup.Running().empty());
  sup.Stop();
}

TEST_CASE("a process's CPU time is read from /proc/PID/stat (proc(5)), its reaped children's too", "[process][usage]") {
  using mlsched::agent::CpuUsecFromStat;
  // utime 14, stime 15, cutime 16, cstime 17; a command name with spaces and ')'.
  const std::string stat = "4242 (a b) c)) S 1 4242 4242 0 -1 4194560 100 0 0 0 150 50 25 25 20 0 1 0 100 0 0";
  CHECK(CpuUsecFromStat(stat, 100) == (150 + 50 + 25 + 25) * 10000);
  CHECK_FALSE(CpuUsecFromStat("4242 (x) S 1 2 3", 100).has_value());
  CHECK_FALSE(CpuUsecFromStat("no parenthesis", 100).has_value());
  CHECK_FALSE(CpuUsecFromStat("1 (x) S 1 1 1 0 -1 0 0 0 0 0 -5 0 0 0", 100).has_value());
  // This process has spent some CPU by now.
  volatile uint64_t spin = 0;
  for (int i = 0; i < 20'000'000; ++i) spin = spin + static_cast<uint64_t>(i);
  auto self = mlsched::agent::ProcessCpuUsec(getpid());
  REQUIRE(self.has_value());
  CHECK(*self > 0);
  CHECK_FALSE(mlsched::agent::ProcessCpuUsec(-1).has_value());
}
