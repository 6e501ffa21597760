// Cgroups: layout detection from mountinfo (pure), and, as root on a kernel with the controllers,
// real task cgroups: a memory hog killed and reported OUT_OF_MEMORY, a bounded fork bomb contained
// by pids.max and killed whole, a daemon that left the process group and forged another task's
// MLSCHED_* variables still killed through the cgroup, devices denied, CPU limits written, stale
// cgroups of a previous agent killed and every directory removed afterwards.
#include <pwd.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <map>
#include <mutex>
#include <random>

#include "agentd/cgroups.h"
#include "agentd/supervisor.h"
#include "support.h"

using namespace mlsched::agent;
using namespace mlsched::agent::testing;
using namespace std::chrono_literals;

namespace {

// This machine's kind of hybrid layout: v1 hierarchies plus an empty cgroup2 mount.
const char* kHybridMountinfo =
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:9 - cgroup cgroup rw,cpu,cpuacct\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices\n"
    "37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
const char* kHybridCgroup =
    "9:pids:/\n6:freezer:/\n5:devices:/\n4:memory:/process_api/abc\n2:cpu,cpuacct:/\n0::/\n";

FileProbe Files(std::map<std::string, std::string> files) {
  return [files](const std::string& p) -> std::optional<std::string> {
    auto it = files.find(p);
    return it == files.end() ? std::nullopt : std::optional(it->second);
  };
}

bool ProcessGone(pid_t pid) {  // gone or a zombie
  std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return stat.empty() || (paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] == 'Z');
}

// The task's cgroup directories, and its attempt's, are gone from every hierarchy.
bool CgroupGone(const Cgroups& cg, const TaskKey& key) {
  for (const auto& d : cg.DirsOf(key))
    if (std::filesystem::exists(d) || std::filesystem::exists(std::filesystem::path(d).parent_path())) return false;
  return true;
}

// Real cgroups for one test under a unique base, cleared (processes killed) at the end.
struct RealCgroups {
  std::unique_ptr<Cgroups> cg;
  std::string skip;
  explicit RealCgroups(std::vector<std::string> need, std::optional<CgroupLayout> layout = std::nullopt) {
    if (geteuid() != 0) {
      skip = "SKIPPED: not root, cgroups cannot be created";
      return;
    }
    CgroupLayout l = layout ? *layout : DetectCgroups();
    if (l.version == 0) {
      skip = "SKIPPED: " + l.Describe();
      return;
    }
    std::random_device rd;
    cg = std::make_unique<Cgroups>(l, "mlsched-test-" + std::to_string(rd() % 1000000000));
    if (auto err = cg->Init(); !err.empty()) skip = "SKIPPED: cannot create cgroups here: " + err;
    for (const auto& c : need)  // after Init(), which may add v2 devices
      if (!cg->Layout().Has(c)) skip = "SKIPPED: no " + c + " controller (" + cg->Layout().Describe() + ")";
  }
  ~RealCgroups() {
    if (cg) cg->Clear(3000, /*remove_base=*/true);
  }
};

// Records the supervisor's callbacks, like process_test's Recorder, with cgroups and orphans.
struct Sup {
  std::mutex mu;
  std::map<TaskKey, pid_t> started;
  std::map<TaskKey, ExitReport> exited;
  ProcessSupervisor sup{[this](const TaskKey& k, pid_t p) { std::lock_guard lk(mu); started[k] = p; },
                        [this](const TaskKey& k, pid_t, const ExitReport& r) { std::lock_guard lk(mu); exited[k] = r; },
                        /*adopt_orphans=*/true};
  explicit Sup(Cgroups* cg) {
    sup.UseCgroups(cg);
    sup.Start();
  }
  ~Sup() { sup.Stop(); }
  bool Exited(const TaskKey& k, std::chrono::milliseconds t = 10s) {
    return WaitUntil([&] { std::lock_guard lk(mu); return exited.count(k) > 0; }, t);
  }
  ExitReport Report(const TaskKey& k) {
    std::lock_guard lk(mu);
    return exited[k];
  }
  pid_t Started(const TaskKey& k) {
    WaitUntil([&] { std::lock_guard lk(mu); return started.count(k) > 0; });
    std::lock_guard lk(mu);
    return started.count(k) ? started[k] : 0;
  }
};

