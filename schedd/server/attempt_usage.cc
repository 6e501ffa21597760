#include "schedd/server/attempt_usage.h"

#include <algorithm>

namespace mlsched::server {

namespace {

constexpr int64_t kMaxBytes = int64_t{1} << 50;       // 1 PiB: beyond any node
constexpr int64_t kMaxCpuUsec = int64_t{1} << 52;     // ~140 years of CPU
constexpr int64_t kMaxPowerMw = 100'000'000;          // 100 kW for a rank's GPUs
constexpr int32_t kMaxGpus = 4096;

}  // namespace

AttemptUsage::Rank* AttemptUsage::RankOf(int64_t job, int32_t attempt, int32_t rank, Attempt** a) {
  auto [it, fresh] = attempts_.try_emplace({job, attempt});
  *a = &it->second;
  auto r = it->second.ranks.find(rank);
  if (r != it->second.ranks.end()) return &r->second;
  if (it->second.ranks.size() >= kMaxRanks) return nullptr;
  return &it->second.ranks[rank];
}

void AttemptUsage::OnRunning(const v1::RunningTask& t, int32_t gpus, int64_t now) {
  Attempt* a = nullptr;
  Rank* r = RankOf(t.job_id(), t.attempt(), t.rank(), &a);
  if (!r || r->exited) return;
  if (t.has_cpu_usec()) r->cpu_usec = std::max(r->cpu_usec, std::clamp<int64_t>(t.cpu_usec(), 0, kMaxCpuUsec));
  if (t.has_max_rss_bytes()) r->max_rss = std::max(r->max_rss, std::clamp<int64_t>(t.max_rss_bytes(), 0, kMaxBytes));
  if (t.has_rss_bytes()) r->max_rss = std::max(r->max_rss, std::clamp<int64_t>(t.rss_bytes(), 0, kMaxBytes));
  gpus = std::clamp(gpus, 0, kMaxGpus);
  if (gpus > 0 && t.has_gpu_util_percent()) a->gpu_util_max = std::max(a->gpu_util_max, std::clamp(t.gpu_util_percent(), 0, 100));
  if (gpus > 0 && t.has_gpu_memory_bytes())
    a->gpu_memory_max = std::max(a->gpu_memory_max, std::clamp<int64_t>(t.gpu_memory_bytes(), 0, kMaxBytes));
  if (r->last_at >= 0 && now > r->last_at && now - r->last_at <= kMaxGapS && gpus > 0 && t.has_gpu_util_percent()) {
    const double dt = static_cast<double>(now - r->last_at);
    a->gpu_seconds += gpus * dt;
    a->gpu_busy_seconds += gpus * dt * std::clamp(t.gpu_util_percent(), 0, 100) / 100.0;
    if (t.has_gpu_power_mw()) a->gpu_energy_joules += std::clamp<int64_t>(t.gpu_power_mw(), 0, kMaxPowerMw) / 1000.0 * dt;
  }
  r->last_at = std::max(r->last_at, now);
}

void AttemptUsage::OnExited(const v1::TaskExited& e) {
  Attempt* a = nullptr;
  Rank* r = RankOf(e.job_id(), e.attempt(), e.rank(), &a);
  if (!r) return;
  if (e.has_cpu_usec()) r->cpu_usec = std::max(r->cpu_usec, std::clamp<int64_t>(e.cpu_usec(), 0, kMaxCpuUsec));
  if (e.has_max_rss_bytes()) r->max_rss = std::max(r->max_rss, std::clamp<int64_t>(e.max_rss_bytes(), 0, kMaxBytes));
  if (e.has_memory_peak_bytes()) r->peak = std::clamp<int64_t>(e.memory_peak_bytes(), 0, kMaxBytes);
  if (e.has_oom_kills()) r->oom_kills = std::clamp<int64_t>(e.oom_kills(), 0, 1'000'000);
  r->exited = true;
}

v1::JobUsage AttemptUsage::Of(int64_t job, int32_t attempt) const {
  v1::JobUsage u;
  u.set_cpu_usec(-1);
  u.set_max_rss_bytes(-1);
  auto it = attempts_.find({job, attempt});
  if (it == attempts_.end()) return u;
  const Attempt& a = it->second;
  for (const auto& [rank, r] : a.ranks) {
    if (r.cpu_usec >= 0) u.set_cpu_usec(std::max<int64_t>(u.cpu_usec(), 0) + r.cpu_usec);
    u.set_max_rss_bytes(std::max(u.max_rss_bytes(), r.max_rss));
    u.set_oom_kills(u.oom_kills() + r.oom_kills);
  }
  u.set_gpu_seconds(a.gpu_seconds);
  u.set_gpu_busy_seconds(a.gpu_busy_seconds);
  u.set_gpu_energy_joules(a.gpu_energy_joules);
  u.set_gpu_util_max_percent(a.gpu_util_max);
  u.set_gpu_memory_max_bytes(a.gpu_memory_max);
  u.set_ranks(static_cast<int32_t>(a.ranks.size()));
  return u;
}

void AttemptUsage::Forget(int64_t job, int32_t attempt) { attempts_.erase({job, attempt}); }

v1::JobUsage AddUsage(const v1::JobUsage* total, const v1::JobUsage& more) {
  if (!total) return more;
  v1::JobUsage u = *total;
  if (more.cpu_usec() >= 0) u.set_cpu_usec(std::max<int64_t>(u.cpu_usec(), 0) + more.cpu_usec());
  u.set_max_rss_bytes(std::max(u.max_rss_bytes(), more.max_rss_bytes()));
  u.set_gpu_seconds(u.gpu_seconds() + more.gpu_seconds());
  u.set_gpu_busy_seconds(u.gpu_busy_seconds() + more.gpu_busy_seconds());
  u.set_gpu_energy_joules(u.gpu_energy_joules() + more.gpu_energy_joules());
  u.set_oom_kills(u.oom_kills() + more.oom_kills());
  u.set_gpu_util_max_percent(std::max(u.gpu_util_max_percent(), more.gpu_util_max_percent()));
  u.set_gpu_memory_max_bytes(std::max(u.gpu_memory_max_bytes(), more.gpu_memory_max_bytes()));
  u.set_ranks(std::max(u.ranks(), more.ranks()));
  u.set_wall_seconds(u.wall_seconds() + more.wall_seconds());
  u.set_lost_work_seconds(u.lost_work_seconds() + more.lost_work_seconds());
  u.set_cost(u.cost() + more.cost());
  return u;
}

double AttemptCost(const AttemptRow& a, const std::map<std::string, core::PoolPricing>& pricing) {
  auto pool = pricing.find(a.pool);
  if (pool == pricing.end() || a.end_time <= a.start_time) return 0;
  const double hours = static_cast<double>(a.end_time - a.start_time) / 3600.0;
  double per_hour = static_cast<double>(a.cpu_millis) / 1000.0 * pool->second.cpu_hour;
  if (a.gpus > 0) {
    auto g = pool->second.gpu_hour.find(a.gpu_type);
    if (g == pool->second.gpu_hour.end()) g = pool->second.gpu_hour.find("");
    if (g != pool->second.gpu_hour.end()) per_hour += static_cast<double>(a.gpus) * g->second;
  }
  return per_hour * hours;
}

}  // namespace mlsched::server
