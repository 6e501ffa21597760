// Test support for the scheduling core: builders with named setters, plan application and the
// invariant checks every scenario runs after every cycle.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <cstdint>
#include <string>
#include <vector>

#include "schedd/core/types.h"

namespace mlsched::core::testing {

/// Expands a Slurm-style host list: "gpu-[01-03]" -> gpu-01, gpu-02, gpu-03; "a,b" and plain names
/// work too. Zero padding follows the lower bound's width.
std::vector<std::string> ExpandHostList(const std::string& list);

/// Builds nodes group by group: each Nodes() call starts a group that the following Gpus/Cpus/
/// MemoryGiB/Features/Health calls shape.
/// ClusterBuilder().Pool("spot").Nodes("gpu-[01-16]").Gpus("h100", 8)
class ClusterBuilder {
 public:
  ClusterBuilder();
  /// Pool, region, zone and domain apply to the groups that later Nodes() calls start.
  ClusterBuilder& Pool(const std::string& pool);
  ClusterBuilder& Region(const std::string& region);
  ClusterBuilder& Zone(const std::string& zone);
  ClusterBuilder& Domain(const std::string& domain);
  ClusterBuilder& Nodes(const std::string& host_list);
  ClusterBuilder& Gpus(const std::string& type, int64_t count);
  ClusterBuilder& Cpus(int64_t cores);
  ClusterBuilder& MemoryGiB(int64_t gib);
  ClusterBuilder& Features(std::vector<std::string> features);
  ClusterBuilder& Health(NodeHealth health);
  std::vector<Node> Build() const;

 private:
  template <typename F>
  ClusterBuilder& ForGroup(F f) {
    for (size_t i = group_begin_; i < nodes_.size(); ++i) f(nodes_[i]);
    return *this;
  }
  std::vector<Node> nodes_;
  size_t group_begin_ = 0;
  Node defaults_;
};

/// Builds one job. JobBuilder(7).Tasks(16).GpusPerTask(8).TimeLimit(4h)
class JobBuilder {
 public:
  explicit JobBuilder(JobId id = 1);
  JobBuilder& Tasks(int32_t n);
  /// An elastic gang of min_tasks..max_tasks tasks in steps of `step` (mlsub -n MIN-MAX:STEP).
  JobBuilder& Elastic(int32_t min_tasks, int32_t max_tasks, int32_t step = 1);
  JobBuilder& GpusPerTask(int64_t n, const std::string& type = "");
  JobBuilder& GpuTypes(std::vector<std::string> types);
  JobBuilder& CpusPerTask(int64_t cores);
  JobBuilder& CpuMillisPerTask(int64_t millis);
  JobBuilder& MemoryGiBPerTask(int64_t gib);
  JobBuilder& TimeLimit(std::chrono::seconds limit);
  JobBuilder& Submit(Timestamp t);
  JobBuilder& Topo(Topology t);
  JobBuilder& Partition(const std::string& p);
  JobBuilder& Account(const std::string& a);
  JobBuilder& User(const std::string& u);
  JobBuilder& Qos(const std::string& q);
  JobBuilder& Nice(int32_t nice);
  JobBuilder& Hold();
  JobBuilder& Features(std::vector<std::string> f);
  JobBuilder& Name(const std::string& name);
  /// Adds a dependency term: DependsOn(DependencyType::kAfterOk, {3, 4}).
  JobBuilder& DependsOn(DependencyType type, std::vector<JobId> jobs);
  /// Joins the dependency terms with '?' (any one suffices) instead of ',' (all).
  JobBuilder& DependsOnAny();
  JobBuilder& Singleton();
  /// Makes the job element `task` of array `array_id` with at most `max_running` running.
  JobBuilder& ArrayElement(JobId array_id, int32_t task, int32_t max_running = 0);
  /// Marks the job running since `start` on `allocation`.
  JobBuilder& Running(Timestamp start, Allocation allocation);
  Job Build() const { return job_; }

 private:
  Job job_;
};

/// A task placement for hand-written running allocations.
TaskPlacement Task(int32_t rank, const std::string& node, std::vector<int32_t> gpu_indices,
                   const std::string& gpu_type, int64_t cpu_millis = 0);

/// Violations of the cycle invariants for `plan` applied to `state` (empty = all hold): every
/// started job was pending and its dependencies hold (singleton and array "%N" included), gang all-or-nothing (ranks 0..ntasks-1, each with the per-task
/// demand), only up and eligible-pool nodes get new work, no node over-allocated, GPU device
/// indices in range and disjoint, account/QoS limits respected by every start, every pending job
/// has exactly one update.
std::vector<std::string> CheckInvariants(const ClusterState& state, const PolicySet& policy,
                                         const CyclePlan& plan);

/// Applies a plan: started jobs become running at `now` with their allocation; pending updates
/// set reasons and expected starts.
void ApplyPlan(ClusterState& state, const CyclePlan& plan, Timestamp now);

/// Runs one cycle, REQUIREs the invariants, and returns the plan.
CyclePlan RunChecked(const ClusterState& state, const PolicySet& policy, Timestamp now);

/// Ids of the started jobs, in plan order.
std::vector<JobId> StartedIds(const CyclePlan& plan);
/// The pending update of `job` (REQUIREs that there is one).
PendingUpdate PendingOf(const CyclePlan& plan, JobId job);

}  // namespace mlsched::core::testing

namespace mlsched::core::testing {

/// A tiny event-driven replay for property tests: jobs arrive at their submit_time, run for
/// `run_time[id]` (default: their time limit) and end; a cycle runs at every event time with the
/// invariants checked. `on_cycle(state, plan, now)` sees every cycle.
struct Replay {
  ClusterState state;
  std::vector<Job> arrivals;             // pending jobs, submitted at their submit_time
  std::map<JobId, Duration> run_time;    // actual run time per job (<= time limit)
  std::map<JobId, Timestamp> started;    // filled by Run
  std::map<JobId, JobState> outcome;     // final state per job when it ends (default COMPLETED)
  /// Runs until every job has ended or `max_cycles` cycles ran.
  void Run(const PolicySet& policy,
           const std::function<void(const ClusterState&, const CyclePlan&, Timestamp)>& on_cycle,
           int max_cycles = 100000);
};

}  // namespace mlsched::core::testing
