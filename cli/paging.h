// Listing jobs page by page (JobService.ListJobs paging): mlq and mlcancel follow
// next_page_token until it is empty, bounded so that a hostile or broken schedd cannot keep them
// listing forever or fill their memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "mlsched/v1/jobs.pb.h"

namespace mlsched::cli {

/// Jobs asked for per page (schedd may answer fewer: its own page limit).
inline constexpr int32_t kListPageSize = 1000;
/// Most pages one listing follows. A schedd still sending tokens after that is cut off (an error).
inline constexpr int kMaxListPages = 10000;
/// mlq --max-jobs: the default, and the most it may be set to.
inline constexpr int64_t kDefaultMaxListJobs = 100000;
inline constexpr int64_t kMaxListJobs = 1000000;
/// Longest page token accepted: it is sent back as is, so a bigger one is refused (an error).
inline constexpr size_t kMaxPageTokenBytes = 4096;

/// One page: sends `req` (the filters with page_size and page_token set) and fills `resp`. Returns
/// false when the call failed; the caller keeps the call's status.
using FetchPage = std::function<bool(const v1::ListJobsRequest& req, v1::ListJobsResponse* resp)>;

/// What a paged listing gathered.
struct ListOutcome {
  v1::ListJobsResponse jobs;  // every page's jobs, each job id once, in the order received
  int pages = 0;              // pages fetched
  bool capped = false;        // stopped at max_jobs while schedd had (or may have had) more
  std::string error;          // schedd misbehaved and the listing stopped early ("" = complete)
};

/// Lists the jobs of `req` page by page, kListPageSize per request, following next_page_token
/// until it is empty. An old schedd that ignores paging answers everything with an empty token:
/// one page. Stops early, keeping what it has, when
/// * `max_jobs` jobs were gathered (`capped` when more were sent or a token remains);
/// * schedd sends a page token it had sent before (a loop), or one over kMaxPageTokenBytes, or is
///   still sending tokens after kMaxListPages pages (`error` says which).
/// A job id seen on an earlier page is skipped. With include_all_finished and finished_since set,
/// finished jobs that ended before finished_since are dropped too (an old schedd ignores it).
/// Returns false when a page could not be fetched (`fetch` returned false).
bool ListJobPages(v1::ListJobsRequest req, int64_t max_jobs, const FetchPage& fetch, ListOutcome* out);

}  // namespace mlsched::cli
