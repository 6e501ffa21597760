#include "schedd/report/report.h"

#include <toml++/toml.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/units.h"
#include "mlsched/v1/types.pb.h"

namespace mlsched::report {

std::optional<Pricing> LoadPricing(const std::string& path, std::string* error) {
  toml::table tbl;
  try {
    tbl = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    const auto& b = e.source().begin;
    *error = path + ":" + std::to_string(b.line) + ":" + std::to_string(b.column) + ": " + std::string(e.description());
    return std::nullopt;
  }
  Pricing p;
  const toml::table* pricing = tbl["pricing"].as_table();
  if (!pricing) return p;
  for (const auto& [pool, node] : *pricing) {
    const toml::table* t = node.as_table();
    auto where = [&](const toml::node& n) {
      return path + ":" + std::to_string(n.source().begin.line) + ":" + std::to_string(n.source().begin.column) + ": ";
    };
    if (!t) {
      *error = where(node) + "[pricing." + std::string(pool.str()) + "] must be a table";
      return std::nullopt;
    }
    Pricing::PoolPrices pp;
    for (const auto& [key, v] : *t) {
      if (key == "cpu_hour") {
        auto d = v.value<double>();
        if (!d || *d < 0) {
          *error = where(v) + "cpu_hour must be a number >= 0";
          return std::nullopt;
        }
        pp.cpu_hour = *d;
      } else if (key == "gpu_hour") {
        const toml::table* g = v.as_table();
        if (!g) {
          *error = where(v) + "gpu_hour must be a table of GPU type = price";
          return std::nullopt;
        }
        for (const auto& [type, price] : *g) {
          auto d = price.value<double>();
          if (!d || *d < 0) {
            *error = where(price) + "gpu_hour." + std::string(type.str()) + " must be a number >= 0";
            return std::nullopt;
          }
          pp.gpu_hour[std::string(type.str())] = *d;
        }
      } else {
        *error = where(v) + "unknown key '" + std::string(key.str()) + "' in [pricing." + std::string(pool.str()) +
                 "] (cpu_hour, gpu_hour)";
        return std::nullopt;
      }
    }
    p.pools[std::string(pool.str())] = pp;
  }
  return p;
}

namespace {

// Nearest-rank percentile q (0..1] of sorted `v`.
double Percentile(const std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  size_t idx = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(idx == 0 ? 0 : idx - 1, v.size() - 1)];
}

}  // namespace

