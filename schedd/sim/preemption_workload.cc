#include "schedd/sim/preemption_workload.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

namespace mlsched::sim {
namespace {

/// Uniform in [0, 1) from the top 53 bits (the standard distributions are not portable).
double Unit(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

template <typename T>
const T& Pick(std::mt19937_64& rng, const std::vector<T>& from) {
  return from[static_cast<size_t>(rng() % from.size())];
}

core::Duration LogUniform(std::mt19937_64& rng, core::Duration lo, core::Duration hi) {
  const double a = std::log(static_cast<double>(std::max<core::Duration>(lo, 1)));
  const double b = std::log(static_cast<double>(std::max(hi, lo)));
  return std::max<core::Duration>(1, std::llround(std::exp(a + (b - a) * Unit(rng))));
}

}  // namespace

Trace MakePreemptionTrace(const PreemptionWorkload& w) {
  if (w.jobs < 1 || w.load <= 0 || w.capacity_gpus < 1 || w.low_sizes.empty() ||
      w.high_sizes.empty() || w.checkpoint_intervals.empty()) {
    throw std::invalid_argument("MakePreemptionTrace: need jobs >= 1, load > 0, capacity >= 1 "
                                "and non-empty size and checkpoint interval lists");
  }
  std::mt19937_64 rng(w.seed);
  Trace trace;
  trace.name = "preemption-workload-seed" + std::to_string(w.seed);
  trace.format = "synthetic";
  double gpu_seconds = 0;
  for (int i = 0; i < w.jobs; ++i) {
    const bool high = Unit(rng) < w.high_fraction;
    TraceJob j;
    j.id = i + 1;
    j.size = Pick(rng, high ? w.high_sizes : w.low_sizes);
    j.run_time = high ? LogUniform(rng, w.high_min_run_s, w.high_max_run_s)
                      : LogUniform(rng, w.low_min_run_s, w.low_max_run_s);
    j.requested_time = static_cast<core::Duration>(
        std::ceil(w.time_limit_factor * static_cast<double>(j.run_time)));
    j.requested_time = std::max(j.requested_time, j.run_time);
    j.checkpoint_interval_s = Pick(rng, w.checkpoint_intervals);
    const std::string user = "u" + std::to_string(rng() % static_cast<uint64_t>(std::max(w.users, 1)));
    j.spec.user = user;
    j.spec.qos = high ? w.high_qos : w.low_qos;
    j.spec.account = j.spec.qos;
    j.spec.name = "job" + std::to_string(j.id);
    j.spec.time_limit = j.requested_time;
    j.spec.ntasks = static_cast<int32_t>(j.size);
    j.spec.per_task.cpu_millis = w.cpu_millis_per_gpu;
    j.spec.per_task.gpus[""] = 1;
    j.accelerator = "gpu";
    j.origin = trace.name + ":" + std::to_string(j.id);
    gpu_seconds += static_cast<double>(j.size) * static_cast<double>(j.run_time);
    trace.jobs.push_back(std::move(j));
  }
  // Submit times: sorted uniform draws over the span that gives the offered load (a Poisson
  // process conditioned on the job count).
  const double span = gpu_seconds / (static_cast<double>(w.capacity_gpus) * w.load);
  std::vector<core::Timestamp> submits;
  submits.reserve(trace.jobs.size());
  for (size_t i = 0; i < trace.jobs.size(); ++i) {
    submits.push_back(static_cast<core::Timestamp>(std::floor(span * Unit(rng))));
  }
  std::sort(submits.begin(), submits.end());
  for (size_t i = 0; i < trace.jobs.size(); ++i) trace.jobs[i].submit_time = submits[i];
  FinalizeTrace(trace);
  return trace;
}

}  // namespace mlsched::sim
