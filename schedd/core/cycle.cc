// SchedulingCycle::Run: admission (hold, dependencies, partition) -> order (QoS preemption tier, then FIFO or
// multifactor priority) -> planner (start in order, reserve for blocked jobs, backfill around the
// reservations) -> preemption for blocked jobs whose QoS may preempt -> grows of running elastic
// jobs (elastic.h).
#include <algorithm>
#include <deque>
#include <optional>
#include <set>

#include "schedd/core/backfill.h"
#include "schedd/core/dependency.h"
#include "schedd/core/fallback.h"
#include "schedd/core/ledger.h"
#include "schedd/core/limits.h"
#include "schedd/core/pools.h"
#include "schedd/core/elastic.h"
#include "schedd/core/preemption.h"
#include "schedd/core/priority.h"
#include "schedd/core/timeline.h"
#include "schedd/core/types.h"

namespace mlsched::core {
namespace {

// Reasons decided before ordering: hold, dependencies and partition state. nullopt = the job is
// queued. `deps` is null when no pending job has dependencies.
std::optional<PendingUpdate> Admit(const Job& job, const PolicySet& policy, const JobStateIndex* deps,
                                   const PartitionPolicy** partition) {
  const JobSpec& spec = job.spec;
  if (spec.hold) return PendingUpdate{job.id, PendingReason::kJobHeldUser, std::nullopt, "", 0};
  if (deps && !spec.dependencies.empty()) {
    DependencyStatus d = EvaluateDependencies(spec, *deps);
    if (d.kind != DependencyStatus::Kind::kSatisfied)
      return PendingUpdate{job.id,
                           d.kind == DependencyStatus::Kind::kNever ? PendingReason::kDependencyNeverSatisfied
                                                                    : PendingReason::kDependency,
                           std::nullopt, std::move(d.detail), 0};
  }
  *partition = FindPartition(policy, spec.partition);
  if (!*partition)
    return PendingUpdate{job.id, PendingReason::kPartitionLimit, std::nullopt,
                         "unknown partition '" + spec.partition + "'", 0};
  if (!(*partition)->up)
    return PendingUpdate{job.id, PendingReason::kPartitionDown, std::nullopt,
                         "partition '" + (*partition)->name + "' is down", 0};
  if (spec.time_limit > (*partition)->max_time_limit)
    return PendingUpdate{job.id, PendingReason::kPartitionLimit, std::nullopt,
                         "time limit above partition '" + (*partition)->name + "' max_time_limit", 0};
  return std::nullopt;
}

// SchedulingCycle::Run, from `occupancy` when given (else the ledger is built from the state).
CyclePlan RunWith(const ClusterState& state, const PolicySet& policy, Timestamp now, const NodeLedger* occupancy) {
  CyclePlan plan;
  std::vector<QueuedJob> queue;
  std::optional<JobStateIndex> deps;  // built only when some pending job has dependencies
  for (const Job& job : state.jobs)
    if (job.state == JobState::kPending && !job.spec.dependencies.empty()) {
      deps.emplace(state);
      break;
    }
  queue.reserve(state.jobs.size());
  for (const Job& job : state.jobs) {
    if (job.state != JobState::kPending) continue;
    const PartitionPolicy* partition = nullptr;
    if (auto held = Admit(job, policy, deps ? &*deps : nullptr, &partition)) {
      plan.pending.push_back(std::move(*held));
      continue;
    }
    queue.push_back({&job, partition, 0, 0});
  }
  plan.pending.reserve(plan.pending.size() + queue.size());  // at most one update per queued job
  if (policy.queue_order == QueueOrder::kMultifactor) {
    PriorityCalculator calc(state, policy, now);
    for (QueuedJob& q : queue) q.priority = calc.Compute(*q.job).priority;
  }
  // A QoS that may preempt another is always ahead of it (QosTiers); all tiers are 0 otherwise.
  if (const auto tiers = QosTiers(policy); !tiers.empty())
    for (QueuedJob& q : queue)
      if (const QosPolicy* qos = QosOf(*q.job, policy)) q.tier = tiers.at(qos->name);
  // A strict total order (ids are unique): one sorted result, so a queue already in order (FIFO
  // over jobs kept in submission order) is left as it is.
  auto before = [](const QueuedJob& a, const QueuedJob& b) {
    if (a.tier != b.tier) return a.tier > b.tier;
    if (a.priority != b.priority) return a.priority > b.priority;
    if (a.job->submit_time != b.job->submit_time) return a.job->submit_time < b.job->submit_time;
    return a.job->id < b.job->id;
  };
  if (!std::is_sorted(queue.begin(), queue.end(), before)) std::sort(queue.begin(), queue.end(), before);
  // A kept ledger over another node list (a caller's bug) is not used: the cycle builds its own.
  if (occupancy && (occupancy->size() != state.nodes.size() ||
                    (!state.nodes.empty() && occupancy->slot(0).node != &state.nodes.front())))
    occupancy = nullptr;
  NodeLedger ledger = occupancy ? *occupancy : NodeLedger(state.nodes, state.jobs);
  // Jobs with accelerator fallback tiers are placed with the tiers their wait has opened.
  std::deque<Job> with_tiers;
  for (QueuedJob& q : queue) {
    if (q.job->spec.fallback.empty()) continue;
    Job j = *q.job;
    j.spec = EffectiveSpec(q.job->spec, now - q.job->submit_time, ledger, q.partition);
    if (j.spec == q.job->spec) continue;
    with_tiers.push_back(std::move(j));
    q.job = &with_tiers.back();
  }
  // Pools and regions: the effective spot preference (wait budget, evictions) and, when the policy
  // prices pools or the job names a data region, the order in which to try them.
  std::deque<std::vector<NodeFilter>> placements;
  std::set<JobId> spot_only;
  std::vector<Pool> present;  // pools with nodes, in on-demand, spot, reserved order
  for (Pool pool : {Pool::kOnDemand, Pool::kSpot, Pool::kReserved})
    if (std::any_of(state.nodes.begin(), state.nodes.end(), [&](const Node& n) { return n.pool == pool; }))
      present.push_back(pool);
  for (QueuedJob& q : queue) {
    const SpotPreference spot = EffectiveSpot(*q.job, policy, now);
    if (spot != q.job->spec.spot) {
      Job j = *q.job;
      j.spec.spot = spot;
      with_tiers.push_back(std::move(j));
      q.job = &with_tiers.back();
      if (spot == SpotPreference::kOnly) spot_only.insert(q.job->id);
    }
    if (policy.placement.pricing.empty() && q.job->spec.data_region.empty()) continue;
    std::vector<NodeFilter> order;
    for (const PlacementTier& t : PlacementTiers(q.job->spec, policy, state, present)) order.push_back(t.filter);
    if (order.empty()) continue;
    placements.push_back(std::move(order));
    q.placement = &placements.back();
  }
  AvailabilityTimeline timeline(ledger, state.jobs, now);
  LimitTracker limits(state, policy);
  Planner(ledger, timeline, limits, policy, now).Run(queue, plan);
  if (policy.backfill.mode == BackfillMode::kConservative) plan.free_after = timeline.AggregateSteps();
  for (PendingUpdate& p : plan.pending)
    if (p.reason == PendingReason::kResources && spot_only.count(p.job)) {
      p.reason = PendingReason::kWaitingForSpotBudget;
      p.detail = "spot nodes only until it has waited " + std::to_string(policy.placement.spot_wait_budget) +
                 " s (--spot=prefer); " + p.detail;
    }
  PlanPreemptions(state, policy, now, queue, ledger, plan);
  plan.resizes = PlanGrows(state, policy, plan, now);
  return plan;
}

}  // namespace

CyclePlan SchedulingCycle::Run(const ClusterState& state, const PolicySet& policy, Timestamp now) {
  return RunWith(state, policy, now, nullptr);
}

CyclePlan SchedulingCycle::Run(const ClusterState& state, const PolicySet& policy, Timestamp now,
                               const NodeLedger& occupancy) {
  return RunWith(state, policy, now, &occupancy);
}

}  // namespace mlsched::core
