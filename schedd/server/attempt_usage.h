// AttemptUsage: what each running attempt's ranks used (accounting, issue 34), from their agents'
// reports: heartbeats (RunningTask: CPU time, MaxRSS, GPU utilization and power, sampled by agentd
// from the task's cgroup and NVML) and exits (TaskExited: the final CPU time, MaxRSS, memory peak
// and OOM kills). GPU-seconds are integrated between a rank's consecutive samples. A component
// beside the Controller, owned and locked by it; no clock: `now` (seconds) comes with each report.
#pragma once

#include <cstdint>
#include <map>
#include <utility>

#include "mlsched/v1/agent.pb.h"
#include "mlsched/v1/types.pb.h"
#include "schedd/core/types.h"
#include "schedd/server/store.h"

namespace mlsched::server {

class AttemptUsage {
 public:
  /// Records a heartbeat's figures of rank `t.rank()` of attempt `t.attempt()` of job `t.job_id()`,
  /// which holds `gpus` GPUs, at `now` (seconds). Values out of range are clamped.
  void OnRunning(const v1::RunningTask& t, int32_t gpus, int64_t now);
  /// Records a rank's final figures (its exit).
  void OnExited(const v1::TaskExited& e);
  /// The attempt's figures so far (ranks 0 when nothing was reported).
  v1::JobUsage Of(int64_t job, int32_t attempt) const;
  /// Forgets an attempt (it ended).
  void Forget(int64_t job, int32_t attempt);
  size_t Attempts() const { return attempts_.size(); }

  /// A longer gap between two samples of a rank is not integrated (seconds): a stalled stream
  /// says nothing about the GPUs in between.
  static constexpr int64_t kMaxGapS = 120;
  /// Ranks kept per attempt (beyond: not counted).
  static constexpr size_t kMaxRanks = 65536;

 private:
  struct Rank {
    int64_t cpu_usec = -1, max_rss = -1, peak = -1, oom_kills = 0;
    int64_t last_at = -1;  // the previous heartbeat sample (seconds)
    bool exited = false;   // the final figures came: later heartbeats are stale
  };
  struct Attempt {
    std::map<int32_t, Rank> ranks;
    double gpu_seconds = 0, gpu_busy_seconds = 0, gpu_energy_joules = 0;
    int32_t gpu_util_max = 0;    // percent, over every rank's samples
    int64_t gpu_memory_max = 0;  // bytes, the most one rank's GPUs held at a sample
  };
  Rank* RankOf(int64_t job, int32_t attempt, int32_t rank, Attempt** a);
  std::map<std::pair<int64_t, int32_t>, Attempt> attempts_;
};

/// `total` (null: nothing yet) plus attempt `more`: CPU, GPU-seconds, energy and OOM kills summed
/// (an unknown CPU time stays unknown only when both are), MaxRSS and ranks the larger.
v1::JobUsage AddUsage(const v1::JobUsage* total, const v1::JobUsage& more);

/// The price of what an ended attempt held (end_time - start_time) at `pricing` (the policy's
/// [pricing.POOL], by the pool of its rank-0 node): cores x cpu_hour + GPUs x gpu_hour of its GPU
/// type (else the pool's "" price), per hour; 0 without a price for its pool. As mlreport's Cost.
double AttemptCost(const AttemptRow& a, const std::map<std::string, core::PoolPricing>& pricing);

}  // namespace mlsched::server
