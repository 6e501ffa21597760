// What agentd's accounting samples cost (issue 34 point 8): N tasks (sleeping processes), each in
// its own real cgroup through the ProcessSupervisor, and the supervisor's Running() timed: per
// task, its CPU time, anonymous memory (memory.stat) and process list, as each heartbeat reads
// them. Prints the cost per call and per task, and the share of one core that sampling every
// `--interval` seconds costs. Root only (real cgroups).
//   sampling_bench [--tasks 100] [--calls 200] [--interval 30]
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "agentd/cgroups.h"
#include "agentd/supervisor.h"

using namespace mlsched::agent;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  int tasks = 100, calls = 200;
  double interval = 30;
  CLI::App app{"sampling_bench: the cost of agentd's per-task accounting samples (cgroups)"};
  app.add_option("--tasks", tasks, "tasks sampled")->check(CLI::Range(1, 10000));
  app.add_option("--calls", calls, "samples timed")->check(CLI::Range(1, 100000));
  app.add_option("--interval", interval, "seconds between samples (agentd's heartbeat)")->check(CLI::Range(1.0, 3600.0));
  CLI11_PARSE(app, argc, argv);
  spdlog::set_level(spdlog::level::warn);  // not a line per task started
  if (geteuid() != 0) {
    std::fprintf(stderr, "sampling_bench: needs root (real cgroups)\n");
    return 2;
  }
  CgroupLayout layout = DetectCgroups();
  std::random_device rd;
  Cgroups cg(layout, "mlsched-bench-" + std::to_string(rd() % 1000000000));
  if (auto err = cg.Init(); !err.empty()) {
    std::fprintf(stderr, "sampling_bench: cgroups: %s\n", err.c_str());
    return 1;
  }
  ProcessSupervisor sup([](const TaskKey&, pid_t) {}, [](const TaskKey&, pid_t, const ExitReport&) {}, false);
  sup.UseCgroups(&cg);
  sup.Start();
  for (int i = 0; i < tasks; ++i) {
    LaunchRequest r;
    r.executable = "/bin/sleep";
    r.argv = {"/bin/sleep", "600"};
    r.env = {"PATH=/usr/bin:/bin"};
    r.workdir = "/tmp";
    r.stdout_path = r.stderr_path = "/dev/null";
    sup.Spawn(TaskKey{1, 1, i}, r);
  }
  for (int i = 0; i < 500 && sup.Running().size() < static_cast<size_t>(tasks); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::vector<double> us;
  size_t with_memory = 0;
  for (int i = 0; i < calls; ++i) {
    const auto t0 = Clock::now();
    auto running = sup.Running();
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    with_memory = static_cast<size_t>(std::count_if(running.begin(), running.end(), [](const RunningTaskInfo& r) { return r.rss_bytes >= 0; }));
  }
  std::sort(us.begin(), us.end());
  const double p50 = us[us.size() / 2];
  std::printf("tasks=%d sampled_with_memory=%zu calls=%d p50_us=%.0f p99_us=%.0f per_task_us=%.1f core_share_at_%.0fs=%.5f%%\n", tasks,
              with_memory, calls, p50, us[us.size() * 99 / 100], p50 / tasks, interval, 100.0 * p50 / 1e6 / interval);
  sup.TerminateAll(std::chrono::milliseconds(100));
  sup.Stop();
  cg.Clear(3000, /*remove_base=*/true);
  return 0;
}
