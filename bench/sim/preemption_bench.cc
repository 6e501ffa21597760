// Checkpoint-aware QoS preemption vs. a youngest-first baseline on a fleet with spot nodes
// (schedd/sim/PREEMPTION.md). For each spot eviction rate and seed, one seeded workload
// (schedd/sim/preemption_workload.h) is replayed through the core twice, with
// core::VictimOrder::kLeastLostWork and kYoungestFirst, same fleet, same evictions; the figures
// are averaged over the seeds.
//
//   preemption_bench [--jobs N] [--load L] [--seeds 1,2,3] [--rates 0,0.05,0.2]
//                    [--policy FILE.toml] [--cluster FILE.toml] [--per-seed]
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "schedd/core/types.h"
#include "schedd/sim/fleet.h"
#include "schedd/sim/metrics.h"
#include "schedd/sim/preemption_workload.h"
#include "schedd/sim/sim_config.h"
#include "schedd/sim/simulator.h"

namespace {

using mlsched::core::Duration;
using mlsched::core::VictimOrder;
namespace sim = mlsched::sim;

/// Command line.
struct Args {
  int jobs = 1200;
  double load = 0.95;
  std::vector<uint64_t> seeds = {1, 2, 3};
  std::vector<double> rates = {0.0, 0.05, 0.2};  // spot evictions per node-hour
  std::string policy = std::string(MLSCHED_SIM_POLICY_DIR) + "/qos-preempt.toml";
  std::string cluster = std::string(MLSCHED_SIM_CLUSTER_DIR) + "/spot-gpu-fleet.toml";
  bool per_seed = false;
};

std::vector<std::string> SplitCommas(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) out.push_back(item);
  return out;
}

Args Parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(flag + ": missing value");
      return argv[++i];
    };
    if (flag == "--jobs") {
      a.jobs = std::stoi(value());
    } else if (flag == "--load") {
      a.load = std::stod(value());
    } else if (flag == "--seeds") {
      a.seeds.clear();
      for (const auto& s : SplitCommas(value())) a.seeds.push_back(std::stoull(s));
    } else if (flag == "--rates") {
      a.rates.clear();
      for (const auto& s : SplitCommas(value())) a.rates.push_back(std::stod(s));
    } else if (flag == "--policy") {
      a.policy = value();
    } else if (flag == "--cluster") {
      a.cluster = value();
    } else if (flag == "--per-seed") {
      a.per_seed = true;
    } else {
      throw std::invalid_argument("unknown argument '" + flag +
                                  "' (see the usage at the top of preemption_bench.cc)");
    }
  }
  if (a.jobs < 1 || a.load <= 0 || a.seeds.empty() || a.rates.empty()) {
    throw std::invalid_argument("want --jobs >= 1, --load > 0 and non-empty --seeds, --rates");
  }
  return a;
}

/// The figures of one replay (or their mean over seeds).
struct Figures {
  double preemptions = 0, evictions = 0;
  double lost_preemption_gpu_h = 0, lost_eviction_gpu_h = 0;
  double mean_jct_h = 0, p95_jct_h = 0;  // job completion time = end - submit, hours
  double mean_jct_low_h = 0, mean_jct_high_h = 0;
  double unfinished = 0;
  std::map<Duration, double> victims_by_interval;  // victim's checkpoint interval -> preemptions
  Figures& operator+=(const Figures& o) {
    preemptions += o.preemptions;
    evictions += o.evictions;
    lost_preemption_gpu_h += o.lost_preemption_gpu_h;
    lost_eviction_gpu_h += o.lost_eviction_gpu_h;
    mean_jct_h += o.mean_jct_h;
    p95_jct_h += o.p95_jct_h;
    mean_jct_low_h += o.mean_jct_low_h;
    mean_jct_high_h += o.mean_jct_high_h;
    unfinished += o.unfinished;
    for (const auto& [k, v] : o.victims_by_interval) victims_by_interval[k] += v;
    return *this;
  }
  Figures& operator/=(double n) {
    preemptions /= n;
    evictions /= n;
    lost_preemption_gpu_h /= n;
    lost_eviction_gpu_h /= n;
    mean_jct_h /= n;
    p95_jct_h /= n;
    mean_jct_low_h /= n;
    mean_jct_high_h /= n;
    unfinished /= n;
    for (auto& [k, v] : victims_by_interval) v /= n;
    return *this;
  }
};

