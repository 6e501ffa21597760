#include "schedd/server/usage_book.h"

#include <algorithm>

namespace mlsched::server {

void UsageBook::Observe(const std::string& node, const v1::Heartbeat& hb, Clock::time_point at) {
  std::lock_guard lk(mu_);
  std::map<Key, Sample>& old = nodes_[node];
  std::map<Key, Sample> now;
  for (const auto& r : hb.running()) {
    if (now.size() >= kMaxTasksPerNode) break;
    if (!r.has_cpu_usec() || r.cpu_usec() < 0) continue;
    const Key key{r.job_id(), r.attempt(), r.rank()};
    Sample s{r.cpu_usec(), at, -1, at};
    if (auto it = old.find(key); it != old.end()) {
      const double secs = std::chrono::duration<double>(at - it->second.at).count();
      // A counter that went back (a new cgroup under the same key) restarts the rate.
      if (secs > 0.05 && r.cpu_usec() >= it->second.cpu_usec) {
        s.cores = static_cast<double>(r.cpu_usec() - it->second.cpu_usec) / 1e6 / secs;
        s.since = it->second.at;
      } else if (secs <= 0.05) {
        s = it->second;  // too close to measure: keep the previous sample and rate
      }
    }
    now.emplace(key, s);
  }
  if (now.empty()) nodes_.erase(node);
  else old = std::move(now);
}

void UsageBook::ForgetNode(const std::string& node) {
  std::lock_guard lk(mu_);
  nodes_.erase(node);
}

std::optional<UsageBook::CpuUse> UsageBook::Cpu(const v1::JobInfo& info) const {
  std::lock_guard lk(mu_);
  CpuUse use;
  for (const auto& t : info.tasks()) {
    auto n = nodes_.find(t.node());
    if (n == nodes_.end()) continue;
    auto s = n->second.find(Key{info.job_id(), info.attempt(), t.rank()});
    if (s == n->second.end() || s->second.cores < 0) continue;
    use.oldest = use.tasks_measured == 0 ? s->second.since : std::min(use.oldest, s->second.since);
    use.cores += s->second.cores;
    ++use.tasks_measured;
  }
  if (use.tasks_measured == 0) return std::nullopt;
  return use;
}

}  // namespace mlsched::server
