// Scheduling-quality metrics of a replay.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "schedd/sim/simulator.h"

namespace mlsched::sim {

/// One account's usage against its share.
struct AccountUsage {
  std::string account;
  double usage_share = 0;  // fraction of all resource-seconds used by the account's jobs
  double share = 0;        // normalized share it is entitled to
  int64_t jobs = 0;
  double mean_wait_s = 0;
};

/// Summary over all finished jobs (infeasible and never-started jobs are counted apart).
struct Metrics {
  int64_t jobs = 0;            // jobs in the trace
  int64_t finished = 0;        // jobs that ran to completion (or to their time limit)
  int64_t infeasible = 0;      // never admitted: no node set could hold them
  int64_t unfinished = 0;      // admitted but never finished
  double mean_wait_s = 0, median_wait_s = 0, p95_wait_s = 0, max_wait_s = 0;
  /// Response (completion) time = end - submit, seconds, over finished jobs; requeued jobs keep
  /// their submit time, so it includes every wait and every lost attempt.
  double mean_response_s = 0, p95_response_s = 0;
  /// Mean of max(1, (wait + run) / max(run, tau)), tau = 10 s (Feitelson et al., "Theory and
  /// Practice in Parallel Job Scheduling", 1997). wait = first start - submit; run = recorded
  /// run time; evicted jobs count their end - submit as wait + run.
  double mean_bounded_slowdown = 0;
  double max_bounded_slowdown = 0;  // the largest of the same, over finished jobs
  /// Resource-seconds held by jobs / (capacity x makespan), resource = GPUs or processors; with
  /// provisioning, / the resource-seconds the fleet offered (SimResult::capacity_s).
  double utilization = 0;
  int64_t makespan_s = 0;      // last end - first submission
  int64_t cycles = 0;
  int64_t evictions = 0, preemptions = 0, fallbacks = 0;
  double lost_resource_hours = 0;  // size x seconds of work lost / 3600, both causes
  double lost_preemption_resource_hours = 0;  // the part lost to QoS preemptions
  double lost_eviction_resource_hours = 0;    // the part lost to spot evictions
  /// Elastic gangs: jobs with a range of sizes, resizes, and the size x restart-cost hours spent
  /// restarting after them (part of lost_resource_hours; every part counts an attempt at the size
  /// it ran with).
  int64_t elastic_jobs = 0, resizes = 0;
  double lost_resize_resource_hours = 0;
  /// Node failures (SimOptions::faults): failures drawn, attempts hung, nodes drained for repair,
  /// attempts ended by failures, and the size x hours they lost (work since the last checkpoint
  /// plus the time hung attempts held their nodes; part of lost_resource_hours).
  bool faults = false;
  int64_t node_failures = 0, hangs = 0, health_drains = 0, failed_attempts = 0;
  double lost_failure_resource_hours = 0;
  /// Cost of the fleet (SimResult::pools; [pricing.POOL] units), and the provisioned node-hours.
  double cost = 0, provisioned_node_hours = 0;
  std::vector<AccountUsage> accounts;  // sorted by account name
  /// Jain's fairness index over accounts of (usage share / share) (Jain, Chiu & Hawe, DEC-TR-301,
  /// 1984): 1 = every account got exactly its share; 1/n = one account got everything.
  double jain_fairness = 0;
  std::map<std::string, double> p95_wait_by_accelerator;  // accelerator label -> p95 wait (s)
};

/// Nearest-rank percentile (p in [0, 100]) of `values` (sorted in place); 0 when empty.
double Percentile(std::vector<double>& values, double p);

/// Computes the metrics. `shares` maps account -> raw share (normalized over the accounts that
/// appear); accounts absent from it, or all accounts when it is empty, get equal shares.
Metrics ComputeMetrics(const SimResult& result, const std::map<std::string, double>& shares = {});

/// Resource-seconds `job` held: JobOutcome::resource_s when tracked, else size x busy_s.
double ResourceSeconds(const JobOutcome& job);

/// max(1, (wait + run) / max(run, tau)).
double BoundedSlowdown(double wait_s, double run_s, double tau_s = 10.0);

}  // namespace mlsched::sim
