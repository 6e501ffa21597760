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
                           kWaitingForSpotBudget, kLaunchFailedRequeue, kPreempting,
                           kDependencyNeverSatisfied, kJobArrayTaskLimit };
const char* PendingReasonName(PendingReason r);

/// Topology constraint of a gang.
enum class Topology { kNone, kSameDomain, kSameZone, kSameRegion, kSpread };
std::optional<Topology> ParseTopology(const std::string& s);
/// "none" | "same-domain" | "same-zone" | "same-region" | "spread"; ParseTopology also accepts
/// "domain", "zone" and "region" (mlsub's spelling).
const char* TopologyName(Topology t);

/// One accelerator fallback tier: once the job has waited `after` seconds since submission it may
/// also run on `accelerator`, a GPU type or "cpu" (no GPUs).
struct FallbackTier {
  std::string accelerator;
  Duration after = 0;
  bool operator==(const FallbackTier&) const = default;
};

/// Where a job may run by pool (mlsub --spot). kAllow: spot or on-demand, cheaper expected cost
/// first (pools.h); kNever: never on spot nodes; kPrefer: spot only until it has waited the
/// policy's spot wait budget, then on-demand too. kOnly is not a user choice: the core sets it on
/// the effective spec of a kPrefer job still inside its budget (spot nodes only).
enum class SpotPreference { kAllow, kNever, kPrefer, kOnly };

/// Slurm's dependency types (sbatch --dependency): kAfter = the jobs have started (or ended);
/// kAfterAny = ended in any state; kAfterOk = ended COMPLETED; kAfterNotOk = ended in another
/// final state (FAILED, CANCELLED, TIMEOUT, NODE_FAIL); kSingleton = no other job with the same
/// name and user is running (no job ids).
enum class DependencyType { kAfter, kAfterAny, kAfterOk, kAfterNotOk, kSingleton };
/// "after" | "afterany" | "afterok" | "afternotok" | "singleton".
const char* DependencyTypeName(DependencyType t);

/// One term of a dependency list: `type` on every job of `jobs` (array jobs already expanded to
/// their elements' ids by the server).
struct Dependency {
  DependencyType type = DependencyType::kAfterAny;
  std::vector<JobId> jobs;
  bool operator==(const Dependency&) const = default;
};

/// A job's place in a job array (sbatch --array): element `task_id` of the array whose id is
/// `job_id` (the id of its first element); at most `max_running` elements run at once (0 = no
/// limit, the "%N" of --array=0-99%N). job_id 0 = not an array element.
struct ArrayIndex {
  JobId job_id = 0;
  int32_t task_id = 0;
  int32_t max_running = 0;
  int32_t task_count = 0;             // elements in the array (ids job_id .. job_id + task_count - 1)
  bool operator==(const ArrayIndex&) const = default;
};

/// An elastic gang's sizes (mlsub -n MIN-MAX:STEP): the job may run with min_tasks,
/// min_tasks + step, ... tasks, up to JobSpec::ntasks (its MAX). min_tasks 0 = a rigid gang of
/// exactly ntasks tasks.
struct TaskRange {
  int32_t min_tasks = 0;  // tasks; 0 = rigid
  int32_t step = 1;       // tasks between two allowed sizes, >= 1
  bool operator==(const TaskRange&) const = default;
};

/// What a job asks for: `ntasks` identical tasks, each needing `per_task`, started all-or-nothing.
/// An elastic job (`elastic.min_tasks` > 0) runs with any size of its range; ntasks is its MAX.
struct JobSpec {
  std::string name, user, account, partition, qos;
  int32_t ntasks = 1;                 // rigid: the gang size; elastic: the largest size
  TaskRange elastic;                  // elastic sizes; min_tasks 0 = rigid
  ResourceVector per_task;            // gpus: count under key "" = any type, or a named type
  std::vector<std::string> gpu_types; // acceptable GPU types, preferred first; empty = any
  Duration time_limit = 3600;         // seconds
  Topology topology = Topology::kNone;
  int32_t nice = 0;
  bool hold = false;
  std::vector<std::string> features;  // node features/labels every node of the gang must carry
  std::vector<FallbackTier> fallback; // accelerator tiers opened by waiting (fallback.h)
  std::vector<Dependency> dependencies;  // all must hold, or any one when dependency_any ('?')
  bool dependency_any = false;
  ArrayIndex array;                   // array element, or job_id 0
  SpotPreference spot = SpotPreference::kAllow;
  Duration checkpoint_interval = 0;   // seconds between the job's checkpoints; 0 = never checkpoints
  std::string data_region;            // where its data lives ("" = anywhere)
  int64_t data_bytes = 0;             // size of that data (egress cost when run elsewhere)
  bool region_strict = false;         // run only in data_region
  bool interactive = false;           // an allocation of mlrun/mlalloc (the policy's [interactive])
  /// Nodes this job must not use (Slurm's --exclude): schedd adds the nodes the gang watchdog
  /// suspected in the job's own stalls, so its restart avoids them (at most kMaxExcludedNodes).
  std::vector<std::string> exclude_nodes;
  bool operator==(const JobSpec&) const = default;
};

