// mlsim: replay a workload trace through the scheduling core and report wait, slowdown,
// utilization and fairness. See schedd/sim/README.md.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>

#include <CLI/CLI.hpp>

#include "schedd/sim/compare.h"
#include "schedd/sim/plot.h"
#include "schedd/sim/report.h"
#include "schedd/sim/sim_config.h"
#include "schedd/sim/start_estimates.h"

namespace {

/// What to print beside the replay.
struct Outputs {
  bool json = false, show_issues = false, start_estimates = false;
  std::string jobs_csv, plot, compare;
};

/// Writes `path` with `write`; false (after a message naming the file) when it fails.
bool WriteFile(const std::string& path, const std::function<void(std::ostream&)>& write) {
  std::ofstream out(path, std::ios::binary);
  if (!out) {
    std::cerr << "mlsim: cannot write " << path << "\n";
    return false;
  }
  write(out);
  if (!out.flush()) {
    std::cerr << "mlsim: write failed: " << path << "\n";
    return false;
  }
  return true;
}

/// mlsim --compare: one replay per policy file, one table (or JSON) and optionally one SVG.
int RunCompareMode(const mlsched::sim::SimConfig& c, const Outputs& o) {
  using namespace mlsched::sim;
  if (!c.policy_path.empty() || !o.jobs_csv.empty() || o.start_estimates) {
    std::cerr << "mlsim: --compare takes the policy files itself; it cannot be combined with "
                 "--policy, --jobs-csv or --start-estimates\n";
    return 2;
  }
  SimConfig config = c;
  config.estimates = false;  // not reported by --compare
  const std::vector<CompareRow> rows = RunCompare(config, SplitPolicyList(o.compare));
  const std::string trace = std::filesystem::path(c.trace_path).filename().string();
  if (o.json) {
    WriteCompareJson(std::cout, trace, rows);
  } else {
    WriteCompareTable(std::cout, trace, rows);
  }
  if (!o.plot.empty() &&
      !WriteFile(o.plot, [&](std::ostream& out) { WriteCompareSvg(out, "mlsim compare: " + trace, rows); })) {
    return 1;
  }
  return 0;
}

/// One replay: its report, and the per-job CSV and plot when asked for.
int RunOne(const mlsched::sim::SimConfig& c, const Outputs& o) {
  using namespace mlsched::sim;
  SimConfig config = c;
  config.estimates = o.start_estimates;  // without them, passes that only re-plan can be skipped
  Replay r = RunReplay(config);
  if (r.trace.skipped > 0) {
    std::cerr << "mlsim: skipped " << r.trace.skipped << " malformed record(s)";
    if (!r.trace.issues.empty()) std::cerr << ", first: " << r.trace.issues.front();
    std::cerr << "\n";
    if (o.show_issues) {
      for (const auto& issue : r.trace.issues) std::cerr << issue << "\n";
    }
  }
  StartEstimateMetrics estimates;
  if (o.start_estimates) estimates = ComputeStartEstimates(r.result);
  const StartEstimateMetrics* e = o.start_estimates ? &estimates : nullptr;
  if (o.json) {
    WriteJson(std::cout, r.info, r.result, r.metrics, e);
  } else {
    WriteTable(std::cout, r.info, r.result, r.metrics, e);
  }
  if (!o.jobs_csv.empty() &&
      !WriteFile(o.jobs_csv, [&](std::ostream& out) { WriteJobsCsv(out, r.result); })) {
    return 1;
  }
  if (!o.plot.empty() && !WriteFile(o.plot, [&](std::ostream& out) {
        WriteSvgPlot(out, BuildPlotSeries(r.result), "mlsim: " + r.info.trace + " | " + r.info.policy);
      })) {
    return 1;
  }
  return 0;
}

/// Declares the elastic-gang and provisioning options (schedd/sim/README.md, "Elastic gangs and
/// provisioning") on `app`, filling `c`.
void AddCapacityOptions(CLI::App& app, mlsched::sim::SimConfig& c) {
  app.add_option("--elastic", c.elastic_min_fraction,
                 "make every multi-task gang elastic: sizes max(1, ceil(n x F))..n (F in (0, 1]); "
                 "shrinks at start and after evictions, grows at checkpoints ([elastic] policy)")
      ->check([](const std::string& text) -> std::string {
        char* end = nullptr;
        const double f = std::strtod(text.c_str(), &end);
        if (end == text.c_str() || *end != '\0' || !(f > 0 && f <= 1)) {
          return "must be a fraction in (0, 1] (the smallest size over the traced one), got '" + text + "'";
        }
        return "";
      });
  app.add_option("--speedup-exponent", c.speedup_exponent,
                 "elastic speed-up at k of n tasks: (k / n)^A of the traced rate (1 = linear)")
      ->check(CLI::Range(mlsched::sim::kMinSpeedupExponent, 1.0));
  app.add_option("--boot-delay", c.boot_delay_s,
                 "provisioning: seconds from a resume request until the node joins (default 120)")
      ->check(CLI::Range(int64_t{0}, mlsched::sim::kMaxBootDelayS));
  app.add_flag("--cost", c.report_cost,
               "report node-hours and cost per pool (the policy's [pricing.POOL]) for a fixed fleet "
               "too (always reported with [provisioning.POOL])");
}

/// Declares the node-failure options (schedd/sim/README.md, "Node failures and the watchdog").
void AddFaultOptions(CLI::App& app, mlsched::sim::FaultModel& f) {
  app.add_option("--node-failures", f.rate_per_node_hour, "failures per node-hour of an ordinary node (default 0)")
      ->check(CLI::Range(0.0, mlsched::sim::kMaxEvictionRatePerHour));
  app.add_option("--bad-nodes", f.bad_fraction, "share of the nodes that are bad (fail at --bad-node-failures)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--bad-node-failures", f.bad_rate_per_node_hour, "failures per node-hour of a bad node")
      ->check(CLI::Range(0.0, mlsched::sim::kMaxEvictionRatePerHour));
  app.add_option("--hang-fraction", f.hang_fraction, "share of failures that hang the gang instead of crashing it")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--reboot", f.reboot_s, "seconds a crashed node is away (back unrepaired; default 600)")
      ->check(CLI::Range(int64_t{1}, int64_t{30 * 86400}));
  app.add_option("--drain-after", f.drain_after,
                 "health checks and the gang watchdog: drain and repair a node after N failures within "
                 "--suspect-window, find hangs after --hang-detect (0, the default: blind retry)")
      ->check(CLI::Range(0, 1000));
  app.add_option("--suspect-window", f.suspect_window_s, "seconds over which --drain-after counts (default 86400)")
      ->check(CLI::Range(int64_t{1}, int64_t{365 * 86400}));
  app.add_option("--hang-detect", f.hang_detect_s, "seconds from a hang to its requeue with the watchdog (default 1830)")
      ->check(CLI::Range(int64_t{1}, int64_t{30 * 86400}));
  app.add_option("--repair", f.repair_s, "seconds a drained node is away for repair (default 259200)")
      ->check(CLI::Range(int64_t{1}, int64_t{365 * 86400}));
}

/// Declares mlsim's options on `app`, filling `c` (the replay) and `o` (the outputs).
void AddOptions(CLI::App& app, mlsched::sim::SimConfig& c, Outputs& o) {
  app.add_option("--trace", c.trace_path, "trace file (plain or .gz)")->required();
  app.add_option("--format", c.format, "trace format (default: detected)")
      ->check(CLI::IsMember({"swf", "philly", "pollux", "alibaba"}));
  app.add_option("--policy", c.policy_path,
                 "policy file, the same as schedd's --policy (policies/README.md); its [simulation] "
                 "table holds mlsim-only settings, which the options below override")
      ->check(CLI::ExistingFile);
  app.add_option("--backfill", c.backfill, "backfill mode, overriding the policy")
      ->check(CLI::IsMember({"none", "easy", "conservative"}));
  app.add_option("--backfill-order", c.backfill_order, "order of backfill candidates")
      ->check(CLI::IsMember({"queue", "shortest-first"}));
  app.add_option("--queue-order", c.queue_order, "queue order: FCFS or multifactor priority")
      ->check(CLI::IsMember({"fifo", "multifactor"}));
  app.add_option("--victim-order", c.victim_order,
                 "QoS preemption victims: least work lost since their last checkpoint first, or "
                 "most recently started first (overrides the policy's victim_order)")
      ->check(CLI::IsMember({"least-lost-work", "youngest-first"}));
  app.add_flag("--keep-plans", c.keep_plans,
               "conservative backfill: keep planned starts between cycles, moving them only "
               "earlier (pyss)");
  app.add_flag("--exact-runtimes", c.exact_runtimes, "time limit = actual run time");
  app.add_flag("--predict-runtimes", c.predict_runtimes,
               "plan with run times predicted from each user's last two jobs (Tsafrir 2007)");
  app.add_option("--predictor", c.predictor,
                 "run-time predictor: user-mean (Tsafrir 2007) or online-linear (a linear model of log "
                 "run time learned online, after Gaussier et al. SC'15); default: the policy's [prediction]")
      ->check(CLI::IsMember({"user-mean", "online-linear"}));
  app.add_option("--predict-history", c.predict_history, "run times averaged per user")
      ->check(CLI::PositiveNumber);
  app.add_option("--predict-scale", c.predict_scale, "prediction = scale x mean of the history")
      ->check(CLI::PositiveNumber);
  app.add_option("--predict-correction", c.predict_correction,
                 "when a running job outlives its prediction: incremental (+1 min, 5 min, 15 min, ...; Tsafrir "
                 "2007) or doubling (twice the elapsed time); default: the policy's [prediction]")
      ->check(CLI::IsMember({"incremental", "doubling"}));
  app.add_option("--predict-history-by", c.predict_history_by,
                 "which of a user's past jobs a prediction averages: user (all of them) or request (those with "
                 "the same request and time limit when there are any; Smith, Foster & Taylor 1998); default: the "
                 "policy's [prediction]")
      ->check(CLI::IsMember({"user", "request"}));
  app.add_option("--seed", c.seed, "seed of spot evictions");
  app.add_flag("--json", o.json, "print JSON instead of a table");
  app.add_option("--jobs-csv", o.jobs_csv, "write one CSV line per job to this file");
  app.add_option("--plot", o.plot,
                 "write an SVG of queue length, resources held, utilization and account shares "
                 "over simulated time to this file (with --compare: the policies' wait distributions)");
  app.add_option("--cluster", c.cluster_path, "cluster description (TOML)")
      ->check(CLI::ExistingFile);
  app.add_option("--nodes", c.nodes, "uniform fleet: number of nodes")->check(CLI::PositiveNumber);
  app.add_option("--cpus-per-node", c.cpus_per_node, "uniform fleet: cores per node")
      ->check(CLI::PositiveNumber);
  app.add_option("--gpus-per-node", c.gpus_per_node, "uniform fleet: GPUs per node")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--memory-gib-per-node", c.memory_gib_per_node, "uniform fleet: memory")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--gpu-type", c.gpu_type, "uniform fleet: GPU model name");
  app.add_option("--domain-size", c.domain_size, "uniform fleet: nodes per topology domain")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--node-list", c.node_list, "Alibaba node list (default: beside the pod list)")
      ->check(CLI::ExistingFile);
  app.add_option("--app-runtimes", c.app_runtimes_path,
                 "Pollux: TOML table of run times (s) per application")
      ->check(CLI::ExistingFile);
  app.add_option("--processors", c.processors, "SWF: machine size (default: header MaxProcs)")
      ->check(CLI::PositiveNumber);
  app.add_option("--cycle-period", c.cycle_period_s,
                 "also run a scheduling cycle every S seconds while jobs pend (0: events only)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--checkpoint-interval", c.checkpoint_interval_s,
                 "evicted or preempted jobs resume from a checkpoint taken every S seconds of "
                 "their run (0: restart)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-jobs", c.max_jobs, "replay only the first N jobs by submit time")
      ->check(CLI::PositiveNumber);
  app.add_flag("--strict", c.strict, "stop at the first malformed trace record");
  app.add_flag("--show-issues", o.show_issues, "print every skipped record to stderr");
  app.add_flag("--start-estimates", o.start_estimates,
               "report how far the start times the core planned for pending jobs (at submission "
               "and 1 h later) were from their actual starts; meaningful with --backfill "
               "conservative, which plans every pending job");
  app.add_flag("--estimate-with-predictions", c.estimate_with_predictions,
               "schedule with the requested times (Slurm's way) but estimate start times with a "
               "shadow pass that plans with predicted run times (--predict-runtimes plans with them "
               "outright and makes this moot)");
  AddCapacityOptions(app, c);
  AddFaultOptions(app, c.faults);
  app.add_option("--compare", o.compare,
                 "POLICY1.toml,POLICY2.toml,...: replay each policy file on the trace with the "
                 "other options and print one table (--json: one array); --plot then writes their "
                 "wait distributions");
}

}  // namespace

int main(int argc, char** argv) {
  mlsched::sim::SimConfig c;
  Outputs o;
  CLI::App app{"mlsim: replay a workload trace through the mlsched scheduling core"};
  AddOptions(app, c, o);
  CLI11_PARSE(app, argc, argv);

  try {
    return o.compare.empty() ? RunOne(c, o) : RunCompareMode(c, o);
  } catch (const std::exception& e) {
    std::cerr << "mlsim: " << e.what() << "\n";
    return 1;
  }
}
