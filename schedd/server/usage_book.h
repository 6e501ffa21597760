// UsageBook: what running tasks use, from their agents' heartbeats (RunningTask.cpu_usec), a
// component beside the Controller: the AgentGateway hands it each heartbeat it applied, and
// readers (the AllocationWatch's idle release) ask it per job: CPU (from the tasks' CPU time) and
// GPU utilization (NVML, sampled by the agents); memory joins it with accounting (issue 34). Its own lock: a heartbeat never waits for the Controller here.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "mlsched/v1/agent.pb.h"
#include "mlsched/v1/types.pb.h"

namespace mlsched::server {

class UsageBook {
 public:
  using Clock = std::chrono::steady_clock;

  /// A job's CPU use over its tasks' latest heartbeat intervals.
  struct CpuUse {
    double cores = 0;           // CPU seconds per second, summed over the tasks measured
    int tasks_measured = 0;     // tasks with two samples (a rate); the others are not counted
    Clock::time_point oldest;   // receipt of the oldest sample the rate rests on
  };

  /// Records a heartbeat of `node` received at `at`: a task's CPU time since its previous sample
  /// (same job, attempt and rank, on the same node) over the time between them is its CPU use.
  /// The node's entries are replaced: a task the heartbeat no longer lists is dropped. At most
  /// `kMaxTasksPerNode` tasks of a heartbeat are kept (RegistrationLimits bounds them anyway).
  void Observe(const std::string& node, const v1::Heartbeat& hb, Clock::time_point at);
  /// Forgets a node's tasks (its stream ended).
  void ForgetNode(const std::string& node);
  /// The CPU use of attempt `info.attempt()` of job `info.job_id()`, counting each rank only as
  /// reported by the node `info.tasks()` places it on (an agent speaks for its own tasks only).
  /// nullopt when no task has a rate yet (fewer than two samples, or no cgroup to read).
  std::optional<CpuUse> Cpu(const v1::JobInfo& info) const;
  /// The mean GPU utilization (percent) of its tasks that report one (RunningTask
  /// gpu_util_percent, NVML), counted as Cpu() counts; nullopt when none does.
  std::optional<double> GpuUtil(const v1::JobInfo& info) const;

  static constexpr size_t kMaxTasksPerNode = 100000;

 private:
  struct Sample {
    int64_t cpu_usec = 0;
    Clock::time_point at;
    double cores = -1;          // over the interval ending at `at`; < 0 = no rate yet
    Clock::time_point since;    // start of that interval
    int32_t gpu_util = -1;      // percent at the last sample; < 0 = not measured
  };
  using Key = std::tuple<int64_t, int32_t, int32_t>;  // job, attempt, rank
  mutable std::mutex mu_;
  std::map<std::string, std::map<Key, Sample>> nodes_;
};

}  // namespace mlsched::server