LaunchRequest Cmd(const TempDir& dir, std::vector<std::string> argv) {
  LaunchRequest r;
  r.executable = argv[0];
  r.argv = std::move(argv);
  r.env = {"PATH=/usr/bin:/bin"};
  r.workdir = dir.Str();
  r.stdout_path = dir.Str("out.txt");
  r.stderr_path = dir.Str("out.txt");
  return r;
}

LaunchRequest Shell(const TempDir& dir, const std::string& cmd) { return Cmd(dir, {"/bin/sh", "-c", cmd}); }

bool HavePython() { return access("/usr/bin/python3", X_OK) == 0; }

// The layout from this host's cgroup2 mounts only: on a hybrid host, the (controller-less) unified
// hierarchy, so the v2 code runs here too.
CgroupLayout UnifiedOnly() {
  std::string mountinfo, line;
  std::istringstream in(ReadFile("/proc/self/mountinfo"));
  while (std::getline(in, line))
    if (line.find(" - cgroup2 ") != std::string::npos) mountinfo += line + "\n";
  auto read = [](const std::string& p) -> std::optional<std::string> {
    if (access(p.c_str(), F_OK) != 0) return std::nullopt;
    return ReadFile(p);
  };
  return ParseCgroupLayout(mountinfo, ReadFile("/proc/self/cgroup"), read);
}

// Runs a task denied /dev/full (standing in for another rank's /dev/nvidiaN) and checks it cannot
// open it while /dev/zero stays allowed.
void CheckDevicesDenied(Cgroups* cg, const TaskKey& k) {
  TempDir dir;
  Sup s(cg);
  auto req = Shell(dir, "head -c1 /dev/full >/dev/null && echo full-opened; head -c1 /dev/zero | wc -c");
  req.limits.deny_devices = {"/dev/full", "/dev/no-such-device"};
  s.sup.Spawn(k, req);
  REQUIRE(s.Exited(k));
  std::string out = ReadFile(dir.Str("out.txt"));
  CHECK(out.find("Operation not permitted") != std::string::npos);
  CHECK(out.find("full-opened") == std::string::npos);
  CHECK(out.find("1\n") != std::string::npos);  // /dev/zero is still allowed
}

}  // namespace

TEST_CASE("cgroup layout: v1 hierarchies on a hybrid host", "[cgroup]") {
  auto l = ParseCgroupLayout(kHybridMountinfo, kHybridCgroup, Files({{"/sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n"}}));
  CHECK(l.version == 1);
  CHECK(l.Summary() == "v1:memory,cpu,pids,devices,freezer");
  CHECK(l.v1_dirs.at("memory") == "/sys/fs/cgroup/memory/process_api/abc");
  CHECK(l.v1_dirs.at("cpu") == "/sys/fs/cgroup/cpu,cpuacct");
  CHECK(l.v1_dirs.at("pids") == "/sys/fs/cgroup/pids");
  CHECK(l.Missing().empty());
  CHECK(l.Describe() == "cgroups: v1 memory, cpu, pids, devices, freezer");
}

TEST_CASE("cgroup layout: unified v2 with its controllers", "[cgroup]") {
  std::string mi = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n";
  std::string dir = "/sys/fs/cgroup/system.slice/agentd.service";
  auto l = ParseCgroupLayout(mi, "0::/system.slice/agentd.service\n",
                             Files({{dir + "/cgroup.controllers", "cpuset cpu io memory pids\n"}, {dir + "/cgroup.kill", ""}}));
  CHECK(l.version == 2);
  CHECK(l.v2_dir == dir);
  CHECK(l.Summary() == "v2:memory,cpu,pids,kill");
  CHECK(l.Missing().find("devices (cgroup v2 needs an eBPF device program") == 0);
  // A v2 host whose agentd cgroup got no controllers still tracks and kills through cgroup.freeze.
  auto bare = ParseCgroupLayout(mi, "0::/\n", Files({{"/sys/fs/cgroup/cgroup.controllers", ""}, {"/sys/fs/cgroup/cgroup.freeze", ""}}));
  CHECK(bare.Summary() == "v2:freeze");
  CHECK(bare.Missing().find("memory, cpu, pids") == 0);
}

