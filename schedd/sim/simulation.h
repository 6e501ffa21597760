// The simulation behind Simulate (simulator.h): one ClusterState driven through the core on a
// virtual clock. Internal to mlsched_sim: simulator.cc holds the event loop and the job events,
// simulator_cycle.cc the scheduling passes (with the idle shortcuts of SimOptions).
#pragma once

#include <chrono>
#include <optional>
#include <queue>
#include <random>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "schedd/sim/pending_view.h"
#include "schedd/sim/simulator.h"

namespace mlsched::sim::detail {

using core::Duration;
using core::Timestamp;

/// Events at one timestamp run in this order, all after that timestamp's submissions and before
/// its scheduling pass (submission < termination < start < scheduling pass). kPreemptStop: a
/// preemption victim's grace time is over.
enum class EventKind : int {
  kFinish = 0, kPredictionDue = 1, kEviction = 2, kRecovery = 3, kPreemptStop = 4
};

/// Why a running job goes back to the queue.
enum class StopCause { kEviction, kPreemption };

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
};

/// One replay (Simulate): owns the ClusterState the core sees, the event queue and the outcomes.
class Simulation {
 public:
  Simulation(const Trace& trace, const Fleet& fleet, const SimOptions& options)
      : trace_(trace), fleet_(fleet), options_(options), live_(trace.jobs.size()),
        rng_(options.seed), view_(FleetCapacity(fleet), kVisiblePrefix) {
    state_.nodes = fleet.nodes;
    accrue_usage_ = options.policy.queue_order == core::QueueOrder::kMultifactor &&
                    options.policy.weights.fairshare > 0;
    preemption_ = std::any_of(options.policy.qos.begin(), options.policy.qos.end(),
                              [](const core::QosPolicy& q) { return !q.preempt.empty(); });
    result_.jobs.resize(trace.jobs.size());
    result_.resource = TotalGpus(fleet) > 0 ? "gpu" : "cpu";
    result_.capacity =
        result_.resource == "gpu" ? TotalGpus(fleet) : TotalCpuMillis(fleet) / 1000;
    ChooseShortcuts();
  }

  SimResult Run();

 private:
  void Submit(size_t index);
  /// core::CheckJobFeasible on the fleet, remembered per job shape (it costs O(nodes) per call).
  const std::optional<std::string>& Feasibility(const core::JobSpec& spec);
  void HandleEvent(const Event& e);
  void Finish(size_t index);
  void PredictionDue(size_t index);
  void EvictNode(size_t node);
  void RecoverNode(size_t node);
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
    const Duration elapsed = now_ - live_[index].attempt_start;
    const Duration interval = CheckpointInterval(index);
    return interval > 0 ? (elapsed / interval) * interval : 0;
  }
  void Cycle();
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
  /// Keeps the plan a pending job's first cycle, and its last cycle within the recheck delay,
  /// gave it (JobOutcome::estimate_at_submit, estimate_recheck).
  void RecordEstimate(size_t index, const std::optional<Timestamp>& expected);
  /// Records the estimates of a pass planned with SimOptions::estimate_predictor's time limits on
  /// a copy of the state (not applied): a job it would start now is estimated to start now.
  void ShadowEstimates();
  void Start(const core::StartDecision& decision);
  void Compact();
  void Push(Timestamp time, EventKind kind, int64_t target, int32_t attempt = 0) {
    events_.push(Event{time, kind, seq_++, target, attempt});
  }
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
  SimResult result_;
  int64_t seq_ = 0;
  Timestamp now_ = 0;
  bool dirty_ = false, need_compact_ = false;
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
  bool parking_ = false;    // the core sees PendingView's choice of pending jobs
  std::unordered_map<size_t, core::Job> parked_jobs_;  // by trace index
  std::vector<size_t> unpark_, park_;
};

}  // namespace mlsched::sim::detail
