#include "schedd/core/preemption.h"

#include <algorithm>
#include <functional>
#include <set>
#include <unordered_map>

#include "schedd/core/fairshare.h"
#include "schedd/core/placement.h"

namespace mlsched::core {

const QosPolicy* QosOf(const Job& job, const PolicySet& policy) {
  const std::string& name = job.spec.qos.empty() ? policy.default_qos : job.spec.qos;
  for (const QosPolicy& q : policy.qos)
    if (q.name == name) return &q;
  return nullptr;
}

std::map<std::string, int32_t> QosTiers(const PolicySet& policy) {
  std::map<std::string, const QosPolicy*> by_name;
  for (const QosPolicy& q : policy.qos) by_name[q.name] = &q;
  std::map<std::string, int32_t> tier;
  std::set<std::string> visiting;
  std::function<int32_t(const std::string&)> visit = [&](const std::string& name) -> int32_t {
    if (auto it = tier.find(name); it != tier.end()) return it->second;
    auto q = by_name.find(name);
    if (q == by_name.end() || !visiting.insert(name).second) return 0;  // unknown, or a cycle
    int32_t t = 0;
    for (const std::string& victim : q->second->preempt) t = std::max(t, visit(victim) + 1);
    visiting.erase(name);
    tier[name] = t;
    return t;
  };
  for (const QosPolicy& q : policy.qos) visit(q.name);
  return tier;
}

double PreemptionCost(const Job& job, const PolicySet& policy, Timestamp now) {
  double rate = RunningBillingRate(job, policy.fairshare);  // at the size it runs
  if (rate <= 0) rate = static_cast<double>(RunningTasks(job));
  const Timestamp since = std::max(job.start_time, job.last_checkpoint);
  return rate * static_cast<double>(std::max<Timestamp>(0, now - since));
}

namespace {

struct Candidate {
  const Job* job = nullptr;
  const QosPolicy* qos = nullptr;
  double cost = 0;
};

// True when the gang of `spec` fits the ledger now on `eligible` (nothing is kept).
bool FitsNow(NodeLedger& ledger, const std::vector<size_t>& eligible, const JobSpec& spec, const TaskDemand& demand) {
  AllocationTxn txn(ledger);
  bool ok = PlaceGangNow(txn, ledger, eligible, spec, demand);
  txn.Discard();
  return ok;
}

// Running jobs `preemptor` may preempt, cheapest first. Only jobs with a task on an eligible node
// can make room for it.
std::vector<Candidate> Candidates(const ClusterState& state, const PolicySet& policy, Timestamp now,
                                  const QosPolicy& preemptor_qos, const std::set<JobId>& taken,
                                  const std::set<std::string>& eligible_nodes) {
  std::vector<Candidate> out;
  for (const Job& j : state.jobs) {
    if (j.state != JobState::kRunning || !j.allocation || j.preempting || taken.count(j.id)) continue;
    const QosPolicy* v = QosOf(j, policy);
    if (!v || std::find(preemptor_qos.preempt.begin(), preemptor_qos.preempt.end(), v->name) == preemptor_qos.preempt.end())
      continue;
    if (now - j.start_time < v->preempt_exempt_time) continue;
    if (v->max_preemptions > 0 && j.preempt_count >= v->max_preemptions) continue;
    bool useful = false;
    for (const TaskPlacement& t : j.allocation->tasks) useful |= eligible_nodes.count(t.node) > 0;
    if (useful) out.push_back({&j, v, PreemptionCost(j, policy, now)});
  }
  if (policy.victim_order == VictimOrder::kYoungestFirst)
    for (Candidate& c : out) c.cost = -static_cast<double>(c.job->start_time);  // latest start first
  std::sort(out.begin(), out.end(), [](const Candidate& a, const Candidate& b) {
    return a.cost != b.cost ? a.cost < b.cost : a.job->id < b.job->id;
  });
  return out;
}

// Chooses the victims for one preemptor on `ledger` (left with the victims released when the
// result is not empty, unchanged otherwise).
std::vector<Candidate> ChooseVictims(NodeLedger& ledger, const std::vector<size_t>& eligible, const JobSpec& spec,
                                     const TaskDemand& demand, const std::vector<Candidate>& candidates) {
  std::vector<Candidate> chosen;
  bool fits = false;
  for (const Candidate& c : candidates) {
    ledger.Release(*c.job->allocation);
    chosen.push_back(c);
    if ((fits = FitsNow(ledger, eligible, spec, demand))) break;
  }
  if (!fits) {
    for (const Candidate& c : chosen) ledger.Occupy(*c.job->allocation);
    return {};
  }
  // Drop victims that turned out not to be needed, most expensive first (fewest jobs, least cost).
  for (size_t k = chosen.size(); k-- > 0;) {
    ledger.Occupy(*chosen[k].job->allocation);
    if (FitsNow(ledger, eligible, spec, demand)) {
      chosen.erase(chosen.begin() + static_cast<std::ptrdiff_t>(k));
    } else {
      ledger.Release(*chosen[k].job->allocation);
    }
  }
  return chosen;
}

}  // namespace

void PlanPreemptions(const ClusterState& state, const PolicySet& policy, Timestamp now,
                     const std::vector<QueuedJob>& queue, NodeLedger& ledger, CyclePlan& plan) {
  if (policy.qos.empty()) return;
  bool any_preemptor = false;
  for (const QosPolicy& q : policy.qos) any_preemptor |= !q.preempt.empty();
  if (!any_preemptor) return;
  std::unordered_map<JobId, size_t> pending_index;
  for (size_t i = 0; i < plan.pending.size(); ++i) pending_index[plan.pending[i].job] = i;
  // Jobs already being preempted will free their resources: count them as free.
  std::set<JobId> taken;
  bool any_preempting = false;
  for (const Job& j : state.jobs)
    if (j.state == JobState::kRunning && j.preempting && j.allocation) {
      ledger.Release(*j.allocation);
      taken.insert(j.id);
      any_preempting = true;
    }
  for (const QueuedJob& q : queue) {
    auto it = pending_index.find(q.job->id);
    if (it == pending_index.end()) continue;  // started this cycle
    PendingUpdate& update = plan.pending[it->second];
    if (update.reason != PendingReason::kResources && update.reason != PendingReason::kPriority) continue;
    const QosPolicy* qos = QosOf(*q.job, policy);
    if (!qos || qos->preempt.empty()) continue;
    const JobSpec& spec = q.job->spec;
    std::vector<size_t> eligible;
    std::set<std::string> eligible_nodes;
    for (size_t i = 0; i < ledger.size(); ++i)
      if (NodeEligible(ledger.slot(i), spec, q.partition)) {
        eligible.push_back(i);
        eligible_nodes.insert(ledger.slot(i).node->name);
      }
    if (eligible.empty()) continue;
    auto demand = ResolveTaskDemand(spec, *ledger.slot(eligible.front()).node);
    if (!demand) continue;
    std::vector<Candidate> victims;
    if (FitsNow(ledger, eligible, spec, *demand)) {
      // Room now: freed by jobs being preempted, or it is held back by a reservation (then
      // preempting would not help it start).
      if (!any_preempting) continue;
    } else {
      victims = ChooseVictims(ledger, eligible, spec, *demand,
                              Candidates(state, policy, now, *qos, taken, eligible_nodes));
      if (victims.empty()) continue;  // even every candidate would not make room: preempt nothing
    }
    AllocationTxn claim(ledger);  // the freed room is this preemptor's for the rest of the cycle
    PlaceGangNow(claim, ledger, eligible, spec, *demand);
    claim.Commit();
    std::string ids;
    for (const Candidate& v : victims) {
      taken.insert(v.job->id);
      const Timestamp since = std::max(v.job->start_time, v.job->last_checkpoint);
      plan.preemptions.push_back({v.job->id, q.job->id, v.qos->preempt_mode, v.qos->grace_time, now - since});
      ids += (ids.empty() ? "" : ", ") + std::to_string(v.job->id);
    }
    update.reason = PendingReason::kPreempting;
    update.detail = victims.empty() ? "waiting for preempted jobs to exit" : "preempting job(s) " + ids;
  }
}

}  // namespace mlsched::core
