#include "schedd/core/priority.h"

#include <algorithm>
#include <cmath>

#include "schedd/core/limits.h"

namespace mlsched::core {

PriorityCalculator::PriorityCalculator(const ClusterState& state, const PolicySet& policy,
                                       Timestamp now)
    : policy_(policy), now_(now), fairshare_(policy, state.usage, state.jobs) {
  for (const Node& n : state.nodes) {
    total_gpus_ += n.capacity.GpuCount();
    total_cpu_millis_ += n.capacity.cpu_millis;
  }
  for (const PartitionPolicy& p : policy.partitions) max_tier_ = std::max(max_tier_, p.priority_tier);
  for (const QosPolicy& q : policy.qos) max_qos_ = std::max(max_qos_, q.priority);
}

PriorityBreakdown PriorityCalculator::Compute(const Job& job) const {
  const PriorityWeights& w = policy_.weights;
  const JobSpec& spec = job.spec;
  PriorityBreakdown b;
  b.job = job.id;
  if (w.max_age > 0)
    b.age = std::clamp(double(now_ - job.submit_time) / double(w.max_age), 0.0, 1.0);
  b.fairshare = fairshare_.Factor(spec.account, spec.user);
  const int64_t gpus = spec.per_task.GpuCount() * spec.ntasks;
  double size = gpus > 0 ? (total_gpus_ > 0 ? double(gpus) / double(total_gpus_) : 1.0)
                         : (total_cpu_millis_ > 0
                                ? double(spec.per_task.cpu_millis * spec.ntasks) / double(total_cpu_millis_)
                                : 1.0);
  size = std::clamp(size, 0.0, 1.0);
  b.job_size = w.favor_small ? 1.0 - size : size;
  if (const PartitionPolicy* p = FindPartition(policy_, spec.partition); p && max_tier_ > 0)
    b.partition = std::clamp(double(p->priority_tier) / double(max_tier_), 0.0, 1.0);
  if (const QosPolicy* q = FindQos(policy_, spec.qos); q && max_qos_ > 0)
    b.qos = std::clamp(double(q->priority) / double(max_qos_), 0.0, 1.0);
  b.nice = spec.nice;
  const double sum = double(w.age) * b.age + double(w.fairshare) * b.fairshare +
                     double(w.job_size) * b.job_size + double(w.partition) * b.partition +
                     double(w.qos) * b.qos;
  b.priority = std::llround(sum) - b.nice;
  return b;
}

std::vector<PriorityBreakdown> ExplainPriorities(const ClusterState& state, const PolicySet& policy,
                                                 Timestamp now) {
  PriorityCalculator calc(state, policy, now);
  std::vector<PriorityBreakdown> out;
  for (const Job& j : state.jobs)
    if (j.state == JobState::kPending) out.push_back(calc.Compute(j));
  return out;
}

}  // namespace mlsched::core
