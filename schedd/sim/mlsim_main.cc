// mlsim: replay a workload trace through the scheduling core and report wait, slowdown,
// utilization and fairness. See schedd/sim/README.md.
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "schedd/sim/plot.h"
#include "schedd/sim/report.h"
#include "schedd/sim/sim_config.h"

int main(int argc, char** argv) {
  using mlsched::sim::SimConfig;
  SimConfig c;
  bool json = false, show_issues = false;
  std::string jobs_csv, plot;
  CLI::App app{"mlsim: replay a workload trace through the mlsched scheduling core"};
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
  app.add_option("--predict-history", c.predict_history, "run times averaged per user")
      ->check(CLI::PositiveNumber);
  app.add_option("--predict-scale", c.predict_scale, "prediction = scale x mean of the history")
      ->check(CLI::PositiveNumber);
  app.add_option("--seed", c.seed, "seed of spot evictions");
  app.add_flag("--json", json, "print JSON instead of a table");
  app.add_option("--jobs-csv", jobs_csv, "write one CSV line per job to this file");
  app.add_option("--plot", plot,
                 "write an SVG of queue length, resources held, utilization and account shares "
                 "over simulated time to this file");
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
  app.add_flag("--show-issues", show_issues, "print every skipped record to stderr");
  CLI11_PARSE(app, argc, argv);

  try {
    mlsched::sim::Replay r = mlsched::sim::RunReplay(c);
    if (r.trace.skipped > 0) {
      std::cerr << "mlsim: skipped " << r.trace.skipped << " malformed record(s)";
      if (!r.trace.issues.empty()) std::cerr << ", first: " << r.trace.issues.front();
      std::cerr << "\n";
      if (show_issues) {
        for (const auto& issue : r.trace.issues) std::cerr << issue << "\n";
      }
    }
    if (json) {
      mlsched::sim::WriteJson(std::cout, r.info, r.result, r.metrics);
    } else {
      mlsched::sim::WriteTable(std::cout, r.info, r.result, r.metrics);
    }
    if (!jobs_csv.empty()) {
      std::ofstream out(jobs_csv, std::ios::binary);
      if (!out) {
        std::cerr << "mlsim: cannot write " << jobs_csv << "\n";
        return 1;
      }
      mlsched::sim::WriteJobsCsv(out, r.result);
      if (!out.flush()) {
        std::cerr << "mlsim: write failed: " << jobs_csv << "\n";
        return 1;
      }
    }
    if (!plot.empty()) {
      std::ofstream out(plot, std::ios::binary);
      if (!out) {
        std::cerr << "mlsim: cannot write " << plot << "\n";
        return 1;
      }
      mlsched::sim::WriteSvgPlot(out, mlsched::sim::BuildPlotSeries(r.result),
                                 "mlsim: " + r.info.trace + " | " + r.info.policy);
      if (!out.flush()) {
        std::cerr << "mlsim: write failed: " << plot << "\n";
        return 1;
      }
    }
  } catch (const std::exception& e) {
    std::cerr << "mlsim: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
