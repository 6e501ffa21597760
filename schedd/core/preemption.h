// QoS preemption (Slurm's preempt/qos: a QoS lists the QoS it may preempt), with checkpoint-aware
// victim choice: whole gangs only, the cheapest set in lost work, and only when the preemptor would
// then really start (a dry run through the same ledger and gang placement as the planner).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "schedd/core/backfill.h"
#include "schedd/core/ledger.h"
#include "schedd/core/types.h"

namespace mlsched::core {

/// The QoS policy of a job (spec.qos, else policy.default_qos), or null when the policy defines
/// no such QoS.
const QosPolicy* QosOf(const Job& job, const PolicySet& policy);

/// Queue tier of every QoS: 0 for a QoS that preempts nothing, else 1 + the highest tier it may
/// preempt. The queue is ordered by tier first, so a preemptor is always ahead of its victims once
/// they are requeued (no preempt-requeue-restart loop). The loader rejects cycles; a cycle left
/// here is cut (its members get the tier found first).
std::map<std::string, int32_t> QosTiers(const PolicySet& policy);

/// The cost of preempting running job `job` at `now`: billing-weighted resources per second
/// (BillingRate, or its task count when every billing weight is 0) x the seconds of work it would
/// lose (since its last checkpoint, or its whole runtime when it never checkpointed).
double PreemptionCost(const Job& job, const PolicySet& policy, Timestamp now);

/// Runs after the planner, on the ledger it left (this cycle's starts taken). For each queued job
/// that is still blocked by resources, in queue order, whose QoS may preempt: if the jobs already
/// being preempted free enough, it waits for them (reason Preempting); otherwise it picks victims
/// among running jobs of the QoS it may preempt that are past their PreemptExemptTime and under
/// their max_preemptions, cheapest first (PreemptionCost, then job id; youngest first under
/// VictimOrder::kYoungestFirst), until the gang fits, then
/// drops any victim not needed; no victim at all when even every candidate would not make room.
/// The freed resources are claimed for that preemptor, so one victim set serves one preemptor.
/// Appends PreemptDecisions to `plan` and sets the preemptors' pending reason to kPreempting.
void PlanPreemptions(const ClusterState& state, const PolicySet& policy, Timestamp now,
                     const std::vector<QueuedJob>& queue, NodeLedger& ledger, CyclePlan& plan);

}  // namespace mlsched::core
