// mlsim_bench [--all-philly] [BACKFILL...]: replays KTH-SP2, SDSC-SP2 (one 100/128-processor
// pool) and the Philly GPU trace (multi-GPU gangs on 16 nodes x 4 GPUs: its first 10,000 jobs,
// or with --all-philly also all 52,849) with each backfill mode given
// (default: every mode the core supports) and prints jobs simulated per second and the wall
// time of scheduling cycles (p50/p99/max). A benchmark, not a test: it asserts nothing.
//
// mlsim_bench --synthetic-blue | --synthetic-gpu [--nodes N] [--jobs N] [--seed N]
// [BACKFILL...]: instead replays a workload generated in memory (synthetic.h) through the same
// simulator (Simulate, as mlsim does):
//   --synthetic-blue  230,000 SWF-like jobs on a 1,152-processor pool (SDSC-BLUE's size);
//                     default modes none, easy and conservative
//   --synthetic-gpu   1,000,000 gangs on 10,000 nodes x 8 GPUs (--nodes: another fleet size, same
//                     offered load); default mode easy
// --jobs N generates N jobs instead (same distributions and offered load). Prints the simulation's
// wall time (generation excluded), jobs/s, cycle p50/p95/p99/max (of the passes run), passes
// skipped as idle and the peak queue length. --digest also prints a hash of every job's outcome
// (start, end, state, attempts) and the pass count: equal digests, equal schedules.
// --no-shortcuts runs every pass on the whole queue (SimOptions::idle_shortcuts = false), to
// time or check the shortcuts against.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/sim/synthetic.h"
#include "schedd/sim/sim_config.h"

namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

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
  config.estimates = false;  // as mlsim without --start-estimates
  const auto t0 = std::chrono::steady_clock::now();
  mlsched::sim::Replay r = mlsched::sim::RunReplay(config);
  const double wall = Since(t0);
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

/// FNV-1a over every job's outcome and the pass count.
uint64_t Digest(const mlsched::sim::SimResult& r) {
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](int64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= static_cast<uint64_t>(v >> (8 * i)) & 0xff;
      h *= 1099511628211ULL;
    }
  };
  for (const auto& j : r.jobs) {
    mix(j.id);
    mix(j.first_start);
    mix(j.end);
    mix(static_cast<int64_t>(j.state));
    mix(j.attempts);
  }
  mix(r.cycles);
  return h;
}

struct SyntheticFlags {
  bool digest = false;
  bool shortcuts = true;
};

/// Simulates a generated workload with one backfill mode, the way mlsim replays a trace
/// (LoadPolicy, Simulate, ComputeMetrics), and prints one report.
void RunSynthetic(const char* label, const mlsched::bench::SyntheticWorkload& w,
                  const std::string& backfill, const SyntheticFlags& flags) {
  namespace sim = mlsched::sim;
  sim::SimConfig config;
  config.backfill = backfill;
  sim::SimOptions options;
  options.policy = sim::LoadPolicy(config, w.trace);
  options.record_series = true;  // for the peak queue length
  options.estimates = false;     // as mlsim without --start-estimates
  options.idle_shortcuts = flags.shortcuts;
  const auto t0 = std::chrono::steady_clock::now();
  sim::SimResult result = sim::Simulate(w.trace, w.fleet, options);
  const double wall = Since(t0);
  const sim::Metrics m = sim::ComputeMetrics(result);
  int64_t peak_queue = 0, peak_running = 0, peak_busy = 0;
  for (const auto& p : result.series) {
    peak_queue = std::max(peak_queue, p.pending);
    peak_running = std::max(peak_running, p.running);
    peak_busy = std::max(peak_busy, p.busy);
  }
  std::vector<double> cycles = result.cycle_wall_s;
  double total_cycle_s = 0;
  for (double s : cycles) total_cycle_s += s;
  const double mean_ms =
      cycles.empty() ? 0.0 : 1e3 * total_cycle_s / static_cast<double>(cycles.size());
  const double p50 = sim::Percentile(cycles, 50) * 1e3;  // sorts `cycles`
  const double p95 = sim::Percentile(cycles, 95) * 1e3;
  const double p99 = sim::Percentile(cycles, 99) * 1e3;
  const double max = cycles.empty() ? 0 : cycles.back() * 1e3;
  std::printf("%-14s %-13s %8lld jobs %9.2f s %9.0f jobs/s  %8lld cycles (%.1f%% of wall), "
              "%lld skipped as idle\n",
              label, backfill.c_str(), static_cast<long long>(m.jobs), wall,
              static_cast<double>(m.jobs) / wall, static_cast<long long>(result.cycles),
              wall > 0 ? 100.0 * total_cycle_s / wall : 0.0,
              static_cast<long long>(result.skipped_cycles));
  std::printf("%-14s cycle p50 %.3f ms  p95 %.3f ms  p99 %.3f ms  max %.3f ms  mean %.3f ms\n", "",
              p50, p95, p99, max, mean_ms);
  std::printf("%-14s peak queue %lld  peak running %lld jobs holding %lld of %lld %s\n", "",
              static_cast<long long>(peak_queue), static_cast<long long>(peak_running),
              static_cast<long long>(peak_busy), static_cast<long long>(result.capacity),
              result.resource == "gpu" ? "GPUs" : "processors");
  std::printf("%-14s bsld %.2f  mean wait %.0f s  max wait %.0f s  util %.4f  unfinished %lld "
              "infeasible %lld\n",
              "", m.mean_bounded_slowdown, m.mean_wait_s, m.max_wait_s, m.utilization,
              static_cast<long long>(m.unfinished), static_cast<long long>(m.infeasible));
  if (flags.digest) {
    std::printf("%-14s %-13s digest %016llx\n", label, backfill.c_str(),
                static_cast<unsigned long long>(Digest(result)));
  }
  std::fflush(stdout);
}

