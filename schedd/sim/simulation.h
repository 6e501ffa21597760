// The simulation behind Simulate (simulator.h): one ClusterState driven through the core on a
// virtual clock. Internal to mlsched_sim: simulator.cc holds the event loop and the job events,
// simulator_cycle.cc the scheduling passes (with the idle shortcuts of SimOptions).
#pragma once

#include <chrono>
#include <optional>
#include <map>
#include <queue>
#include <set>
#include <random>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "schedd/core/ledger.h"
#include "schedd/core/provisioning.h"
#include "schedd/sim/pending_view.h"
#include "schedd/sim/simulator.h"

namespace mlsched::sim::detail {

using core::Duration;
using core::Timestamp;

/// Events at one timestamp run in this order, all after that timestamp's submissions and before
/// its scheduling pass (submission < termination < start < scheduling pass). kPreemptStop: a
/// preemption victim's grace time is over. kEviction and kRecovery target a node id (NodeInfo);
/// kNodeBoot a provisioned node's boot (booting_); kProvisionTick only wakes the provisioner;
/// kGrowDue: a shrunk elastic attempt has run min_resize_interval (a pass may grow it now).
enum class EventKind : int {
  kFinish = 0, kPredictionDue = 1, kEviction = 2, kRecovery = 3, kPreemptStop = 4,
  kNodeBoot = 5, kProvisionTick = 6, kGrowDue = 7,
  kNodeFailure = 8, kHangEnd = 9, kFailureRecovery = 10
};

/// Why a running job goes back to the queue (kResize: it checkpointed to restart at a new size).
enum class StopCause { kEviction, kPreemption, kResize, kFailure };

/// Passes one cycle may run to restart resized jobs (the rest of a last pass's resizes wait).
inline constexpr int kMaxResizeRounds = 4;

/// Simulation-only facts of one node of ClusterState::nodes (same index).
struct NodeInfo {
  int64_t id = 0;                // stable: events name nodes by it (indices shift on removal)
  double rate_per_hour = 0;      // spot evictions per node-hour
  Duration recovery_s = 0;       // static nodes: back up after an eviction this long
  bool provisioned = false;      // created by the provisioner: evicted = gone, never recovers
  // SimOptions::faults: this node's failure rate per hour (bad nodes' until repaired), and its
  // failures within the suspect window (health checks and watchdog).
  double failure_rate_per_hour = 0;
  bool bad = false;
  bool repairing = false;        // drained for repair (kFailureRecovery brings it back healthy)
  int32_t failure_generation = 0;  // failure events of an older generation are stale
  std::vector<Timestamp> failures;
};

struct Event {
  Timestamp time = 0;
  EventKind kind = EventKind::kFinish;
  int64_t seq = 0;     // insertion order: ties broken deterministically
  int64_t target = 0;  // job index or node index
  int32_t attempt = 0;
  bool operator>(const Event& o) const {
    return std::tie(time, kind, seq) > std::tie(o.time, o.kind, o.seq);
  }
};

/// Per-job simulation state beside the core's Job.
struct Live {
  int64_t slot = -1;             // index in ClusterState::jobs, -1 when not there
  Timestamp attempt_start = 0;
  Duration progress = 0;         // checkpointed useful work, seconds
  int extensions = 0;            // predictor extensions this attempt
  Duration shadow_limit = 0;     // SimOptions::estimate_predictor's prediction at submission
  bool running = false;
  // Pending preemption of this attempt (set from a PreemptDecision until the victim stops).
  core::JobId preemptor = 0;
  core::Timestamp preempt_decided = 0;
  Duration planned_lost_s = 0;
  bool preempt_cancel = false;
  Need held;                     // what the running attempt holds (PendingView's bookkeeping)
  // Elastic gangs: the attempt's tasks, its rate (traced seconds of work per second), and the
  // restart cost (seconds without progress) at its start; next_dead_s: that of the next attempt.
  int32_t tasks = 0;
  double rate = 1.0;
  Duration dead_s = 0, next_dead_s = 0;
  double resource_s = 0;         // size x seconds held, all attempts
  Timestamp hung_since = 0;      // SimOptions::faults: the attempt hangs since then; 0 = not hung
};

/// One replay (Simulate): owns the ClusterState the core sees, the event queue and the outcomes.
class Simulation {
 public:
  Simulation(const Trace& trace, const Fleet& fleet, const SimOptions& options)
      : trace_(trace), fleet_(fleet), options_(options), live_(trace.jobs.size()),
        rng_(options.seed), fault_rng_(options.seed ^ 0x9e3779b97f4a7c15ULL), view_(FleetCapacity(fleet), kVisiblePrefix) {
    state_.nodes = fleet.nodes;
    accrue_usage_ = options.policy.queue_order == core::QueueOrder::kMultifactor &&
                    options.policy.weights.fairshare > 0;
    preemption_ = std::any_of(options.policy.qos.begin(), options.policy.qos.end(),
                              [](const core::QosPolicy& q) { return !q.preempt.empty(); });
    result_.jobs.resize(trace.jobs.size());
    result_.resource = TotalGpus(fleet) > 0 ? "gpu" : "cpu";
    result_.capacity =
        result_.resource == "gpu" ? TotalGpus(fleet) : TotalCpuMillis(fleet) / 1000;
    InitCapacity();
    ChooseShortcuts();
  }