TEST_CASE("cgroup layout: none, container roots and escapes", "[cgroup]") {
  auto none = ParseCgroupLayout("22 1 0:21 / /proc rw - proc proc rw\n", "", Files({}));
  CHECK(none.version == 0);
  CHECK(none.Summary() == "none");
  CHECK(none.Describe().find("cgroups: none - tasks run without memory/CPU/device limits") == 0);
  // Inside a container the mounted part of the hierarchy starts at the container's cgroup.
  auto c = ParseCgroupLayout("40 31 0:36 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n",
                             "4:memory:/docker/abc/agent\n", Files({}));
  CHECK(c.v1_dirs.at("memory") == "/sys/fs/cgroup/memory/agent");
  CHECK(UnescapeMountField("/mnt/a\\040b") == "/mnt/a b");
  CHECK(ParseCgroupMode("required") == CgroupMode::kRequired);
  CHECK_FALSE(ParseCgroupMode("yes"));
}

TEST_CASE("task cgroups are recognised from /proc/PID/cgroup, not from the environment", "[cgroup]") {
  auto l = ParseCgroupLayout(kHybridMountinfo, kHybridCgroup, Files({}));
  Cgroups cg(l, "mlsched-n1-00000000");
  CHECK(cg.TaskOfCgroupFile("6:freezer:/mlsched-n1-00000000/12.3/rank4\n4:memory:/x\n") == TaskKey{12, 3, 4});
  CHECK_FALSE(cg.TaskOfCgroupFile("6:freezer:/mlsched-n2-00000000/12.3/rank4\n"));
  CHECK_FALSE(cg.TaskOfCgroupFile("6:freezer:/\n"));
  CHECK(cg.DirOf("memory", {12, 3, 4}) == "/sys/fs/cgroup/memory/process_api/abc/mlsched-n1-00000000/12.3/rank4");
  // v2, detected after agentd moved itself into its leaf: task cgroups go beside the leaf.
  auto v2 = ParseCgroupLayout("30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "0::/svc/agentd\n",
                              Files({{"/sys/fs/cgroup/svc/agentd/cgroup.controllers", "memory cpu pids"}}));
  Cgroups in_leaf(v2, "b");
  CHECK(in_leaf.DirOf("", {1, 1, 0}) == "/sys/fs/cgroup/svc/b/1.1/rank0");
  CHECK(in_leaf.TaskOfCgroupFile("0::/svc/b/1.1/rank0\n") == TaskKey{1, 1, 0});
  CHECK(Cgroups::BaseName("gpu/01", "/var/spool/x").rfind("mlsched-gpu_01-", 0) == 0);
  CHECK(Cgroups::BaseName("n1", "/a") != Cgroups::BaseName("n1", "/b"));
  CHECK(OutOfMemoryError(64 << 20, 1) ==
        "OUT_OF_MEMORY: task used more than its 64 MiB memory limit (1 process killed by the kernel's OOM killer)");
}

TEST_CASE("a task that allocates past its memory limit is killed and reported OUT_OF_MEMORY", "[cgroup][root]") {
  RealCgroups real({"memory"});
  if (!real.skip.empty() || !HavePython()) {
    WARN((real.skip.empty() ? std::string("SKIPPED: no /usr/bin/python3") : real.skip));
    return;
  }
  TempDir dir;
  Sup s(real.cg.get());
  auto hog = Cmd(dir, {"/usr/bin/python3", "-c", "x = b'a' * (300 << 20); print('survived')"});
  hog.limits.memory_bytes = 64 << 20;
  auto modest = Cmd(dir, {"/usr/bin/python3", "-c", "x = b'a' * (16 << 20); print('fine')"});
  modest.limits.memory_bytes = 64 << 20;
  s.sup.Spawn({20, 1, 0}, hog);
  s.sup.Spawn({20, 1, 1}, modest);
  REQUIRE(s.Exited({20, 1, 0}, 30s));
  REQUIRE(s.Exited({20, 1, 1}, 30s));
  auto r = s.Report({20, 1, 0});
  WARN("memory hog reported: exit " << r.exit_code << ", error: " << r.error);
  CHECK(r.signaled);
  CHECK(r.exit_code == 128 + SIGKILL);
  CHECK(r.error.rfind("OUT_OF_MEMORY: task used more than its 64 MiB memory limit (", 0) == 0);
  CHECK(s.Report({20, 1, 1}).exit_code == 0);
  CHECK(s.Report({20, 1, 1}).error.empty());
  std::string out = ReadFile(dir.Str("out.txt"));
  CHECK(out.find("survived") == std::string::npos);
  CHECK(out.find("fine") != std::string::npos);
  CHECK(WaitUntil([&] { return CgroupGone(*real.cg, {20, 1, 0}) && CgroupGone(*real.cg, {20, 1, 1}); }, 3s));
}