/// One task's placement: node and GPU device indices on it.
struct TaskPlacement {
  int32_t rank = 0;
  std::string node;
  std::vector<int32_t> gpu_indices;
  ResourceVector resources;           // what the task holds on that node (gpus by the node's type)
  /// Where `node` stood in ClusterState::nodes when the core placed the task; -1 when unknown. A
  /// lookup hint only: NodeLedger checks it against the name and falls back to a name lookup.
  int32_t node_hint = -1;
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
  /// Pending jobs: the planned start the previous cycle gave (PendingUpdate::expected_start).
  /// Only conservative backfill with BackfillPolicy::keep_plans reads it.
  std::optional<Timestamp> expected_start;
  /// Running jobs, for preemption: when its tasks last reported a committed checkpoint (0 = never),
  /// how often it was preempted so far, and whether it is being preempted now (signalled, not yet
  /// exited: its resources will be free soon and it is not chosen again).
  Timestamp last_checkpoint = 0;
  int32_t preempt_count = 0;
  bool preempting = false;
  /// Times the job was requeued by a spot eviction (after PlacementPolicy::spot_max_evictions it
  /// stays off spot nodes).
  int32_t evictions = 0;
  /// Seconds the job is planned to run (from start_time for running jobs); 0 = its time limit.
  /// Planning only (timeline, reservations, shortest-first order); limits and the kill use
  /// spec.time_limit. schedd sets it from its run-time predictor (predictor.h).
  Duration predicted_runtime = 0;
  /// Elastic jobs: seconds its last checkpoint-and-restart took (from the stop request to the
  /// next attempt running), measured by the caller; 0 = none yet (ElasticPolicy::restart_cost).
  Duration restart_cost = 0;
  /// Running jobs: true while a rank of the current attempt has not started yet (its node is
  /// preparing, pulling its image or launching it); such an attempt is never resized.
  bool launching = false;
  /// Running jobs: when every rank of the current attempt had started, in seconds; 0 = not known
  /// (then start_time stands for it). ElasticPolicy::min_resize_interval counts from here, so the
  /// time an attempt spends pulling its image or launching is not counted as running.
  Timestamp running_since = 0;
  /// Running jobs: the mean utilization of its GPUs at their latest samples (0..1, NVML through
  /// its agents); < 0 = not measured. Only FairsharePolicy::Charge::kBusy reads it.
  double gpu_busy_fraction = -1;
};

/// Seconds `job`'s current attempt has run at `now`: from running_since (or start_time when that
/// is unknown); 0 while it is launching.
inline Duration RunningFor(const Job& job, Timestamp now) {
  if (job.launching) return 0;
  return now - (job.running_since > 0 ? job.running_since : job.start_time);
}

/// True when `spec` is an elastic gang (a range of sizes, not one size).
inline bool IsElastic(const JobSpec& spec) { return spec.elastic.min_tasks > 0; }

/// The gang sizes `spec` may run with, largest first: {ntasks} for a rigid job; for an elastic
/// one min_tasks + k * step for every k >= 0 with the size <= ntasks (in tasks).
std::vector<int32_t> GangSizes(const JobSpec& spec);

/// Why spec's size fields are invalid ("min_tasks 5 above ntasks 4"), or nullopt. Limits:
/// 1 <= min_tasks <= ntasks, step >= 1, (ntasks - min_tasks) % step == 0.
std::optional<std::string> CheckGangSize(const JobSpec& spec);

/// Tasks `job` runs with: its allocation's size when it has one, else spec.ntasks.
inline int32_t RunningTasks(const Job& job) {
  return job.allocation && !job.allocation->tasks.empty() ? static_cast<int32_t>(job.allocation->tasks.size())
                                                          : job.spec.ntasks;
}

/// Seconds an elastic job is expected to run at `tasks` tasks, for ElasticStart::kEarliestFinish:
/// PlannedRuntime x GangSizes().back() / tasks, i.e. linear speed-up with the time limit (or the
/// prediction) read as the run time at the smallest size. A rigid job: PlannedRuntime.
Duration ElasticRuntime(const Job& job, int32_t tasks);

/// Seconds the core plans `job` to run: its predicted run time when set (at most its time
/// limit), else its time limit.
inline Duration PlannedRuntime(const Job& job) {
  return job.predicted_runtime > 0 && job.predicted_runtime < job.spec.time_limit ? job.predicted_runtime
                                                                                   : job.spec.time_limit;
}

