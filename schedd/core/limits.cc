#include "schedd/core/limits.h"

#include <algorithm>

#include "schedd/core/dependency.h"

namespace mlsched::core {
namespace {

int64_t JobGpus(const JobSpec& s) { return s.per_task.GpuCount() * s.ntasks; }
int64_t JobCpus(const JobSpec& s) { return s.per_task.cpu_millis * s.ntasks; }

std::string Over(const std::string& what, int64_t limit, int64_t running, int64_t job) {
  return what + " " + std::to_string(limit) + " (running " + std::to_string(running) + ", job " +
         std::to_string(job) + ")";
}

}  // namespace

std::vector<const AccountPolicy*> AccountChain(const PolicySet& policy, const std::string& account) {
  std::vector<const AccountPolicy*> chain;
  // A name always resolves to the same account (the last listed), so a name seen before is an
  // account already in the chain: that is where a cycle is cut. No allocation without accounts.
  const std::string* name = &account;
  while (!name->empty()) {
    const AccountPolicy* found = nullptr;
    for (const AccountPolicy& a : policy.accounts)
      if (a.name == *name) found = &a;
    if (!found || std::find(chain.begin(), chain.end(), found) != chain.end()) break;
    chain.push_back(found);
    name = &found->parent;
  }
  return chain;
}

const QosPolicy* FindQos(const PolicySet& policy, const std::string& name) {
  const std::string& wanted = name.empty() ? policy.default_qos : name;
  for (const QosPolicy& q : policy.qos)
    if (q.name == wanted) return &q;
  return nullptr;
}

LimitTracker::LimitTracker(const ClusterState& state, const PolicySet& policy) : policy_(policy) {
  for (const Job& job : state.jobs)
    if (job.state == JobState::kPending && !job.spec.dependencies.empty() && IsSingleton(job.spec)) {
      track_singletons_ = true;
      break;
    }
  for (const Job& job : state.jobs) {
    if (job.state != JobState::kRunning && job.state != JobState::kCompleting) continue;
    if (RunningTasks(job) == job.spec.ntasks) {
      Charge(job);
      continue;
    }
    Job at_size = job;  // an elastic gang counts at the size it runs
    at_size.spec.ntasks = RunningTasks(job);
    Charge(at_size);
  }
}

void LimitTracker::Charge(const Job& job) {
  const JobSpec& s = job.spec;
  if (s.array.job_id != 0) running_by_array_[s.array.job_id] += 1;
  if (track_singletons_ && job.id > 0) singletons_.try_emplace({s.user, s.name}, job.id);
  // Only what Check reads: totals of accounts and QoS with a limit on running work.
  for (const AccountPolicy* a : AccountChain(policy_, s.account)) {
    if (a->max_gpus <= 0 && a->max_cpu_millis <= 0 && a->max_running_jobs <= 0) continue;
    Totals& t = by_account_[a->name];
    t.gpus += JobGpus(s);
    t.cpu_millis += JobCpus(s);
    t.jobs += 1;
  }
  const QosPolicy* q = FindQos(policy_, s.qos);
  if (q && (q->max_gpus_per_user > 0 || q->max_running_jobs_per_user > 0)) {
    Totals& t = by_qos_user_[{q->name, s.user}];
    t.gpus += JobGpus(s);
    t.jobs += 1;
  }
}

std::optional<LimitHit> LimitTracker::CheckStatic(const Job& job) const {
  const JobSpec& s = job.spec;
  if (const PartitionPolicy* p = FindPartition(policy_, s.partition))
    if (p->max_tasks_per_job > 0 && s.ntasks > p->max_tasks_per_job)
      return LimitHit{PendingReason::kPartitionLimit,
                      "partition '" + p->name + "' max_tasks_per_job " +
                          std::to_string(p->max_tasks_per_job)};
  if (policy_.qos.empty()) return std::nullopt;
  const QosPolicy* q = FindQos(policy_, s.qos);
  const std::string qname = s.qos.empty() ? policy_.default_qos : s.qos;
  if (!q) return LimitHit{PendingReason::kQosLimit, "unknown QoS '" + qname + "'"};
  if (q->max_wall > 0 && s.time_limit > q->max_wall)
    return LimitHit{PendingReason::kQosLimit, "QoS '" + q->name + "' max_wall " +
                                                  std::to_string(q->max_wall) + " s"};
  if (q->max_gpus_per_job > 0 && JobGpus(s) > q->max_gpus_per_job)
    return LimitHit{PendingReason::kQosLimit, "QoS '" + q->name + "' max_gpus_per_job " +
                                                  std::to_string(q->max_gpus_per_job)};
  return std::nullopt;
}

std::optional<LimitHit> LimitTracker::Check(const Job& job) const {
  if (auto hit = CheckStatic(job)) return hit;
  const JobSpec& s = job.spec;
  if (s.array.max_running > 0) {
    auto it = running_by_array_.find(s.array.job_id);
    if (it != running_by_array_.end() && it->second >= s.array.max_running)
      return LimitHit{PendingReason::kJobArrayTaskLimit,
                      "array " + std::to_string(s.array.job_id) + ": " + std::to_string(it->second) +
                          " elements running, limit %" + std::to_string(s.array.max_running)};
  }
  if (!s.dependencies.empty() && IsSingleton(s)) {
    auto it = singletons_.find({s.user, s.name});
    if (it != singletons_.end() && it->second != job.id)
      return LimitHit{PendingReason::kDependency, "singleton: job " + std::to_string(it->second) + " '" + s.name +
                                                      "' of user '" + s.user + "' is running"};
  }
  if (const QosPolicy* q = FindQos(policy_, s.qos)) {
    auto it = by_qos_user_.find({q->name, s.user});
    Totals t = it == by_qos_user_.end() ? Totals{} : it->second;
    auto who = [&] { return "QoS '" + q->name + "' user '" + s.user + "' "; };  // built on a hit only
    if (q->max_gpus_per_user > 0 && t.gpus + JobGpus(s) > q->max_gpus_per_user)
      return LimitHit{PendingReason::kQosLimit,
                      Over(who() + "max_gpus_per_user", q->max_gpus_per_user, t.gpus, JobGpus(s))};
    if (q->max_running_jobs_per_user > 0 && t.jobs + 1 > q->max_running_jobs_per_user)
      return LimitHit{PendingReason::kQosLimit,
                      Over(who() + "max_running_jobs_per_user", q->max_running_jobs_per_user, t.jobs, 1)};
  }
  for (const AccountPolicy* a : AccountChain(policy_, s.account)) {
    auto it = by_account_.find(a->name);
    Totals t = it == by_account_.end() ? Totals{} : it->second;
    auto who = [&] { return "account '" + a->name + "' "; };  // built on a hit only
    if (a->max_gpus > 0 && t.gpus + JobGpus(s) > a->max_gpus)
      return LimitHit{PendingReason::kAccountQuota, Over(who() + "max_gpus", a->max_gpus, t.gpus, JobGpus(s))};
    if (a->max_cpu_millis > 0 && t.cpu_millis + JobCpus(s) > a->max_cpu_millis)
      return LimitHit{PendingReason::kAccountQuota,
                      Over(who() + "max_cpu_millis", a->max_cpu_millis, t.cpu_millis, JobCpus(s))};
    if (a->max_running_jobs > 0 && t.jobs + 1 > a->max_running_jobs)
      return LimitHit{PendingReason::kAccountQuota,
                      Over(who() + "max_running_jobs", a->max_running_jobs, t.jobs, 1)};
  }
  return std::nullopt;
}

}  // namespace mlsched::core