TEST_CASE("accounting: a task burning one CPU for 2 s shows 2 CPU-seconds, one holding 300 MB shows MaxRSS 300 MB",
          "[cgroup][root][accounting]") {
  RealCgroups real({"memory"});
  if (!real.skip.empty() || !HavePython()) {
    WARN((real.skip.empty() ? std::string("SKIPPED: no /usr/bin/python3") : real.skip));
    return;
  }
  TempDir dir;
  Sup s(real.cg.get());
  // Burns one CPU for 2 s of its own CPU time (not wall time: the machine may be shared).
  s.sup.Spawn({21, 1, 0}, Cmd(dir, {"/usr/bin/python3", "-c",
                                    "import time\nt = time.process_time()\nwhile time.process_time() - t < 2.0: pass\n"}));
  // Holds 300 MB of touched memory for 3 s, then frees it and idles.
  s.sup.Spawn({21, 1, 1}, Cmd(dir, {"/usr/bin/python3", "-c",
                                    "import time\nx = bytearray(300 << 20)\nfor i in range(0, len(x), 4096): x[i] = 1\n"
                                    "time.sleep(3)\ndel x\ntime.sleep(1)\n"}));
  // The supervisor samples at each heartbeat's Running(): here every 200 ms.
  int64_t live_rss = -1;
  int32_t live_processes = -1;
  WaitUntil([&] {
    for (const auto& r : s.sup.Running())
      if (r.key.rank == 1) {
        live_rss = std::max(live_rss, r.rss_bytes);
        // The most seen: the last sample may come after the process left its cgroup but before its
        // exit was collected (0 processes).
        live_processes = std::max(live_processes, r.processes);
      }
    std::lock_guard lk(s.mu);
    return s.exited.size() == 2;
  }, 30s);
  REQUIRE(s.Exited({21, 1, 0}, 30s));
  REQUIRE(s.Exited({21, 1, 1}, 30s));
  const ExitReport burn = s.Report({21, 1, 0}), hold = s.Report({21, 1, 1});
  WARN("burn: cpu " << burn.cpu_usec.value_or(-1) << " us; hold: max rss " << hold.max_rss_bytes << ", peak "
                    << hold.memory_peak_bytes << ", live max " << live_rss);
  if (burn.cpu_usec) {
    CHECK(*burn.cpu_usec >= 1'900'000);
    CHECK(*burn.cpu_usec <= 3'000'000);  // python's start-up on top
  } else {
    WARN("no CPU accounting controller here: cpu_usec unknown");
  }
  constexpr int64_t kMB = 1 << 20;
  CHECK(live_rss >= 290 * kMB);
  CHECK(live_rss <= 360 * kMB);
  CHECK(live_processes == 1);
  CHECK(hold.max_rss_bytes >= 290 * kMB);  // the samples' maximum: at the end the memory is freed
  CHECK(hold.max_rss_bytes <= 360 * kMB);
  if (hold.memory_peak_bytes >= 0) CHECK(hold.memory_peak_bytes >= 290 * kMB);
  CHECK(hold.oom_kills == 0);
  CHECK(burn.max_rss_bytes < 100 * kMB);
}

