#include "bench/sim/synthetic.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <random>
#include <string>
#include <vector>

namespace mlsched::bench {
namespace {

using core::Duration;

/// Samplers over mt19937_64 written out here: <random>'s distributions are implementation-defined,
/// so they would make the traces differ between standard libraries.
class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}
  /// Uniform in [0, 1).
  double Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }
  /// Uniform in [lo, hi).
  double Uniform(double lo, double hi) { return lo + (hi - lo) * Uniform(); }
  /// Standard normal (Box-Muller; one of the pair is dropped to keep the stream simple).
  double Normal() {
    const double u = 1.0 - Uniform();  // (0, 1]
    return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * std::numbers::pi * Uniform());
  }
  /// Exponential with the given mean.
  double Exponential(double mean) { return -mean * std::log(1.0 - Uniform()); }

 private:
  std::mt19937_64 engine_;
};

/// What the generators draw per job before arrival times are known.
struct Draw {
  int64_t size = 1;           // processors or GPUs
  Duration run = 1;           // actual run time, seconds
  Duration requested = 1;     // user estimate, seconds (>= run)
  int user = 0;
};

/// Log-normal run time (median, sigma), rounded to seconds and clamped to [1, cap].
Duration RunTime(Rng& rng, double median_s, double sigma, Duration cap) {
  const double x = median_s * std::exp(sigma * rng.Normal());
  return std::clamp<Duration>(static_cast<Duration>(std::llround(std::min(x, 1e12))), 1, cap);
}

/// User estimate: run time x U(1, 5), rounded up, capped at `cap` but never below the run time.
Duration Estimate(Rng& rng, Duration run, Duration cap) {
  const auto scaled = static_cast<Duration>(std::ceil(static_cast<double>(run) * rng.Uniform(1, 5)));
  return std::max(run, std::min(scaled, cap));
}

/// A few heavy users and a long tail: index floor(n x u^3).
int SkewedUser(Rng& rng, int users) {
  const double u = rng.Uniform();
  return std::min(users - 1, static_cast<int>(users * u * u * u));
}

/// Turns draws into trace jobs with Poisson arrivals whose rate gives `load` on `capacity`.
/// `fill` sets the spec (and accelerator) of job i from its draw.
template <typename Fill>
void Arrange(Rng& rng, const std::vector<Draw>& draws, int64_t capacity, double load, Fill fill,
             SyntheticWorkload& out) {
  double area = 0, sizes = 0, runs = 0;
  for (const Draw& d : draws) {
    area += static_cast<double>(d.size) * static_cast<double>(d.run);
    sizes += static_cast<double>(d.size);
    runs += static_cast<double>(d.run);
  }
  const double n = std::max<double>(1, static_cast<double>(draws.size()));
  const double target_span = area / (load * static_cast<double>(capacity));
  const double mean_gap = target_span / n;
  double t = 0;
  out.trace.jobs.reserve(draws.size());
  for (size_t i = 0; i < draws.size(); ++i) {
    const Draw& d = draws[i];
    sim::TraceJob job;
    job.id = static_cast<core::JobId>(i + 1);
    job.submit_time = static_cast<core::Timestamp>(t);
    job.run_time = d.run;
    job.requested_time = d.requested;
    job.hits_time_limit = d.run >= d.requested;
    job.size = d.size;
    job.spec.time_limit = d.requested;
    fill(i, d, job);
    out.trace.jobs.push_back(std::move(job));
    t += rng.Exponential(mean_gap);
  }
  sim::FinalizeTrace(out.trace);
  out.span_s = out.trace.jobs.empty() ? 0 : static_cast<double>(out.trace.jobs.back().submit_time);
  out.offered_load = out.span_s > 0 ? area / (static_cast<double>(capacity) * out.span_s) : 0;
  out.mean_size = sizes / n;
  out.mean_run_s = runs / n;
}

}  // namespace

