// SchedulingCycle::Run: strict FIFO gang scheduling (first version; backfill and priority follow).
#include <algorithm>
#include <unordered_map>

#include "schedd/core/ledger.h"
#include "schedd/core/placement.h"
#include "schedd/core/types.h"

namespace mlsched::core {

CyclePlan SchedulingCycle::Run(const ClusterState& state, const PolicySet& policy, Timestamp now) {
  CyclePlan plan;
  NodeLedger ledger(state.nodes, state.jobs);
  std::vector<const Job*> queue;
  for (const Job& job : state.jobs)
    if (job.state == JobState::kPending) queue.push_back(&job);
  std::sort(queue.begin(), queue.end(), [](const Job* a, const Job* b) {
    return a->submit_time != b->submit_time ? a->submit_time < b->submit_time : a->id < b->id;
  });
  bool blocked = false;
  for (const Job* job : queue) {
    const JobSpec& spec = job->spec;
    auto pend = [&](PendingReason r, std::string detail = {}) {
      plan.pending.push_back({job->id, r, std::nullopt, std::move(detail)});
    };
    if (spec.hold) { pend(PendingReason::kJobHeldUser); continue; }
    const PartitionPolicy* partition = FindPartition(policy, spec.partition);
    if (!partition) { pend(PendingReason::kPartitionLimit, "unknown partition"); continue; }
    if (!partition->up) { pend(PendingReason::kPartitionDown); continue; }
    if (spec.time_limit > partition->max_time_limit) {
      pend(PendingReason::kPartitionLimit, "time limit above partition maximum");
      continue;
    }
    if (blocked) { pend(PendingReason::kPriority); continue; }
    std::vector<size_t> eligible;
    for (size_t i = 0; i < ledger.size(); ++i)
      if (NodeEligible(ledger.slot(i), spec, partition)) eligible.push_back(i);
    bool started = false;
    if (!eligible.empty()) {
      TaskDemand demand = *ResolveTaskDemand(spec, *ledger.slot(eligible.front()).node);
      AllocationTxn txn(ledger);
      if (PlaceGangNow(txn, ledger, eligible, spec, demand)) {
        plan.starts.push_back({job->id, txn.Commit()});
        started = true;
      }
    }
    if (!started) {
      pend(PendingReason::kResources);
      blocked = true;
    }
  }
  return plan;
}

}  // namespace mlsched::core
