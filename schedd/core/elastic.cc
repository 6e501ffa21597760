#include "schedd/core/elastic.h"

#include <algorithm>
#include <set>

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
    if (now - job.start_time < policy.elastic.min_resize_interval) continue;
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

}  // namespace

std::vector<ResizeDecision> PlanGrows(const ClusterState& state, const PolicySet& policy, const CyclePlan& plan,
                                      Timestamp now) {
  if (!policy.elastic.grow || !plan.preemptions.empty()) return {};
  for (const PendingUpdate& p : plan.pending)
    if (NeedsNodes(p.reason)) return {};
  const std::vector<const Job*> candidates = GrowCandidates(state, policy, plan, now);
  if (candidates.empty()) return {};
  NodeLedger ledger(state.nodes, state.jobs);
  for (const StartDecision& s : plan.starts) ledger.Occupy(s.allocation);
  std::vector<ResizeDecision> out;
  for (const Job* job : candidates) {
    if (job->spec.time_limit <= 0) continue;  // no known remainder
    const Duration remaining = PlannedRuntime(*job) - (now - job->start_time);
    if (remaining <= 0) continue;
    const int32_t from = RunningTasks(*job);
    const Duration cost = job->restart_cost > 0 ? job->restart_cost : policy.elastic.restart_cost;
    ledger.Release(*job->allocation);
    AllocationTxn txn(ledger);
    const int32_t to = TakeLargestFit(txn, ledger, *job, policy, from);
    const Duration gain = to > from ? remaining * (to - from) / to : 0;
    if (to > from && gain > cost) {
      txn.Commit();  // the new size's nodes are not offered to the next candidate
      out.push_back({job->id, from, to, gain, cost});
      continue;
    }
    txn.Discard();
    ledger.Occupy(*job->allocation);
  }
  return out;
}

}  // namespace mlsched::core
