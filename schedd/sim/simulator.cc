#include "schedd/sim/simulator.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "schedd/core/fairshare.h"
#include "schedd/sim/simulation.h"

namespace mlsched::sim {
namespace detail {

void Simulation::ChooseShortcuts() {
  const core::PolicySet& policy = options_.policy;
  const core::BackfillMode mode = policy.backfill.mode;
  const bool plans_read = mode == core::BackfillMode::kConservative && policy.backfill.keep_plans;
  // Provisioning changes the fleet and needs every pass's pending reasons: no shortcuts.
  // Elastic: passes with nothing pending may grow running jobs.
  skip_idle_ = options_.idle_shortcuts && !preemption_ && !plans_read && !provisioning_ && !elastic_ &&
               options_.estimate_predictor == nullptr &&
               (mode == core::BackfillMode::kNone || !options_.estimates);
  const bool dependencies = std::any_of(trace_.jobs.begin(), trace_.jobs.end(), [](const TraceJob& j) {
    return !j.spec.dependencies.empty();
  });
  // FIFO order is trace index order: submit time, then id (dense in trace order).
  // Elastic: a grow reads whether any pending job waits, parked ones included.
  parking_ = skip_idle_ && !elastic_ && policy.queue_order == core::QueueOrder::kFifo &&
             (mode == core::BackfillMode::kNone || mode == core::BackfillMode::kEasy) &&
             policy.backfill.max_job_test == 0 && policy.backfill.reserve_after == 0 && !dependencies;
  // Warm pools make a job's eligible nodes depend on its time limit (Planner::WarmExcluded).
  shapes_ = parking_ && mode == core::BackfillMode::kEasy && policy.warm_pools.empty();
  // Conservative plans that do not move while only submissions come: FIFO (a new job is last),
  // no window or resolution (plans would depend on now), nothing that changes with a job's wait
  // (reserve_after, fallback tiers, a spot preference with a wait budget).
  const bool waits_matter = std::any_of(trace_.jobs.begin(), trace_.jobs.end(), [](const TraceJob& j) {
    return !j.spec.fallback.empty() || j.spec.spot == core::SpotPreference::kPrefer;
  });
  replan_skip_ = skip_idle_ && !dependencies && !waits_matter && mode == core::BackfillMode::kConservative &&
                 policy.queue_order == core::QueueOrder::kFifo && policy.backfill.window == 0 &&
                 policy.backfill.resolution <= 1 && policy.backfill.max_job_test == 0 &&
                 policy.backfill.reserve_after == 0;
}


const std::optional<std::string>& Simulation::Feasibility(const core::JobSpec& spec) {
  // Everything CheckJobFeasible reads: partition, gang shape, GPU types, features and the placement
  // restrictions. Time limits only matter against the partition's maximum: such verdicts (whose
  // message names the limit) are not remembered.
  const core::PartitionPolicy* partition = core::FindPartition(options_.policy, spec.partition);
  if (!partition || spec.time_limit <= 0 || spec.time_limit > partition->max_time_limit) {
    uncached_ = core::CheckJobFeasible(feasible_nodes_, options_.policy, spec);
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
    it = feasible_.emplace(std::move(key), core::CheckJobFeasible(feasible_nodes_, options_.policy, spec)).first;
  return it->second;
}

Duration Simulation::EvictionDelay(size_t node) {
  const double per_second = node_info_[node].rate_per_hour / 3600.0;
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
  const core::JobFeatures features{tj.spec.user, tj.requested_time, tj.spec.ntasks, tj.spec.per_task};
  if (options_.predictor != nullptr) job.spec.time_limit = options_.predictor->Predict(features);
  if (options_.estimate_predictor != nullptr) live_[index].shadow_limit = options_.estimate_predictor->Predict(features);
  job.submit_time = now_;
  if (core::IsElastic(job.spec)) job.spec.time_limit = PendingLimit(index);
  live_[index].slot = static_cast<int64_t>(state_.jobs.size());
  state_.jobs.push_back(std::move(job));
  AddPending(index);
  if (plan_fresh_) since_plan_.emplace_back(NeedOf(JobOf(index).spec), core::PlannedRuntime(JobOf(index)));
  ++pending_;
  dirty_ = true;
}

void Simulation::HandleEvent(const Event& e) {
  plan_fresh_ = false;  // only submissions keep the last pass's plan (NothingNewFits)
  const auto index = static_cast<size_t>(e.target);
  switch (e.kind) {
    case EventKind::kFinish:
    case EventKind::kPredictionDue:
    case EventKind::kPreemptStop:
      // Stale: the job ended, was evicted or preempted since this event was scheduled.
      if (!live_[index].running || result_.jobs[index].attempts != e.attempt) return;
      // A hung attempt never finishes: it ends at its detection or time limit (kHangEnd).
      if (live_[index].hung_since > 0 && e.kind != EventKind::kPreemptStop) return;
      if (e.kind == EventKind::kFinish) {
        Finish(index);
      } else if (e.kind == EventKind::kPredictionDue) {
        PredictionDue(index);
      } else {
        PreemptStop(index);
      }
      return;
    case EventKind::kEviction:
      EvictNode(e.target);
      return;
    case EventKind::kRecovery:
      RecoverNode(e.target);
      return;
    case EventKind::kNodeBoot:
      BootNode(e.target);
      return;
    case EventKind::kProvisionTick:
      ticks_.erase(e.time);  // the loop runs the provisioner at every event time
      return;
    case EventKind::kGrowDue:
      if (live_[index].running && result_.jobs[index].attempts == e.attempt) dirty_ = true;
      return;
    case EventKind::kNodeFailure:
      FailNode(e.target, e.attempt);
      return;
    case EventKind::kHangEnd:
      if (live_[index].running && result_.jobs[index].attempts == e.attempt) EndHang(index);
      return;
    case EventKind::kFailureRecovery:
      RecoverFailedNode(e.target);
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
  CloseAttempt(index);
  if (occupancy_ && job.allocation) occupancy_->Release(*job.allocation);
  live.running = false;
  Unslot(index);
  view_.Stopped(live.held);
  --running_;
  const core::JobFeatures features{tj.spec.user, tj.requested_time, tj.spec.ntasks, tj.spec.per_task};
  for (core::RuntimePredictor* p : {options_.predictor, options_.estimate_predictor}) {
    if (p == nullptr) continue;
    p->Observe(features, tj.run_time);
    p->TakeDroppedHistory();  // no store to delete them from
  }
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
  // A resize checkpoints on its signal: nothing is lost. The restart cost's dead time is counted
  // apart (CloseAttempt), not as lost work.
  const Duration saved = cause == StopCause::kResize ? elapsed : SavedThisAttempt(index);
  const Duration lost = elapsed - std::max(saved, std::min(live.dead_s, elapsed));
  live.progress = std::min(tj.run_time, live.progress + WorkDone(index, saved));
  if (cause != StopCause::kResize) {
    out.lost_resource_hours +=
        static_cast<double>(SizeAt(index, live.tasks)) * static_cast<double>(lost) / 3600.0;
    if (cause == StopCause::kFailure) {
      out.lost_failure_s += lost;
      out.lost_failure_resource_hours += static_cast<double>(SizeAt(index, live.tasks)) * static_cast<double>(lost) / 3600.0;
    } else {
      (cause == StopCause::kPreemption ? out.lost_preemption_s : out.lost_eviction_s) += lost;
    }
    if (core::IsElastic(tj.spec) && cause != StopCause::kFailure) {
      double& part = cause == StopCause::kPreemption ? out.lost_preemption_resource_hours
                                                     : out.lost_eviction_resource_hours;
      part = std::max(part, 0.0) +
             static_cast<double>(SizeAt(index, live.tasks)) * static_cast<double>(lost) / 3600.0;
    }
  }
  CloseAttempt(index);
  if (core::IsElastic(job.spec)) job.spec.time_limit = PendingLimit(index);
  job.state = core::JobState::kPending;
  job.reason = core::PendingReason::kNone;
  job.start_time = 0;
  if (occupancy_ && job.allocation) occupancy_->Release(*job.allocation);
  job.allocation.reset();
  job.expected_start.reset();  // a requeued job is planned afresh
  job.last_checkpoint = 0;     // of the next attempt (progress carries the saved work)
  job.preempting = false;
  live.running = false;
  live.preemptor = 0;
  view_.Stopped(live.held);
  AddPending(index);
  --running_;
  ++pending_;
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
  out.lost_resource_hours +=
      static_cast<double>(SizeAt(index, live.tasks)) * static_cast<double>(record.lost_s) / 3600.0;
  out.lost_preemption_s += record.lost_s;
  if (core::IsElastic(tj.spec)) {
    out.lost_preemption_resource_hours = std::max(out.lost_preemption_resource_hours, 0.0) +
        static_cast<double>(SizeAt(index, live.tasks)) * static_cast<double>(record.lost_s) / 3600.0;
  }
  CloseAttempt(index);
  out.state = core::JobState::kCancelled;
  job.state = core::JobState::kCancelled;
  if (occupancy_ && job.allocation) occupancy_->Release(*job.allocation);
  live.running = false;
  Unslot(index);
  view_.Stopped(live.held);
  --running_;
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

void Simulation::RequeueJobsOn(size_t node) {
  const core::Node& n = state_.nodes[node];
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
}

void Simulation::EvictNode(int64_t id) {
  const int64_t at = NodeIndex(id);
  if (at < 0) return;  // released since
  const auto node = static_cast<size_t>(at);
  state_.nodes[node].health = core::NodeHealth::kDown;
  RequeueJobsOn(node);
  dirty_ = true;
  if (node_info_[node].provisioned) {
    // Taken back by the cloud: the provisioner releases it (down, no task) at its next step.
    ++result_.pools[std::string(core::PoolName(state_.nodes[node].pool)) + "/provisioned"].evicted;
    return;
  }
  Push(now_ + std::max<Duration>(node_info_[node].recovery_s, 1), EventKind::kRecovery, id);
}

void Simulation::RecoverNode(int64_t id) {
  const int64_t at = NodeIndex(id);
  if (at < 0) return;
  state_.nodes[static_cast<size_t>(at)].health = core::NodeHealth::kUp;
  Push(now_ + EvictionDelay(static_cast<size_t>(at)), EventKind::kEviction, id);
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
  if (occupancy_) occupancy_->Occupy(decision.allocation);
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
  live.held = Held(decision.allocation);
  view_.Started(static_cast<size_t>(index), live.held);
  --pending_;
  ++running_;
  const auto i = static_cast<size_t>(index);
  live.tasks = static_cast<int32_t>(decision.allocation.tasks.size());
  live.rate = Rate(i, live.tasks);
  live.dead_s = live.next_dead_s;
  live.next_dead_s = 0;
  busy_ += SizeAt(i, live.tasks);
  Duration remaining = tj.run_time - live.progress;
  if (live.rate != 1.0) {
    remaining = static_cast<Duration>(std::ceil(static_cast<double>(remaining) / live.rate - 1e-9));
  }
  remaining += live.dead_s;
  // Elastic jobs plan with the attempt's exact remaining time at its size (the traces' limits
  // are their exact run times at the traced size).
  if (core::IsElastic(job.spec)) job.spec.time_limit = std::max<Duration>(1, remaining);
  Push(now_ + remaining, EventKind::kFinish, index, out.attempts);
  if (core::IsElastic(job.spec) && live.tasks < job.spec.ntasks && options_.policy.elastic.grow) {
    // The daemon's periodic cycles would see it eligible to grow then; a pass at that time does.
    Push(now_ + std::max<Duration>(options_.policy.elastic.min_resize_interval, 1), EventKind::kGrowDue, index,
         out.attempts);
  }
  if (options_.predictor != nullptr && job.spec.time_limit < remaining) {
    Push(now_ + job.spec.time_limit, EventKind::kPredictionDue, index, out.attempts);
  }
}

SimResult Simulation::Run() {
  for (size_t n = 0; n < node_info_.size(); ++n) {
    if (node_info_[n].rate_per_hour > 0) Push(EvictionDelay(n), EventKind::kEviction, node_info_[n].id);
  }
  InitFaults();
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
    if (next > 0) AccrueCapacity();
    while (!events_.empty() && events_.top().time == now_) {
      Event e = events_.top();
      events_.pop();
      HandleEvent(e);
    }
    // Elastic: a pass with nothing pending may still grow shrunk jobs.
    if ((pending_ == 0 && (!elastic_ || !dirty_)) || (!dirty_ && !(periodic && now_ >= last_cycle + period))) {
      if (provisioning_) Provision(core::CyclePlan{});  // idle nodes, failed boots
      continue;
    }
    const int64_t running_before = running_;
    Cycle();
    last_cycle = now_;
    // Stuck: nothing runs, nothing will arrive, every node is up and the pass started nothing.
    if (running_ == 0 && running_before == 0 && next == jobs.size() && pending_ > 0 &&
        !AnyNodeDown() && period == 0 && booting_.empty()) {
      break;
    }
  }
  FinishCapacity();
  return std::move(result_);
}


}  // namespace detail

SimResult Simulate(const Trace& trace, const Fleet& fleet, const SimOptions& options) {
  if (fleet.nodes.empty()) throw std::invalid_argument("Simulate: the fleet has no nodes");
  if (fleet.eviction_rate_per_hour.size() != fleet.nodes.size() ||
      fleet.recovery_s.size() != fleet.nodes.size()) {
    throw std::invalid_argument("Simulate: fleet per-node vectors differ in size");
  }
  if (!(options.speedup_exponent >= kMinSpeedupExponent && options.speedup_exponent <= 1.0)) {
    throw std::invalid_argument("Simulate: speedup_exponent " + std::to_string(options.speedup_exponent) +
                                " is outside " + std::to_string(kMinSpeedupExponent) + "..1");
  }
  const FaultModel& f = options.faults;
  if (!(f.rate_per_node_hour >= 0 && f.rate_per_node_hour <= kMaxEvictionRatePerHour && f.bad_rate_per_node_hour >= 0 &&
        f.bad_rate_per_node_hour <= kMaxEvictionRatePerHour && f.bad_fraction >= 0 && f.bad_fraction <= 1 &&
        f.hang_fraction >= 0 && f.hang_fraction <= 1 && f.reboot_s >= 1 && f.drain_after >= 0 && f.suspect_window_s >= 1 &&
        f.hang_detect_s >= 1 && f.repair_s >= 1)) {
    throw std::invalid_argument("Simulate: a node-failure setting is out of range (rates 0.." +
                                std::to_string(static_cast<int>(kMaxEvictionRatePerHour)) +
                                " per node-hour, fractions 0..1, durations >= 1 s, drain_after >= 0)");
  }
  if (options.boot_delay_s < 0 || options.boot_delay_s > kMaxBootDelayS) {
    throw std::invalid_argument("Simulate: boot delay " + std::to_string(options.boot_delay_s) +
                                " s is outside 0.." + std::to_string(kMaxBootDelayS) + " s");
  }
  const bool elastic = std::any_of(trace.jobs.begin(), trace.jobs.end(),
                                   [](const TraceJob& j) { return core::IsElastic(j.spec); });
  if (elastic && (options.predictor != nullptr || options.estimate_predictor != nullptr)) {
    throw std::invalid_argument("Simulate: elastic jobs cannot be replayed with run-time predictions");
  }
  return detail::Simulation(trace, fleet, options).Run();
}

}  // namespace mlsched::sim