double MeanHours(const std::vector<double>& seconds) {
  if (seconds.empty()) return 0;
  double sum = 0;
  for (double s : seconds) sum += s;
  return sum / static_cast<double>(seconds.size()) / 3600.0;
}

Figures Measure(const sim::Trace& trace, const sim::SimResult& r,
                const mlsched::core::PolicySet& policy) {
  const sim::Metrics m = sim::ComputeMetrics(r);
  Figures f;
  f.preemptions = static_cast<double>(r.preemptions);
  f.evictions = static_cast<double>(r.evictions);
  f.lost_preemption_gpu_h = m.lost_preemption_resource_hours;
  f.lost_eviction_gpu_h = m.lost_eviction_resource_hours;
  f.mean_jct_h = m.mean_response_s / 3600.0;
  f.p95_jct_h = m.p95_response_s / 3600.0;
  f.unfinished = static_cast<double>(m.unfinished);
  std::vector<double> low, high;
  for (size_t i = 0; i < r.jobs.size(); ++i) {
    const auto& j = r.jobs[i];
    if (j.end < 0) continue;
    const bool is_high = trace.jobs[i].spec.qos != policy.default_qos;
    (is_high ? high : low).push_back(static_cast<double>(j.end - j.submit));
  }
  f.mean_jct_low_h = MeanHours(low);
  f.mean_jct_high_h = MeanHours(high);
  std::map<mlsched::core::JobId, Duration> interval_of;
  for (const auto& j : trace.jobs) interval_of[j.id] = j.checkpoint_interval_s;
  for (const auto& p : r.preemption_log) f.victims_by_interval[interval_of.at(p.victim)] += 1;
  return f;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string Percent(double now, double base) {
  if (base == 0) return now == 0 ? "0%" : "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.0f%%", 100.0 * (now - base) / base);
  return buf;
}

std::string IntervalName(Duration s) {
  if (s == 0) return "never";
  if (s % 3600 == 0) return std::to_string(s / 3600) + "h";
  if (s % 60 == 0) return std::to_string(s / 60) + "m";
  return std::to_string(s) + "s";
}