TEST_CASE("a fork bomb is contained by pids.max and killed whole, escaped children included", "[cgroup][root]") {
  RealCgroups real({"pids"});
  if (!real.skip.empty() || !HavePython()) {
    WARN((real.skip.empty() ? std::string("SKIPPED: no /usr/bin/python3") : real.skip));
    return;
  }
  TempDir dir;
  Sup s(real.cg.get());
  // Bounded: at most 10000 forks; every child leaves the process group (setsid) and sleeps.
  const char* bomb =
      "import os, time\n"
      "n = 0\n"
      "for i in range(10000):\n"
      "    try:\n"
      "        pid = os.fork()\n"
      "    except OSError as e:\n"
      "        open('forks.txt', 'w').write(f'forked {n}, then: {e}')\n"
      "        break\n"
      "    if pid == 0:\n"
      "        os.setsid(); time.sleep(120); os._exit(0)\n"
      "    n += 1\n"
      "time.sleep(120)\n";
  auto req = Cmd(dir, {"/usr/bin/python3", "-c", bomb});
  req.limits.pids_max = 64;
  TaskKey k{21, 1, 0};
  s.sup.Spawn(k, req);
  REQUIRE(WaitUntil([&] { return !ReadFile(dir.Str("forks.txt")).empty(); }, 20s));
  std::string forks = ReadFile(dir.Str("forks.txt"));
  WARN("fork bomb: " << forks);
  CHECK(forks.find("forked 63, then: [Errno 11] Resource temporarily unavailable") == 0);
  std::string procs_dir = real.cg->DirOf("pids", k);
  CHECK(std::stoi(ReadFile(procs_dir + "/pids.current")) <= 64);
  std::vector<pid_t> members;
  std::istringstream in(ReadFile(procs_dir + "/cgroup.procs"));
  for (pid_t p; in >> p;) members.push_back(p);
  CHECK(members.size() == 64);
  REQUIRE(s.sup.Terminate(k, 200ms));
  REQUIRE(s.Exited(k));
  for (pid_t p : members) CHECK(WaitUntil([&] { return ProcessGone(p); }, 3s));
  CHECK(WaitUntil([&] { return CgroupGone(*real.cg, k); }, 3s));
}

TEST_CASE("a daemon that left the process group and forged another task's variables dies with its task",
          "[cgroup][root]") {
  RealCgroups real({});
  if (!real.skip.empty()) {
    WARN(real.skip);
    return;
  }
  TempDir dir;
  Sup s(real.cg.get());
  TaskKey victim{31, 1, 0}, task{30, 1, 0};
  s.sup.Spawn(victim, Shell(dir, "exec sleep 60"));
  REQUIRE(s.Started(victim) > 0);
  // The daemon claims to belong to the still-running victim task.
  s.sup.Spawn(task, Shell(dir, "(MLSCHED_JOB_ID=31 MLSCHED_ATTEMPT=1 MLSCHED_TASK_ID=0 setsid sleep 60 & "
                               "echo $! > daemon.pid); sleep 0.7"));
  REQUIRE(WaitUntil([&] { return !ReadFile(dir.Str("daemon.pid")).empty(); }));
  pid_t daemon = std::stoi(ReadFile(dir.Str("daemon.pid")));
  CHECK(real.cg->TaskOf(daemon) == task);  // membership, whatever its environment says
  REQUIRE(s.Exited(task));
  CHECK(WaitUntil([&] { return ProcessGone(daemon); }, 3s));
  CHECK(s.Report(task).exit_code == 0);
  {
    std::lock_guard lk(s.mu);
    CHECK(s.exited.count(victim) == 0);  // the victim task is untouched
  }
  s.sup.Terminate(victim, 200ms);
  REQUIRE(s.Exited(victim));
  CHECK(WaitUntil([&] { return CgroupGone(*real.cg, task) && CgroupGone(*real.cg, victim); }, 3s));
}

TEST_CASE("CPU weight and quota come from the request", "[cgroup][root]") {
  RealCgroups real({"cpu"});
  if (!real.skip.empty()) {
    WARN(real.skip);
    return;
  }
  TempDir dir;
  Sup s(real.cg.get());
  auto req = Shell(dir, "exec sleep 60");
  req.limits.cpu_millis = 1500;
  TaskKey k{22, 1, 0};
  s.sup.Spawn(k, req);
  REQUIRE(s.Started(k) > 0);
  std::string d = real.cg->DirOf("cpu", k);
  if (real.cg->Layout().version == 2) {
    CHECK(ReadFile(d + "/cpu.max") == "150000 100000\n");
    CHECK(ReadFile(d + "/cpu.weight") == "150\n");
  } else {
    CHECK(ReadFile(d + "/cpu.cfs_quota_us") == "150000\n");
    CHECK(ReadFile(d + "/cpu.cfs_period_us") == "100000\n");
    CHECK(ReadFile(d + "/cpu.shares") == "1536\n");
  }
  s.sup.Terminate(k, 200ms);
  REQUIRE(s.Exited(k));
  CHECK(WaitUntil([&] { return CgroupGone(*real.cg, k); }, 3s));
}

