#include "schedd/server/listing.h"

#include <algorithm>
#include <climits>

namespace mlsched::server {

std::optional<int64_t> ParsePageToken(const std::string& token) {
  if (token.empty()) return 0;
  if (token.size() > 19 || token.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const unsigned long long v = std::stoull(token);
  if (v > static_cast<unsigned long long>(INT64_MAX)) return std::nullopt;
  return static_cast<int64_t>(v);
}

int32_t PageSize(int32_t requested) {
  return requested <= 0 || requested > kMaxListPageJobs ? kMaxListPageJobs : requested;
}

void FillPage(std::vector<ListSource> sources, int32_t page_size, v1::ListJobsResponse* resp) {
  int64_t limit = INT64_MAX;
  for (const auto& s : sources) limit = std::min(limit, s.limit_id);
  std::vector<v1::JobInfo*> all;
  for (auto& s : sources)
    for (auto& j : s.jobs)
      if (j.job_id() <= limit) all.push_back(&j);
  std::stable_sort(all.begin(), all.end(), [](const auto* a, const auto* b) { return a->job_id() < b->job_id(); });
  size_t bytes = 0;
  int64_t last = -1;
  bool full = false;
  for (v1::JobInfo* j : all) {
    if (j->job_id() == last) continue;  // in memory and in the store: the first source wins
    const size_t size = j->ByteSizeLong();
    if (resp->jobs_size() >= page_size || (resp->jobs_size() > 0 && bytes + size > kMaxListPageBytes)) {
      full = true;
      break;
    }
    bytes += size;
    last = j->job_id();
    *resp->add_jobs() = std::move(*j);
  }
  if (full) resp->set_next_page_token(std::to_string(last));
  else if (limit != INT64_MAX) resp->set_next_page_token(std::to_string(limit));
}

void Summarize(v1::JobSpec* spec) {
  spec->clear_script();
  spec->clear_env();
}

}  // namespace mlsched::server
