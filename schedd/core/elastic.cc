#include "schedd/core/elastic.h"

#include <algorithm>
#include <set>

#include "schedd/core/fallback.h"
#include "schedd/core/ledger.h"
#include "schedd/core/placement.h"

namespace mlsched::core {

namespace {

// A pending job with this reason waits for nodes: a grow would take them, or delay its reservation.
bool NeedsNodes(PendingReason r) {
  return r == PendingReason::kResources || r == PendingReason::kPriority || r == PendingReason::kPreempting ||
         r == PendingReason::kWaitingForSpotBudget;
}

// Running elastic jobs below their largest size whose attempt has run the resize interval, not
// being stopped, oldest attempt first, at most kMaxGrowCandidates.
std::vector<const Job*> GrowCandidates(const ClusterState& state, const PolicySet& policy, const CyclePlan& plan,
                                       Timestamp now) {
  std::set<JobId> victims;
  for (const PreemptDecision& d : plan.preemptions) victims.insert(d.victim);
  std::vector<const Job*> out;
  for (const Job& job : state.jobs) {
    if (job.state != JobState::kRunning || !IsElastic(job.spec) || !job.allocation || job.preempting) continue;
    if (victims.count(job.id) || RunningTasks(job) >= job.spec.ntasks) continue;
    if (job.launching || RunningFor(job, now) < policy.elastic.min_resize_interval) continue;
    out.push_back(&job);
  }
  std::sort(out.begin(), out.end(), [](const Job* a, const Job* b) {
    return a->start_time != b->start_time ? a->start_time < b->start_time : a->id < b->id;
  });
  if (out.size() > kMaxGrowCandidates) out.resize(kMaxGrowCandidates);
  return out;
}

// The largest size of `job`'s range above `from` that fits `ledger` now, taken inside `txn`; 0 when
// none does (nothing taken).
int32_t TakeLargestFit(AllocationTxn& txn, const NodeLedger& ledger, const Job& job, const PolicySet& policy,
                       int32_t from) {
  const PartitionPolicy* partition = FindPartition(policy, job.spec.partition);
  std::vector<size_t> eligible;
  for (size_t i = 0; i < ledger.size(); ++i)
    if (NodeEligible(ledger.slot(i), job.spec, partition)) eligible.push_back(i);
  if (eligible.empty()) return 0;
  const auto demand = ResolveTaskDemand(job.spec, *ledger.slot(eligible.front()).node);
  if (!demand) return 0;
  for (int32_t size : GangSizes(job.spec)) {
    if (size <= from) break;  // largest first
    JobSpec sized = job.spec;
    sized.ntasks = size;
    if (PlaceGangNow(txn, ledger, eligible, sized, *demand)) return size;
  }
  return 0;
}

// The accelerator `job` runs on: the GPU type of its first task, or "cpu" when it holds no GPU.
std::string RunningAccelerator(const Job& job) {
  if (!job.allocation || job.allocation->tasks.empty()) return "cpu";
  for (const auto& [type, count] : job.allocation->tasks.front().resources.gpus)
    if (count > 0) return type;
  return "cpu";
}

// The job's own GPU types, before any fallback tier opens (a tier with after = 0 is still a
// fallback); empty when it takes any type.
std::vector<std::string> OwnGpuTypes(const JobSpec& spec) { return OpenGpuTiers(spec, -1); }

// Running jobs on a fallback tier (an accelerator outside their own GPU types) whose attempt has
// run the resize interval, not being stopped, oldest attempt first, at most kMaxGrowCandidates.
std::vector<const Job*> TierCandidates(const ClusterState& state, const PolicySet& policy, const CyclePlan& plan,
                                       const std::set<JobId>& resized, Timestamp now) {
  std::set<JobId> victims;
  for (const PreemptDecision& d : plan.preemptions) victims.insert(d.victim);
  std::vector<const Job*> out;
  for (const Job& job : state.jobs) {
    if (job.state != JobState::kRunning || job.spec.fallback.empty() || !job.allocation || job.preempting) continue;
    // Only jobs that keep their progress across a restart: a checkpointing or an elastic one.
    if (job.spec.checkpoint_interval <= 0 && !IsElastic(job.spec)) continue;
    if (victims.count(job.id) || resized.count(job.id) || job.launching ||
        RunningFor(job, now) < policy.elastic.min_resize_interval)
      continue;
    const std::vector<std::string> own = OwnGpuTypes(job.spec);
    if (!own.empty() && std::find(own.begin(), own.end(), RunningAccelerator(job)) == own.end()) out.push_back(&job);
  }
  std::sort(out.begin(), out.end(), [](const Job* a, const Job* b) {
    return a->start_time != b->start_time ? a->start_time < b->start_time : a->id < b->id;
  });
  if (out.size() > kMaxGrowCandidates) out.resize(kMaxGrowCandidates);
  return out;
}

// Seconds left of `job`'s planned run at `now`, or 0 when unknown (no time limit) or used up.
Duration Remaining(const Job& job, Timestamp now) {
  if (job.spec.time_limit <= 0) return 0;
  return std::max<Duration>(0, PlannedRuntime(job) - (now - job.start_time));
}

}  // namespace

std::vector<ResizeDecision> PlanGrows(const ClusterState& state, const PolicySet& policy, const CyclePlan& plan,
                                      Timestamp now) {
  if (!policy.elastic.grow || !plan.preemptions.empty()) return {};
  for (const PendingUpdate& p : plan.pending)
    if (NeedsNodes(p.reason)) return {};
  const std::vector<const Job*> candidates = GrowCandidates(state, policy, plan, now);
  std::set<JobId> resized;
  std::vector<const Job*> tier_candidates = TierCandidates(state, policy, plan, resized, now);
  if (candidates.empty() && tier_candidates.empty()) return {};
  NodeLedger ledger(state.nodes, state.jobs);
  for (const StartDecision& s : plan.starts) ledger.Occupy(s.allocation);
  std::vector<ResizeDecision> out;
  // Tier returns first: a job on a fallback tier runs slower at any size.
  for (const Job* job : tier_candidates) {
    const Duration remaining = Remaining(*job, now);
    if (remaining <= 0) continue;
    const int32_t from = RunningTasks(*job);
    const Duration cost = job->restart_cost > 0 ? job->restart_cost : policy.elastic.restart_cost;
    Job preferred = *job;  // the same job restricted to its own GPU types
    preferred.spec.gpu_types = OwnGpuTypes(job->spec);
    preferred.spec.per_task.gpus = {{"", job->spec.per_task.GpuCount()}};
    preferred.spec.fallback.clear();
    ledger.Release(*job->allocation);
    AllocationTxn txn(ledger);
    const int32_t to = TakeLargestFit(txn, ledger, preferred, policy, from - 1);  // never smaller
    const double speedup = std::max(1.0, policy.elastic.tier_speedup) * to / std::max(1, from);
    const auto gain = to > 0 ? static_cast<Duration>(static_cast<double>(remaining) * (1.0 - 1.0 / speedup)) : 0;
    if (to > 0 && gain > cost) {
      txn.Commit();
      ledger.Occupy(*job->allocation);  // held until its ranks have checkpointed and exited
      resized.insert(job->id);
      std::string own;  // the type it returns to (its own types, when it named several)
      for (const std::string& t : preferred.spec.gpu_types) own += (own.empty() ? "" : ",") + t;
      out.push_back({job->id, from, to, gain, cost, own, RunningAccelerator(*job)});
      continue;
    }
    txn.Discard();
    ledger.Occupy(*job->allocation);
  }
  for (const Job* job : candidates) {
    if (resized.count(job->id)) continue;
    const Duration remaining = Remaining(*job, now);
    if (remaining <= 0) continue;  // no known remainder
    const int32_t from = RunningTasks(*job);
    const Duration cost = job->restart_cost > 0 ? job->restart_cost : policy.elastic.restart_cost;
    ledger.Release(*job->allocation);
    AllocationTxn txn(ledger);
    const int32_t to = TakeLargestFit(txn, ledger, *job, policy, from);
    const Duration gain = to > from ? remaining * (to - from) / to : 0;
    if (to > from && gain > cost) {
      txn.Commit();  // the new size's nodes are not offered to the next candidate
      out.push_back({job->id, from, to, gain, cost, "", ""});
      continue;
    }
    txn.Discard();
    ledger.Occupy(*job->allocation);
  }
  return out;
}

}  // namespace mlsched::core
