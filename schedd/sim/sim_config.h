// One replay from a configuration: trace + fleet + policy + options -> results and metrics. The
// mlsim command line, the validation tests and the benchmarks all go through RunReplay.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "schedd/core/types.h"
#include "schedd/sim/fleet.h"
#include "schedd/sim/metrics.h"
#include "schedd/sim/predictor.h"
#include "schedd/sim/report.h"
#include "schedd/sim/simulator.h"
#include "schedd/sim/trace.h"

namespace mlsched::sim {

/// Everything the command line can set.
struct SimConfig {
  std::string trace_path;
  std::string format;             // swf | philly | pollux | alibaba; "" = detect from the file
  std::string policy_path;        // TOML policy file; "" = the core's defaults (FIFO)
  std::string backfill;           // none | easy | conservative; "" = as the policy says
  std::string backfill_order;     // queue | shortest-first; "" = as the policy says
  std::string queue_order;        // fifo | multifactor; "" = as the policy says
  std::string victim_order;       // least-lost-work | youngest-first; "" = as the policy says
  bool keep_plans = false;        // conservative: keep previous plans (pyss); else as the policy
  bool exact_runtimes = false;    // time limit = run time
  bool predict_runtimes = false;  // time limits the core plans with from users' history
  int predict_history = 2;        // run times averaged per user
  double predict_scale = 1.0;     // prediction = scale x mean
  uint64_t seed = 1;
  core::Duration cycle_period_s = 0;
  core::Duration checkpoint_interval_s = 0;
  bool strict = false;            // a malformed record is fatal
  // Fleet: a cluster file, or uniform nodes, or (SWF, Alibaba) what the trace implies.
  std::string cluster_path;
  int nodes = 0, cpus_per_node = 32, gpus_per_node = 0;
  int64_t memory_gib_per_node = 256;
  std::string gpu_type = "gpu";
  int domain_size = 0;
  std::string node_list;          // Alibaba node list; "" = beside the pod list
  std::string app_runtimes_path;  // Pollux: TOML table application = seconds
  int64_t processors = 0;         // SWF machine size override
  bool record_series = false;
  int64_t max_jobs = 0;           // replay only the first N jobs by submit time (0 = all)
};

/// Everything one replay produced.
struct Replay {
  Trace trace;
  Fleet fleet;
  core::PolicySet policy;
  std::map<std::string, double> shares;  // account -> share, from the policy (may be empty)
  std::unique_ptr<RuntimePredictor> predictor;
  SimResult result;
  Metrics metrics;
  RunInfo info;
};

/// "swf" for *.swf[.gz]; for CSVs, the header decides (philly, pollux or alibaba). Throws
/// TraceError when the format cannot be told.
std::string DetectFormat(const std::string& path);

/// Reads the trace named by config (format detected when empty). Throws TraceError.
Trace LoadTrace(const SimConfig& config);

/// The fleet: --cluster file, else --nodes uniform nodes, else the trace's own nodes, else (GPU
/// traces) 16 nodes x 4 GPUs, the Pollux experiments' cluster. Throws std::runtime_error.
Fleet BuildFleet(const SimConfig& config, const Trace& trace);

/// The policy file (if any) with the --backfill override; partition limits are widened to the
/// longest time limit in the trace so that no job is rejected for its limit. Throws
/// std::runtime_error naming the file and key on a bad policy.
core::PolicySet LoadPolicy(const SimConfig& config, const Trace& trace,
                           std::map<std::string, double>* shares = nullptr);

/// A short description of the scheduling policy ("fifo", "fifo+easy", ...).
std::string DescribePolicy(const core::PolicySet& policy, const SimConfig& config);

/// Loads, simulates and measures.
Replay RunReplay(const SimConfig& config);

}  // namespace mlsched::sim