Report Build(const std::vector<server::JobRow>& jobs, const std::vector<server::AttemptRow>& attempts,
             const Pricing& pricing, int64_t start, int64_t end, int64_t now, size_t top) {
  struct JobMeta {
    std::string account, user, partition;
    int64_t submit = 0;
    std::string preferred;  // first GPU type asked for ("" = any type, or no GPUs)
    bool wants_gpus = false;
  };
  std::map<int64_t, JobMeta> meta;
  for (const auto& j : jobs) {
    v1::JobSpec spec;
    spec.ParseFromString(j.spec);
    meta[j.id] = JobMeta{spec.account(), j.user, spec.partition(), j.submit_time,
                         spec.gpu_types_size() > 0 ? spec.gpu_types(0) : "", spec.gpus_per_task() > 0};
  }
  std::map<std::pair<std::string, std::string>, UsageRow> usage;
  std::map<std::pair<std::string, std::string>, std::set<int64_t>> job_sets;
  std::map<std::pair<std::string, std::string>, std::vector<double>> waits;
  for (const auto& a : attempts) {
    auto m = meta.find(a.job_id);
    if (m == meta.end()) continue;
    auto key = std::make_pair(m->second.account, m->second.user);
    UsageRow& u = usage[key];
    u.account = key.first;
    u.user = key.second;
    int64_t a_end = a.end_time > 0 ? a.end_time : now;
    double hours = static_cast<double>(std::max<int64_t>(0, std::min(a_end, end) - std::max(a.start_time, start))) / 3600.0;
    if (a.start_time < end && a_end >= start) job_sets[key].insert(a.job_id);
    double cpu_h = hours * static_cast<double>(a.cpu_millis) / 1000.0;
    double gpu_h = hours * static_cast<double>(a.gpus);
    u.cpu_hours += cpu_h;
    if (a.gpus > 0) {
      u.gpu_hours[a.gpu_type] += gpu_h;
      u.pool_gpu_hours[a.pool.empty() ? "unknown" : a.pool] += gpu_h;
    }
    // Measured use, scaled to the attempt's part inside the period.
    const int64_t a_len = a_end - a.start_time;
    const double share = a_len > 0 ? static_cast<double>(std::max<int64_t>(0, std::min(a_end, end) - std::max(a.start_time, start))) /
                                         static_cast<double>(a_len)
                                   : 0;
    if (a.cpu_usec > 0) u.cpu_used_hours += share * static_cast<double>(a.cpu_usec) / 3.6e9;
    u.gpu_busy_hours += share * a.gpu_busy_seconds / 3600.0;
    u.gpu_idle_hours += share * std::max(0.0, a.gpu_seconds - a.gpu_busy_seconds) / 3600.0;
    if (auto pp = pricing.pools.find(a.pool); pp != pricing.pools.end()) {
      u.cost += cpu_h * pp->second.cpu_hour;
      if (auto g = pp->second.gpu_hour.find(a.gpu_type); a.gpus > 0 && g != pp->second.gpu_hour.end())
        u.cost += gpu_h * g->second;
    }
    if (a_end >= start && a_end < end) {
      if (a.outcome == "Preempted") u.preemptions++;
      if (a.outcome == "Evicted") u.evictions++;
      if (a.outcome == "NodeFail") u.node_failures++;
      double lost_h = static_cast<double>(a.lost_work_s) / 3600.0;
      u.lost_cpu_hours += lost_h * static_cast<double>(a.cpu_millis) / 1000.0;
      u.lost_gpu_hours += lost_h * static_cast<double>(a.gpus);
      if (a.gpus > 0 && a.lost_work_s > 0)
        u.pool_lost_gpu_hours[a.pool.empty() ? "unknown" : a.pool] += lost_h * static_cast<double>(a.gpus);
    }
    // A start on another accelerator than the first one asked for (a fallback tier), or on CPUs.
    if (a.start_time >= start && a.start_time < end && m->second.wants_gpus &&
        (a.gpus == 0 || (!m->second.preferred.empty() && a.gpu_type != m->second.preferred)))
      u.fallbacks++;
    if (a.attempt == 1 && a.start_time >= start && a.start_time < end)
      waits[{m->second.partition, a.gpus > 0 ? a.gpu_type : "cpu"}].push_back(
          static_cast<double>(a.start_time - m->second.submit));
  }
  Report r;
  r.start = start;
  r.end = end;
  for (auto& [key, u] : usage) {
    u.jobs = static_cast<int64_t>(job_sets[key].size());
    if (u.jobs > 0) r.usage.push_back(u);
  }
  for (auto& [key, v] : waits) {
    std::sort(v.begin(), v.end());
    WaitRow w{key.first, key.second, static_cast<int64_t>(v.size()), 0, Percentile(v, 0.95), Percentile(v, 0.5), Percentile(v, 0.9)};
    for (double x : v) w.mean_wait_s += x / static_cast<double>(v.size());
    r.waits.push_back(w);
  }
  for (const auto& u : r.usage)
    if (u.gpu_idle_hours > 0) r.top_idle.push_back(u);
  std::stable_sort(r.top_idle.begin(), r.top_idle.end(),
                   [](const UsageRow& a, const UsageRow& b) { return a.gpu_idle_hours > b.gpu_idle_hours; });
  if (r.top_idle.size() > top) r.top_idle.resize(top);
  return r;
}

namespace {

std::string GpuHours(const std::map<std::string, double>& g, const char* sep) {
  std::string s;
  char buf[64];
  for (const auto& [type, h] : g) {
    std::snprintf(buf, sizeof buf, "%s%s=%.3f", s.empty() ? "" : sep, type.c_str(), h);
    s += buf;
  }
  return s;
}

}  // namespace