TEST_CASE("a task cannot open the devices it was not given (v1 devices.deny, v2 eBPF)", "[cgroup][root]") {
  RealCgroups real({"devices"});
  if (!real.skip.empty()) {
    WARN(real.skip);
  } else {
    CheckDevicesDenied(real.cg.get(), {23, 1, 0});
  }
  auto v2 = UnifiedOnly();
  if (v2.version != 2 || real.cg == nullptr || real.cg->Layout().version == 2) return;  // done above, or no cgroup2
  RealCgroups unified({"devices"}, v2);
  if (!unified.skip.empty()) {
    WARN(unified.skip);
    return;
  }
  CHECK(unified.cg->Layout().Summary().find("devices") != std::string::npos);
  CheckDevicesDenied(unified.cg.get(), {23, 2, 0});
}

TEST_CASE("cgroup v2 without controllers still tracks and kills every process (cgroup.kill)", "[cgroup][root]") {
  auto layout = UnifiedOnly();
  if (layout.version != 2) {
    WARN("SKIPPED: no cgroup2 hierarchy is mounted");
    return;
  }
  RealCgroups real({}, layout);
  if (!real.skip.empty()) {
    WARN(real.skip);
    return;
  }
  TempDir dir;
  Sup s(real.cg.get());
  TaskKey k{24, 1, 0};
  s.sup.Spawn(k, Shell(dir, "(setsid sleep 60 & echo $! > daemon.pid); sleep 0.3"));
  REQUIRE(WaitUntil([&] { return !ReadFile(dir.Str("daemon.pid")).empty(); }));
  pid_t daemon = std::stoi(ReadFile(dir.Str("daemon.pid")));
  CHECK(real.cg->TaskOf(daemon) == k);
  REQUIRE(s.Exited(k));
  CHECK(WaitUntil([&] { return ProcessGone(daemon); }, 3s));
  CHECK(WaitUntil([&] { return CgroupGone(*real.cg, k); }, 3s));
}

TEST_CASE("a new agent kills and removes the task cgroups a previous one left behind", "[cgroup][root]") {
  RealCgroups real({});
  if (!real.skip.empty()) {
    WARN(real.skip);
    return;
  }
  TaskKey k{25, 1, 0};
  auto cg = real.cg->Create(k, TaskLimits{});
  REQUIRE(cg);
  TempDir dir;
  auto req = Shell(dir, "exec sleep 60");
  SpawnResult r = SpawnTask(req, (*cg.value)->JoinFds());
  (*cg.value)->CloseJoinFds();
  REQUIRE(r.pid > 0);
  CHECK((*cg.value)->Pids() == std::vector<pid_t>{r.pid});
  // The same base again, as after an agent restart: the leftover is killed and removed.
  Cgroups again(real.cg->Layout(), std::filesystem::path(real.cg->DirsOf(k).front()).parent_path().parent_path().filename());
  REQUIRE(again.Init().empty());
  int status = 0;
  REQUIRE(waitpid(r.pid, &status, 0) == r.pid);
  CHECK(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK(CgroupGone(*real.cg, k));
}

TEST_CASE("a task running as another user cannot move itself out of its cgroup", "[cgroup][root]") {
  RealCgroups real({});
  if (!real.skip.empty()) {
    WARN(real.skip);
    return;
  }
  struct passwd* pw = getpwnam("nobody");
  REQUIRE(pw != nullptr);
  TempDir dir;
  std::filesystem::permissions(dir.path, std::filesystem::perms::all);
  Sup s(real.cg.get());
  // Every hierarchy's root cgroup.procs, and the agent's own cgroup's.
  std::string cmd;
  for (const auto& d : real.cg->DirsOf({26, 1, 0})) {
    auto own = std::filesystem::path(d).parent_path().parent_path().parent_path();
    cmd += "echo $$ > " + (own / "cgroup.procs").string() + " || echo refused; ";
  }
  auto req = Shell(dir, cmd + "exit 0");
  req.switch_user = true;
  req.uid = pw->pw_uid;
  req.gid = pw->pw_gid;
  req.groups = {pw->pw_gid};
  s.sup.Spawn({26, 1, 0}, req);
  REQUIRE(s.Exited({26, 1, 0}));
  std::string out = ReadFile(dir.Str("out.txt"));
  size_t refused = 0;
  for (size_t at = out.find("refused"); at != std::string::npos; at = out.find("refused", at + 1)) ++refused;
  CHECK(refused == real.cg->DirsOf({26, 1, 0}).size());
  CHECK(out.find("Permission denied") != std::string::npos);
}
