// Discrete-event replay of a trace through core::SchedulingCycle::Run, exactly as the daemon
// drives it: the simulator owns a ClusterState, applies each CyclePlan, and advances a virtual
// clock. Same trace + options + seed -> identical results.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "schedd/core/predictor.h"
#include "schedd/core/types.h"
#include "schedd/sim/fleet.h"
#include "schedd/sim/trace.h"

namespace mlsched::sim {

/// Node failures (mlsim --node-failures; schedd/sim/README.md "Node failures and the watchdog"):
/// each static node fails at exponential intervals, `bad_fraction` of them (chosen by the seed) at
/// `bad_rate_per_node_hour`. A failure crashes the gang on the node (requeued, losing the work
/// since its last checkpoint; the node reboots for reboot_s and comes back unrepaired), or with
/// probability hang_fraction hangs it: the gang holds all its nodes without progress until its
/// time limit, or hang_detect_s with the watchdog. With `drain_after` > 0 (health checks and the
/// gang watchdog on), a node that failed drain_after times within suspect_window_s is drained
/// and repaired: back, no longer bad, after repair_s.
struct FaultModel {
  double rate_per_node_hour = 0;       // failures per node-hour of an ordinary node
  double bad_fraction = 0;             // share of the static nodes that are bad, in [0, 1]
  double bad_rate_per_node_hour = 0;   // failures per node-hour of a bad node
  double hang_fraction = 0;            // share of failures that hang the gang, in [0, 1]
  core::Duration reboot_s = 600;       // a crashed node is back (unrepaired) after this long
  int32_t drain_after = 0;             // 0: blind retry (no health checks, no watchdog)
  core::Duration suspect_window_s = 86400;
  core::Duration hang_detect_s = 1830; // stall_after (30 min) + the diagnosis (30 s)
  core::Duration repair_s = 3 * 86400;
  bool Any() const { return rate_per_node_hour > 0 || (bad_fraction > 0 && bad_rate_per_node_hour > 0); }
};

/// How to replay.
struct SimOptions {
  core::PolicySet policy;
  /// Also run a cycle this often (seconds) while jobs are pending; 0 = only after events.
  core::Duration cycle_period_s = 0;
  uint64_t seed = 1;  // spot evictions
  /// Evicted or preempted jobs resume from their last checkpoint taken every this many seconds
  /// of their attempt; 0 = they restart from scratch. A job's own TraceJob::checkpoint_interval_s
  /// (when >= 0) overrides it. Running jobs report their latest checkpoint to the core
  /// (core::Job::last_checkpoint), which QoS preemption reads to choose victims.
  core::Duration checkpoint_interval_s = 0;
  /// Optional source of the time limits the core plans with (not owned); null = requested times.
  /// Fed each finished job's run time (COMPLETED and TIMEOUT; not cancelled preemption victims).
  core::RuntimePredictor* predictor = nullptr;
  /// Record the queue/usage time series (for plots).
  bool record_series = false;
  /// Seconds after submission at which JobOutcome::estimate_recheck samples the plan (1 h).
  core::Duration estimate_recheck_s = 3600;
  /// Optional (not owned; leave `predictor` null): the estimates come from a shadow pass each
  /// cycle that plans with this predictor's time limits and is not applied, while the schedule
  /// keeps the requested times: time-limit scheduling with prediction-based estimates, on the
  /// same schedule as without it. Fed like `predictor`. Costs a second core pass per cycle.
  core::RuntimePredictor* estimate_predictor = nullptr;
  /// Record JobOutcome::estimate_at_submit and estimate_recheck. When false they stay -1 and a
  /// pass under EASY or conservative backfill whose only effect would be new planned starts may be
  /// skipped (see `idle_shortcuts`); every other output is the same.
  bool estimates = true;
  /// Skip the work of passes whose decisions are known without running them, with byte-identical
  /// results (tests turn it off to check that): (1) when no pending job's total demand fits the
  /// free total, the pass is counted but not run (under EASY or conservative only without
  /// `estimates`; never with keep_plans, preemption or a shadow estimator); (2) under FIFO order
  /// with no backfill or EASY (and no reserve_after: a starved job's reservation could block one
  /// that fits), the core sees only the first pending jobs in queue order (and, under
  /// EASY, those whose demand fits the free total and that no earlier, at most as long job of
  /// their shape covers: PendingView's records): no pass then costs O(queue). A pass whose
  /// decisions could depend on a job left out is run again with more jobs; (3) under conservative
  /// backfill (FIFO, no window or resolution), a pass after nothing but submissions is skipped
  /// when no job submitted since fits the last pass's CyclePlan::free_after.
  bool idle_shortcuts = true;
  /// Elastic gangs (TraceJob specs with spec.elastic set, e.g. mlsim --elastic): a job's work is
  /// run_time x speedup(n) at its traced size n; at k tasks it advances speedup(k) / speedup(n)
  /// traced seconds per second, speedup(k) = k^speedup_exponent (1 = linear; in (0, 1]:
  /// sub-linear). Rigid jobs always run at their traced rate.
  double speedup_exponent = 1.0;
  /// Provisioning (the policy's [provisioning.POOL]): seconds from a resume request until the
  /// node joins the fleet.
  core::Duration boot_delay_s = 120;
  /// Report node-hours and cost (SimResult::pools) for the static fleet too, priced with the
  /// policy's [pricing.POOL]; always on when the policy provisions nodes.
  bool report_cost = false;
  /// Node failures and hangs (none by default); drawn from their own seeded stream, so spot
  /// evictions are the same with and without them.
  FaultModel faults;
};

/// Limits on SimOptions' elastic and provisioning settings (checked by Simulate).
inline constexpr double kMinSpeedupExponent = 0.05;
inline constexpr core::Duration kMaxBootDelayS = 86400;

/// One attempt of a job on nodes: [start, end).
struct RunSpan {
  core::Timestamp start = 0;
  core::Timestamp end = 0;
};

/// What happened to one job.
struct JobOutcome {
  core::JobId id = 0;               // the trace's id
  std::string user, account, accelerator;
  int64_t size = 0;                 // processors or GPUs
  core::Timestamp submit = 0;
  core::Timestamp first_start = -1; // -1: never started
  core::Timestamp end = -1;         // -1: never finished
  core::Duration run_time = 0;      // the recorded (useful) run time
  core::Duration busy_s = 0;        // time held on nodes over all attempts (includes lost work)
  core::JobState state = core::JobState::kPending;  // final state
  int32_t attempts = 0;
  int32_t evictions = 0;
  int32_t preemptions = 0;
  double lost_resource_hours = 0;   // size x work lost to evictions/preemptions, hours
  /// Seconds of work lost (run since the attempt's last checkpoint, summed over attempts) when
  /// QoS preemption stopped the job, and when a spot eviction did.
  core::Duration lost_preemption_s = 0;
  core::Duration lost_eviction_s = 0;
  /// Node failures (SimOptions::faults): attempts they ended, and the work they lost plus the time
  /// a hung attempt held its nodes, seconds and size x hours (also in lost_resource_hours).
  int32_t failures = 0;
  core::Duration lost_failure_s = 0;
  double lost_failure_resource_hours = 0;
  /// Elastic jobs: resizes (checkpoint and restart at another size) and the size x restart-cost
  /// seconds they spent dead after them, hours (also in lost_resource_hours).
  int32_t resizes = 0;
  double lost_resize_resource_hours = 0;
  /// Resource-seconds held over all attempts (size of each attempt x its length); -1 = not tracked
  /// (rigid jobs: size x busy_s). Set for elastic jobs, whose attempts differ in size.
  double resource_s = -1;
  /// Elastic jobs: the eviction and preemption parts of lost_resource_hours at the sizes the job
  /// ran with; -1 = not tracked (rigid jobs: size x lost_eviction_s / 3600, likewise preemption).
  double lost_eviction_resource_hours = -1, lost_preemption_resource_hours = -1;
  std::string infeasible;           // non-empty: never admitted (CheckJobFeasible's reason)
  std::vector<RunSpan> runs;        // every attempt, in order (for plots)
  /// Start-time estimates (the core's PendingUpdate::expected_start), seconds of simulated time;
  /// -1 = none. At submission: the plan of the job's first cycle (the one at its submit time), set
  /// only when that cycle left it pending with a planned start. After SimOptions::estimate_recheck_s
  /// (1 h): the plan of the last cycle at or before submit + recheck while the job had not yet
  /// started, set only when it was still pending then. Requeued attempts are not recorded.
  core::Timestamp estimate_at_submit = -1;
  core::Timestamp estimate_recheck = -1;
};

/// One point of the time series (recorded at each cycle when SimOptions::record_series).
struct SeriesPoint {
  core::Timestamp time = 0;
  int64_t pending = 0;
  int64_t running = 0;
  int64_t busy = 0;                 // processors or GPUs held
};

/// One applied QoS preemption (core::PreemptDecision), recorded when the victim stopped.
struct PreemptionRecord {
  core::Timestamp decided = 0;      // the cycle that chose the victim, seconds
  core::Timestamp stopped = 0;      // decided + the victim QoS's grace time, seconds
  core::JobId victim = 0;           // the trace's ids
  core::JobId preemptor = 0;
  core::Duration planned_lost_s = 0;  // PreemptDecision::lost_work: core's view at `decided`, s
  core::Duration lost_s = 0;        // work the victim lost at `stopped`, seconds
  bool cancelled = false;           // preempt mode cancel: the victim ended CANCELLED
};

/// Node-hours and cost of one pool's nodes, static ("on-demand") or provisioned
/// ("spot/provisioned"). Static nodes are billed from the first submission to the last event
/// (down time included); provisioned ones from their resume request to their release (booting
/// included) or the end. Cost = node-hours x core::NodeCostPerHour (the policy's [pricing.POOL]).
struct PoolUsage {
  int64_t static_nodes = 0;
  int64_t requested = 0;   // provisioned: nodes asked of the resume program
  int64_t released = 0;    // provisioned: suspended after idle_time or when down (evicted)
  int64_t failed = 0;      // provisioned: not booted within resume_timeout
  int64_t evicted = 0;     // provisioned spot nodes evicted while registered
  double node_hours = 0;
  double cost = 0;
  /// Provisioned: the most the pool's held nodes (requested + registered) cost per hour at once.
  double peak_cost_per_hour = 0;
};

/// The whole replay.
struct SimResult {
  std::vector<JobOutcome> jobs;     // in trace order
  std::string resource;             // "gpu" when the fleet has GPUs, else "cpu"
  int64_t capacity = 0;             // GPUs or processors
  int64_t cycles = 0;
  /// Of `cycles`, passes not run because no pending job could start (SimOptions::idle_shortcuts).
  int64_t skipped_cycles = 0;
  int64_t evictions = 0, preemptions = 0, fallbacks = 0;
  /// Wall time of each pass run (not deterministic; not printed); skipped passes have none.
  std::vector<double> cycle_wall_s;
  std::vector<SeriesPoint> series;
  std::vector<PreemptionRecord> preemption_log;  // in the order the victims stopped
  /// Elastic gangs: jobs with a range of sizes, and resizes applied (core::ResizeDecision).
  int64_t elastic_jobs = 0, resizes = 0;
  /// SimOptions::faults: node failures drawn (on idle nodes too), attempts hung, nodes drained and
  /// repaired by the health checks and watchdog.
  int64_t node_failures = 0, hangs = 0, health_drains = 0;
  /// Resource-seconds the fleet offered from the first submission to the end; 0 = capacity x
  /// makespan (a fixed fleet). Set when nodes come and go (provisioning).
  double capacity_s = 0;
  /// By "POOL/static" or "POOL/provisioned"; empty unless SimOptions::report_cost or provisioning.
  std::map<std::string, PoolUsage> pools;
};

/// Replays `trace` on `fleet`. QoS preemptions the core plans are applied: the victim keeps running
/// (marked preempting) for its QoS's grace time, then stops, loses the work since its last
/// checkpoint (no checkpoint is taken on the signal) and is requeued keeping its submit time, or
/// ends CANCELLED (preempt mode cancel; it then never finishes). Throws std::logic_error when the
/// core returns an impossible plan (a start for a job that is not pending, an empty allocation, or
/// a victim that is not running; a resize of a job that is not running). Elastic jobs
/// (core::IsElastic) run at SimOptions::speedup_exponent's rate for their size and are resized as
/// the core's plan.resizes say (checkpoint, requeue, restart in a pass at the same time after
/// the decision's restart cost); with the policy's [provisioning.POOL], core::PlanProvisioning
/// runs after every pass and at every other event time, and its requested nodes join after
/// SimOptions::boot_delay_s. Throws std::invalid_argument on options outside their limits, or
/// elastic jobs with a predictor.
SimResult Simulate(const Trace& trace, const Fleet& fleet, const SimOptions& options);

}  // namespace mlsched::sim