std::string FormatTable(const Report& r) {
  std::ostringstream o;
  char buf[512];
  o << "Usage " << FormatTimestamp(r.start) << " - " << FormatTimestamp(r.end) << "\n";
  std::snprintf(buf, sizeof buf, "%-14s %-10s %5s %10s %-22s %9s %6s %6s %6s %9s %9s %6s %9s %9s %9s\n", "ACCOUNT", "USER", "JOBS",
                "CPU_HOURS", "GPU_HOURS", "COST", "PREEMPT", "EVICT", "NODEF", "LOST_CPUH", "LOST_GPUH", "FALLBK", "CPU_USEDH",
                "GPU_BUSYH", "GPU_IDLEH");
  o << buf;
  for (const auto& u : r.usage) {
    std::string g = GpuHours(u.gpu_hours, ",");
    std::snprintf(buf, sizeof buf, "%-14s %-10s %5lld %10.3f %-22s %9.2f %6lld %6lld %6lld %9.3f %9.3f %6lld %9.3f %9.3f %9.3f\n",
                  u.account.c_str(), u.user.c_str(), (long long)u.jobs, u.cpu_hours, g.empty() ? "-" : g.c_str(), u.cost,
                  (long long)u.preemptions, (long long)u.evictions, (long long)u.node_failures, u.lost_cpu_hours,
                  u.lost_gpu_hours, (long long)u.fallbacks, u.cpu_used_hours, u.gpu_busy_hours, u.gpu_idle_hours);
    o << buf;
  }
  o << "\nGPU-hours by pool (allocated / lost to requeues)\n";
  std::snprintf(buf, sizeof buf, "%-14s %-10s %10s %10s %10s %11s %11s\n", "ACCOUNT", "USER", "OD_GPUH", "SPOT_GPUH", "RESV_GPUH",
                "OD_LOSTH", "SPOT_LOSTH");
  o << buf;
  auto of = [](const std::map<std::string, double>& m, const char* k) { return m.count(k) ? m.at(k) : 0.0; };
  for (const auto& u : r.usage) {
    if (u.pool_gpu_hours.empty()) continue;
    std::snprintf(buf, sizeof buf, "%-14s %-10s %10.3f %10.3f %10.3f %11.3f %11.3f\n", u.account.c_str(), u.user.c_str(),
                  of(u.pool_gpu_hours, "on-demand"), of(u.pool_gpu_hours, "spot"), of(u.pool_gpu_hours, "reserved"),
                  of(u.pool_lost_gpu_hours, "on-demand"), of(u.pool_lost_gpu_hours, "spot"));
    o << buf;
  }
  o << "\nTop idle GPU-hours (GPUs held but not busy, NVML)\n";
  std::snprintf(buf, sizeof buf, "%4s %-14s %-10s %10s %10s %10s %6s\n", "RANK", "ACCOUNT", "USER", "GPU_HOURS", "GPU_BUSYH",
                "GPU_IDLEH", "IDLE%");
  o << buf;
  int rank = 0;
  for (const auto& u : r.top_idle) {
    const double sampled = u.gpu_busy_hours + u.gpu_idle_hours;
    std::snprintf(buf, sizeof buf, "%4d %-14s %-10s %10.3f %10.3f %10.3f %6.1f\n", ++rank, u.account.c_str(), u.user.c_str(),
                  of(u.pool_gpu_hours, "on-demand") + of(u.pool_gpu_hours, "spot") + of(u.pool_gpu_hours, "reserved") +
                      of(u.pool_gpu_hours, "unknown"),
                  u.gpu_busy_hours, u.gpu_idle_hours, sampled > 0 ? 100 * u.gpu_idle_hours / sampled : 0.0);
    o << buf;
  }
  o << "\nQueue wait (jobs first started in the period)\n";
  std::snprintf(buf, sizeof buf, "%-14s %-12s %6s %12s %12s %12s %12s\n", "PARTITION", "ACCELERATOR", "JOBS", "MEAN_WAIT", "P50_WAIT",
                "P90_WAIT", "P95_WAIT");
  o << buf;
  for (const auto& w : r.waits) {
    std::snprintf(buf, sizeof buf, "%-14s %-12s %6lld %12s %12s %12s %12s\n", w.partition.c_str(), w.accelerator.c_str(),
                  (long long)w.jobs, FormatDuration(std::llround(w.mean_wait_s)).c_str(),
                  FormatDuration(std::llround(w.p50_wait_s)).c_str(), FormatDuration(std::llround(w.p90_wait_s)).c_str(),
                  FormatDuration(std::llround(w.p95_wait_s)).c_str());
    o << buf;
  }
  return o.str();
}

