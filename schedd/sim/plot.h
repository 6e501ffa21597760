// mlsim --plot: a self-contained SVG of one replay over simulated time (queue length, resources
// held, utilization, per-account usage share), derived from each job's submit time and attempts
// (JobOutcome::runs). Same result -> same bytes (fixed number formatting, no clocks, no locale).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "schedd/sim/simulator.h"

namespace mlsched::sim {

/// Time-averaged values per bucket of simulated time; bucket i covers
/// [start + i * bucket_s, min(start + (i + 1) * bucket_s, end)).
struct PlotSeries {
  core::Timestamp start = 0, end = 1;
  core::Duration bucket_s = 1;
  std::string resource;                      // "gpu" or "cpu" (SimResult::resource)
  int64_t capacity = 0;                      // GPUs or processors
  std::vector<double> pending;               // pending jobs (submitted or requeued, not running)
  std::vector<double> busy;                  // resources held
  std::vector<double> utilization;           // busy / capacity, per bucket
  std::vector<double> cumulative_utilization;  // resource-seconds held so far / (capacity x elapsed)
  std::vector<std::string> accounts;         // top accounts by usage, then "other" if any
  std::vector<std::vector<double>> account_share;  // [account][bucket]: share of resources held
};

/// Derives the series from the jobs' submit times and attempt spans: a job pends from its
/// submission (or requeue) until its next attempt starts, and holds `size` resources during each
/// attempt. At most `max_buckets` buckets over [0, last event]; the `top_accounts` accounts with
/// the most resource-seconds get their own share series, the rest are summed as "other".
PlotSeries BuildPlotSeries(const SimResult& result, int max_buckets = 800, int top_accounts = 6);

/// Writes a standalone SVG document (four panels sharing a time axis in s/min/h/days, each with
/// y-axis labels and a legend) of `series`, titled `title`. Every series is one <polyline> with
/// id "queue", "busy", "capacity", "utilization", "cumulative-utilization" or "account-N".
void WriteSvgPlot(std::ostream& out, const PlotSeries& series, const std::string& title);

/// One distribution of waits (seconds) for WriteSvgWaitCdf.
struct WaitSeries {
  std::string label;
  std::vector<double> waits_s;
};

/// Writes a standalone SVG with one panel: for each series, the share of its jobs that waited at
/// most x (y, 0-100%) against x = wait on a log scale from 1 s (ticks 1 s, 10 s, 1 min, 10 min,
/// 1 h, 10 h, 1 d, 10 d, 100 d; waits under 1 s count at the left edge), sampled at 400 points.
/// Series i is one <polyline id="policy-i"> with a legend entry; same input -> same bytes.
void WriteSvgWaitCdf(std::ostream& out, const std::vector<WaitSeries>& series,
                     const std::string& title);

}  // namespace mlsched::sim
