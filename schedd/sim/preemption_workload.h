// A seeded synthetic GPU workload for measuring QoS preemption victim choice (PREEMPTION.md): two
// QoS levels, gangs of one-GPU tasks, and jobs that checkpoint often, rarely or never. No trace
// format records QoS or checkpoints, so the experiment generates its jobs in memory.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedd/core/types.h"
#include "schedd/sim/trace.h"

namespace mlsched::sim {

/// What to generate. Defaults: the PREEMPTION.md experiment on a 128-GPU fleet.
struct PreemptionWorkload {
  int jobs = 1200;
  /// Offered load: the jobs' GPU-seconds / (capacity_gpus x the span of their submit times).
  double load = 0.95;
  int64_t capacity_gpus = 128;       // GPUs of the fleet the load is computed against
  double high_fraction = 0.3;        // share of jobs in `high_qos` (the rest are in `low_qos`)
  std::string high_qos = "high";     // the QoS that may preempt (policy file)
  std::string low_qos = "low";
  /// Low-QoS jobs: GPUs per job drawn from `low_sizes` (equal odds), run time log-uniform in
  /// [low_min_run_s, low_max_run_s] seconds.
  std::vector<int64_t> low_sizes = {1, 2, 4, 8, 8, 16};
  core::Duration low_min_run_s = 3600, low_max_run_s = 12 * 3600;
  /// High-QoS jobs likewise.
  std::vector<int64_t> high_sizes = {1, 2, 4, 8};
  core::Duration high_min_run_s = 900, high_max_run_s = 3 * 3600;
  /// Each job's checkpoint interval (seconds of run between checkpoints, 0 = never) is drawn from
  /// these with equal odds: by default a third checkpoint every 15 min, a third every 2 h, a third
  /// never.
  std::vector<core::Duration> checkpoint_intervals = {900, 7200, 0};
  double time_limit_factor = 1.25;   // time limit = ceil(factor x run time), seconds
  int64_t cpu_millis_per_gpu = 4000; // each one-GPU task also takes this many millicores
  int users = 16;                    // users u0..u{users-1}; account = the job's QoS name
  uint64_t seed = 1;                 // mt19937_64; same seed -> same jobs on every platform
};

/// The jobs, sorted by submit time (first at 0), ids 1..jobs. Each job is a gang of `size` tasks
/// of one GPU (any type) with spec.qos and TraceJob::checkpoint_interval_s set; size = GPUs.
/// Throws std::invalid_argument on an empty size or interval list, jobs < 1, load <= 0 or
/// capacity_gpus < 1.
Trace MakePreemptionTrace(const PreemptionWorkload& workload);

}  // namespace mlsched::sim
