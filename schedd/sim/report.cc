#include "schedd/sim/report.h"

#include <cstdio>

#include <nlohmann/json.hpp>

namespace mlsched::sim {
namespace {

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

/// Rounds for JSON so that output is stable and readable (values keep 6 significant decimals).
double Round6(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6f", v);
  return std::strtod(buf, nullptr);
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

nlohmann::ordered_json AccuracyJson(const EstimateAccuracy& a) {
  return {{"pending", a.pending},
          {"estimated", a.estimated},
          {"median_abs_error_s", Round6(a.median_abs_error_s)},
          {"mean_abs_error_s", Round6(a.mean_abs_error_s)},
          {"p90_abs_error_s", Round6(a.p90_abs_error_s)},
          {"median_error_s", Round6(a.median_error_s)},
          {"within_15m", Round6(a.within_15m)},
          {"within_1h", Round6(a.within_1h)},
          {"started_early", Round6(a.started_early)}};
}

}  // namespace

void WriteTable(std::ostream& out, const RunInfo& info, const SimResult& result, const Metrics& m,
                const StartEstimateMetrics* estimates) {
  auto row = [&](const std::string& key, const std::string& value) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%-28s %s\n", key.c_str(), value.c_str());
    out << buf;
  };
  row("trace", info.trace + " (" + info.format + ")");
  row("policy", info.policy);
  row("seed", std::to_string(info.seed));
  row("nodes", std::to_string(info.nodes) + " (" + std::to_string(result.capacity) + " " +
                   result.resource + "s)");
  row("jobs", std::to_string(m.jobs) + " (finished " + std::to_string(m.finished) +
                  ", infeasible " + std::to_string(m.infeasible) + ", unfinished " +
                  std::to_string(m.unfinished) + ", skipped records " +
                  std::to_string(info.skipped_records) + ")");
  row("mean wait (s)", Fixed(m.mean_wait_s, 1));
  row("median wait (s)", Fixed(m.median_wait_s, 1));
  row("p95 wait (s)", Fixed(m.p95_wait_s, 1));
  row("max wait (s)", Fixed(m.max_wait_s, 1));
  row("mean response (s)", Fixed(m.mean_response_s, 1));
  row("p95 response (s)", Fixed(m.p95_response_s, 1));
  row("mean bounded slowdown", Fixed(m.mean_bounded_slowdown, 2));
  row("utilization", Fixed(m.utilization, 4));
  row("makespan (s)", std::to_string(m.makespan_s));
  row("scheduling cycles", std::to_string(m.cycles));
  row("evictions", std::to_string(m.evictions));
  row("preemptions", std::to_string(m.preemptions));
  row("fallbacks", std::to_string(m.fallbacks));
  row("lost resource-hours", Fixed(m.lost_resource_hours, 2));
  row("  to preemptions", Fixed(m.lost_preemption_resource_hours, 2));
  row("  to evictions", Fixed(m.lost_eviction_resource_hours, 2));
  if (m.elastic_jobs > 0) {
    row("  to resize restarts", Fixed(m.lost_resize_resource_hours, 2));
    row("elastic jobs", std::to_string(m.elastic_jobs));
    row("resizes", std::to_string(m.resizes));
  }
  if (m.faults) {
    row("  to node failures", Fixed(m.lost_failure_resource_hours, 2));
    row("node failures", std::to_string(m.node_failures));
    row("attempts ended by failures", std::to_string(m.failed_attempts));
    row("  of them hung", std::to_string(m.hangs));
    row("nodes drained for repair", std::to_string(m.health_drains));
  }
  if (!result.pools.empty()) {
    row("cost", Fixed(m.cost, 2));
    for (const auto& [pool, u] : result.pools) {
      const std::string nodes = u.static_nodes > 0
                                    ? std::to_string(u.static_nodes) + " nodes"
                                    : std::to_string(u.requested) + " requested, " + std::to_string(u.released) +
                                          " released, " + std::to_string(u.failed) + " failed, " +
                                          std::to_string(u.evicted) + " evicted, peak " +
                                          Fixed(u.peak_cost_per_hour, 2) + "/h";
      row("  " + pool, Fixed(u.cost, 2) + " (" + Fixed(u.node_hours, 2) + " node-hours; " + nodes + ")");
    }
  }
  row("Jain fairness (accounts)", Fixed(m.jain_fairness, 4));
  for (const auto& [accel, p95] : m.p95_wait_by_accelerator) {
    row("p95 wait " + accel + " (s)", Fixed(p95, 1));
  }
  if (m.accounts.size() <= 40) {
    out << "\naccount                      jobs   usage   share  mean wait (s)\n";
    for (const auto& a : m.accounts) {
      char buf[200];
      std::snprintf(buf, sizeof buf, "%-26s %6lld  %6.4f  %6.4f  %.1f\n", a.account.c_str(),
                    static_cast<long long>(a.jobs), a.usage_share, a.share, a.mean_wait_s);
      out << buf;
    }
  } else {
    out << "(" << m.accounts.size() << " accounts: see --json)\n";
  }
  if (estimates != nullptr) WriteStartEstimateTable(out, *estimates);
}

void WriteJson(std::ostream& out, const RunInfo& info, const SimResult& result, const Metrics& m,
               const StartEstimateMetrics* estimates) {
  nlohmann::ordered_json j;
  j["trace"] = info.trace;
  j["format"] = info.format;
  j["policy"] = info.policy;
  j["seed"] = info.seed;
  j["nodes"] = info.nodes;
  j["resource"] = result.resource;
  j["capacity"] = result.capacity;
  j["skipped_records"] = info.skipped_records;
  j["jobs"] = m.jobs;
  j["finished"] = m.finished;
  j["infeasible"] = m.infeasible;
  j["unfinished"] = m.unfinished;
  j["mean_wait_s"] = Round6(m.mean_wait_s);
  j["median_wait_s"] = Round6(m.median_wait_s);
  j["p95_wait_s"] = Round6(m.p95_wait_s);
  j["max_wait_s"] = Round6(m.max_wait_s);
  j["mean_response_s"] = Round6(m.mean_response_s);
  j["p95_response_s"] = Round6(m.p95_response_s);
  j["mean_bounded_slowdown"] = Round6(m.mean_bounded_slowdown);
  j["utilization"] = Round6(m.utilization);
  j["makespan_s"] = m.makespan_s;
  j["cycles"] = m.cycles;
  j["evictions"] = m.evictions;
  j["preemptions"] = m.preemptions;
  j["fallbacks"] = m.fallbacks;
  j["lost_resource_hours"] = Round6(m.lost_resource_hours);
  j["lost_preemption_resource_hours"] = Round6(m.lost_preemption_resource_hours);
  j["lost_eviction_resource_hours"] = Round6(m.lost_eviction_resource_hours);
  if (m.elastic_jobs > 0) {
    j["lost_resize_resource_hours"] = Round6(m.lost_resize_resource_hours);
    j["elastic_jobs"] = m.elastic_jobs;
    j["resizes"] = m.resizes;
  }
  if (m.faults) {
    j["lost_failure_resource_hours"] = Round6(m.lost_failure_resource_hours);
    j["node_failures"] = m.node_failures;
    j["failed_attempts"] = m.failed_attempts;
    j["hangs"] = m.hangs;
    j["health_drains"] = m.health_drains;
  }
  if (!result.pools.empty()) {
    j["cost"] = Round6(m.cost);
    j["provisioned_node_hours"] = Round6(m.provisioned_node_hours);
    auto& pools = j["pools"] = nlohmann::ordered_json::object();
    for (const auto& [pool, u] : result.pools) {
      pools[pool] = {{"static_nodes", u.static_nodes}, {"requested", u.requested}, {"released", u.released},
                     {"failed", u.failed}, {"evicted", u.evicted}, {"node_hours", Round6(u.node_hours)},
                     {"cost", Round6(u.cost)}, {"peak_cost_per_hour", Round6(u.peak_cost_per_hour)}};
    }
  }
  j["jain_fairness"] = Round6(m.jain_fairness);
  auto& accel = j["p95_wait_by_accelerator_s"] = nlohmann::ordered_json::object();
  for (const auto& [name, p95] : m.p95_wait_by_accelerator) accel[name] = Round6(p95);
  auto& accounts = j["accounts"] = nlohmann::ordered_json::array();
  for (const auto& a : m.accounts) {
    accounts.push_back({{"account", a.account}, {"jobs", a.jobs},
                        {"usage_share", Round6(a.usage_share)}, {"share", Round6(a.share)},
                        {"mean_wait_s", Round6(a.mean_wait_s)}});
  }
  if (estimates != nullptr) {
    auto& e = j["start_estimates"] = nlohmann::ordered_json::object();
    e["recheck_s"] = estimates->recheck_s;
    e["at_submit"] = AccuracyJson(estimates->at_submit);
    e["after_recheck"] = AccuracyJson(estimates->after_recheck);
  }
  out << j.dump(2) << "\n";
}

void WriteJobsCsv(std::ostream& out, const SimResult& result) {
  out << "id,user,account,accelerator,size,submit,start,end,wait_s,run_s,bounded_slowdown,state,"
         "attempts,evictions,preemptions,lost_resource_hours,infeasible\n";
  for (const auto& j : result.jobs) {
    const bool done = j.end >= 0;
    const int64_t wait = j.first_start >= 0 ? j.first_start - j.submit : -1;
    const double bsld = done ? BoundedSlowdown(static_cast<double>(j.end - j.submit - j.run_time),
                                               static_cast<double>(j.run_time))
                             : 0;
    out << j.id << ',' << CsvField(j.user) << ',' << CsvField(j.account) << ','
        << CsvField(j.accelerator) << ',' << j.size << ',' << j.submit << ',' << j.first_start
        << ',' << j.end << ',' << wait << ',' << j.run_time << ',' << Fixed(bsld, 4) << ','
        << core::JobStateName(j.state) << ',' << j.attempts << ',' << j.evictions << ','
        << j.preemptions << ',' << Fixed(j.lost_resource_hours, 4) << ','
        << CsvField(j.infeasible) << '\n';
  }
}

}  // namespace mlsched::sim
