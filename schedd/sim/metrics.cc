#include "schedd/sim/metrics.h"

#include <algorithm>
#include <cmath>

namespace mlsched::sim {

double Percentile(std::vector<double>& values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  const size_t index = rank < 1 ? 0 : static_cast<size_t>(rank) - 1;
  return values[std::min(index, values.size() - 1)];
}

double BoundedSlowdown(double wait_s, double run_s, double tau_s) {
  return std::max(1.0, (wait_s + run_s) / std::max(run_s, tau_s));
}

double ResourceSeconds(const JobOutcome& job) {
  return job.resource_s >= 0 ? job.resource_s : static_cast<double>(job.size) * static_cast<double>(job.busy_s);
}

namespace {

void FillAccounts(const SimResult& result, const std::map<std::string, double>& shares,
                  Metrics& m) {
  struct Acc { double used = 0, wait = 0; int64_t jobs = 0; };
  std::map<std::string, Acc> acc;
  double total_used = 0;
  for (const auto& j : result.jobs) {
    if (!j.infeasible.empty()) continue;
    Acc& a = acc[j.account];
    const double used = ResourceSeconds(j);
    a.used += used;
    total_used += used;
    if (j.first_start >= 0) {
      a.wait += static_cast<double>(j.first_start - j.submit);
      ++a.jobs;
    }
  }
  double share_total = 0;
  for (const auto& [name, a] : acc) {
    auto it = shares.find(name);
    share_total += it != shares.end() ? it->second : (shares.empty() ? 1.0 : 0.0);
  }
  double sum = 0, sum_sq = 0;
  int64_t n = 0;
  for (const auto& [name, a] : acc) {
    AccountUsage u;
    u.account = name;
    u.jobs = a.jobs;
    u.mean_wait_s = a.jobs > 0 ? a.wait / static_cast<double>(a.jobs) : 0;
    u.usage_share = total_used > 0 ? a.used / total_used : 0;
    auto it = shares.find(name);
    const double raw = it != shares.end() ? it->second : (shares.empty() ? 1.0 : 0.0);
    u.share = share_total > 0 ? raw / share_total : 0;
    if (u.share > 0) {
      const double x = u.usage_share / u.share;
      sum += x;
      sum_sq += x * x;
      ++n;
    }
    m.accounts.push_back(u);
  }
  m.jain_fairness = sum_sq > 0 ? (sum * sum) / (static_cast<double>(n) * sum_sq) : 0;
}

}  // namespace

Metrics ComputeMetrics(const SimResult& result, const std::map<std::string, double>& shares) {
  Metrics m;
  m.jobs = static_cast<int64_t>(result.jobs.size());
  m.cycles = result.cycles;
  m.evictions = result.evictions;
  m.preemptions = result.preemptions;
  m.fallbacks = result.fallbacks;
  std::vector<double> waits, responses;
  std::map<std::string, std::vector<double>> by_accel;
  double slowdown_sum = 0, held = 0;
  int64_t first_submit = INT64_MAX, last_end = 0;
  for (const auto& j : result.jobs) {
    if (!j.infeasible.empty()) {
      ++m.infeasible;
      continue;
    }
    first_submit = std::min(first_submit, j.submit);
    m.lost_resource_hours += j.lost_resource_hours;
    m.lost_preemption_resource_hours +=
        j.lost_preemption_resource_hours >= 0
            ? j.lost_preemption_resource_hours
            : static_cast<double>(j.size) * static_cast<double>(j.lost_preemption_s) / 3600.0;
    m.lost_eviction_resource_hours +=
        j.lost_eviction_resource_hours >= 0
            ? j.lost_eviction_resource_hours
            : static_cast<double>(j.size) * static_cast<double>(j.lost_eviction_s) / 3600.0;
    m.lost_resize_resource_hours += j.lost_resize_resource_hours;
    m.lost_failure_resource_hours += j.lost_failure_resource_hours;
    m.failed_attempts += j.failures;
    held += ResourceSeconds(j);
    if (j.end < 0) {
      ++m.unfinished;
      continue;
    }
    ++m.finished;
    last_end = std::max(last_end, j.end);
    const double wait = static_cast<double>(j.first_start - j.submit);
    const double run = static_cast<double>(j.run_time);
    const double response = static_cast<double>(j.end - j.submit);
    waits.push_back(wait);
    responses.push_back(response);
    by_accel[j.accelerator].push_back(wait);
    const double slowdown = BoundedSlowdown(response - run, run);
    slowdown_sum += slowdown;
    m.max_bounded_slowdown = std::max(m.max_bounded_slowdown, slowdown);
  }
  if (m.finished > 0) {
    double total = 0;
    for (double w : waits) total += w;
    m.mean_wait_s = total / static_cast<double>(m.finished);
    m.mean_bounded_slowdown = slowdown_sum / static_cast<double>(m.finished);
    m.median_wait_s = Percentile(waits, 50);
    m.p95_wait_s = Percentile(waits, 95);
    m.max_wait_s = waits.back();
    double response_total = 0;
    for (double r : responses) response_total += r;
    m.mean_response_s = response_total / static_cast<double>(m.finished);
    m.p95_response_s = Percentile(responses, 95);
    m.makespan_s = last_end - first_submit;
  }
  for (auto& [accel, w] : by_accel) m.p95_wait_by_accelerator[accel] = Percentile(w, 95);
  if (result.capacity_s > 0) {
    m.utilization = held / result.capacity_s;
  } else if (m.makespan_s > 0 && result.capacity > 0) {
    m.utilization = held / (static_cast<double>(result.capacity) * static_cast<double>(m.makespan_s));
  }
  m.elastic_jobs = result.elastic_jobs;
  m.node_failures = result.node_failures;
  m.hangs = result.hangs;
  m.health_drains = result.health_drains;
  m.faults = result.node_failures > 0;
  m.resizes = result.resizes;
  for (const auto& [pool, usage] : result.pools) {
    m.cost += usage.cost;
    if (usage.static_nodes == 0) m.provisioned_node_hours += usage.node_hours;
  }
  FillAccounts(result, shares, m);
  return m;
}

}  // namespace mlsched::sim
