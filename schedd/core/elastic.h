// Elastic gangs that grow at checkpoints (issue 16 point 3): after a cycle's starts, which running
// elastic jobs below their largest size should checkpoint and restart larger.
#pragma once

#include <vector>

#include "schedd/core/types.h"

namespace mlsched::core {

/// Most running elastic jobs PlanGrows examines in one cycle (oldest attempts first); the rest
/// wait for a later cycle. Bounds the cost of a cycle with many shrunk jobs.
inline constexpr size_t kMaxGrowCandidates = 64;

/// The grows of one cycle, decided after `plan`'s starts and preemptions (SchedulingCycle::Run
/// appends them to plan.resizes). A running elastic job below spec.ntasks grows to the largest
/// size of its range (GangSizes) that its own nodes plus the nodes free after this cycle's starts
/// hold, when all of these hold:
/// - policy.elastic.grow is on, and the cycle preempts nothing and leaves no pending job waiting for
///   nodes (reason Resources, Priority, Preempting or WaitingForSpotBudget): a blocked job is
///   ahead of a grow, and with none there is no reservation a grow could delay;
/// - the job is not being stopped or launched (Job::launching), and its attempt has run at least
///   policy.elastic.min_resize_interval seconds since all its ranks started (RunningFor; every
///   resize restarts the attempt, so no job is resized twice inside the interval);
/// - the expected gain beats the restart cost: remaining x (1 - from / to) > cost, where remaining
///   is PlannedRuntime minus the time run so far (a job without a time limit has no known
///   remainder and never grows) and cost is job.restart_cost, or policy.elastic.restart_cost when
///   the job has not been measured.
/// Capacity given to one grow is not offered to the next.
/// The same rule returns a job from a fallback tier (issue 16 point 3): a running job with
/// spec.fallback whose attempt runs on an accelerator outside its own GPU types (another type, or
/// CPU-only) and whose own types could hold it now at its size or larger (the largest that fits)
/// gets a ResizeDecision with `accelerator` = its first own type, when the gain
/// remaining x (1 - from / (to x policy.elastic.tier_speedup)) beats the restart cost. Tier returns
/// are planned before grows. The restart goes through the next cycle's placement, which tries the
/// job's own types first. Pure: at most kMaxGrowCandidates jobs of each kind, O(nodes + running
/// tasks) when there is a candidate, nothing otherwise.
std::vector<ResizeDecision> PlanGrows(const ClusterState& state, const PolicySet& policy, const CyclePlan& plan,
                                      Timestamp now);

}  // namespace mlsched::core