/// The snapshot one cycle works on.
struct ClusterState {
  std::vector<Node> nodes;
  std::vector<Job> jobs;              // pending and running (final jobs may be omitted)
  /// Decayed fairshare usage (billing-weighted resource-seconds) per association key: an account
  /// name, or "account/user" for a user. Maintained with AccrueUsage (fairshare.h).
  std::map<std::string, double> usage;
  /// States of jobs that pending jobs depend on but that `jobs` omits: ended jobs, and pending
  /// ones the caller leaves out of the cycle (held, or waiting out a requeue backoff). A dependency
  /// on a job found in neither counts as satisfied (Slurm: the job was purged).
  std::map<JobId, JobState> omitted;
  /// Spot evictions per node-hour observed per pool name (EvictionRateEstimator, pools.h); a pool
  /// listed here overrides the policy's configured rate.
  std::map<std::string, double> observed_eviction_rates;
};

/// Where a policy entry was written, for error messages that cite the policy file: "FILE:LINE" of
/// the entry and of some of its keys (all empty when the policy was built in code).
struct SourceLines {
  std::string entry;                       // the entry's first line ([[accounts]], [[users]], ...)
  std::map<std::string, std::string> keys; // key name -> its line
  /// The line of `key`, else of the entry ("" when neither is known).
  const std::string& Of(const std::string& key) const {
    auto it = keys.find(key);
    return it == keys.end() ? entry : it->second;
  }
};

/// Scheduler policy as plain data (the TOML loader fills it; defaults give FIFO + EASY-free).
struct PartitionPolicy {
  std::string name;
  Duration default_time_limit = 3600;
  Duration max_time_limit = 7 * 24 * 3600;
  std::vector<std::string> pools;     // empty = every pool
  bool up = true;
  int64_t priority_tier = 0;          // partition factor: tier / max tier over partitions, in [0,1]
  int32_t max_tasks_per_job = 0;      // 0 = unlimited
  // Submit-time access (Slurm's AllowAccounts / AllowQos), enforced for unprivileged callers even
  // when the policy is permissive (associations.h):
  std::vector<std::string> allow_accounts;  // empty = every account
  std::vector<std::string> allow_qos;       // empty = every QoS
  SourceLines source;
};

/// Backfill (Lifka 1995; Mu'alem & Feitelson 2001): kEasy reserves for the first blocked job only,
/// kConservative for every blocked job up to `depth`; lower jobs start now only if they delay no
/// reservation. Both plan with the jobs' time limits.
enum class BackfillMode { kNone, kEasy, kConservative };
/// "none" | "easy" | "conservative".
const char* BackfillModeName(BackfillMode m);
std::optional<BackfillMode> ParseBackfillMode(const std::string& s);

/// Order of the main queue: kFifo = (submit_time, id) like pyss/FCFS; kMultifactor = Slurm's
/// multifactor priority, highest first, ties by (submit_time, id).
enum class QueueOrder { kFifo, kMultifactor };
/// Order in which jobs behind the reservations are tried for backfill: kQueue = queue order;
/// kShortestFirst = shortest time limit first (ties by queue order).
enum class BackfillOrder { kQueue, kShortestFirst };

/// Backfill parameters, named after Slurm's SchedulerParameters.
struct BackfillPolicy {
  BackfillMode mode = BackfillMode::kNone;
  BackfillOrder order = BackfillOrder::kQueue;
  /// Conservative: most reservations per cycle (0 = every blocked job). EASY always uses 1.
  int32_t depth = 0;
  /// bf_max_job_test: most pending jobs examined per cycle (0 = all).
  int32_t max_job_test = 0;
  /// bf_window, seconds: reservations are not planned beyond now + window (0 = unlimited).
  Duration window = 0;
  /// bf_resolution, seconds: planned starts are rounded up to a multiple of this (>= 1).
  Duration resolution = 1;
  /// Conservative only. true: start from the previous cycle's plans (Job::expected_start, which
  /// the caller copies from the last PendingUpdate) and move each job, in queue order, only to an
  /// earlier start, like pyss's conservative scheduler: a plan never moves later. false: re-plan
  /// every cycle from scratch, like Slurm.
  bool keep_plans = false;
  /// Starvation guard, seconds (0 = off): a pending job that has waited at least this long since
  /// submission gets a reservation too, not only the jobs the mode reserves for; such jobs are
  /// planned in queue order before the other backfill candidates. Selective reservation
  /// (Srinivasan, Kettimuthu, Subramani and Sadayappan, "Selective Reservation Strategies for
  /// Backfill Job Scheduling", JSSPP 2002), with a wait threshold in place of their expansion-factor
  /// one: aggressive backfill keeps the mean low, the guard bounds the worst wait.
  Duration reserve_after = 0;
  /// The guard's threshold for wide jobs, seconds (0 = reserve_after): a job whose total demand
  /// exceeds `wide_fraction` of what its eligible nodes hold (GPUs for GPU jobs, else CPU
  /// millicores) waits only this long before its reservation. Backfill starves wide jobs most
  /// (narrow ones find holes; a wide one needs the machine drained), so they get a shorter bound.
  Duration reserve_after_wide = 0;
  double wide_fraction = 0.5;  // (0, 1]
};

