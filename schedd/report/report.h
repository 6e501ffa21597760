// Accounting reports over schedd's records (like Slurm's sreport/sacct): per account and user,
// usage by resource, cost, requeues and lost work; queue waits per partition and accelerator.
// Pure functions over rows read from the store; the mlreport tool only reads and prints.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "schedd/server/store.h"

namespace mlsched::report {

/// Prices per resource-hour by pool ("on-demand", "spot", "reserved"), from the policy file's
/// [pricing.POOL] tables: cpu_hour = price of one core-hour; gpu_hour.TYPE = price of one GPU-hour.
struct Pricing {
  struct PoolPrices {
    double cpu_hour = 0;
    std::map<std::string, double> gpu_hour;  // by GPU type
  };
  std::map<std::string, PoolPrices> pools;
};

/// Reads [pricing] from a policy TOML file. Errors come back as "FILE:LINE:COL: message".
std::optional<Pricing> LoadPricing(const std::string& path, std::string* error);

/// Usage of one (account, user) over the period. Hours are resource-hours clipped to the period.
struct UsageRow {
  std::string account, user;
  int64_t jobs = 0;                          // jobs with an attempt overlapping the period
  double cpu_hours = 0;                      // core-hours
  std::map<std::string, double> gpu_hours;   // GPU-hours by type
  double cost = 0;                           // from Pricing
  int64_t preemptions = 0;                   // attempts ended by preemption (exit 75 / QoS)
  int64_t evictions = 0;                     // attempts ended by a spot eviction
  int64_t node_failures = 0;                 // attempts ended by a node failure
  double lost_cpu_hours = 0;                 // core-hours of work lost to requeues
  double lost_gpu_hours = 0;                 // GPU-hours of work lost to requeues
  int64_t fallbacks = 0;                     // starts on a lower accelerator tier
  // Efficiency (accounting, issue 34): what the attempts used, from their agents' cgroup and NVML
  // samples (AttemptRow), each attempt's figures scaled to the part of it inside the period.
  double cpu_used_hours = 0;                 // CPU-hours the tasks' processes used (cgroups)
  double gpu_busy_hours = 0;                 // GPU-hours weighted by NVML utilization
  double gpu_idle_hours = 0;                 // GPU-hours sampled but not busy (the waste)
  // Spot vs on-demand (by the pool of each attempt's rank-0 node: on-demand, spot, reserved):
  // GPU-hours allocated and GPU-hours of work lost to requeues.
  std::map<std::string, double> pool_gpu_hours;
  std::map<std::string, double> pool_lost_gpu_hours;
};

/// Queue wait of jobs whose first start falls in the period.
struct WaitRow {
  std::string partition, accelerator;        // accelerator: GPU type, or "cpu"
  int64_t jobs = 0;
  double mean_wait_s = 0, p95_wait_s = 0;
  double p50_wait_s = 0, p90_wait_s = 0;     // nearest-rank percentiles
};

struct Report {
  int64_t start = 0, end = 0;
  std::vector<UsageRow> usage;               // sorted by (account, user)
  std::vector<WaitRow> waits;                // sorted by (partition, accelerator)
  /// The top wasters: usage rows with idle GPU-hours, most idle first (at most `top` of Build).
  std::vector<UsageRow> top_idle;
};

/// Builds the report for [start, end). `now` closes attempts that are still running; `top` bounds
/// Report::top_idle.
Report Build(const std::vector<server::JobRow>& jobs, const std::vector<server::AttemptRow>& attempts,
             const Pricing& pricing, int64_t start, int64_t end, int64_t now, size_t top = 10);

/// Output formats with stable columns.
std::string FormatTable(const Report& r);
std::string FormatCsv(const Report& r);
std::string FormatJson(const Report& r);

}  // namespace mlsched::report
