#include "cli/paging.h"

#include <unordered_set>

#include "cli/job_states.h"

namespace mlsched::cli {

namespace {

// False for a finished job that ended before `since` (0 = no bound); jobs without an end time stay.
bool WithinWindow(const v1::JobInfo& j, int64_t since) {
  return since <= 0 || !IsFinished(j.state()) || j.end_time() <= 0 || j.end_time() >= since;
}

}  // namespace

bool ListJobPages(v1::ListJobsRequest req, int64_t max_jobs, const FetchPage& fetch, ListOutcome* out) {
  *out = ListOutcome{};
  const int64_t since = req.include_all_finished() ? req.finished_since() : 0;
  std::unordered_set<int64_t> seen;
  std::unordered_set<size_t> tokens;  // hashes of the tokens received: one sent before is a loop
  req.set_page_size(kListPageSize);
  req.clear_page_token();
  while (true) {
    v1::ListJobsResponse page;
    if (!fetch(req, &page)) return false;
    ++out->pages;
    for (auto& j : *page.mutable_jobs()) {
      if (!WithinWindow(j, since) || !seen.insert(j.job_id()).second) continue;
      if (out->jobs.jobs_size() >= max_jobs) {
        out->capped = true;
        return true;
      }
      *out->jobs.add_jobs() = std::move(j);
    }
    const std::string& token = page.next_page_token();
    if (token.empty()) return true;
    if (out->jobs.jobs_size() >= max_jobs) {
      out->capped = true;
      return true;
    }
    if (token.size() > kMaxPageTokenBytes) {
      out->error = "schedd sent a page token of " + std::to_string(token.size()) + " bytes (at most " +
                   std::to_string(kMaxPageTokenBytes) + "); the listing stopped after " +
                   std::to_string(out->pages) + " page(s)";
      return true;
    }
    if (!tokens.insert(std::hash<std::string>{}(token)).second) {
      out->error = "schedd answered with a page token it had sent before (a loop); the listing stopped after " +
                   std::to_string(out->pages) + " page(s)";
      return true;
    }
    if (out->pages >= kMaxListPages) {
      out->error = "schedd was still sending pages after " + std::to_string(kMaxListPages) +
                   " (the most a listing follows); the listing stopped";
      return true;
    }
    req.set_page_token(token);
  }
}

}  // namespace mlsched::cli