/// Slurm multifactor priority weights (PriorityWeight*): priority = sum of weight x factor, each
/// factor in [0,1].
struct PriorityWeights {
  int64_t age = 0;
  int64_t fairshare = 0;
  int64_t job_size = 0;
  int64_t partition = 0;
  int64_t qos = 0;
  Duration max_age = 7 * 24 * 3600;   // PriorityMaxAge: the age factor reaches 1 here
  bool favor_small = false;           // PriorityFavorSmall: small jobs get the larger size factor
};

/// Fairshare algorithm: kClassic F = 2^(-U/S) on the association's effective usage; kFairTree
/// ranks siblings by level fairshare S/U, depth first (Slurm's Fair Tree).
enum class FairshareAlgorithm { kClassic, kFairTree };
const char* FairshareAlgorithmName(FairshareAlgorithm a);
std::optional<FairshareAlgorithm> ParseFairshareAlgorithm(const std::string& s);

/// How usage is charged and forgotten.
struct FairsharePolicy {
  FairshareAlgorithm algorithm = FairshareAlgorithm::kClassic;
  Duration half_life = 7 * 24 * 3600; // PriorityDecayHalfLife, seconds (0 = no decay)
  /// Billing weights (Slurm TRESBillingWeights) per resource-second: "cpu" (per core),
  /// "mem" (per GiB), "gpu" (any type) or "gpu:TYPE" (overrides "gpu"). Missing = 0, except
  /// "cpu" which defaults to 1 when the map is empty.
  std::map<std::string, double> billing_weights;
  /// What a running job's GPUs are charged: kAllocated (every GPU it holds, as Slurm and every
  /// peer do) or kBusy (each GPU-second x its measured utilization, Job::gpu_busy_fraction, when
  /// known): a team pays for the work its GPUs did; alone it makes idle holding free, so sites
  /// pair it with an IdlePolicy rule that requeues or cancels. CPU and memory: as allocated.
  enum class Charge { kAllocated, kBusy };
  Charge charge = Charge::kAllocated;
};

/// What happens to a preempted job (Slurm PreemptMode, set on the victim's QoS): kRequeue: SIGTERM,
/// grace_time to checkpoint, SIGKILL, back to PENDING keeping its submit time; kCancel: the same
/// signals, then the job ends CANCELLED.
enum class PreemptMode { kRequeue, kCancel };
const char* PreemptModeName(PreemptMode m);
std::optional<PreemptMode> ParsePreemptMode(const std::string& s);

/// How QoS preemption orders candidate victims. kLeastLostWork (default): least billing-weighted
/// work lost since each victim's last checkpoint first (PreemptionCost). kYoungestFirst: most
/// recently started first, ignoring checkpoints (the common baseline, e.g. Slurm's default
/// preempt ordering by start time), kept for comparisons.
enum class VictimOrder { kLeastLostWork, kYoungestFirst };

/// A quality of service: priority and limits for the jobs that ask for it. 0 = unlimited.
struct QosPolicy {
  std::string name;
  int64_t priority = 0;               // QoS factor = priority / max priority over QoS
  Duration max_wall = 0;              // seconds
  int64_t max_gpus_per_job = 0;
  int64_t max_gpus_per_user = 0;      // running GPUs of one user in this QoS
  int32_t max_running_jobs_per_user = 0;
  // Preemption (Slurm's QoS Preempt=, PreemptMode, GraceTime, PreemptExemptTime):
  std::vector<std::string> preempt;   // QoS whose running jobs this QoS's jobs may preempt
  PreemptMode preempt_mode = PreemptMode::kRequeue;  // as a victim
  Duration grace_time = 60;           // as a victim: seconds between SIGTERM and SIGKILL
  Duration preempt_exempt_time = 0;   // as a victim: not preempted before running this long
  int32_t max_preemptions = 0;        // as a victim: preempted at most this often (0 = unlimited)
};

/// A node of the account tree (Slurm association). Users appear as `users` of their account; a
/// user not listed gets 1 share. Listed users are the account's members: with enforced
/// associations only they may charge it (associations.h). Limits (0 = unlimited) cap the running total of the account and
/// every account below it (Slurm GrpTRES / GrpJobs, inherited down the tree).
struct AccountPolicy {
  std::string name;
  std::string parent;                 // "" = child of the root
  int64_t shares = 1;
  std::map<std::string, int64_t> user_shares;
  int64_t max_gpus = 0;
  int64_t max_cpu_millis = 0;
  int32_t max_running_jobs = 0;
  std::vector<std::string> allow_qos;  // QoS its jobs may use; empty = the parent's list (none: any)
  SourceLines source;
};
/// A user's association defaults (the policy's [[users]]; Slurm's DefaultAccount).
struct UserPolicy {
  std::string name;
  std::string default_account;  // charged when a job names no account ("" = see DefaultAccount)
  SourceLines source;
};
/// Price of a pool's resources (the policy's [pricing.POOL]): per core-hour and per GPU-hour by
/// GPU type ("" = any type without its own price).
struct PoolPricing {
  double cpu_hour = 0;
  std::map<std::string, double> gpu_hour;
};