void PrintRow(const std::string& label, const std::string& order, const Figures& f,
              const std::vector<Duration>& intervals) {
  std::string victims;
  for (Duration d : intervals) {
    auto it = f.victims_by_interval.find(d);
    victims += (victims.empty() ? "" : " / ") + Fixed(it == f.victims_by_interval.end() ? 0 : it->second, 1);
  }
  std::printf("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", label.c_str(),
              order.c_str(), Fixed(f.preemptions, 1).c_str(), victims.c_str(),
              Fixed(f.lost_preemption_gpu_h, 1).c_str(), Fixed(f.evictions, 1).c_str(),
              Fixed(f.lost_eviction_gpu_h, 1).c_str(),
              Fixed(f.lost_preemption_gpu_h + f.lost_eviction_gpu_h, 1).c_str(),
              Fixed(f.mean_jct_h, 2).c_str(), Fixed(f.p95_jct_h, 2).c_str(),
              (Fixed(f.mean_jct_high_h, 2) + " / " + Fixed(f.mean_jct_low_h, 2)).c_str(),
              Fixed(f.unfinished, 1).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Args args = Parse(argc, argv);
    const mlsched::core::PolicySet base = *sim::ReadPolicy(args.policy).policy;
    const sim::Fleet fleet0 = sim::ReadClusterFile(args.cluster);
    sim::PreemptionWorkload workload;
    workload.jobs = args.jobs;
    workload.load = args.load;
    workload.capacity_gpus = sim::TotalGpus(fleet0);
    std::vector<Duration> intervals = workload.checkpoint_intervals;
    std::sort(intervals.begin(), intervals.end(), [](Duration a, Duration b) {
      return (a == 0 ? INT64_MAX : a) < (b == 0 ? INT64_MAX : b);  // often first, never last
    });
    intervals.erase(std::unique(intervals.begin(), intervals.end()), intervals.end());
    std::string victims_header;
    for (Duration d : intervals) victims_header += (victims_header.empty() ? "" : "/") + IntervalName(d);

    std::printf("policy %s, cluster %s (%lld GPUs), %d jobs per seed, offered load %.2f, "
                "seeds", args.policy.c_str(), args.cluster.c_str(),
                static_cast<long long>(workload.capacity_gpus), args.jobs, args.load);
    for (uint64_t s : args.seeds) std::printf(" %llu", static_cast<unsigned long long>(s));
    std::printf("; figures are means over the seeds\n\n");
    std::printf("| spot evictions /node-h | victim order | preemptions | victims by checkpoint "
                "interval (%s) | lost GPU-h, preemption | evictions | lost GPU-h, eviction | "
                "lost GPU-h, total | mean JCT (h) | p95 JCT (h) | mean JCT high / low (h) | "
                "unfinished |\n",
                victims_header.c_str());
    std::printf("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    const std::pair<VictimOrder, const char*> orders[] = {
        {VictimOrder::kLeastLostWork, "least-lost-work"},
        {VictimOrder::kYoungestFirst, "youngest-first"}};
    for (double rate : args.rates) {
      sim::Fleet fleet = fleet0;
      for (size_t n = 0; n < fleet.nodes.size(); ++n) {
        if (fleet.nodes[n].pool == mlsched::core::Pool::kSpot) fleet.eviction_rate_per_hour[n] = rate;
      }
      Figures mean[2];
      int fewer_lost = 0, shorter_jct = 0;  // seeds where least-lost-work did better
      for (uint64_t seed : args.seeds) {
        Figures seed_figures[2];
        workload.seed = seed;
        const sim::Trace trace = sim::MakePreemptionTrace(workload);
        for (int o = 0; o < 2; ++o) {
          sim::SimOptions options;
          options.policy = base;
          options.policy.victim_order = orders[o].first;
          options.seed = seed;
          const sim::SimResult r = sim::Simulate(trace, fleet, options);
          const Figures f = Measure(trace, r, options.policy);
          mean[o] += f;
          seed_figures[o] = f;
          if (args.per_seed) {
            PrintRow(Fixed(rate, 2) + " (seed " + std::to_string(seed) + ")", orders[o].second, f,
                     intervals);
          }
        }
        fewer_lost += seed_figures[0].lost_preemption_gpu_h < seed_figures[1].lost_preemption_gpu_h;
        shorter_jct += seed_figures[0].mean_jct_h < seed_figures[1].mean_jct_h;
      }
      for (int o = 0; o < 2; ++o) {
        mean[o] /= static_cast<double>(args.seeds.size());
        PrintRow(Fixed(rate, 2), orders[o].second, mean[o], intervals);
      }
      const std::string n = std::to_string(args.seeds.size());
      std::printf("| %s | least-lost-work vs youngest-first | %s | | %s (less in %d/%s seeds) | | "
                  "%s | %s | %s (shorter in %d/%s seeds) | %s | | |\n",
                  Fixed(rate, 2).c_str(), Percent(mean[0].preemptions, mean[1].preemptions).c_str(),
                  Percent(mean[0].lost_preemption_gpu_h, mean[1].lost_preemption_gpu_h).c_str(),
                  fewer_lost, n.c_str(),
                  Percent(mean[0].lost_eviction_gpu_h, mean[1].lost_eviction_gpu_h).c_str(),
                  Percent(mean[0].lost_preemption_gpu_h + mean[0].lost_eviction_gpu_h,
                          mean[1].lost_preemption_gpu_h + mean[1].lost_eviction_gpu_h).c_str(),
                  Percent(mean[0].mean_jct_h, mean[1].mean_jct_h).c_str(), shorter_jct, n.c_str(),
                  Percent(mean[0].p95_jct_h, mean[1].p95_jct_h).c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "preemption_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
