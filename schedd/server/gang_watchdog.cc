#include "schedd/server/gang_watchdog.h"

#include <algorithm>

namespace mlsched::server {

void GangWatchdog::Observe(int64_t job, int32_t attempt, int32_t rank, const std::string& node, int64_t step, int64_t now) {
  Gang& g = gangs_[job];
  if (attempt < g.attempt) return;
  if (attempt > g.attempt) g = Gang{attempt, {}, false};
  auto it = g.ranks.find(rank);
  if (it == g.ranks.end()) {
    if (g.ranks.size() >= kMaxRanksPerGang) return;
    g.ranks[rank] = Rank{node, step, now};
    return;
  }
  Rank& r = it->second;
  r.node = node;
  if (step > r.step) {
    r.step = step;
    r.advanced_at = now;
    g.reported = false;  // progress again: a later stall is a new one
  }
}

void GangWatchdog::Forget(int64_t job) { gangs_.erase(job); }

std::vector<GangWatchdog::Stall> GangWatchdog::TakeStalls(int64_t stall_after, int64_t now) {
  std::vector<Stall> out;
  if (stall_after <= 0) return out;
  for (auto& [job, g] : gangs_) {
    if (g.reported || g.ranks.empty()) continue;
    int64_t top = 0, last = 0;
    for (const auto& [rank, r] : g.ranks) {
      top = std::max(top, r.step);
      last = std::max(last, r.advanced_at);
    }
    if (top <= 0 || now - last < stall_after) continue;  // never reported a step, or still moving
    g.reported = true;
    out.push_back(Stall{job, g.attempt, top, last});
  }
  return out;
}

std::vector<GangWatchdog::Behind> GangWatchdog::BehindRanks(int64_t job) const {
  std::vector<Behind> out;
  auto it = gangs_.find(job);
  if (it == gangs_.end()) return out;
  int64_t top = 0;
  for (const auto& [rank, r] : it->second.ranks) top = std::max(top, r.step);
  for (const auto& [rank, r] : it->second.ranks)
    if (r.step < top) out.push_back(Behind{rank, r.node, r.step});
  return out;
}

int GangWatchdog::Suspect(const std::string& node, int64_t now, int64_t window) {
  auto& times = suspicions_[node];
  times.push_back(now);
  while (!times.empty() && (times.front() <= now - window || times.size() > kMaxSuspicionsPerNode)) times.pop_front();
  return static_cast<int>(times.size());
}

}  // namespace mlsched::server
