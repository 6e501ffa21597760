// Simulation's scheduling passes: the core call, its idle shortcuts (SimOptions::idle_shortcuts,
// pending_view.h) and applying the plan.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>

#include "schedd/core/pools.h"
#include "schedd/sim/simulation.h"

namespace mlsched::sim::detail {

void Simulation::Unslot(size_t index) {
  if (live_[index].slot < 0) return;  // already out (never expected: each job leaves once)
  holes_.push_back(static_cast<size_t>(live_[index].slot));
  live_[index].slot = -1;
  need_compact_ = true;
}

void Simulation::Compact() {
  // Final jobs leave, and so do parked ones (moved to parked_jobs_, slot -1).
  auto gone = [&](const core::Job& j) {
    return core::IsFinal(j.state) || live_[static_cast<size_t>(j.id - 1)].slot < 0;
  };
  if (parking_) {
    // A FIFO pass without preemption does not depend on the order of state_.jobs (the queue is
    // sorted by submit time and id; the ledger, timeline and limits are sums): each hole, lowest
    // first, takes the last job still in, O(removed) moves instead of shifting every later job.
    std::sort(holes_.begin(), holes_.end());
    for (size_t h : holes_) {
      while (!state_.jobs.empty() && gone(state_.jobs.back())) state_.jobs.pop_back();
      if (h >= state_.jobs.size()) break;  // every later hole was at the back
      state_.jobs[h] = std::move(state_.jobs.back());
      state_.jobs.pop_back();
      live_[static_cast<size_t>(state_.jobs[h].id - 1)].slot = static_cast<int64_t>(h);
    }
    holes_.clear();
    need_compact_ = false;
    return;
  }
  holes_.clear();
  size_t w = 0;
  for (size_t r = 0; r < state_.jobs.size(); ++r) {
    if (gone(state_.jobs[r])) continue;
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

void Simulation::Arrange() {
  view_.Arrange(options_.policy.backfill.mode == core::BackfillMode::kEasy, &unpark_, &park_);
  for (size_t i : park_) {
    parked_jobs_.emplace(i, std::move(JobOf(i)));
    Unslot(i);
  }
  if (need_compact_) Compact();
  for (size_t i : unpark_) {
    auto it = parked_jobs_.find(i);
    live_[i].slot = static_cast<int64_t>(state_.jobs.size());
    state_.jobs.push_back(std::move(it->second));
    parked_jobs_.erase(it);
  }
}

bool Simulation::PassStands(const core::CyclePlan& plan) const {
  const size_t first_parked = view_.FirstParked();
  if (first_parked == SIZE_MAX) return true;
  const bool easy = options_.policy.backfill.mode == core::BackfillMode::kEasy;
  for (const auto& u : plan.pending) {
    const bool blocker = easy ? u.expected_start.has_value()
                              : u.reason == core::PendingReason::kResources ||
                                    u.reason == core::PendingReason::kWaitingForSpotBudget;
    if (blocker) return static_cast<size_t>(u.job - 1) < first_parked;
  }
  return false;
}

std::optional<std::string> Simulation::ShapeKey(const core::Job& job) const {
  const core::JobSpec& spec = job.spec;
  if (!shapes_ || spec.hold || !spec.dependencies.empty() || !spec.fallback.empty() || core::IsElastic(spec) ||
      spec.spot == core::SpotPreference::kPrefer)
    return std::nullopt;
  // What Planner::MakeShape's key reads (partition, features, GPU types, per-task demand, tasks,
  // topology, the effective spot preference, a strict data region).
  std::string key = spec.partition;
  key += '|';
  for (const auto& f : spec.features) key += f + ',';
  key += '|';
  for (const auto& t : spec.gpu_types) key += t + ',';
  key += '|';
  for (const auto& [type, n] : spec.per_task.gpus) key += type + ':' + std::to_string(n) + ',';
  for (int64_t v : {spec.per_task.cpu_millis, spec.per_task.memory_bytes, int64_t{spec.ntasks},
                    static_cast<int64_t>(spec.topology),
                    static_cast<int64_t>(core::EffectiveSpot(job, options_.policy, now_))}) {
    key += '|';
    key += std::to_string(v);
  }
  key += '|';
  if (spec.region_strict) key += spec.data_region;
  return key;
}

void Simulation::AddPending(size_t index) {
  const core::Job& job = JobOf(index);
  view_.AddPending(index, NeedOf(job.spec), ShapeKey(job), core::PlannedRuntime(job));
}

bool Simulation::GapsClosed(const core::CyclePlan& plan) {
  unpark_.clear();
  for (const auto& start : plan.starts) view_.OpenGap(static_cast<size_t>(start.job - 1), &unpark_);
  for (const auto& u : plan.pending)
    if (u.reason != core::PendingReason::kResources && u.reason != core::PendingReason::kPriority)
      view_.OpenGap(static_cast<size_t>(u.job - 1), &unpark_);
  for (size_t i : unpark_) {
    auto it = parked_jobs_.find(i);
    live_[i].slot = static_cast<int64_t>(state_.jobs.size());
    state_.jobs.push_back(std::move(it->second));
    parked_jobs_.erase(it);
  }
  return unpark_.empty();
}

core::CyclePlan Simulation::Pass() {
  double wall = 0;
  bool arrange = parking_;
  while (true) {
    if (arrange) Arrange();
    arrange = false;
    if (need_compact_) Compact();
    if (preemption_) ReportCheckpoints();
    const auto t0 = std::chrono::steady_clock::now();
    if (skip_idle_ && !occupancy_) occupancy_.emplace(state_.nodes, state_.jobs);
    core::CyclePlan plan = occupancy_ ? core::SchedulingCycle::Run(state_, options_.policy, now_, *occupancy_)
                                      : core::SchedulingCycle::Run(state_, options_.policy, now_);
    wall += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (parking_ && !PassStands(plan)) {
      view_.Widen();  // the pass may depend on a parked job: run it again seeing more of them
      arrange = true;
      continue;
    }
    if (shapes_ && !GapsClosed(plan)) continue;  // run again with the uncovered jobs shown
    result_.cycle_wall_s.push_back(wall);
    ++result_.cycles;
    if (parking_) view_.Settle(plan.starts.size() + 1);
    return plan;
  }
}

void Simulation::Cycle() {
  dirty_ = false;
  if (skip_idle_ && (!view_.AnyMayStart() || NothingNewFits())) {
    // Nothing can start: the pass would only restate pending reasons and planned starts, which
    // nothing reads here (SimOptions::idle_shortcuts). Counted as a pass all the same.
    ++result_.cycles;
    ++result_.skipped_cycles;
  } else {
    core::CyclePlan plan = Pass();
    Apply(plan);
    // Resizes (elastic grows): the jobs checkpoint and go back to the queue; a pass at the same
    // time restarts them at the size that fits now (the nodes PlanGrows found are free for them).
    for (int round = 0; !plan.resizes.empty() && round < kMaxResizeRounds; ++round) {
      for (const auto& resize : plan.resizes) Resize(resize);
      plan = Pass();
      Apply(plan);
    }
    if (provisioning_) Provision(plan);
    if (replan_skip_) {
      free_after_ = std::move(plan.free_after);
      since_plan_.clear();
      plan_fresh_ = true;
    }
  }
  if (options_.record_series) {
    result_.series.push_back(SeriesPoint{now_, pending_, running_, busy_});
  }
}

bool Simulation::NothingNewFits() const {
  if (!plan_fresh_ || free_after_.empty()) return false;
  // Under conservative backfill every job pending at the last pass keeps its planned start (the
  // timeline has not changed since, and plans do not depend on now): only a job submitted since
  // could start, and only where the plan's free total covers it over its whole run.
  const auto first = std::upper_bound(free_after_.begin(), free_after_.end(), now_,
                                      [](Timestamp t, const core::FreeStep& s) { return t < s.time; });
  for (const auto& [need, run] : since_plan_) {
    bool covered = true;
    for (auto it = first == free_after_.begin() ? first : std::prev(first);
         covered && it != free_after_.end() && (it->time <= now_ || it->time < now_ + run); ++it) {
      covered = it->cpu_millis >= need.cpu_millis && it->memory_bytes >= need.memory_bytes && it->gpus >= need.gpus;
    }
    if (covered) return false;
  }
  return true;
}

void Simulation::Apply(const core::CyclePlan& plan) {
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
      if (options_.estimate_predictor == nullptr && options_.estimates) {
        RecordEstimate(static_cast<size_t>(index), update.expected_start);
      }
    }
  }
  if (options_.estimate_predictor != nullptr) ShadowEstimates();
}

}  // namespace mlsched::sim::detail