/// Preemption-aware, cost-aware placement across pools and regions (pools.h).
struct PlacementPolicy {
  std::map<std::string, PoolPricing> pricing;            // by pool name (on-demand, spot, reserved)
  std::map<std::string, double> eviction_rate_per_hour;  // configured evictions per node-hour, by pool
  int32_t spot_max_evictions = 3;  // K: after K evictions a job runs on on-demand nodes only (0 = never)
  Duration spot_wait_budget = 600; // --spot=prefer: seconds waiting for spot before on-demand opens
  double egress_per_gb = 0;        // cost per GB of data read outside the job's data_region
};

/// Nodes held warm for a QoS: the first `nodes` up nodes of `pool` (in snapshot order) run jobs of
/// QoS `qos`, and jobs of other QoS only when their time limit is at most `borrow_limit` seconds
/// (short jobs that end before the nodes are likely needed; 0 = never lent).
struct WarmPool {
  std::string pool;
  int32_t nodes = 0;
  std::string qos;
  Duration borrow_limit = 0;
};

/// A partition called `name` with every other field at its default.
inline PartitionPolicy MakePartition(std::string name) {
  PartitionPolicy p;
  p.name = std::move(name);
  return p;
}
/// Named limits on user input (the policy's [limits]); schedd refuses over-limit input with an
/// error naming the field and the limit. Sizes in bytes.
struct InputLimits {
  int64_t max_name_bytes = 1024;            // job name
  int64_t max_script_bytes = 4 << 20;       // batch script (Slurm's default max_script_size, 4 MiB)
  int64_t max_env_bytes = 1 << 20;          // environment, keys and values together
  int32_t max_env_vars = 4096;
  int64_t max_argv_bytes = 128 << 10;       // argv, all arguments together
  int32_t max_argv = 4096;
  int64_t max_field_bytes = 4096;           // any other text field (paths, patterns, names, expressions)
  int32_t max_list_items = 16;              // gpu types, fallback tiers (each; at most 64)
  int32_t max_ids_per_request = 10000;      // job ids and references in one cancel/query/dependency
  int64_t max_array_bytes = 256 << 20;      // array elements x spec size stored by one submission
  int32_t max_pending_jobs_per_user = 10000;  // Slurm's MaxSubmitJobs (pending + held); 0 = none
  int64_t max_pending_bytes_per_user = 256 << 20;  // stored spec bytes of one user's pending jobs; 0 = none
  int32_t submit_rate_per_user = 100;       // sustained submissions/s per user (token bucket); 0 = none
  int32_t submit_burst_per_user = 1000;     // bucket size: submissions accepted at once
};

/// What a running job's prediction becomes each time the job outlives it (ExtendPrediction):
/// kIncremental: elapsed + 1 min, 5 min, 15 min, ... (Tsafrir, Etsion & Feitelson 2007);
/// kDoubling: twice the elapsed time ("recursive doubling", one of the corrections compared by
/// Gaussier et al., SC'15). Both are capped at the time limit.
enum class PredictionCorrection { kIncremental, kDoubling };

/// Which of a user's finished jobs a prediction reads (HistoryBook):
/// kUser: all of them (Tsafrir, Etsion & Feitelson 2007);
/// kRequest: those with the same request (task count, per-task resources and time limit) when
/// there are any, else all of them: Smith, Foster & Taylor's "templates" of similar jobs
/// ("Predicting Application Run Times Using Historical Information", JSSPP 1998), with the
/// user's history as the coarser template.
enum class HistoryBy { kUser, kRequest };

/// Run-time prediction for planning (the policy's [prediction]; predictor.h). When enabled,
/// schedd plans backfill reservations, shortest-first order and expected starts with a job's
/// predicted run time (Job::predicted_runtime); only the time limit ever ends a job.
struct PredictionPolicy {
  bool enabled = false;
  std::string predictor = "user-mean";  // "user-mean": UserMeanPredictor (Tsafrir et al. 2007);
                                        // "online-linear": OnlineLinearPredictor (after SC'15)
  int32_t history = 2;                  // run times kept and averaged per user (and template), 1..64
  PredictionCorrection correction = PredictionCorrection::kIncremental;  // "incremental" | "doubling"
  HistoryBy history_by = HistoryBy::kUser;  // "user" | "request"
};