SyntheticWorkload MakeBlueWorkload(const BlueOptions& options) {
  Rng rng(options.seed);
  const int64_t procs = options.processors;
  const double log2_max = std::log2(static_cast<double>(procs));
  constexpr int kUsers = 400, kGroups = 25;
  std::vector<Draw> draws(static_cast<size_t>(std::max<int64_t>(options.jobs, 0)));
  for (Draw& d : draws) {
    if (rng.Uniform() < 0.24) {
      d.size = 1;
    } else {
      // Lublin & Feitelson: most parallel jobs are small, a second stage reaches the machine size.
      const double x = rng.Uniform() < 0.86 ? rng.Uniform(1, std::min(5.0, log2_max))
                                            : rng.Uniform(std::min(5.0, log2_max), log2_max);
      d.size = rng.Uniform() < 0.75 ? int64_t{1} << std::llround(x) : std::llround(std::exp2(x));
      d.size = std::clamp<int64_t>(d.size, 1, procs);
    }
    d.run = RunTime(rng, 1150, 1.9, options.max_run_s);
    d.requested = Estimate(rng, d.run, options.max_run_s);
    d.user = SkewedUser(rng, kUsers);
  }
  SyntheticWorkload out;
  out.trace.name = "synthetic-sdsc-blue";
  out.trace.format = "swf";
  Arrange(rng, draws, procs, options.offered_load,
          [](size_t i, const Draw& d, sim::TraceJob& job) {
            job.spec.name = "blue-" + std::to_string(i + 1);
            job.spec.user = "u" + std::to_string(d.user);
            job.spec.account = "g" + std::to_string(d.user % kGroups);
            job.spec.ntasks = 1;
            job.spec.per_task.cpu_millis = d.size * 1000;
            job.accelerator = "cpu";
          },
          out);
  // The fleet mlsim builds for an SWF trace: one node holding every processor.
  core::Node node;
  node.name = "swf-0";
  node.capacity.cpu_millis = procs * 1000;
  node.capacity.memory_bytes = procs * (int64_t{1} << 30);
  out.trace.nodes.push_back(node);
  out.fleet = sim::FleetFromNodes(out.trace.nodes);
  return out;
}

SyntheticWorkload MakeGpuWorkload(const GpuOptions& options) {
  struct Gang {
    int64_t gpus;
    double probability;
  };
  static constexpr Gang kGangs[] = {{1, 0.45},  {2, 0.12},  {4, 0.15},   {8, 0.18},  {16, 0.04},
                                    {32, 0.03}, {64, 0.02}, {128, 0.007}, {256, 0.003}};
  constexpr int kUsers = 1000, kAccounts = 50;
  constexpr int64_t kCpuMillisPerGpu = 12000;          // 12 cores per GPU
  constexpr int64_t kMemoryPerGpu = int64_t{200} << 30;  // 200 GiB per GPU
  const int64_t per_node = std::max(1, options.gpus_per_node);
  Rng rng(options.seed);
  std::vector<Draw> draws(static_cast<size_t>(std::max<int64_t>(options.jobs, 0)));
  for (Draw& d : draws) {
    double u = rng.Uniform();
    d.size = kGangs[std::size(kGangs) - 1].gpus;
    for (const Gang& g : kGangs) {
      if (u < g.probability) {
        d.size = g.gpus;
        break;
      }
      u -= g.probability;
    }
    // A gang wider than a node takes whole nodes.
    if (d.size > per_node) d.size = (d.size + per_node - 1) / per_node * per_node;
    d.run = RunTime(rng, 1200, 1.7, options.max_run_s);
    d.requested = Estimate(rng, d.run, options.max_run_s);
    d.user = SkewedUser(rng, kUsers);
  }
  SyntheticWorkload out;
  out.trace.name = "synthetic-gpu";
  out.trace.format = "synthetic";
  const int64_t capacity = int64_t{options.nodes} * per_node;
  Arrange(rng, draws, capacity, options.offered_load,
          [per_node](size_t i, const Draw& d, sim::TraceJob& job) {
            const int64_t per_task = std::min(d.size, per_node);
            job.spec.name = "gpu-" + std::to_string(i + 1);
            job.spec.user = "u" + std::to_string(d.user);
            job.spec.account = "a" + std::to_string(d.user % kAccounts);
            job.spec.ntasks = static_cast<int32_t>(d.size / per_task);
            job.spec.per_task.cpu_millis = per_task * kCpuMillisPerGpu;
            job.spec.per_task.memory_bytes = per_task * kMemoryPerGpu;
            job.spec.per_task.gpus[""] = per_task;  // any GPU type
            job.accelerator = "gpu";
          },
          out);
  const int node_cpus = static_cast<int>(per_node * kCpuMillisPerGpu / 1000);
  out.fleet = sim::UniformFleet(options.nodes, node_cpus, per_node * (kMemoryPerGpu >> 30),
                                static_cast<int>(per_node), "h100");
  return out;
}

}  // namespace mlsched::bench