std::string FormatCsv(const Report& r) {
  std::ostringstream o;
  o << "section,account,user,jobs,cpu_hours,gpu_hours,cost,preemptions,evictions,node_failures,lost_cpu_hours,"
       "lost_gpu_hours,fallbacks,partition,accelerator,mean_wait_s,p95_wait_s,cpu_used_hours,gpu_busy_hours,gpu_idle_hours,"
       "p50_wait_s,p90_wait_s,gpu_hours_by_pool,lost_gpu_hours_by_pool,rank\n";
  char buf[1024];
  auto usage_row = [&](const char* section, const UsageRow& u, int rank) {
    std::snprintf(buf, sizeof buf, "%s,%s,%s,%lld,%.6f,%s,%.4f,%lld,%lld,%lld,%.6f,%.6f,%lld,,,,,%.6f,%.6f,%.6f,,,%s,%s,%s\n", section,
                  u.account.c_str(), u.user.c_str(), (long long)u.jobs, u.cpu_hours, GpuHours(u.gpu_hours, ";").c_str(), u.cost,
                  (long long)u.preemptions, (long long)u.evictions, (long long)u.node_failures, u.lost_cpu_hours,
                  u.lost_gpu_hours, (long long)u.fallbacks, u.cpu_used_hours, u.gpu_busy_hours, u.gpu_idle_hours,
                  GpuHours(u.pool_gpu_hours, ";").c_str(), GpuHours(u.pool_lost_gpu_hours, ";").c_str(),
                  rank > 0 ? std::to_string(rank).c_str() : "");
    o << buf;
  };
  for (const auto& u : r.usage) usage_row("usage", u, 0);
  for (const auto& w : r.waits) {
    std::snprintf(buf, sizeof buf, "wait,,,%lld,,,,,,,,,,%s,%s,%.1f,%.1f,,,,%.1f,%.1f,,,\n", (long long)w.jobs, w.partition.c_str(),
                  w.accelerator.c_str(), w.mean_wait_s, w.p95_wait_s, w.p50_wait_s, w.p90_wait_s);
    o << buf;
  }
  int rank = 0;
  for (const auto& u : r.top_idle) usage_row("top_idle", u, ++rank);
  return o.str();
}

std::string FormatJson(const Report& r) {
  nlohmann::json j;
  j["start"] = r.start;
  j["end"] = r.end;
  j["usage"] = nlohmann::json::array();
  for (const auto& u : r.usage)
    j["usage"].push_back({{"account", u.account}, {"user", u.user}, {"jobs", u.jobs}, {"cpu_hours", u.cpu_hours},
                          {"gpu_hours", u.gpu_hours}, {"cost", u.cost}, {"preemptions", u.preemptions},
                          {"evictions", u.evictions}, {"node_failures", u.node_failures},
                          {"lost_cpu_hours", u.lost_cpu_hours}, {"lost_gpu_hours", u.lost_gpu_hours},
                          {"fallbacks", u.fallbacks}, {"cpu_used_hours", u.cpu_used_hours},
                          {"gpu_busy_hours", u.gpu_busy_hours}, {"gpu_idle_hours", u.gpu_idle_hours},
                          {"gpu_hours_by_pool", u.pool_gpu_hours}, {"lost_gpu_hours_by_pool", u.pool_lost_gpu_hours}});
  j["waits"] = nlohmann::json::array();
  for (const auto& w : r.waits)
    j["waits"].push_back({{"partition", w.partition}, {"accelerator", w.accelerator}, {"jobs", w.jobs},
                          {"mean_wait_s", w.mean_wait_s}, {"p50_wait_s", w.p50_wait_s}, {"p90_wait_s", w.p90_wait_s},
                          {"p95_wait_s", w.p95_wait_s}});
  j["top_idle"] = nlohmann::json::array();
  for (const auto& u : r.top_idle)
    j["top_idle"].push_back({{"account", u.account}, {"user", u.user}, {"gpu_busy_hours", u.gpu_busy_hours},
                             {"gpu_idle_hours", u.gpu_idle_hours}});
  return j.dump(2) + "\n";
}

}  // namespace mlsched::report