/// How an elastic job that does not fit at its largest size picks its start ([elastic] start).
/// kLargest: at once, with the largest size that fits now (Slurm's sbatch -N MIN-MAX).
/// kEarliestFinish: that size only when it is expected to finish strictly before waiting for the
/// largest size would (moldable scheduling's partition-size selection, Srinivasan et al., HiPC
/// 2002); else the job waits (and is planned) at its largest size. See ElasticRuntime.
enum class ElasticStart { kLargest, kEarliestFinish };

/// Interactive allocations (the policy's [interactive]; jobs of mlrun and mlalloc, JobSpec
/// interactive): where they may run, how long, and when an idle one is released. Idle means no
/// session input or output, CPU use below idle_cpu_below and GPU utilization (where measured)
/// below idle_gpu_below, after Determined's and JupyterHub's
/// idle culling but on what the job does rather than on a browser's activity.
struct InteractivePolicy {
  std::vector<std::string> partitions;  // that take interactive jobs; empty = every partition
  Duration max_time = 0;                // longest time limit of an interactive job (s); 0 = the partition's
  Duration idle_timeout = 0;            // idle this long (s): released; 0 = never
  Duration idle_warning = 300;          // the client is warned this long (s) before the release
  double idle_cpu_below = 0.1;          // CPU use (cores, all its tasks together) that counts as idle
  double idle_gpu_below = 5;            // GPU utilization (percent, its GPUs' mean; NVML) that counts as idle
  SourceLines source;                   // lines of the table and its keys
};

/// What schedd does with a node whose agent reports a failing health check (the policy's [health];
/// agentd/health.h runs the checks). Slurm's HealthCheckProgram + LBNL NHC drain and, NHC's
/// default, bring back a node they drained once its checks pass.
struct HealthPolicy {
  /// kDrain: no new work, running jobs keep running; kDrainAndRequeue: also checkpoint-requeue the
  /// jobs running there (SIGTERM, requeue_grace, SIGKILL; elastic gangs restart smaller without it).
  enum class Action { kDrain, kDrainAndRequeue };
  Action action = Action::kDrain;
  bool auto_resume = true;     // a node drained for health returns once its checks pass again
  Duration requeue_grace = 60; // seconds between SIGTERM and SIGKILL for kDrainAndRequeue
  SourceLines source;          // lines of the table and its keys
};

/// The gang watchdog (the policy's [watchdog]; schedd/server/gang_watchdog.h): a running gang whose
/// ranks report their training step (MLSCHED_STATUS_FILE) is watched for a stall: no rank advanced
/// for stall_after while every task lives. Then stack traces of every rank are taken, the gang is
/// checkpoint-requeued, and the node whose ranks are outside the collective (or behind the others)
/// is suspected; suspected by the jobs of drain_after different users within suspect_window, it
/// is drained (the evidence comes from users' processes: one user alone cannot drain a node).
/// On by default with conservative settings (a stall is 30 min without a step; a straggler runs
/// below half the gang's median rate for 15 min); a job that writes no status file is never judged.
struct WatchdogPolicy {
  Duration stall_after = 1800;       // seconds without progress that make a stall; 0 = off
  /// A straggler: a node whose ranks' step rate measured by compute time (the status file's
  /// compute_s: seconds outside collectives per step) is below straggler_ratio x the median of
  /// the gang's other nodes over straggler_window. 0 = off.
  double straggler_ratio = 0.5;
  Duration straggler_window = 900;   // seconds compared
  int32_t drain_after = 2;           // different users whose jobs suspected a node before it is drained
  Duration suspect_window = 86400;   // ... counted over this many seconds
  Duration requeue_grace = 60;       // seconds from SIGTERM to SIGKILL when a stalled gang is requeued
  SourceLines source;                // lines of the table and its keys
};

/// The idle-GPU policy (the policy's [idle]; schedd/server/idle_gpus.h): a running job whose GPUs'
/// mean utilization (NVML, sampled by its agents) stays below gpu_util_below percent for `after`
/// seconds is idle: kNotify records an IDLE event, counts it in the metrics, flags it in mlq and
/// appends a warning to its tasks' stderr; kRequeue also checkpoint-requeues it (SIGTERM,
/// requeue_grace, SIGKILL); kCancel cancels it (reason IdleGPUs). After Princeton's
/// job_defense_shield and the "requests GPUs and runs nothing on them" pattern of issue 34.
struct IdleRule {
  enum class Action { kNotify, kRequeue, kCancel };
  double gpu_util_below = 5;   // percent (0..100); 0 = off
  Duration after = 1800;       // seconds below it, continuously
  Action action = Action::kNotify;
};
/// [idle] holds the default rule; [idle.partitions.NAME] and [idle.qos.NAME] override any of its
/// keys (a job's QoS over its partition over the default); exempt_* name jobs it never touches.
struct IdlePolicy {
  IdleRule rule;
  std::map<std::string, IdleRule> partitions;  // overrides, complete (defaults filled in)
  std::map<std::string, IdleRule> qos;
  std::vector<std::string> exempt_accounts, exempt_users, exempt_qos;
  Duration requeue_grace = 60;  // seconds from SIGTERM to SIGKILL for kRequeue
  SourceLines source;           // lines of the table and its keys
};
const char* IdleActionName(IdleRule::Action a);

