// Hierarchical fairshare over the account tree (Slurm associations: accounts, sub-accounts, users).
// Usage is billing-weighted resource-seconds, decayed with a half-life; it is plain data
// (ClusterState::usage) the daemon persists and updates incrementally with AccrueUsage.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "schedd/core/types.h"

namespace mlsched::core {

/// Usage key of a user's association: "account/user".
std::string UsageKey(const std::string& account, const std::string& user);

/// Billing rate of one job, per second: sum over its resources of count x billing weight
/// (Slurm TRESBillingWeights): cores x "cpu", GiB x "mem", GPUs x ("gpu:TYPE" or "gpu").
double BillingRate(const JobSpec& spec, const FairsharePolicy& policy);
/// BillingRate of a running job at the size it runs (RunningTasks: an elastic gang may run below
/// its largest size), per second; with FairsharePolicy::Charge::kBusy its GPUs' part is scaled by
/// job.gpu_busy_fraction when that is known (>= 0).
double RunningBillingRate(const Job& job, const FairsharePolicy& policy);

/// Decays every usage value by 2^(-(to-from)/half_life) (Slurm PriorityDecayHalfLife), then adds
/// each running job's billing rate x its seconds running within [from, to) to its user's key.
/// Call it with consecutive intervals; `to` >= `from`.
void AccrueUsage(std::map<std::string, double>& usage, const std::vector<Job>& jobs,
                 const FairsharePolicy& policy, Timestamp from, Timestamp to);

/// One association of the fairshare tree as reported by sshare-like tools.
struct FairshareRow {
  std::string key;           // account name, or "account/user"
  std::string parent;        // "" for top-level accounts
  int64_t raw_shares = 0;
  double norm_shares = 0;    // S: product of shares / siblings' shares along the path
  double raw_usage = 0;      // decayed usage of the subtree
  double norm_usage = 0;     // U: raw usage / total usage
  double effective_usage = 0;  // classic: Slurm's effective usage
  double level_fairshare = 0;  // Fair Tree: (S at this level) / (U at this level)
  double factor = 0;         // fairshare factor in [0,1]; for users only
};

/// Fairshare factors for every association the policy, the jobs or the usage mention.
/// Classic: F = 2^(-UE/S), UE = U + (UE_parent - U) x shares / siblings' shares (Slurm's
/// priority_multifactor classic algorithm). Fair Tree: siblings ranked by level fairshare S/U
/// (ties equal), depth first; a user's factor = rank / number of users, the first visited
/// highest (Slurm's Fair Tree). Built once per scheduling cycle: associations are found by hashed
/// name (one lookup per job), and the rows (strings) are made only when rows() is asked for.
class FairshareTree {
 public:
  FairshareTree(const PolicySet& policy, const std::map<std::string, double>& usage,
                const std::vector<Job>& jobs);
  ~FairshareTree();
  FairshareTree(FairshareTree&&) noexcept;
  FairshareTree& operator=(FairshareTree&&) noexcept;
  /// The user's factor in [0,1] (1 when the tree has no usage at all, or does not know the user).
  double Factor(const std::string& account, const std::string& user) const;
  /// Every association, accounts before their children, siblings in name order (classic) or by
  /// level fairshare (Fair Tree); computed on the first call.
  const std::vector<FairshareRow>& rows() const;

 private:
  class Walker;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlsched::core
