// Paging of JobService.ListJobs: every answer is bounded (jobs and bytes), jobs come in id order,
// and a page token (the last id of the previous page) continues where an answer stopped. Pure
// functions over the candidates the Controller gathers from memory and from the store.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mlsched/v1/jobs.pb.h"

namespace mlsched::server {

/// Most jobs in one ListJobs answer (also when the request asks for more or for 0).
inline constexpr int32_t kMaxListPageJobs = 5000;
/// Most bytes of job summaries in one answer; gRPC's receive limit on the client is 64 MiB.
inline constexpr size_t kMaxListPageBytes = 8 << 20;
/// `mlq -a` without --since: finished jobs that ended within this many seconds (7 days).
inline constexpr int64_t kDefaultFinishedWindowS = 7 * 86400;
/// Candidates one answer may examine per source (memory, store) before it stops short and lets
/// the token continue: a filter that matches little cannot make one call scan everything.
inline constexpr size_t kMaxListScan = 100000;

/// Candidate jobs from one source, in id order, complete up to `limit_id`: the source may hold
/// more jobs only above it (INT64_MAX: the source was read to its end).
struct ListSource {
  std::vector<v1::JobInfo> jobs;
  int64_t limit_id = INT64_MAX;
};

/// The job id a page token stands for ("" = 0: from the start); nullopt when it is not a
/// non-negative decimal of at most 19 digits.
std::optional<int64_t> ParsePageToken(const std::string& token);

/// Clamps a requested page size to 1..kMaxListPageJobs (0 = the maximum).
int32_t PageSize(int32_t requested);

/// Merges `sources` (each sorted by id; a job in several counts once) into one page of at most
/// `page_size` jobs and kMaxListPageBytes, only ids no source may still be missing (at most the
/// smallest limit_id); sets next_page_token to the last id when more may follow, else "".
void FillPage(std::vector<ListSource> sources, int32_t page_size, v1::ListJobsResponse* resp);

/// A list entry's spec: everything but the script and the environment (GetJob returns those, to
/// whoever may see them). The arguments stay (mlq %o shows the command; max_argv_bytes bounds them).
void Summarize(v1::JobSpec* spec);

}  // namespace mlsched::server
