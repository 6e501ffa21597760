// Accuracy of the start times the core plans for pending jobs (what `squeue --start` / `mlq --start`
// would show), against the starts that happened: one summary per sampling point (at submission,
// and 1 h later for jobs still pending then).
#pragma once

#include <cstdint>
#include <ostream>

#include "schedd/sim/simulator.h"

namespace mlsched::sim {

/// Errors of one sampling point over the jobs that had an estimate there and later started.
/// error = actual first start - estimated start, seconds (> 0: the job started later than shown).
struct EstimateAccuracy {
  int64_t pending = 0;        // jobs pending at the sampling point (the denominator of coverage)
  int64_t estimated = 0;      // of those, jobs given a planned start that later started
  double median_abs_error_s = 0;
  double mean_abs_error_s = 0;
  double p90_abs_error_s = 0;
  double median_error_s = 0;  // signed: < 0 = estimates pessimistic (jobs start early)
  double within_15m = 0;      // share of `estimated` with |error| <= 900 s
  double within_1h = 0;       // share of `estimated` with |error| <= 3600 s
  double started_early = 0;   // share of `estimated` with error < 0
};

/// Both sampling points of a replay (JobOutcome::estimate_at_submit and estimate_recheck).
struct StartEstimateMetrics {
  EstimateAccuracy at_submit;
  EstimateAccuracy after_recheck;
  core::Duration recheck_s = 3600;  // SimOptions::estimate_recheck_s of the replay
};

/// Computes both summaries. "Pending at submission" = admitted jobs that did not start at their
/// submit time; "pending at the recheck" = jobs not started by submit + recheck_s (seconds).
StartEstimateMetrics ComputeStartEstimates(const SimResult& result, core::Duration recheck_s = 3600);

/// The text report's section: a header line, then one row per sampling point.
void WriteStartEstimateTable(std::ostream& out, const StartEstimateMetrics& m);

}  // namespace mlsched::sim
