#include "schedd/server/gang_watchdog.h"

#include <algorithm>
#include <set>

namespace mlsched::server {

void GangWatchdog::Observe(int64_t job, int32_t attempt, int32_t rank, const std::string& node, int64_t step,
                           int64_t compute_ms, int64_t now) {
  Gang& g = gangs_[job];
  if (attempt < g.attempt) return;
  if (attempt > g.attempt) g = Gang{attempt, {}, false, {}};
  auto it = g.ranks.find(rank);
  if (it == g.ranks.end()) {
    if (g.ranks.size() >= kMaxRanksPerGang) return;
    it = g.ranks.emplace(rank, Rank{node, step, now, {}}).first;
  }
  Rank& r = it->second;
  r.node = node;
  if (step > r.step) {
    r.step = step;
    r.advanced_at = now;
    g.reported = false;  // progress again: a later stall is a new one
  }
  if (compute_ms >= 0 && (r.samples.empty() || now > r.samples.back().at)) {
    r.samples.push_back(Sample{now, step, compute_ms});
    // Thinned: the older half keeps every other sample once the deque is full.
    if (r.samples.size() > kMaxSamples) {
      std::deque<Sample> thin;
      for (size_t i = 0; i < r.samples.size(); ++i)
        if (i >= r.samples.size() / 2 || i % 2 == 0) thin.push_back(r.samples[i]);
      r.samples.swap(thin);
    }
  }
}

double GangWatchdog::SecondsPerStep(const Rank& r, int64_t window, int64_t now) {
  const Sample* first = nullptr;
  for (const auto& s : r.samples)
    if (s.at >= now - window) {
      first = &s;
      break;
    }
  if (!first || r.samples.empty()) return -1;
  const Sample& last = r.samples.back();
  if (last.at - first->at < window / 2 || last.step <= first->step || last.compute_ms < first->compute_ms) return -1;
  return static_cast<double>(last.compute_ms - first->compute_ms) / 1000.0 / static_cast<double>(last.step - first->step);
}

std::vector<GangWatchdog::Straggler> GangWatchdog::TakeStragglers(double ratio, int64_t window, int64_t now) {
  std::vector<Straggler> out;
  if (ratio <= 0 || window <= 0) return out;
  for (auto& [job, g] : gangs_) {
    std::map<std::string, std::pair<double, int>> by_node;  // node -> (sum of seconds per step, ranks)
    for (const auto& [rank, r] : g.ranks) {
      const double sps = SecondsPerStep(r, window, now);
      if (sps < 0) continue;
      by_node[r.node].first += sps;
      by_node[r.node].second += 1;
    }
    if (by_node.size() < 2) continue;
    for (const auto& [node, sum] : by_node) {
      std::vector<double> others;
      for (const auto& [other, o] : by_node)
        if (other != node) others.push_back(o.first / o.second);
      std::sort(others.begin(), others.end());
      const size_t n = others.size();
      const double median = n % 2 ? others[n / 2] : (others[n / 2 - 1] + others[n / 2]) / 2;
      const double mine = sum.first / sum.second;
      // Rates are steps per compute second: below ratio x the median rate = above median / ratio.
      if (median <= 0 || mine * ratio <= median) continue;
      auto rep = g.straggler_reported.find(node);
      if (rep != g.straggler_reported.end() && now - rep->second < window) continue;
      g.straggler_reported[node] = now;
      out.push_back(Straggler{job, g.attempt, node, mine, median});
    }
  }
  return out;
}

bool GangWatchdog::StragglingOn(int64_t job, const std::string& node, int64_t since) const {
  auto g = gangs_.find(job);
  if (g == gangs_.end()) return false;
  auto r = g->second.straggler_reported.find(node);
  return r != g->second.straggler_reported.end() && r->second >= since;
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

int GangWatchdog::Suspect(const std::string& node, int64_t now, int64_t window, uint32_t uid) {
  auto& seen = suspicions_[node];
  seen.emplace_back(now, uid);
  while (!seen.empty() && (seen.front().first <= now - window || seen.size() > kMaxSuspicionsPerNode)) seen.pop_front();
  std::set<uint32_t> users;
  for (const auto& [at, u] : seen) users.insert(u);
  return static_cast<int>(users.size());
}

}  // namespace mlsched::server
