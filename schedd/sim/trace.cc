#include "schedd/sim/trace.h"

#include <algorithm>
#include <numeric>

namespace mlsched::sim {

void ReportIssue(Trace& trace, const ReaderOptions& options, const std::string& origin,
                 const std::string& message) {
  if (options.strict) throw TraceError(origin + ": " + message);
  ++trace.skipped;
  if (trace.issues.size() < options.max_issues_kept) trace.issues.push_back(origin + ": " + message);
}

void FinalizeTrace(Trace& trace) {
  auto& jobs = trace.jobs;
  auto before = [](const TraceJob& a, const TraceJob& b) {
    return a.submit_time != b.submit_time ? a.submit_time < b.submit_time : a.id < b.id;
  };
  if (!std::is_sorted(jobs.begin(), jobs.end(), before)) {
    // A stable sort of indices, then one move per job: the same order as stable-sorting the jobs,
    // without moving each TraceJob (strings, vectors) O(log n) times.
    std::vector<size_t> order(jobs.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return before(jobs[a], jobs[b]); });
    std::vector<TraceJob> sorted;
    sorted.reserve(jobs.size());
    for (size_t i : order) sorted.push_back(std::move(jobs[i]));
    jobs = std::move(sorted);
  }
  if (!jobs.empty()) {
    const core::Timestamp base = jobs.front().submit_time;
    for (auto& j : jobs) j.submit_time -= base;
  }
  std::vector<std::pair<core::JobId, size_t>> ids;
  ids.reserve(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) ids.emplace_back(jobs[i].id, i);
  std::sort(ids.begin(), ids.end());
  for (size_t i = 1; i < ids.size(); ++i) {
    if (ids[i].first == ids[i - 1].first) {
      throw TraceError(jobs[ids[i].second].origin + ": duplicate job id " +
                       std::to_string(ids[i].first) + " (first at " +
                       jobs[ids[i - 1].second].origin + ")");
    }
  }
}

void UseExactRuntimes(Trace& trace) {
  for (auto& j : trace.jobs) {
    const core::Duration limit = std::max<core::Duration>(j.run_time, 1);
    j.requested_time = limit;
    j.spec.time_limit = limit;
  }
}

}  // namespace mlsched::sim