  SimResult Run();

 private:
  /// Node bookkeeping, provisioning and cost (simulator_capacity.cc).
  void InitCapacity();
  /// Index in state_.nodes of the node with this id, or -1 when it left the fleet.
  int64_t NodeIndex(int64_t id) const;
  /// Adds the fleet's offered resource-seconds up to now_ (SimResult::capacity_s).
  void AccrueCapacity();
  /// One provisioning step after a cycle (`plan`; an empty one between cycles).
  void Provision(const core::CyclePlan& plan);
  void BootNode(int64_t boot);
  void ReleaseNode(const core::ProvisionRelease& release);
  /// Bills a provisioned node from its request to now_ and forgets it.
  void BillProvisioned(const std::string& name, core::Pool pool);
  /// Bills the static nodes and the still-held provisioned ones up to now_ (end of the run).
  void FinishCapacity();
  /// Elastic gangs: checkpoint `decision.job` and requeue it to restart at another size.
  void Resize(const core::ResizeDecision& decision);
  /// Traced seconds of work per second for job `index` at `tasks` tasks (1 at its traced size).
  double Rate(size_t index, int32_t tasks) const;
  /// Time limit of pending elastic job `index`: its remaining work at its smallest size (plus the
  /// restart cost it will pay), seconds, so that the core's plans hold at any size it starts with.
  Duration PendingLimit(size_t index) const;
  /// Resources (GPUs or processors) job `index` holds at `tasks` tasks.
  int64_t SizeAt(size_t index, int32_t tasks) const;
  /// Traced seconds of work the current attempt did in its first `wall` seconds.
  Duration WorkDone(size_t index, Duration wall) const;
  /// Ends the current attempt's bookkeeping (busy time, resources held, the run span, dead time).
  void CloseAttempt(size_t index);
  void Submit(size_t index);
  /// core::CheckJobFeasible on the fleet, remembered per job shape (it costs O(nodes) per call).
  const std::optional<std::string>& Feasibility(const core::JobSpec& spec);
  void HandleEvent(const Event& e);
  void Finish(size_t index);
  void PredictionDue(size_t index);
  /// Spot eviction of the node with this id (NodeInfo::id): its jobs are requeued; a static node
  /// recovers after its recovery time, a provisioned one stays down until released.
  void EvictNode(int64_t id);
  void RecoverNode(int64_t id);
  /// Requeues (as evicted) every running job with a task on state_.nodes[node].
  void RequeueJobsOn(size_t node);
  void Requeue(size_t index, StopCause cause);
  void Preempt(const core::PreemptDecision& decision);
  void PreemptStop(size_t index);
  void ReportCheckpoints();
  /// Seconds between the job's checkpoints (0 = never).
  Duration CheckpointInterval(size_t index) const {
    const Duration own = trace_.jobs[index].checkpoint_interval_s;
    return own >= 0 ? own : options_.checkpoint_interval_s;
  }
  /// Seconds of the current attempt covered by its latest checkpoint, at now_.
  Duration SavedThisAttempt(size_t index) const {
    // A hung attempt checkpoints no more.
    const Timestamp until = live_[index].hung_since > 0 ? live_[index].hung_since : now_;
    const Duration elapsed = until - live_[index].attempt_start;
    const Duration interval = CheckpointInterval(index);
    return interval > 0 ? (elapsed / interval) * interval : 0;
  }
  void Cycle();
  /// Node failures (simulator_faults.cc, SimOptions::faults): draws the bad nodes and every
  /// node's first failure; a failure crashes or hangs the gangs on the node, and with drain_after
  /// drains a repeat offender for repair; a hang ends (requeue) at its detection or time limit.
  void InitFaults();
  void FailNode(int64_t id, int32_t generation);
  void EndHang(size_t index);
  void RecoverFailedNode(int64_t id);
  Duration FailureDelay(double rate_per_hour);
  /// Applies a pass's starts, preemptions and pending updates.
  void Apply(const core::CyclePlan& plan);
  /// Sets skip_idle_ and parking_ from the options, the policy and the trace (SimOptions::idle_shortcuts).
  void ChooseShortcuts();
  /// One core pass over the jobs the core should see (all of them, or PendingView's choice when
  /// parking_; repeated with more of them while PassStands fails). Counts the pass.
  core::CyclePlan Pass();
  /// Moves jobs between state_ and parked_jobs_ as PendingView::Arrange says.
  void Arrange();
  /// True when a pass with parked jobs left out decided exactly what the pass over every job would:
  /// the job that blocked the queue (no backfill) or holds the reservation (EASY) comes before
  /// every parked job, so the parked ones would only have been left pending (they cannot start).
  bool PassStands(const core::CyclePlan& plan) const;
  /// After a pass with shapes_: shows the parked jobs a record no longer covers (a record that
  /// started or was held by something other than resources; PendingView::OpenGap). True when there
  /// were none: the pass stands as far as shapes go.
  bool GapsClosed(const core::CyclePlan& plan);
  /// The PendingView shape key of pending `job` (everything the core's shape key reads), or nullopt
  /// when shapes_ is off or the job must stay visible while its need fits (held, dependencies,
  /// fallback tiers, elastic, a spot preference that changes with its wait).
  std::optional<std::string> ShapeKey(const core::Job& job) const;
  /// AddPending for job `index` (now in state_), with its shape key and planned run time.
  void AddPending(size_t index);
  /// With replan_skip_: true when the last pass run still decides this one (only submissions since)
  /// and no job submitted since fits its CyclePlan::free_after over [now, now + run time): the pass
  /// would start nothing. O(jobs submitted since x log steps).
  bool NothingNewFits() const;
  /// Keeps the plan a pending job's first cycle, and its last cycle within the recheck delay,
  /// gave it (JobOutcome::estimate_at_submit, estimate_recheck).
  void RecordEstimate(size_t index, const std::optional<Timestamp>& expected);
  /// Records the estimates of a pass planned with SimOptions::estimate_predictor's time limits on
  /// a copy of the state (not applied): a job it would start now is estimated to start now.
  void ShadowEstimates();
  void Start(const core::StartDecision& decision);
  void Compact();
  /// Takes job `index` out of state_.jobs (its slot becomes a hole that Compact fills).
  void Unslot(size_t index);
  void Push(Timestamp time, EventKind kind, int64_t target, int32_t attempt = 0) {
    events_.push(Event{time, kind, seq_++, target, attempt});
  }
  /// Seconds to the next eviction of state_.nodes[node] (exponential, its NodeInfo rate).
  Duration EvictionDelay(size_t node);
  core::Job& JobOf(size_t index) { return state_.jobs[static_cast<size_t>(live_[index].slot)]; }
  bool AnyNodeDown() const {
    return std::any_of(state_.nodes.begin(), state_.nodes.end(),
                       [](const core::Node& n) { return n.health == core::NodeHealth::kDown; });
  }

