// Value types of the pure scheduling core. No I/O, no clocks, no threads: everything a scheduling
// cycle needs arrives in a ClusterState snapshot and every decision leaves in a CyclePlan.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlsched::core {

/// Seconds since the Unix epoch (daemon) or since trace start (simulator).
using Timestamp = int64_t;
/// Seconds.
using Duration = int64_t;
using JobId = int64_t;

/// A resource vector with fixed-point quantities (never floating point).
/// cpu_millis: millicores (1 core = 1000). memory_bytes: bytes. gpus: device count by type
/// (lower-case model name, e.g. "h100"). Comparisons are component-wise.
struct ResourceVector {
  int64_t cpu_millis = 0;
  int64_t memory_bytes = 0;
  std::map<std::string, int64_t> gpus;

  /// Total GPUs over all types.
  int64_t GpuCount() const;
  /// True when every component of *this is <= the same component of other.
  bool FitsIn(const ResourceVector& other) const;
  ResourceVector& operator+=(const ResourceVector& o);
  ResourceVector& operator-=(const ResourceVector& o);
  bool operator==(const ResourceVector&) const = default;
};

enum class Pool { kOnDemand, kSpot, kReserved };
/// "on-demand" | "spot" | "reserved".
const char* PoolName(Pool p);
std::optional<Pool> ParsePool(const std::string& s);

/// Administrative / health state of a node. Idle/Mixed/Allocated are derived from allocations.
enum class NodeHealth { kUp, kDrain, kDraining, kDown };

/// A node as the scheduler sees it. `gpu_type` and `capacity.gpus` agree (one GPU type per node).
struct Node {
  std::string name;
  Pool pool = Pool::kOnDemand;
  std::string region, zone, domain;   // domain: topology domain (NVLink domain / rack)
  ResourceVector capacity;            // total schedulable resources
  std::vector<std::string> features;  // labels a job may require
  NodeHealth health = NodeHealth::kUp;
};

/// Slurm's job states.
enum class JobState { kPending, kRunning, kCompleting, kCompleted, kFailed, kCancelled, kTimeout,
                      kPreempted, kNodeFail };
/// Slurm's upper-case name, e.g. "PENDING".
const char* JobStateName(JobState s);
std::optional<JobState> ParseJobState(const std::string& s);
/// True for COMPLETED, FAILED, CANCELLED, TIMEOUT.
bool IsFinal(JobState s);

/// Why a pending job does not run (one per job, Slurm's names).
enum class PendingReason { kNone, kPriority, kResources, kJobHeldUser, kJobHeldAdmin, kDependency,
                           kQosLimit, kAccountQuota, kPartitionLimit, kPartitionDown, kBeginTime,
                           kWaitingForSpotBudget, kLaunchFailedRequeue };
const char* PendingReasonName(PendingReason r);

/// Topology constraint of a gang.
enum class Topology { kNone, kSameDomain, kSameZone, kSameRegion, kSpread };
std::optional<Topology> ParseTopology(const std::string& s);
/// "none" | "same-domain" | "same-zone" | "same-region" | "spread" (what ParseTopology accepts).
const char* TopologyName(Topology t);

/// What a job asks for: `ntasks` identical tasks, each needing `per_task`, started all-or-nothing.
struct JobSpec {
  std::string name, user, account, partition, qos;
  int32_t ntasks = 1;
  ResourceVector per_task;            // gpus: count under key "" = any type, or a named type
  std::vector<std::string> gpu_types; // acceptable GPU types, preferred first; empty = any
  Duration time_limit = 3600;         // seconds
  Topology topology = Topology::kNone;
  int32_t nice = 0;
  bool hold = false;
  std::vector<std::string> features;  // node features/labels every node of the gang must carry
};

/// One task's placement: node and GPU device indices on it.
struct TaskPlacement {
  int32_t rank = 0;
  std::string node;
  std::vector<int32_t> gpu_indices;
  ResourceVector resources;           // what the task holds on that node (gpus by the node's type)
};

/// A whole gang's placement.
struct Allocation {
  std::vector<TaskPlacement> tasks;
};

/// A job in the snapshot. Running jobs carry their allocation; pending ones do not.
struct Job {
  JobId id = 0;
  JobSpec spec;
  JobState state = JobState::kPending;
  PendingReason reason = PendingReason::kNone;
  Timestamp submit_time = 0;
  Timestamp start_time = 0;           // of the current attempt (running jobs)
  int32_t attempt = 0;
  std::optional<Allocation> allocation;
};

/// The snapshot one cycle works on.
struct ClusterState {
  std::vector<Node> nodes;
  std::vector<Job> jobs;              // pending and running (final jobs may be omitted)
};

/// Scheduler policy as plain data (the TOML loader fills it; defaults give FIFO + EASY-free).
struct PartitionPolicy {
  std::string name;
  Duration default_time_limit = 3600;
  Duration max_time_limit = 7 * 24 * 3600;
  std::vector<std::string> pools;     // empty = every pool
  bool up = true;
};
/// A partition called `name` with every other field at its default.
inline PartitionPolicy MakePartition(std::string name) {
  PartitionPolicy p;
  p.name = std::move(name);
  return p;
}
struct PolicySet {
  std::vector<PartitionPolicy> partitions{MakePartition("default")};
  std::string default_partition = "default";
  std::vector<std::string> operators; // user names allowed to act on any job
};

/// The partition a job named (empty = policy.default_partition), or null when there is none.
const PartitionPolicy* FindPartition(const PolicySet& policy, const std::string& name);

/// Start this job now on this allocation.
struct StartDecision {
  JobId job = 0;
  Allocation allocation;
};
/// A pending job's reason and, when known, its planned start.
struct PendingUpdate {
  JobId job = 0;
  PendingReason reason = PendingReason::kNone;
  std::optional<Timestamp> expected_start;
  std::string detail;                 // short human explanation, e.g. "needs 16 h100, 8 free"
};

/// The output of one cycle: decisions as data; the caller applies them.
struct CyclePlan {
  std::vector<StartDecision> starts;
  std::vector<PendingUpdate> pending;
};

/// Why a spec can never run on this cluster (e.g. "job needs 9 GPUs per task but no node has more
/// than 8"), or nullopt when some set of nodes could hold it once empty.
std::optional<std::string> CheckJobFeasible(const std::vector<Node>& nodes, const PolicySet& policy,
                                            const JobSpec& spec);

/// One scheduling cycle: a pure, deterministic function of (state, policy, now).
struct SchedulingCycle {
  static CyclePlan Run(const ClusterState& state, const PolicySet& policy, Timestamp now);
};

}  // namespace mlsched::core
