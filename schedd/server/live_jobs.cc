#include "schedd/server/live_jobs.h"

#include <unistd.h>

#include <algorithm>

namespace mlsched::server {

int64_t WallNow();

std::map<int64_t, v1::JobInfo> RunningSummaries(Controller& ctl, const std::vector<int64_t>& ids) {
  const Caller self{"schedd", static_cast<uint32_t>(getuid()), static_cast<uint32_t>(getgid()), true};
  std::map<int64_t, v1::JobInfo> out;
  for (size_t i = 0; i < ids.size(); i += 1000) {
    v1::ListJobsRequest req;
    for (size_t j = i; j < std::min(ids.size(), i + 1000); ++j) req.add_job_ids(ids[j]);
    req.add_states(v1::RUNNING);
    req.set_page_size(1000);
    for (int page = 0; page < 100; ++page) {
      v1::ListJobsResponse resp;
      if (!ctl.List(self, req, WallNow(), &resp).ok()) break;
      for (auto& j : *resp.mutable_jobs())
        if (j.state() == v1::RUNNING) out[j.job_id()] = std::move(j);
      if (resp.next_page_token().empty()) break;
      req.set_page_token(resp.next_page_token());
    }
  }
  return out;
}

}  // namespace mlsched::server