  const Trace& trace_;
  const Fleet& fleet_;
  const SimOptions& options_;
  core::ClusterState state_;
  std::vector<Live> live_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  std::mt19937_64 rng_;
  std::mt19937_64 fault_rng_;  // SimOptions::faults, apart from rng_ (spot evictions)
  SimResult result_;
  int64_t seq_ = 0;
  Timestamp now_ = 0;
  bool dirty_ = false, need_compact_ = false;
  std::vector<size_t> holes_;  // state_.jobs positions of the jobs Unslot took out since Compact
  bool accrue_usage_ = false;   // the policy's priorities read fairshare usage
  bool preemption_ = false;     // some QoS may preempt: the core reads checkpoints
  Timestamp accrued_until_ = 0;
  int64_t pending_ = 0, running_ = 0, busy_ = 0;
  std::unordered_map<std::string, std::optional<std::string>> feasible_;  // shape key -> why not
  std::optional<std::string> uncached_;
  // Idle-cycle shortcuts (SimOptions::idle_shortcuts).
  static constexpr size_t kVisiblePrefix = 8;  // pending jobs the core sees first, in queue order
  PendingView view_;
  bool skip_idle_ = false;  // a pass in which no pending job fits the free total is not run
  // With skip_idle_ (no preemption, provisioning or elastic gangs: allocations change only when a
  // job starts or stops, and the nodes vector never does), the ledger of running allocations is
  // kept across passes (Occupy on start, Release on stop) and the core copies it instead of
  // building it each pass (SchedulingCycle::Run's occupancy).
  std::optional<core::NodeLedger> occupancy_;
  bool parking_ = false;    // the core sees PendingView's choice of pending jobs
  bool shapes_ = false;     // parking_ under EASY: jobs a record of their shape covers are parked too
  // Conservative: a pass is skipped while only submissions came since the last pass run and none
  // of them fits that pass's free_after (NothingNewFits).
  bool replan_skip_ = false;
  bool plan_fresh_ = false;                          // only submissions since the last pass run
  std::vector<core::FreeStep> free_after_;           // that pass's CyclePlan::free_after
  std::vector<std::pair<Need, Duration>> since_plan_;  // jobs submitted since: need, planned run time
  std::unordered_map<size_t, core::Job> parked_jobs_;  // by trace index
  std::vector<size_t> unpark_, park_;
  // Nodes (parallel to state_.nodes), provisioning and cost.
  std::vector<NodeInfo> node_info_;
  int64_t next_node_id_ = 0;
  bool provisioning_ = false;    // the policy has [provisioning.POOL] tables
  bool elastic_ = false;         // some job is an elastic gang
  core::ProvisionLedger ledger_;
  struct Boot {
    std::string name;
    core::Pool pool = core::Pool::kOnDemand;
  };
  std::map<int64_t, Boot> booting_;                 // by boot id (kNodeBoot's target)
  int64_t next_boot_ = 0;
  std::map<std::string, std::pair<Timestamp, core::Pool>> held_since_;  // provisioned: requested when
  std::vector<core::Node> feasible_nodes_;  // fleet + what provisioning could add (Feasibility)
  std::set<Timestamp> ticks_;                       // kProvisionTick events pushed, not yet due
  Timestamp capacity_since_ = -1;                   // AccrueCapacity's clock; -1 = not started
  double capacity_now_ = 0;                         // resources the nodes now in the fleet offer
};

}  // namespace mlsched::sim::detail