/// Elastic gangs (the policy's [elastic]; elastic.h): how an elastic job starts, and when a running
/// one below its largest size (or on a fallback tier) is asked to checkpoint and restart.
struct ElasticPolicy {
  ElasticStart start = ElasticStart::kLargest;
  bool grow = true;                    // false: running jobs never grow
  Duration min_resize_interval = 600;  // seconds an attempt runs before it may be resized (no thrash)
  Duration restart_cost = 60;          // seconds a checkpoint + restart costs, for jobs not yet measured
  /// Expected speed of a job on its preferred accelerator relative to a fallback tier (>= 1; 1 =
  /// move back only when its own type also lets it grow): the gain of a tier return is
  /// remaining x (1 - from / (to x tier_speedup)).
  /// One factor for every pair of tiers: a per-type throughput table (Gavel, OSDI'20) is finer.
  double tier_speedup = 2.0;
};

/// Elastic capacity of one pool (the policy's [provisioning.POOL]; provisioning.h), after Slurm's
/// power saving (ResumeProgram / SuspendProgram): schedd runs `resume_program HOSTLIST` to bring up
/// agents on new nodes of shape `shape` while jobs that fit it wait for resources, and
/// `suspend_program HOSTLIST` for nodes it created that stayed idle `idle_time` seconds or did not
/// register within `resume_timeout` seconds.
struct ProvisioningPolicy {
  Pool pool = Pool::kOnDemand;
  std::string resume_program;       // absolute path, run without a shell
  std::string suspend_program;      // absolute path, run without a shell
  int32_t max_nodes = 0;            // nodes of this pool schedd may hold created at once (requested + registered)
  Duration idle_time = 600;         // seconds a created node runs no task before it is released
  Duration resume_timeout = 300;    // seconds a requested node has to register
  double max_cost_per_hour = 0;     // budget of the created nodes, [pricing.POOL] units per hour; 0 = none
  Node shape;                       // what one created node registers as (name empty, pool = `pool`)
  SourceLines source;
};

/// The node feature of nodes whose agent runs jobs of uid 0 (agentd --allow-root-jobs, a
/// provisioned pool's `root_jobs`); every job of uid 0 requires it (Slurm's DisableRootJobs as the
/// default).
inline constexpr const char* kRootJobsFeature = "mlsched:root-jobs";
/// Feature of nodes whose agent runs container jobs (it found its OCI runtime, skopeo and umoci);
/// a job with a container image requires it.
inline constexpr const char* kContainersFeature = "mlsched:containers";
/// Most nodes in JobSpec::exclude_nodes (beyond it the oldest exclusion is dropped).
inline constexpr size_t kMaxExcludedNodes = 64;

/// One [[nodes]] entry of the policy (slurm.conf's NodeName= lines): nodes the cluster may have,
/// where they are, and the most each may register. The controller, not the node, decides what a
/// node holds (docs/operations.md, "Node inventory").
struct NodeDeclaration {
  std::vector<std::string> names;   // expanded from a hostlist ("gpu-[01-16]")
  std::optional<Pool> pool;         // unset = any pool
  Node shape;                       // capacity: the most each may register (cpu_millis, memory_bytes,
                                    // gpus by type); region/zone/domain: must match when set;
                                    // features: given to the node
};

/// The policy's node inventory ([inventory] and [[nodes]]).
struct NodeInventory {
  std::vector<NodeDeclaration> nodes;
  std::map<std::string, size_t> index;  // node name -> its entry in `nodes`
  /// Nodes no [[nodes]] entry names (and no provisioned pool requested) are refused; false: such
  /// nodes register with what they report, as before an inventory existed.
  bool strict = false;
  /// A registration above its declared shape is clamped to it (logged) instead of refused.
  bool clamp = false;
};

