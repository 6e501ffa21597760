// Output of a replay: a human-readable table, JSON and a per-job CSV. All three are byte-identical
// for identical inputs (fixed formatting, ordered keys, no wall-clock values).
#pragma once

#include <ostream>
#include <string>

#include "schedd/sim/metrics.h"
#include "schedd/sim/start_estimates.h"
#include "schedd/sim/simulator.h"

namespace mlsched::sim {

/// What was replayed, for the report header.
struct RunInfo {
  std::string trace;     // trace file name
  std::string format;
  std::string policy;    // short description, e.g. "fcfs+easy"
  uint64_t seed = 0;
  int64_t nodes = 0;
  int64_t skipped_records = 0;
};

/// Aligned two-column table of the metrics, then per-account and per-accelerator sections, then
/// (when `estimates` is given, mlsim --start-estimates) the start-time estimate section.
void WriteTable(std::ostream& out, const RunInfo& info, const SimResult& result, const Metrics& m,
                const StartEstimateMetrics* estimates = nullptr);
/// One JSON object: run info, the metrics (jobs, mean_wait_s, p95_wait_s, mean_bounded_slowdown,
/// utilization, makespan_s, ...), accounts and per-accelerator p95 waits; with `estimates`, a
/// last key "start_estimates": {"recheck_s", "at_submit": {...}, "after_recheck": {...}} holding
/// EstimateAccuracy's fields (pending, estimated, median_abs_error_s, ..., within_1h).
void WriteJson(std::ostream& out, const RunInfo& info, const SimResult& result, const Metrics& m,
               const StartEstimateMetrics* estimates = nullptr);
/// One line per job: id,user,account,accelerator,size,submit,start,end,wait_s,run_s,
/// bounded_slowdown,state,attempts,evictions,preemptions,lost_resource_hours,infeasible.
void WriteJobsCsv(std::ostream& out, const SimResult& result);

}  // namespace mlsched::sim
