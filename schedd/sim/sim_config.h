// One replay from a configuration: trace + fleet + policy + options -> results and metrics. The
// mlsim command line, the validation tests and the benchmarks all go through RunReplay.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "schedd/core/predictor.h"
#include "schedd/core/types.h"
#include "schedd/policy/policy_loader.h"
#include "schedd/sim/fleet.h"
#include "schedd/sim/metrics.h"
#include "schedd/sim/report.h"
#include "schedd/sim/simulator.h"
#include "schedd/sim/trace.h"

namespace mlsched::sim {

/// Everything the command line can set. The settings a policy file's [simulation] table may also
/// give (policy::SimulationSettings) are optional here: unset = the file's value, else the default
/// in the comment (RunReplay resolves them with WithSimulationSettings).
struct SimConfig {
  std::string trace_path;
  std::string format;             // swf | philly | pollux | alibaba; "" = detect from the file
  std::string policy_path;        // policy file, schedd's format; "" = the core's defaults (FIFO)
  std::string backfill;           // none | easy | conservative; "" = as the policy says
  std::string backfill_order;     // queue | shortest-first; "" = as the policy says
  std::string queue_order;        // fifo | multifactor; "" = as the policy says
  std::string victim_order;       // least-lost-work | youngest-first; "" = as the policy says
  bool keep_plans = false;        // conservative: keep previous plans (pyss); else as the policy
  bool exact_runtimes = false;    // time limit = run time (or the file's exact_runtimes)
  bool predict_runtimes = false;  // time limits the core plans with from users' history (or the file's)
  /// Schedule with the requested times but take start-time estimates from a shadow pass planned
  /// with predicted run times (SimOptions::estimate_predictor); not with predict_runtimes.
  bool estimate_with_predictions = false;
  std::string predictor;                    // user-mean | online-linear; "" = the policy's (user-mean)
  std::optional<int> predict_history;       // run times averaged per user (2)
  std::optional<double> predict_scale;      // prediction = scale x mean (1.0)
  std::string predict_correction;           // incremental | doubling; "" = the policy's (incremental)
  std::string predict_history_by;           // user | request; "" = the policy's (user)
  std::optional<uint64_t> seed;             // seed of spot evictions (1)
  std::optional<core::Duration> cycle_period_s;         // 0: a cycle on events only (0)
  std::optional<core::Duration> checkpoint_interval_s;  // 0: evicted jobs restart (0)
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
  /// Record start-time estimates (SimOptions::estimates); mlsim turns it on with --start-estimates.
  bool estimates = true;
  /// SimOptions::idle_shortcuts (tests and benchmarks turn it off to compare).
  bool idle_shortcuts = true;
  int64_t max_jobs = 0;           // replay only the first N jobs by submit time (0 = all)
  /// Elastic gangs (mlsim --elastic F): every job of n > 1 tasks runs with any size in
  /// [max(1, ceil(n x F)), n] (step 1); 0 = rigid, as traced. In (0, 1].
  double elastic_min_fraction = 0;
  double speedup_exponent = 1.0;       // SimOptions::speedup_exponent (1 = linear speed-up)
  core::Duration boot_delay_s = 120;   // SimOptions::boot_delay_s, 0..kMaxBootDelayS
  bool report_cost = false;            // SimOptions::report_cost (mlsim --cost)
  FaultModel faults;                   // SimOptions::faults (mlsim --node-failures, --bad-nodes, ...)
};

/// Makes every job of the trace with n > 1 tasks elastic over [max(1, ceil(n x min_fraction)), n],
/// step 1 (a job whose range would be one size stays rigid). Throws std::invalid_argument unless
/// 0 < min_fraction <= 1.
void MakeElastic(Trace& trace, double min_fraction);

/// Everything one replay produced.
struct Replay {
  Trace trace;
  Fleet fleet;
  core::PolicySet policy;
  std::map<std::string, double> shares;  // account -> share, from the policy (may be empty)
  std::unique_ptr<core::RuntimePredictor> predictor;
  std::unique_ptr<core::RuntimePredictor> estimate_predictor;  // estimate_with_predictions
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

/// Reads a policy file with schedd's loader (policy::LoadPolicyFile), so that mlsim replays exactly
/// the file schedd runs; "" = the core's defaults. The result is ok(). Throws std::runtime_error
/// listing every error, one "FILE:LINE:COL: message" per line.
policy::PolicyLoadResult ReadPolicy(const std::string& path);

/// `config` with every setting it leaves unset taken from the policy file's [simulation] table,
/// else from the defaults in SimConfig's comments: all of its optionals are set afterwards.
/// Prediction: the command line, then [simulation]'s predict_*, then the file's [prediction]
/// (`prediction`: enabled turns predictions on, history is the default predict_history).
/// Throws std::invalid_argument when the command line names a predictor but nothing predicts.
SimConfig WithSimulationSettings(SimConfig config, const policy::SimulationSettings& file,
                                 const core::PredictionPolicy& prediction = {});

/// `policy` with the command line's overrides (--backfill, --queue-order, ...); partition limits
/// are widened to the longest time limit in the trace so that no job is rejected for its limit.
core::PolicySet ApplyOverrides(core::PolicySet policy, const SimConfig& config, const Trace& trace);

/// ReadPolicy(config.policy_path) then ApplyOverrides ([simulation] is RunReplay's to apply).
/// `shares` (optional) receives AccountShares. Throws std::runtime_error on a bad policy.
core::PolicySet LoadPolicy(const SimConfig& config, const Trace& trace,
                           std::map<std::string, double>* shares = nullptr);

/// account -> shares of the policy's [[accounts]]: the fairness report's shares.
std::map<std::string, double> AccountShares(const core::PolicySet& policy);

/// Applies --backfill none|easy|conservative. Throws std::invalid_argument on an unknown mode.
void SetBackfillMode(core::PolicySet& policy, const std::string& mode);
/// Applies --backfill-order queue|shortest-first. Throws std::invalid_argument otherwise.
void SetBackfillOrder(core::PolicySet& policy, const std::string& order);
/// Applies --queue-order fifo|multifactor. Throws std::invalid_argument otherwise.
void SetQueueOrder(core::PolicySet& policy, const std::string& order);
/// Applies --victim-order (the policy's [preemption] victim_order): "least-lost-work"
/// (core::VictimOrder::kLeastLostWork) or "youngest-first" (kYoungestFirst). Throws
/// std::invalid_argument otherwise.
void SetVictimOrder(core::PolicySet& policy, const std::string& order);
/// "least-lost-work" | "youngest-first".
const char* VictimOrderName(core::VictimOrder order);

/// "fifo", "fifo+easy", ... from the policy's settings; with QoS preemption, the victim order is
/// appended (", youngest-first victims").
std::string DescribeSchedulingPolicy(const core::PolicySet& policy);

/// DescribeSchedulingPolicy plus the run-time options (", exact run times", ...).
std::string DescribePolicy(const core::PolicySet& policy, const SimConfig& config);

/// Loads (the policy file first: its [simulation] table may change how the trace is read),
/// simulates and measures. Throws on a bad trace, fleet or policy.
Replay RunReplay(const SimConfig& config);

}  // namespace mlsched::sim