struct PolicySet {
  std::vector<PartitionPolicy> partitions{MakePartition("default")};
  std::string default_partition = "default";
  std::vector<std::string> operators; // user names allowed to act on any job
  QueueOrder queue_order = QueueOrder::kFifo;
  BackfillPolicy backfill;
  PriorityWeights weights;
  FairsharePolicy fairshare;
  std::vector<QosPolicy> qos;         // empty = no QoS limits; jobs' qos names are then ignored
  std::string default_qos = "normal";
  std::vector<AccountPolicy> accounts;  // empty = every account has 1 share and no limits
  std::vector<UserPolicy> users;        // per-user defaults
  // Submit-time associations (Slurm's AccountingStorageEnforce=associations,qos): an unprivileged
  // user may charge only accounts that list them and use only defined, allowed QoS. false: any
  // account and QoS (single-user clusters). Partition allow lists and nice apply either way.
  bool enforce_associations = true;
  VictimOrder victim_order = VictimOrder::kLeastLostWork;  // QoS preemption (preemption.h)
  PlacementPolicy placement;
  std::vector<WarmPool> warm_pools;
  InputLimits limits;                   // [limits]; root, schedd's user and operators skip the per-user ones
  PredictionPolicy prediction;          // [prediction]
  ElasticPolicy elastic;                // [elastic]
  InteractivePolicy interactive;        // [interactive]
  HealthPolicy health;                  // [health]
  WatchdogPolicy watchdog;              // [watchdog]
  IdlePolicy idle;                      // [idle]
  std::vector<ProvisioningPolicy> provisioning;  // [provisioning.POOL], at most one per pool
  NodeInventory inventory;              // [inventory], [[nodes]]
};

/// The idle-GPU rule for a job (its QoS's override, else its partition's, empty names meaning the
/// defaults, else [idle]'s); nullopt when the job is exempt or the rule is off (gpu_util_below 0).
std::optional<IdleRule> IdleRuleFor(const PolicySet& policy, const JobSpec& spec);

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
  int64_t priority = 0;               // multifactor priority (0 under FIFO order)
};

/// Preempt this running job (a whole gang) so that `preemptor` can start: signal its tasks with
/// SIGTERM, allow `grace` seconds to checkpoint (exit 75), then SIGKILL; requeue or cancel it.
struct PreemptDecision {
  JobId victim = 0;
  JobId preemptor = 0;
  PreemptMode mode = PreemptMode::kRequeue;
  Duration grace = 60;
  Duration lost_work = 0;             // seconds since its last checkpoint (or start), at `now`
};

/// The output of one cycle: decisions as data; the caller applies them.
/// Ask this running elastic job to checkpoint and restart with `to` tasks instead of `from`
/// (PlanGrows, elastic.h): the caller signals its tasks with the reason "resize".
struct ResizeDecision {
  JobId job = 0;
  int32_t from = 0, to = 0;  // tasks
  Duration gain = 0;         // seconds of run time saved: remaining x (1 - from / to), or
                             // remaining x (1 - from / (to x tier_speedup)) for a tier return
  Duration cost = 0;         // seconds the checkpoint and restart are expected to cost
  std::string accelerator;   // tier return: the job's own GPU type it moves back to (its own types,
                             // comma-separated, when it named several); "" for a size change
  std::string from_accelerator;  // tier return: the fallback tier it leaves (a GPU type or "cpu")
};

/// One step of a free-resource profile: the sum over all up nodes of what is free from `time`
/// (seconds) until the next step's time (the last step: from then on). CPU millicores, bytes, GPUs.
struct FreeStep {
  Timestamp time = 0;
  int64_t cpu_millis = 0;
  int64_t memory_bytes = 0;
  int64_t gpus = 0;
};

struct CyclePlan {
  std::vector<StartDecision> starts;
  std::vector<PendingUpdate> pending;
  std::vector<PreemptDecision> preemptions;
  std::vector<ResizeDecision> resizes;
  /// Under conservative backfill (empty otherwise): the planner's availability timeline summed
  /// over nodes once its starts and planned starts (reservations) are taken, from now on, before
  /// preemptions and grows; steps in time order. A job that needs more than this over
  /// [now, now + its run time) could not have started in this cycle, nor in a later one where
  /// nothing but submissions changed (the simulator's idle passes).
  std::vector<FreeStep> free_after;
};

/// Why a spec can never run on this cluster (e.g. "job needs 9 GPUs per task but no node has more
/// than 8"), or nullopt when some set of nodes could hold it once empty.
std::optional<std::string> CheckJobFeasible(const std::vector<Node>& nodes, const PolicySet& policy,
                                            const JobSpec& spec);

class NodeLedger;

/// One scheduling cycle: a pure, deterministic function of (state, policy, now).
struct SchedulingCycle {
  static CyclePlan Run(const ClusterState& state, const PolicySet& policy, Timestamp now);
  /// The same, starting from `occupancy`, a ledger the caller keeps equal to
  /// NodeLedger(state.nodes, state.jobs) (built over the same nodes vector, with every running
  /// allocation occupied and no other) by Occupy on each start and Release on each stop. The
  /// cycle copies it, O(N) for N nodes, instead of building it, O(N + T) hashing and pointer
  /// chasing for T running tasks (the simulator's incremental ledger).
  static CyclePlan Run(const ClusterState& state, const PolicySet& policy, Timestamp now,
                       const NodeLedger& occupancy);
};

}  // namespace mlsched::core
