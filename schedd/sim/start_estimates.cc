#include "schedd/sim/start_estimates.h"

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "schedd/sim/metrics.h"

namespace mlsched::sim {
namespace {

/// Summarizes signed errors (seconds) of `pending` sampled jobs.
EstimateAccuracy Summarize(std::vector<double> errors, int64_t pending) {
  EstimateAccuracy a;
  a.pending = pending;
  a.estimated = static_cast<int64_t>(errors.size());
  if (errors.empty()) return a;
  std::vector<double> abs;
  abs.reserve(errors.size());
  double sum = 0;
  int64_t in15 = 0, in60 = 0, early = 0;
  for (double e : errors) {
    abs.push_back(std::fabs(e));
    sum += std::fabs(e);
    in15 += std::fabs(e) <= 900 ? 1 : 0;
    in60 += std::fabs(e) <= 3600 ? 1 : 0;
    early += e < 0 ? 1 : 0;
  }
  const auto n = static_cast<double>(errors.size());
  a.mean_abs_error_s = sum / n;
  a.median_abs_error_s = Percentile(abs, 50);
  a.p90_abs_error_s = Percentile(abs, 90);
  a.median_error_s = Percentile(errors, 50);
  a.within_15m = static_cast<double>(in15) / n;
  a.within_1h = static_cast<double>(in60) / n;
  a.started_early = static_cast<double>(early) / n;
  return a;
}

}  // namespace

StartEstimateMetrics ComputeStartEstimates(const SimResult& result, core::Duration recheck_s) {
  std::vector<double> at_submit, later;
  int64_t pending_submit = 0, pending_later = 0;
  for (const JobOutcome& j : result.jobs) {
    if (!j.infeasible.empty()) continue;
    const bool started = j.first_start >= 0;
    if (started && j.first_start <= j.submit) continue;
    ++pending_submit;
    if (started && j.estimate_at_submit >= 0) {
      at_submit.push_back(static_cast<double>(j.first_start - j.estimate_at_submit));
    }
    if (started && j.first_start <= j.submit + recheck_s) continue;
    ++pending_later;
    if (started && j.estimate_recheck >= 0) {
      later.push_back(static_cast<double>(j.first_start - j.estimate_recheck));
    }
  }
  StartEstimateMetrics m;
  m.recheck_s = recheck_s;
  m.at_submit = Summarize(std::move(at_submit), pending_submit);
  m.after_recheck = Summarize(std::move(later), pending_later);
  return m;
}

void WriteStartEstimateTable(std::ostream& out, const StartEstimateMetrics& m) {
  out << "\nstart-time estimates (planned start vs actual; error = actual - planned)\n"
         "sampled         pending  estimated  median |err| (s)  mean |err| (s)  "
         "median err (s)  within 15m  within 1h\n";
  auto row = [&](const std::string& name, const EstimateAccuracy& a) {
    char buf[240];
    std::snprintf(buf, sizeof buf, "%-14s %8lld %10lld %17.1f %15.1f %15.1f %11.4f %10.4f\n",
                  name.c_str(), static_cast<long long>(a.pending),
                  static_cast<long long>(a.estimated), a.median_abs_error_s, a.mean_abs_error_s,
                  a.median_error_s, a.within_15m, a.within_1h);
    out << buf;
  };
  row("at submit", m.at_submit);
  row("after " + std::to_string(m.recheck_s) + " s", m.after_recheck);
}

}  // namespace mlsched::sim
