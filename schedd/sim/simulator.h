// Discrete-event replay of a trace through core::SchedulingCycle::Run, exactly as the daemon
// drives it: the simulator owns a ClusterState, applies each CyclePlan, and advances a virtual
// clock. Same trace + options + seed -> identical results.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "schedd/core/types.h"
#include "schedd/sim/fleet.h"
#include "schedd/sim/predictor.h"
#include "schedd/sim/trace.h"

namespace mlsched::sim {

/// How to replay.
struct SimOptions {
  core::PolicySet policy;
  /// Also run a cycle this often (seconds) while jobs are pending; 0 = only after events.
  core::Duration cycle_period_s = 0;
  uint64_t seed = 1;  // spot evictions
  /// Evicted or preempted jobs resume from their last checkpoint taken every this many seconds
  /// of their attempt; 0 = they restart from scratch.
  core::Duration checkpoint_interval_s = 0;
  /// Optional source of the time limits the core plans with (not owned); null = requested times.
  RuntimePredictor* predictor = nullptr;
  /// Record the queue/usage time series (for plots).
  bool record_series = false;
};

/// One attempt of a job on nodes: [start, end).
struct RunSpan {
  core::Timestamp start = 0;
  core::Timestamp end = 0;
};

/// What happened to one job.
struct JobOutcome {
  core::JobId id = 0;               // the trace's id
  std::string user, account, accelerator;
  int64_t size = 0;                 // processors or GPUs
  core::Timestamp submit = 0;
  core::Timestamp first_start = -1; // -1: never started
  core::Timestamp end = -1;         // -1: never finished
  core::Duration run_time = 0;      // the recorded (useful) run time
  core::Duration busy_s = 0;        // time held on nodes over all attempts (includes lost work)
  core::JobState state = core::JobState::kPending;  // final state
  int32_t attempts = 0;
  int32_t evictions = 0;
  int32_t preemptions = 0;
  double lost_resource_hours = 0;   // size x work lost to evictions/preemptions, hours
  std::string infeasible;           // non-empty: never admitted (CheckJobFeasible's reason)
  std::vector<RunSpan> runs;        // every attempt, in order (for plots)
};

/// One point of the time series (recorded at each cycle when SimOptions::record_series).
struct SeriesPoint {
  core::Timestamp time = 0;
  int64_t pending = 0;
  int64_t running = 0;
  int64_t busy = 0;                 // processors or GPUs held
};

/// The whole replay.
struct SimResult {
  std::vector<JobOutcome> jobs;     // in trace order
  std::string resource;             // "gpu" when the fleet has GPUs, else "cpu"
  int64_t capacity = 0;             // GPUs or processors
  int64_t cycles = 0;
  int64_t evictions = 0, preemptions = 0, fallbacks = 0;
  std::vector<double> cycle_wall_s; // wall time of each Run call (not deterministic; not printed)
  std::vector<SeriesPoint> series;
};

/// Replays `trace` on `fleet`. Throws std::logic_error when the core returns an impossible plan
/// (a start for a job that is not pending, or an empty allocation).
SimResult Simulate(const Trace& trace, const Fleet& fleet, const SimOptions& options);

}  // namespace mlsched::sim
