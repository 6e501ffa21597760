#include "schedd/sim/simulator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <queue>
#include <unordered_map>
#include <random>
#include <stdexcept>
#include <tuple>

#include "schedd/core/fairshare.h"

namespace mlsched::sim {
namespace {

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
};

class Simulation {
 public:
  Simulation(const Trace& trace, const Fleet& fleet, const SimOptions& options)
      : trace_(trace), fleet_(fleet), options_(options), live_(trace.jobs.size()),
        rng_(options.seed) {
    state_.nodes = fleet.nodes;
    accrue_usage_ = options.policy.queue_order == core::QueueOrder::kMultifactor &&
                    options.policy.weights.fairshare > 0;
    preemption_ = std::any_of(options.policy.qos.begin(), options.policy.qos.end(),
                              [](const core::QosPolicy& q) { return !q.preempt.empty(); });
    result_.jobs.resize(trace.jobs.size());
    result_.resource = TotalGpus(fleet) > 0 ? "gpu" : "cpu";
    result_.capacity =
        result_.resource == "gpu" ? TotalGpus(fleet) : TotalCpuMillis(fleet) / 1000;
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
};

const std::optional<std::string>& Simulation::Feasibility(const core::JobSpec& spec) {
  // Everything CheckJobFeasible reads: partition, gang shape, GPU types, features and the placement
  // restrictions. Time limits only matter against the partition's maximum: such verdicts (whose
  // message names the limit) are not remembered.
  const core::PartitionPolicy* partition = core::FindPartition(options_.policy, spec.partition);
  if (!partition || spec.time_limit <= 0 || spec.time_limit > partition->max_time_limit) {
    uncached_ = core::CheckJobFeasible(fleet_.nodes, options_.policy, spec);
    return uncached_;
  }
  std::string key = spec.partition + '|' + std::to_string(spec.ntasks) + '|' +
                    std::to_string(spec.per_task.cpu_millis) + '|' + std::to_string(spec.per_task.memory_bytes) +
                    '|' + std::to_string(static_cast<int>(spec.spot)) + '|' +
                    (spec.region_strict ? spec.data_region : std::string()) + '|';
  for (const auto& [type, n] : spec.per_task.gpus) key += type + ':' + std::to_string(n) + ',';
  key += '|';
  for (const auto& t : spec.gpu_types) key += t + ',';
  key += '|';
  for (const auto& f : spec.features) key += f + ',';
  auto it = feasible_.find(key);
  if (it == feasible_.end())
    it = feasible_.emplace(std::move(key), core::CheckJobFeasible(fleet_.nodes, options_.policy, spec)).first;
  return it->second;
}

Duration Simulation::EvictionDelay(size_t node) {
  const double per_second = fleet_.eviction_rate_per_hour[node] / 3600.0;
  // Inverse-transform sampling of an exponential inter-arrival time; u in (0, 1].
  const double u = static_cast<double>((rng_() >> 11) + 1) * 0x1.0p-53;
  return std::max<Duration>(1, static_cast<Duration>(std::ceil(-std::log(u) / per_second)));
}

void Simulation::Submit(size_t index) {
  const TraceJob& tj = trace_.jobs[index];
  JobOutcome& out = result_.jobs[index];
  out.id = tj.id;
  out.user = tj.spec.user;
  out.account = tj.spec.account;
  out.accelerator = tj.accelerator;
  out.size = tj.size;
  out.submit = tj.submit_time;
  out.run_time = tj.run_time;
  if (auto why = Feasibility(tj.spec)) {
    out.infeasible = *why;
    out.state = core::JobState::kFailed;
    return;
  }
  core::Job job;
  job.id = static_cast<core::JobId>(index + 1);
  job.spec = tj.spec;
  if (options_.predictor != nullptr) job.spec.time_limit = options_.predictor->Predict(tj.spec.user, tj.requested_time);
  if (options_.estimate_predictor != nullptr) {
    live_[index].shadow_limit = options_.estimate_predictor->Predict(tj.spec.user, tj.requested_time);
  }
  job.submit_time = now_;
  live_[index].slot = static_cast<int64_t>(state_.jobs.size());
  state_.jobs.push_back(std::move(job));
  ++pending_;
  dirty_ = true;
}

void Simulation::HandleEvent(const Event& e) {
  const auto index = static_cast<size_t>(e.target);
  switch (e.kind) {
    case EventKind::kFinish:
    case EventKind::kPredictionDue:
    case EventKind::kPreemptStop:
      // Stale: the job ended, was evicted or preempted since this event was scheduled.
      if (!live_[index].running || result_.jobs[index].attempts != e.attempt) return;
      if (e.kind == EventKind::kFinish) {
        Finish(index);
      } else if (e.kind == EventKind::kPredictionDue) {
        PredictionDue(index);
      } else {
        PreemptStop(index);
      }
      return;
    case EventKind::kEviction:
      EvictNode(index);
      return;
    case EventKind::kRecovery:
      RecoverNode(index);
      return;
  }
}

void Simulation::Finish(size_t index) {
  const TraceJob& tj = trace_.jobs[index];
  JobOutcome& out = result_.jobs[index];
  Live& live = live_[index];
  core::Job& job = JobOf(index);
  job.state = tj.hits_time_limit ? core::JobState::kTimeout : core::JobState::kCompleted;
  out.state = job.state;
  out.end = now_;
  out.busy_s += now_ - live.attempt_start;
  out.runs.push_back(RunSpan{live.attempt_start, now_});
  live.running = false;
  live.slot = -1;
  need_compact_ = true;
  --running_;
  busy_ -= tj.size;
  if (options_.predictor != nullptr) options_.predictor->Observe(tj.spec.user, tj.run_time);
  if (options_.estimate_predictor != nullptr) options_.estimate_predictor->Observe(tj.spec.user, tj.run_time);
  dirty_ = true;
}

void Simulation::PredictionDue(size_t index) {
  Live& live = live_[index];
  core::Job& job = JobOf(index);
  const Duration elapsed = now_ - live.attempt_start;
  const Duration next =
      options_.predictor->Extend(elapsed, live.extensions++, trace_.jobs[index].requested_time);
  job.spec.time_limit = std::max(next, elapsed + 1);
  const Duration remaining = trace_.jobs[index].run_time - live.progress;
  if (job.spec.time_limit < remaining) {
    Push(live.attempt_start + job.spec.time_limit, EventKind::kPredictionDue,
         static_cast<int64_t>(index), result_.jobs[index].attempts);
  }
  dirty_ = true;
}

void Simulation::Requeue(size_t index, StopCause cause) {
  const TraceJob& tj = trace_.jobs[index];
  JobOutcome& out = result_.jobs[index];
  Live& live = live_[index];
  core::Job& job = JobOf(index);
  const Duration elapsed = now_ - live.attempt_start;
  const Duration saved = SavedThisAttempt(index);
  const Duration lost = elapsed - saved;
  live.progress = std::min(tj.run_time, live.progress + saved);
  out.lost_resource_hours += static_cast<double>(tj.size) * static_cast<double>(lost) / 3600.0;
  (cause == StopCause::kPreemption ? out.lost_preemption_s : out.lost_eviction_s) += lost;
  out.busy_s += elapsed;
  out.runs.push_back(RunSpan{live.attempt_start, now_});
  job.state = core::JobState::kPending;
  job.reason = core::PendingReason::kNone;
  job.start_time = 0;
  job.allocation.reset();
  job.expected_start.reset();  // a requeued job is planned afresh
  job.last_checkpoint = 0;     // of the next attempt (progress carries the saved work)
  job.preempting = false;
  live.running = false;
  live.preemptor = 0;
  --running_;
  ++pending_;
  busy_ -= tj.size;
  dirty_ = true;
}

void Simulation::Preempt(const core::PreemptDecision& decision) {
  const int64_t index = decision.victim - 1;
  if (index < 0 || index >= static_cast<int64_t>(live_.size()) || live_[index].slot < 0 ||
      !live_[index].running || JobOf(static_cast<size_t>(index)).preempting) {
    throw std::logic_error("core planned to preempt job " + std::to_string(decision.victim) +
                           ", which is not running or already being preempted");
  }
  const auto i = static_cast<size_t>(index);
  Live& live = live_[i];
  JobOf(i).preempting = true;  // its resources count as free for the preemptor from now on
  live.preemptor = decision.preemptor;
  live.preempt_decided = now_;
  live.planned_lost_s = decision.lost_work;
  live.preempt_cancel = decision.mode == core::PreemptMode::kCancel;
  // SIGTERM now, SIGKILL after the grace time: the job runs (and may reach a periodic checkpoint
  // or finish) until then; it takes no checkpoint on the signal.
  Push(now_ + std::max<Duration>(decision.grace, 0), EventKind::kPreemptStop, index,
       result_.jobs[i].attempts);
}

void Simulation::PreemptStop(size_t index) {
  const TraceJob& tj = trace_.jobs[index];
  JobOutcome& out = result_.jobs[index];
  Live& live = live_[index];
  core::Job& job = JobOf(index);
  PreemptionRecord record;
  record.decided = live.preempt_decided;
  record.stopped = now_;
  record.victim = tj.id;
  record.preemptor = trace_.jobs[static_cast<size_t>(live.preemptor - 1)].id;
  record.planned_lost_s = live.planned_lost_s;
  record.lost_s = now_ - live.attempt_start - SavedThisAttempt(index);
  record.cancelled = live.preempt_cancel;
  result_.preemption_log.push_back(record);
  ++out.preemptions;
  ++result_.preemptions;
  ++job.preempt_count;
  if (!live.preempt_cancel) {
    Requeue(index, StopCause::kPreemption);
    return;
  }
  // Cancelled: final, never finishes (counted as unfinished); its work since the last checkpoint
  // is lost like a requeued victim's.
  const Duration elapsed = now_ - live.attempt_start;
  out.lost_resource_hours +=
      static_cast<double>(tj.size) * static_cast<double>(record.lost_s) / 3600.0;
  out.lost_preemption_s += record.lost_s;
  out.busy_s += elapsed;
  out.runs.push_back(RunSpan{live.attempt_start, now_});
  out.state = core::JobState::kCancelled;
  job.state = core::JobState::kCancelled;
  live.running = false;
  live.slot = -1;
  need_compact_ = true;
  --running_;
  busy_ -= tj.size;
  dirty_ = true;
}

void Simulation::ReportCheckpoints() {
  for (core::Job& job : state_.jobs) {
    if (job.state != core::JobState::kRunning) continue;
    const auto index = static_cast<size_t>(job.id - 1);
    const Duration saved = SavedThisAttempt(index);
    job.last_checkpoint = saved > 0 ? live_[index].attempt_start + saved : 0;
  }
}

void Simulation::EvictNode(size_t node) {
  core::Node& n = state_.nodes[node];
  n.health = core::NodeHealth::kDown;
  for (size_t i = 0; i < live_.size(); ++i) {
    if (!live_[i].running) continue;
    const auto& alloc = JobOf(i).allocation;
    const bool on_node = alloc && std::any_of(alloc->tasks.begin(), alloc->tasks.end(),
                                              [&](const core::TaskPlacement& t) {
                                                return t.node == n.name;
                                              });
    if (!on_node) continue;
    ++result_.jobs[i].evictions;
    ++result_.evictions;
    Requeue(i, StopCause::kEviction);
  }
  Push(now_ + std::max<Duration>(fleet_.recovery_s[node], 1), EventKind::kRecovery,
       static_cast<int64_t>(node));
  dirty_ = true;
}

void Simulation::RecoverNode(size_t node) {
  state_.nodes[node].health = core::NodeHealth::kUp;
  Push(now_ + EvictionDelay(node), EventKind::kEviction, static_cast<int64_t>(node));
  dirty_ = true;
}

void Simulation::Start(const core::StartDecision& decision) {
  const int64_t index = decision.job - 1;
  if (index < 0 || index >= static_cast<int64_t>(live_.size()) || live_[index].slot < 0 ||
      live_[index].running) {
    throw std::logic_error("core planned a start for job " + std::to_string(decision.job) +
                           ", which is not pending");
  }
  if (decision.allocation.tasks.empty()) {
    throw std::logic_error("core planned job " + std::to_string(decision.job) +
                           " with an empty allocation");
  }
  const TraceJob& tj = trace_.jobs[static_cast<size_t>(index)];
  JobOutcome& out = result_.jobs[static_cast<size_t>(index)];
  Live& live = live_[static_cast<size_t>(index)];
  core::Job& job = JobOf(static_cast<size_t>(index));
  ++out.attempts;
  job.state = core::JobState::kRunning;
  job.reason = core::PendingReason::kNone;
  job.start_time = now_;
  job.expected_start.reset();
  job.attempt = out.attempts;
  job.allocation = decision.allocation;
  job.last_checkpoint = 0;
  job.preempting = false;
  if (out.first_start < 0) {
    // Started by the recheck time: it was not pending then (JobOutcome::estimate_recheck).
    if (now_ <= out.submit + options_.estimate_recheck_s) out.estimate_recheck = -1;
    out.first_start = now_;
  }
  const auto& placed = decision.allocation.tasks.front().resources.gpus;
  if (!placed.empty()) out.accelerator = placed.begin()->first;
  live.running = true;
  live.attempt_start = now_;
  live.extensions = 0;
  --pending_;
  ++running_;
  busy_ += tj.size;
  const Duration remaining = tj.run_time - live.progress;
  Push(now_ + remaining, EventKind::kFinish, index, out.attempts);
  if (options_.predictor != nullptr && job.spec.time_limit < remaining) {
    Push(now_ + job.spec.time_limit, EventKind::kPredictionDue, index, out.attempts);
  }
}

void Simulation::Compact() {
  size_t w = 0;
  for (size_t r = 0; r < state_.jobs.size(); ++r) {
    if (core::IsFinal(state_.jobs[r].state)) continue;
    if (w != r) state_.jobs[w] = std::move(state_.jobs[r]);
    live_[static_cast<size_t>(state_.jobs[w].id - 1)].slot = static_cast<int64_t>(w);
    ++w;
  }
  state_.jobs.resize(w);
  need_compact_ = false;
}

void Simulation::RecordEstimate(size_t index, const std::optional<Timestamp>& expected) {
  JobOutcome& out = result_.jobs[index];
  if (out.first_start >= 0 || now_ > out.submit + options_.estimate_recheck_s) return;
  const Timestamp t = expected.value_or(-1);
  if (now_ == out.submit) out.estimate_at_submit = t;
  out.estimate_recheck = t;
}

void Simulation::ShadowEstimates() {
  core::ClusterState shadow = state_;
  for (core::Job& job : shadow.jobs) {
    const auto index = static_cast<size_t>(job.id - 1);
    const Duration requested = trace_.jobs[index].requested_time;
    Duration limit = live_[index].shadow_limit;
    job.expected_start.reset();
    if (job.state == core::JobState::kRunning) {
      // Corrected as PredictionDue corrects the real one: stepwise past the elapsed time.
      const Duration elapsed = now_ - live_[index].attempt_start;
      for (int k = 0; limit <= elapsed && limit < requested; ++k) {
        limit = std::max(options_.estimate_predictor->Extend(limit, k, requested), limit + 1);
      }
    }
    job.spec.time_limit = std::min(std::max<Duration>(limit, 1), requested);
  }
  const core::CyclePlan plan = core::SchedulingCycle::Run(shadow, options_.policy, now_);
  for (const auto& start : plan.starts) {
    const auto index = static_cast<size_t>(start.job - 1);
    if (live_[index].slot >= 0 && !live_[index].running) RecordEstimate(index, now_);
  }
  for (const auto& update : plan.pending) {
    const auto index = static_cast<size_t>(update.job - 1);
    if (live_[index].slot >= 0 && !live_[index].running) RecordEstimate(index, update.expected_start);
  }
}

void Simulation::Cycle() {
  if (need_compact_) Compact();
  if (preemption_) ReportCheckpoints();
  const auto t0 = std::chrono::steady_clock::now();
  core::CyclePlan plan = core::SchedulingCycle::Run(state_, options_.policy, now_);
  result_.cycle_wall_s.push_back(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  ++result_.cycles;
  dirty_ = false;
  for (const auto& start : plan.starts) Start(start);
  for (const auto& preemption : plan.preemptions) Preempt(preemption);
  for (const auto& update : plan.pending) {
    const int64_t index = update.job - 1;
    if (index >= 0 && index < static_cast<int64_t>(live_.size()) && live_[index].slot >= 0 &&
        !live_[index].running) {
      // Fed back like the daemon does: conservative backfill with keep_plans starts the next
      // cycle from these planned starts (pyss semantics: a plan only moves earlier).
      core::Job& job = JobOf(static_cast<size_t>(index));
      job.reason = update.reason;
      job.expected_start = update.expected_start;
      if (options_.estimate_predictor == nullptr) {
        RecordEstimate(static_cast<size_t>(index), update.expected_start);
      }
    }
  }
  if (options_.estimate_predictor != nullptr) ShadowEstimates();
  if (options_.record_series) {
    result_.series.push_back(SeriesPoint{now_, pending_, running_, busy_});
  }
}

SimResult Simulation::Run() {
  for (size_t n = 0; n < fleet_.nodes.size(); ++n) {
    if (fleet_.eviction_rate_per_hour[n] > 0) {
      Push(EvictionDelay(n), EventKind::kEviction, static_cast<int64_t>(n));
    }
  }
  const auto& jobs = trace_.jobs;
  size_t next = 0;
  Timestamp last_cycle = 0;
  const Duration period = options_.cycle_period_s;
  while (next < jobs.size() || running_ > 0 || pending_ > 0) {
    constexpr Timestamp kNever = INT64_MAX;
    Timestamp t = next < jobs.size() ? jobs[next].submit_time : kNever;
    if (!events_.empty()) t = std::min(t, events_.top().time);
    const bool periodic = period > 0 && pending_ > 0;
    if (periodic) t = std::min(t, last_cycle + period);
    if (t == kNever) break;  // pending jobs that nothing will ever unblock
    now_ = t;
    if (accrue_usage_ && now_ > accrued_until_) {
      // Charge the interval to the jobs that ran in it, before any of them ends at now_.
      core::AccrueUsage(state_.usage, state_.jobs, options_.policy.fairshare, accrued_until_,
                        now_);
      accrued_until_ = now_;
    }
    while (next < jobs.size() && jobs[next].submit_time == now_) Submit(next++);
    while (!events_.empty() && events_.top().time == now_) {
      Event e = events_.top();
      events_.pop();
      HandleEvent(e);
    }
    if (pending_ == 0 || (!dirty_ && !(periodic && now_ >= last_cycle + period))) continue;
    const int64_t running_before = running_;
    Cycle();
    last_cycle = now_;
    // Stuck: nothing runs, nothing will arrive, every node is up and the pass started nothing.
    if (running_ == 0 && running_before == 0 && next == jobs.size() && pending_ > 0 &&
        !AnyNodeDown() && period == 0) {
      break;
    }
  }
  return std::move(result_);
}

}  // namespace

SimResult Simulate(const Trace& trace, const Fleet& fleet, const SimOptions& options) {
  if (fleet.nodes.empty()) throw std::invalid_argument("Simulate: the fleet has no nodes");
  if (fleet.eviction_rate_per_hour.size() != fleet.nodes.size() ||
      fleet.recovery_s.size() != fleet.nodes.size()) {
    throw std::invalid_argument("Simulate: fleet per-node vectors differ in size");
  }
  return Simulation(trace, fleet, options).Run();
}

}  // namespace mlsched::sim
