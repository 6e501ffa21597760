#include "schedd/server/idle_gpus.h"

#include <algorithm>
#include <cstdio>

namespace mlsched::server {

namespace {

constexpr int32_t kMaxGpus = 4096;  // per rank

std::string Percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

// "10m", "2h", "45s": the policy's own spelling of the span.
std::string Span(int64_t s) {
  if (s >= 3600 && s % 3600 == 0) return std::to_string(s / 3600) + "h";
  if (s >= 60 && s % 60 == 0) return std::to_string(s / 60) + "m";
  return std::to_string(s) + "s";
}

}  // namespace

void IdleGpus::OnSample(int64_t job, int32_t attempt, int32_t rank, int32_t gpus, int32_t util_percent, double below_percent,
                        int64_t now) {
  gpus = std::clamp(gpus, 0, kMaxGpus);
  if (gpus == 0) return;
  auto it = attempts_.try_emplace({job, attempt}).first;
  Attempt& a = it->second;
  auto r = a.ranks.find(rank);
  if (r == a.ranks.end()) {
    if (a.ranks.size() >= kMaxRanks) return;
    r = a.ranks.emplace(rank, Rank{}).first;
  }
  if (now < r->second.at) return;  // an older sample than the one kept
  r->second = Rank{gpus, std::clamp(util_percent, 0, 100), now};
  a.last_at = std::max(a.last_at, now);
  const std::optional<double> mean = MeanUtil(job, attempt, now);
  a.util = mean.value_or(-1);
  if (below_percent > 0 && mean && *mean < below_percent) {
    if (a.below_since < 0) a.below_since = now;
  } else {
    a.below_since = -1;
    a.flagged = false;
  }
}

std::optional<double> IdleGpus::MeanUtil(int64_t job, int32_t attempt, int64_t now) const {
  auto it = attempts_.find({job, attempt});
  if (it == attempts_.end()) return std::nullopt;
  double gpus = 0, busy = 0;
  for (const auto& [rank, r] : it->second.ranks) {
    if (now - r.at > kMaxGapS) continue;
    gpus += r.gpus;
    busy += r.gpus * double(r.util);
  }
  if (gpus == 0) return std::nullopt;
  return busy / gpus;
}

std::optional<int32_t> IdleGpus::RankUtil(int64_t job, int32_t attempt, int32_t rank, int64_t now) const {
  auto it = attempts_.find({job, attempt});
  if (it == attempts_.end()) return std::nullopt;
  auto r = it->second.ranks.find(rank);
  if (r == it->second.ranks.end() || now - r->second.at > kMaxGapS) return std::nullopt;
  return r->second.util;
}

std::optional<IdleGpus::Idle> IdleGpus::IdleOf(int64_t job, int32_t attempt, const Attempt& a, int64_t now) const {
  if (a.below_since < 0 || now - a.last_at > kMaxGapS) return std::nullopt;
  Idle idle{job, attempt, a.below_since, a.util, 0, a.flagged};
  for (const auto& [rank, r] : a.ranks) idle.gpus += r.gpus;
  return idle;
}

std::optional<IdleGpus::Idle> IdleGpus::IdleOf(int64_t job, int32_t attempt, int64_t now) const {
  auto it = attempts_.find({job, attempt});
  if (it == attempts_.end()) return std::nullopt;
  return IdleOf(job, attempt, it->second, now);
}

std::vector<IdleGpus::Idle> IdleGpus::IdleNow(int64_t now) const {
  std::vector<Idle> out;
  for (const auto& [key, a] : attempts_)
    if (auto idle = IdleOf(key.first, key.second, a, now)) out.push_back(*idle);
  return out;
}

std::optional<IdleGpus::Idle> IdleGpus::Flagged(int64_t job, int32_t attempt) const {
  auto it = attempts_.find({job, attempt});
  if (it == attempts_.end() || !it->second.flagged) return std::nullopt;
  return IdleOf(job, attempt, it->second, it->second.last_at);
}

void IdleGpus::Flag(int64_t job, int32_t attempt) {
  if (auto it = attempts_.find({job, attempt}); it != attempts_.end() && it->second.below_since >= 0) it->second.flagged = true;
}

std::vector<IdleGpus::Due> IdleGpus::TakeDue(
    int64_t now, const std::function<std::optional<core::IdleRule>(int64_t, int32_t)>& rule_of) {
  std::vector<Due> due;
  for (auto& [key, a] : attempts_) {
    if (a.flagged) continue;
    auto idle = IdleOf(key.first, key.second, a, now);
    if (!idle) continue;
    const std::optional<core::IdleRule> rule = rule_of(key.first, key.second);
    if (!rule || now - idle->since < rule->after) continue;
    a.flagged = true;
    due.push_back({*idle, *rule,
                   std::to_string(idle->gpus) + " GPU(s) " + Percent(idle->util) + " % busy (below " +
                       Percent(rule->gpu_util_below) + " %) for " + Span(now - idle->since) + "; policy [idle] action " +
                       core::IdleActionName(rule->action)});
  }
  return due;
}

void IdleGpus::Forget(int64_t job, int32_t attempt) { attempts_.erase({job, attempt}); }

}  // namespace mlsched::server
