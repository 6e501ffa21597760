// Workload traces as the simulator sees them: jobs with a submit time, an actual run time and the
// JobSpec the core schedules, plus the fleet a trace implies. Format readers fill these; the
// mapping from each trace format is documented in schedd/sim/README.md.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedd/core/types.h"

namespace mlsched::sim {

/// One job of a trace.
struct TraceJob {
  core::JobId id = 0;            // unique within the trace (the trace's own id when it has one)
  core::Timestamp submit_time = 0;  // seconds since the trace's first submission
  core::Duration run_time = 0;   // actual run time, seconds; never longer than the real limit
  /// The user's requested time (seconds): the job is killed (TIMEOUT) when it runs this long.
  /// spec.time_limit starts equal to it; a runtime predictor may lower spec.time_limit only.
  core::Duration requested_time = 0;
  bool hits_time_limit = false;  // the recorded run reached the requested time (ends as TIMEOUT)
  core::JobSpec spec;            // what the core sees (tasks, per-task resources, account, ...)
  std::string accelerator = "cpu";  // label for per-accelerator metrics ("cpu", "gpu", "v100", ...)
  int64_t size = 1;              // processors (SWF) or GPUs (GPU traces), for reports
  std::string origin;            // "FILE:LINE" of the record, for messages
  /// Seconds of run between the job's checkpoints (a job checkpoints every this many seconds of
  /// each attempt); 0 = never checkpoints; -1 = SimOptions::checkpoint_interval_s (trace readers
  /// leave it at -1: no trace format records checkpoints).
  core::Duration checkpoint_interval_s = -1;
};

/// A parsed trace: jobs sorted by (submit_time, id) and the fleet the trace implies, if any.
struct Trace {
  std::string name;              // file name without directories
  std::string format;            // "swf" | "philly" | "pollux" | "alibaba"
  std::vector<TraceJob> jobs;
  std::vector<core::Node> nodes; // from the SWF header or the Alibaba node list; empty otherwise
  std::vector<std::string> issues;  // skipped records, each "FILE:LINE: message"
  int64_t skipped = 0;           // number of skipped records (issues may be truncated)
};

/// A malformed record under --strict, or an unreadable file. what() is "FILE:LINE: message".
class TraceError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// How readers treat malformed records.
struct ReaderOptions {
  bool strict = false;           // true: throw TraceError on the first malformed record
  size_t max_issues_kept = 1000; // issues beyond this are counted in Trace::skipped only
};

/// Records a malformed record: throws TraceError under options.strict, else appends
/// "origin: message" to trace.issues (up to max_issues_kept) and counts it in trace.skipped.
void ReportIssue(Trace& trace, const ReaderOptions& options, const std::string& origin,
                 const std::string& message);

/// Sorts jobs by (submit_time, id), rebases submit times so the first is 0 and checks ids are
/// unique (throws TraceError naming both records otherwise).
void FinalizeTrace(Trace& trace);

/// Sets every job's time limit (and requested time) to its run time: the "exact run times"
/// variant of the published backfilling experiments. Jobs with run time 0 get a 1 s limit.
void UseExactRuntimes(Trace& trace);

}  // namespace mlsched::sim