void RunSyntheticOrSkip(const char* label, const mlsched::bench::SyntheticWorkload& w,
                        const std::string& backfill, const SyntheticFlags& flags) {
  try {
    RunSynthetic(label, w, backfill, flags);
  } catch (const std::exception& e) {
    std::printf("%-14s %-13s skipped: %s\n", label, backfill.c_str(), e.what());
  }
}

void PrintWorkload(const char* label, const mlsched::bench::SyntheticWorkload& w,
                   const char* unit, double gen_s) {
  std::printf("%-14s %lld jobs on %lld %s over %.1f days, offered load %.3f, mean size %.1f %s, "
              "mean run %.0f s (generated in %.2f s)\n",
              label, static_cast<long long>(w.trace.jobs.size()),
              static_cast<long long>(w.fleet.nodes.size()),
              w.fleet.nodes.size() == 1 ? "node" : "nodes", w.span_s / 86400, w.offered_load,
              w.mean_size, unit, w.mean_run_s, gen_s);
  std::fflush(stdout);
}

int Usage(const std::string& bad) {
  std::fprintf(stderr,
               "mlsim_bench: bad argument '%s'\n"
               "usage: mlsim_bench [--all-philly] [BACKFILL...]\n"
               "       mlsim_bench [--synthetic-blue] [--synthetic-gpu [--nodes N]] [--jobs N] "
               "[--seed N] [--digest] [--no-shortcuts] [BACKFILL...]\n",
               bad.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> modes;
  bool all_philly = false, blue = false, gpu = false;
  SyntheticFlags flags;
  int64_t jobs = 0;   // 0 = the workload's default size
  int64_t nodes = 0;  // 0 = the GPU workload's default fleet
  uint64_t seed = 0;  // 0 = the workload's default seed
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--all-philly") {
      all_philly = true;
    } else if (arg == "--synthetic-blue") {
      blue = true;
    } else if (arg == "--synthetic-gpu") {
      gpu = true;
    } else if (arg == "--digest") {
      flags.digest = true;
    } else if (arg == "--no-shortcuts") {
      flags.shortcuts = false;
    } else if ((arg == "--jobs" || arg == "--seed" || arg == "--nodes") && i + 1 < argc) {
      char* end = nullptr;
      const long long v = std::strtoll(argv[++i], &end, 10);
      if (*end != '\0' || v <= 0) return Usage(argv[i]);
      if (arg == "--jobs") {
        jobs = v;
      } else if (arg == "--nodes") {
        if (v > 1000000) return Usage(argv[i]);
        nodes = v;
      } else {
        seed = static_cast<uint64_t>(v);
      }
    } else if (arg.rfind("--", 0) == 0) {
      return Usage(arg);
    } else {
      modes.emplace_back(arg);
    }
  }
  if (blue || gpu) {
    namespace bench = mlsched::bench;
    if (blue) {
      bench::BlueOptions o;
      if (jobs > 0) o.jobs = jobs;
      if (seed > 0) o.seed = seed;
      const auto t0 = std::chrono::steady_clock::now();
      const bench::SyntheticWorkload w = bench::MakeBlueWorkload(o);
      PrintWorkload("SDSC-BLUE-size", w, "procs", Since(t0));
      for (const auto& mode : modes.empty() ? std::vector<std::string>{"none", "easy", "conservative"}
                                            : modes) {
        RunSyntheticOrSkip("SDSC-BLUE-size", w, mode, flags);
      }
    }
    if (gpu) {
      bench::GpuOptions o;
      if (jobs > 0) o.jobs = jobs;
      if (seed > 0) o.seed = seed;
      if (nodes > 0) o.nodes = static_cast<int>(nodes);
      const auto t0 = std::chrono::steady_clock::now();
      const bench::SyntheticWorkload w = bench::MakeGpuWorkload(o);
      PrintWorkload("GPU-cluster", w, "GPUs", Since(t0));
      for (const auto& mode : modes.empty() ? std::vector<std::string>{"easy"} : modes) {
        RunSyntheticOrSkip("GPU-cluster", w, mode, flags);
      }
    }
    return 0;
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
