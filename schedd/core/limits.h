// Limits and quotas: per partition (tasks per job), per QoS (wall time, GPUs per job, running GPUs
// and jobs per user) and per account (running GPUs, CPUs and jobs, inherited down the account tree
// like Slurm's GrpTRES/GrpJobs), plus the job-array "%N" throttle and singleton dependencies. A job
// a limit holds back gets the pending reason naming it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "schedd/core/types.h"

namespace mlsched::core {

/// A limit that holds a job back: the pending reason (kQosLimit, kAccountQuota, kPartitionLimit)
/// and a short detail naming the limit, e.g. "account 'vision' max_gpus 64 (running 60, job 8)".
struct LimitHit {
  PendingReason reason = PendingReason::kNone;
  std::string detail;
};

/// The accounts from `job` up to the root of the policy's account tree, nearest first. An account
/// the policy does not list is a child of the root. Cycles in `parent` are cut (each name once).
std::vector<const AccountPolicy*> AccountChain(const PolicySet& policy, const std::string& account);

/// The QoS a job runs under (spec.qos, else policy.default_qos), or null when the policy lists no
/// QoS at all or does not know that name.
const QosPolicy* FindQos(const PolicySet& policy, const std::string& name);

/// Running totals per account, per (QoS, user), per job array and per singleton (user, name), kept
/// only for accounts and QoS with a limit on running work; charges running jobs at construction
/// and jobs the cycle starts through Charge().
class LimitTracker {
 public:
  LimitTracker(const ClusterState& state, const PolicySet& policy);
  /// nullopt when no limit holds `job` back now.
  std::optional<LimitHit> Check(const Job& job) const;
  /// Adds `job` to the running totals (call when it starts).
  void Charge(const Job& job);

 private:
  struct Totals {
    int64_t gpus = 0, cpu_millis = 0;
    int32_t jobs = 0;
  };
  std::optional<LimitHit> CheckStatic(const Job& job) const;
  const PolicySet& policy_;
  std::map<std::string, Totals> by_account_;
  std::map<std::pair<std::string, std::string>, Totals> by_qos_user_;
  std::map<JobId, int32_t> running_by_array_;                    // array job id -> running elements
  std::map<std::pair<std::string, std::string>, JobId> singletons_;  // (user, name) -> a running job
  bool track_singletons_ = false;  // some pending job is a singleton
};

}  // namespace mlsched::core
