// PlanProvisioning: elastic capacity per pool (provisioning.h).
#include "schedd/core/provisioning.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <unordered_map>

#include "schedd/core/elastic.h"
#include "schedd/core/ledger.h"
#include "schedd/core/placement.h"
#include "schedd/core/pools.h"

namespace mlsched::core {
namespace {

std::string Nodes(int64_t n) { return std::to_string(n) + (n == 1 ? " node" : " nodes"); }

// Reasons of jobs that more nodes would start: Resources (the first blocked job), Priority (behind
// it in the queue) and WaitingForSpotBudget (spot only for now).
bool WaitsForNodes(PendingReason r) {
  return r == PendingReason::kResources || r == PendingReason::kPriority || r == PendingReason::kWaitingForSpotBudget;
}

const ProvisioningPolicy* FindProvisioning(const PolicySet& policy, Pool pool) {
  for (const ProvisioningPolicy& p : policy.provisioning)
    if (p.pool == pool) return &p;
  return nullptr;
}

// Nodes running a task now or given one by this cycle.
std::set<std::string> BusyNodes(const ClusterState& state, const CyclePlan& cycle) {
  std::set<std::string> busy;
  for (const Job& j : state.jobs)
    if (j.state != JobState::kPending && !IsFinal(j.state) && j.allocation)
      for (const TaskPlacement& t : j.allocation->tasks) busy.insert(t.node);
  for (const StartDecision& s : cycle.starts)
    for (const TaskPlacement& t : s.allocation.tasks) busy.insert(t.node);
  return busy;
}

// Updates one ledger node; returns a release when it leaves the ledger.
std::optional<ProvisionRelease> Step(ProvisionedNode& n, const ProvisioningPolicy& cfg,
                                     const std::unordered_map<std::string, const Node*>& present,
                                     const std::set<std::string>& busy, Timestamp now) {
  const auto it = present.find(n.name);
  if (!n.registered) {
    if (it == present.end()) {
      if (now - n.requested_at < cfg.resume_timeout) return std::nullopt;
      return ProvisionRelease{n.pool, n.name, true,
                              "did not register within " + std::to_string(cfg.resume_timeout) + " s (resume_timeout)"};
    }
    n.registered = true;
    n.idle_since = 0;
  }
  if (it == present.end()) return ProvisionRelease{n.pool, n.name, false, "left the cluster"};
  if (busy.count(n.name)) {
    n.idle_since = 0;
    return std::nullopt;
  }
  if (n.idle_since == 0) n.idle_since = now;
  const NodeHealth health = it->second->health;
  // A down node may come back (after a schedd restart every node is down until its agent
  // reconnects): it is released once down and idle for resume_timeout. Drained: at once.
  if (health == NodeHealth::kDown && now - n.idle_since < cfg.resume_timeout) return std::nullopt;
  if (health != NodeHealth::kUp)
    return ProvisionRelease{n.pool, n.name, false, health == NodeHealth::kDown ? "down with no task" : "drained with no task"};
  if (now - n.idle_since >= cfg.idle_time)
    return ProvisionRelease{n.pool, n.name, false,
                            "idle " + std::to_string(now - n.idle_since) + " s (idle_time " +
                                std::to_string(cfg.idle_time) + " s)"};
  return std::nullopt;
}

// Nodes of `shape` that `tasks` tasks of `job` need (tasks per node from the shape's capacity), or
// 0 when no task of it fits the shape.
int64_t NodesFor(const Job& job, int64_t tasks, const Node& shape, const PolicySet& policy, Timestamp now) {
  JobSpec spec = job.spec;
  spec.spot = EffectiveSpot(job, policy, now);
  std::vector<Node> one{shape};
  one[0].health = NodeHealth::kUp;
  NodeLedger ledger(one, {});
  const NodeSlot& slot = ledger.slot(0);
  if (!NodeEligible(slot, spec, FindPartition(policy, spec.partition))) return 0;
  const std::optional<TaskDemand> demand = ResolveTaskDemand(spec, one[0]);
  if (!demand || tasks < 1) return 0;
  int64_t per_node = TasksThatFit(slot.capacity, *demand, tasks);
  if (spec.topology == Topology::kSpread) per_node = std::min<int64_t>(per_node, 1);
  if (per_node <= 0) return 0;
  return (tasks + per_node - 1) / per_node;
}

// Demand for nodes: `tasks` more tasks of `job` (all of a pending job's largest size, or the tasks
// a running elastic job is short of it).
struct Demand {
  const Job* job = nullptr;
  int64_t tasks = 0;
};

// Running elastic jobs below their largest size, when jobs grow (policy.elastic.grow): a shrink
// after an eviction or preemption asks its pool for a replacement this way. The tasks that free
// nodes hold now (after this cycle's starts; each node offered to one job; created nodes that are
// requested or idle excluded, since Request counts them as supply) are not asked for: PlanGrows
// gives them to the job.
std::vector<Demand> GrowthDemand(const ClusterState& state, const CyclePlan& cycle, const PolicySet& policy,
                                 const ProvisionLedger& ledger, Timestamp now) {
  std::vector<Demand> out;
  if (!policy.elastic.grow) return out;
  std::set<JobId> resized, victims;
  for (const ResizeDecision& r : cycle.resizes) resized.insert(r.job);
  for (const PreemptDecision& d : cycle.preemptions) victims.insert(d.victim);
  std::set<std::string> supply;  // requested or idle created nodes: Request counts them already
  for (const ProvisionedNode& n : ledger.nodes)
    if (!n.registered || n.idle_since != 0) supply.insert(n.name);
  std::optional<NodeLedger> free;  // built for the first candidate only
  std::set<size_t> offered;
  size_t examined = 0;
  for (const Job& job : state.jobs) {
    if (job.state != JobState::kRunning || !IsElastic(job.spec) || !job.allocation || job.preempting) continue;
    if (resized.count(job.id) || victims.count(job.id) || job.spec.time_limit <= 0) continue;
    int64_t missing = job.spec.ntasks - RunningTasks(job);
    if (missing <= 0) continue;
    if (++examined > kMaxGrowCandidates) break;
    // PlanGrows' test at the largest size: a node the grow would never use is not asked for.
    const Duration remaining = PlannedRuntime(job) - (now - job.start_time);
    const Duration cost = job.restart_cost > 0 ? job.restart_cost : policy.elastic.restart_cost;
    if (remaining <= 0 || remaining * missing / job.spec.ntasks <= cost) continue;
    if (!free) {
      free.emplace(state.nodes, state.jobs);
      for (const StartDecision& s : cycle.starts) free->Occupy(s.allocation);
    }
    const PartitionPolicy* partition = FindPartition(policy, job.spec.partition);
    for (size_t i = 0; i < free->size() && missing > 0; ++i) {
      const NodeSlot& slot = free->slot(i);
      if (offered.count(i) || supply.count(slot.node->name) || !NodeEligible(slot, job.spec, partition)) continue;
      const std::optional<TaskDemand> demand = ResolveTaskDemand(job.spec, *slot.node);
      int64_t fit = demand ? TasksThatFit(slot.free, *demand, missing) : 0;
      if (job.spec.topology == Topology::kSpread) fit = std::min<int64_t>(fit, 1);
      if (fit > 0) missing -= fit, offered.insert(i);
    }
    if (missing > 0) out.push_back({&job, missing});
  }
  return out;
}

// The pool's request for the demand of `waiting`, or nullopt when it needs nothing more.
std::optional<ProvisionRequest> Request(const ProvisioningPolicy& cfg, const PolicySet& policy,
                                        const std::vector<Demand>& waiting, ProvisionLedger& ledger,
                                        const std::unordered_map<std::string, const Node*>& present,
                                        Timestamp now) {
  Node shape = cfg.shape;
  shape.pool = cfg.pool;
  int64_t need = 0;
  std::vector<JobId> jobs;
  for (const Demand& d : waiting) {
    const Job* j = d.job;
    const int64_t n = NodesFor(*j, d.tasks, shape, policy, now);
    if (n == 0) continue;
    need = std::min<int64_t>(need + n, 2 * kMaxProvisionedNodes);
    jobs.push_back(j->id);
  }
  if (need == 0) return std::nullopt;
  int64_t held = 0, supply = 0;
  for (const ProvisionedNode& n : ledger.nodes) {
    if (n.pool != cfg.pool) continue;
    ++held;
    if (!n.registered || n.idle_since != 0) ++supply;
  }
  int64_t n = std::min<int64_t>(need - supply, cfg.max_nodes - held);
  std::string cap = n < need - supply ? "; max_nodes " + std::to_string(cfg.max_nodes) : "";
  const double rate = NodeCostPerHour(shape, policy);
  if (cfg.max_cost_per_hour > 0 && rate > 0) {
    const auto afford = static_cast<int64_t>(std::floor((cfg.max_cost_per_hour - held * rate) / rate + 1e-9));
    if (afford < n) cap = "; max_cost_per_hour " + std::to_string(cfg.max_cost_per_hour).substr(0, 8);
    n = std::min(n, afford);
  }
  if (n <= 0) return std::nullopt;
  ProvisionRequest r;
  r.pool = cfg.pool;
  r.jobs = std::move(jobs);
  r.cost_per_hour = rate * static_cast<double>(n);
  r.detail = Nodes(need) + " needed for " + std::to_string(r.jobs.size()) + " job(s), " + std::to_string(supply) +
             " requested or idle" + cap;
  int64_t& next = ledger.next_index[cfg.pool];
  while (static_cast<int64_t>(r.nodes.size()) < n) {
    const std::string name = std::string(PoolName(cfg.pool)) + "-p" + std::to_string(++next);
    const bool taken = present.count(name) ||
                       std::any_of(ledger.nodes.begin(), ledger.nodes.end(),
                                   [&](const ProvisionedNode& p) { return p.name == name; });
    if (taken) continue;
    r.nodes.push_back(name);
    ledger.nodes.push_back(ProvisionedNode{name, cfg.pool, false, now, 0});
  }
  return r;
}

}  // namespace

double NodeCostPerHour(const Node& shape, const PolicySet& policy) {
  const auto it = policy.placement.pricing.find(PoolName(shape.pool));
  if (it == policy.placement.pricing.end()) return 0;
  const PoolPricing& price = it->second;
  double cost = price.cpu_hour * static_cast<double>(shape.capacity.cpu_millis) / 1000.0;
  for (const auto& [type, count] : shape.capacity.gpus) {
    auto g = price.gpu_hour.find(type);
    if (g == price.gpu_hour.end()) g = price.gpu_hour.find("");
    if (g != price.gpu_hour.end()) cost += g->second * static_cast<double>(count);
  }
  return cost;
}

void AppendProvisionable(const PolicySet& policy, std::vector<Node>& nodes) {
  for (const ProvisioningPolicy& c : policy.provisioning)
    for (int32_t i = 1; i <= std::min(c.max_nodes, kMaxFeasibilityShapes); ++i) {
      Node n = c.shape;
      n.pool = c.pool;
      n.health = NodeHealth::kUp;
      n.name = std::string(PoolName(c.pool)) + "-p*" + std::to_string(i);
      nodes.push_back(std::move(n));
    }
}

int64_t NodesNeeded(const Job& job, const Node& shape, const PolicySet& policy, Timestamp now) {
  return NodesFor(job, job.spec.ntasks, shape, policy, now);
}

ProvisioningPlan PlanProvisioning(const ClusterState& state, const CyclePlan& cycle, const PolicySet& policy,
                                  const ProvisionLedger& ledger, Timestamp now) {
  ProvisioningPlan plan;
  plan.ledger.next_index = ledger.next_index;
  std::unordered_map<std::string, const Node*> present;
  for (const Node& n : state.nodes) present.emplace(n.name, &n);
  const std::set<std::string> busy = BusyNodes(state, cycle);
  for (ProvisionedNode n : ledger.nodes) {
    const ProvisioningPolicy* cfg = FindProvisioning(policy, n.pool);
    if (!cfg) continue;  // the pool is no longer provisioned: its nodes stay, as ordinary nodes
    if (auto release = Step(n, *cfg, present, busy, now)) plan.suspend.push_back(std::move(*release));
    else plan.ledger.nodes.push_back(n);
  }
  std::unordered_map<JobId, const Job*> by_id;
  for (const Job& j : state.jobs) by_id.emplace(j.id, &j);
  std::vector<Demand> waiting;
  for (const PendingUpdate& p : cycle.pending) {
    if (waiting.size() >= kMaxProvisionDemandJobs) break;
    const auto it = by_id.find(p.job);
    if (WaitsForNodes(p.reason) && it != by_id.end()) waiting.push_back({it->second, it->second->spec.ntasks});
  }
  if (!policy.provisioning.empty())
    for (const Demand& d : GrowthDemand(state, cycle, policy, plan.ledger, now)) waiting.push_back(d);
  // Each job counts once: for the pool whose nodes for it cost least (ties: the first in the policy).
  std::map<Pool, std::vector<Demand>> assigned;
  for (const Demand& d : waiting) {
    const ProvisioningPolicy* best = nullptr;
    double best_cost = 0;
    for (const ProvisioningPolicy& cfg : policy.provisioning) {
      Node shape = cfg.shape;
      shape.pool = cfg.pool;
      const int64_t n = NodesFor(*d.job, d.tasks, shape, policy, now);
      const double cost = NodeCostPerHour(shape, policy) * static_cast<double>(n);
      if (n > 0 && (!best || cost < best_cost)) best = &cfg, best_cost = cost;
    }
    if (best) assigned[best->pool].push_back(d);
  }
  for (const ProvisioningPolicy& cfg : policy.provisioning) {
    if (auto r = Request(cfg, policy, assigned[cfg.pool], plan.ledger, present, now)) plan.resume.push_back(std::move(*r));
    Node shape = cfg.shape;
    shape.pool = cfg.pool;
    const auto held = std::count_if(plan.ledger.nodes.begin(), plan.ledger.nodes.end(),
                                    [&](const ProvisionedNode& n) { return n.pool == cfg.pool; });
    plan.cost_per_hour[cfg.pool] = NodeCostPerHour(shape, policy) * static_cast<double>(held);
  }
  return plan;
}

}  // namespace mlsched::core
