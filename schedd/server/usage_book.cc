#include "schedd/server/usage_book.h"

#include <algorithm>

namespace mlsched::server {

void UsageBook::Observe(const std::string& node, const v1::Heartbeat& hb, Clock::time_point at) {
  std::lock_guard lk(mu_);
  std::map<Key, Sample>& old = nodes_[node];
  std::map<Key, Sample> now;
  for (const auto& r : hb.running()) {
    if (now.size() >= kMaxTasksPerNode) break;
    const Key key{r.job_id(), r.attempt(), r.rank()};
    if (!r.has_cpu_usec() || r.cpu_usec() < 0) {
      if (r.has_gpu_util_percent()) now.emplace(key, Sample{0, at, -1, at, std::clamp(r.gpu_util_percent(), 0, 100)});
      continue;
    }
    Sample s{r.cpu_usec(), at, -1, at, -1};
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
    s.gpu_util = r.has_gpu_util_percent() ? std::clamp(r.gpu_util_percent(), 0, 100) : -1;
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
    if (s == n->second.end() || s->second.cores < 0) continue;  // GPU-only samples have no rate
    use.oldest = use.tasks_measured == 0 ? s->second.since : std::min(use.oldest, s->second.since);
    use.cores += s->second.cores;
    ++use.tasks_measured;
  }
  if (use.tasks_measured == 0) return std::nullopt;
  return use;
}

std::optional<double> UsageBook::GpuUtil(const v1::JobInfo& info) const {
  std::lock_guard lk(mu_);
  double sum = 0;
  int n = 0;
  for (const auto& t : info.tasks()) {
    auto node = nodes_.find(t.node());
    if (node == nodes_.end()) continue;
    auto s = node->second.find(Key{info.job_id(), info.attempt(), t.rank()});
    if (s == node->second.end() || s->second.gpu_util < 0) continue;
    sum += s->second.gpu_util;
    ++n;
  }
  if (n == 0) return std::nullopt;
  return sum / n;
}

}  // namespace mlsched::server
