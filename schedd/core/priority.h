// Slurm's multifactor priority: priority = w_age x age + w_fairshare x fairshare + w_size x size
// + w_partition x partition + w_qos x qos - nice, every factor normalized to [0,1]
// (https://slurm.schedmd.com/priority_multifactor.html).
#pragma once

#include <cstdint>
#include <vector>

#include "schedd/core/fairshare.h"
#include "schedd/core/types.h"

namespace mlsched::core {

/// One job's priority and the factors it is made of (like sprio).
struct PriorityBreakdown {
  JobId job = 0;
  double age = 0;        // min(now - submit, max_age) / max_age
  double fairshare = 0;  // from the fairshare tree
  double job_size = 0;   // job's GPUs (CPUs for CPU jobs) / the cluster's; 1 - that if favor_small
  double partition = 0;  // partition tier / highest tier
  double qos = 0;        // QoS priority / highest QoS priority
  int64_t nice = 0;      // subtracted
  int64_t priority = 0;  // the weighted sum, rounded, minus nice
};

/// Computes priorities for many jobs of one snapshot; precomputes cluster totals and fairshare.
class PriorityCalculator {
 public:
  PriorityCalculator(const ClusterState& state, const PolicySet& policy, Timestamp now);
  PriorityBreakdown Compute(const Job& job) const;
  const FairshareTree& fairshare() const { return fairshare_; }

 private:
  const PolicySet& policy_;
  Timestamp now_;
  FairshareTree fairshare_;
  int64_t total_gpus_ = 0, total_cpu_millis_ = 0, max_tier_ = 0, max_qos_ = 0;
};

/// The breakdown of every pending job of `state` (for mlprio / mlq --explain), in job order.
std::vector<PriorityBreakdown> ExplainPriorities(const ClusterState& state, const PolicySet& policy,
                                                 Timestamp now);

}  // namespace mlsched::core
