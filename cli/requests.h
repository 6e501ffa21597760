// Turning mlq's and mlcancel's filters into JobService requests (pure; the mains only do I/O).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/units.h"
#include "mlsched/v1/jobs.pb.h"

namespace mlsched::cli {

/// mlq's filters as typed on the command line (lists already split at commas).
struct JobFilters {
  std::vector<std::string> job_ids;     // -j
  std::vector<std::string> users;       // -u
  std::vector<std::string> partitions;  // -p
  std::string states;                   // -t, comma list of names/codes or "all"; "" = schedd's default
  bool all = false;                     // -a/--all: also jobs finished longer ago than MinJobAge
  std::string since;                    // --since TIME (ParseTimePoint); implies --all
};

/// The window of `mlq --all` without --since: jobs that finished in the last 7 days.
inline constexpr int64_t kDefaultFinishedWindowS = 7 * 86400;

/// The ListJobs request for mlq's filters at time `now` (Unix seconds). --all asks for finished
/// jobs too, bounded by finished_since: --since's time, else now - kDefaultFinishedWindowS unless
/// -j names the jobs (ids bound the listing already). Errors: "--jobs: 'x' is not a job id",
/// "--states: unknown job state 'X' (...)", "--since: bad time 'x': ...".
Parsed<v1::ListJobsRequest> BuildListRequest(const JobFilters& f, int64_t now);

/// The ids asked for with -j that schedd does not know at all (it returns every job still in its
/// database when ids are given). Only when -j is the sole filter: with -u/-t/-p/--since a missing
/// job may just be filtered out. mlq reports each as "job N: no such job" and exits 1, like squeue.
std::vector<int64_t> UnknownJobIds(const v1::ListJobsRequest& req, const v1::ListJobsResponse& resp);

/// mlcancel's selection as typed on the command line.
struct CancelSelection {
  std::vector<std::string> job_ids;  // positional ids
  std::string user;                  // -u
  std::string states;                // -t
  std::string signal;                // -s: name or number; "" = cancel
  std::string name;                  // -n
  std::string partition;             // -p
};

/// The CancelJobs request for a selection. Without ids and without -u, filters apply to
/// `current_user`'s jobs (so a filter alone never reaches other users' jobs). Giving neither ids
/// nor a filter is an error: "nothing to cancel: give job ids or a filter (-u, -t, -n, -p)".
Parsed<v1::CancelJobsRequest> BuildCancelRequest(const CancelSelection& sel, const std::string& current_user);

/// True when the selection filters by name or partition, which CancelJobs cannot do: mlcancel
/// then lists the candidates first (NarrowingListRequest) and cancels them by id.
bool NeedsListing(const CancelSelection& sel);

/// The ListJobs request that finds the candidates of `cancel` (its ids, user and states) in
/// `sel.partition`.
v1::ListJobsRequest NarrowingListRequest(const v1::CancelJobsRequest& cancel, const CancelSelection& sel);

/// Rewrites `cancel` to name exactly the unfinished listed jobs whose name is `sel.name` (any
/// name when empty), keeping its signal. Returns how many jobs were selected.
int SelectListedJobs(const v1::ListJobsResponse& listed, const CancelSelection& sel, v1::CancelJobsRequest* cancel);

}  // namespace mlsched::cli
