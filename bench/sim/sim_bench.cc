// mlsim_bench [--all-philly] [BACKFILL...]: replays KTH-SP2, SDSC-SP2 (one 100/128-processor
// pool) and the Philly GPU trace (multi-GPU gangs on 16 nodes x 4 GPUs: its first 10,000 jobs,
// or with --all-philly also all 52,849) with each backfill mode given
// (default: every mode the core supports) and prints jobs simulated per second and the wall
// time of scheduling cycles (p50/p99/max). A benchmark, not a test: it asserts nothing.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "schedd/sim/sim_config.h"

namespace {

struct Case {
  const char* label;
  const char* file;
  int nodes, gpus_per_node;
  int64_t max_jobs;  // 0 = the whole trace
};

void RunCase(const Case& c, const std::string& backfill) {
  mlsched::sim::SimConfig config;
  config.trace_path = std::string(MLSCHED_TRACE_DIR) + "/" + c.file;
  config.backfill = backfill;
  config.nodes = c.nodes;
  config.gpus_per_node = c.gpus_per_node;
  config.max_jobs = c.max_jobs;
  const auto t0 = std::chrono::steady_clock::now();
  mlsched::sim::Replay r = mlsched::sim::RunReplay(config);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<double> cycles = r.result.cycle_wall_s;
  const double p50 = mlsched::sim::Percentile(cycles, 50) * 1e6;
  const double p99 = mlsched::sim::Percentile(cycles, 99) * 1e6;
  const double max = cycles.empty() ? 0 : cycles.back() * 1e6;
  std::printf("%-10s %-13s %7lld jobs %8.2f s %9.0f jobs/s %8lld cycles  cycle p50 %7.1f us "
              "p99 %8.1f us max %9.1f us  bsld %9.2f util %.4f\n",
              c.label, backfill.c_str(), static_cast<long long>(r.metrics.jobs), wall,
              static_cast<double>(r.metrics.jobs) / wall, static_cast<long long>(r.metrics.cycles),
              p50, p99, max, r.metrics.mean_bounded_slowdown, r.metrics.utilization);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> modes;
  bool all_philly = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--all-philly") {
      all_philly = true;
    } else {
      modes.emplace_back(argv[i]);
    }
  }
  if (modes.empty()) modes = {"none", "easy", "conservative"};
  const Case cases[] = {
      {"KTH-SP2", "KTH-SP2.input.swf.gz", 0, 0, 0},
      {"SDSC-SP2", "SDSC-SP2.input.swf.gz", 0, 0, 0},
      // The whole Philly trace overloads 64 GPUs (queues of tens of thousands of gangs); the
      // first 10,000 jobs keep the run short. --all-philly adds the whole trace.
      {"Philly-10k", "philly-2017-09-10.csv.gz", 16, 4, 10000},
      {"Philly", "philly-2017-09-10.csv.gz", 16, 4, 0},
  };
  for (const auto& mode : modes) {
    for (const Case& c : cases) {
      if (c.max_jobs == 0 && c.nodes > 0 && !all_philly) continue;
      try {
        RunCase(c, mode);
      } catch (const std::exception& e) {
        std::printf("%-10s %-13s skipped: %s\n", c.label, mode.c_str(), e.what());
      }
    }
  }
  return 0;
}
