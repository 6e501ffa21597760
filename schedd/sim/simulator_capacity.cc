// Simulation's changing capacity: node bookkeeping by stable id, elastic gangs (speed-up, resizes)
// and provisioning (core::PlanProvisioning: boots after SimOptions::boot_delay_s, releases, cost).
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "schedd/sim/simulation.h"

namespace mlsched::sim::detail {
namespace {

const core::ProvisioningPolicy* FindPoolPolicy(const core::PolicySet& policy, core::Pool pool) {
  for (const auto& p : policy.provisioning)
    if (p.pool == pool) return &p;
  return nullptr;
}

std::string PoolKey(core::Pool pool, bool provisioned) {
  return std::string(core::PoolName(pool)) + (provisioned ? "/provisioned" : "/static");
}

}  // namespace

void Simulation::InitCapacity() {
  for (size_t n = 0; n < fleet_.nodes.size(); ++n) {
    node_info_.push_back(NodeInfo{static_cast<int64_t>(n), fleet_.eviction_rate_per_hour[n],
                                  fleet_.recovery_s[n], false, 0, false, false, 0, {}});
  }
  next_node_id_ = static_cast<int64_t>(fleet_.nodes.size());
  provisioning_ = !options_.policy.provisioning.empty();
  for (const TraceJob& j : trace_.jobs) result_.elastic_jobs += core::IsElastic(j.spec) ? 1 : 0;
  elastic_ = result_.elastic_jobs > 0;
  feasible_nodes_ = fleet_.nodes;
  if (provisioning_) core::AppendProvisionable(options_.policy, feasible_nodes_);
  capacity_now_ = static_cast<double>(result_.capacity);
}

int64_t Simulation::NodeIndex(int64_t id) const {
  if (id >= 0 && id < static_cast<int64_t>(node_info_.size()) && node_info_[static_cast<size_t>(id)].id == id) {
    return id;  // no node before it left: the usual case
  }
  for (size_t i = 0; i < node_info_.size(); ++i)
    if (node_info_[i].id == id) return static_cast<int64_t>(i);
  return -1;
}

void Simulation::AccrueCapacity() {
  if (!provisioning_) return;  // a fixed fleet: capacity x makespan
  if (capacity_since_ >= 0) result_.capacity_s += capacity_now_ * static_cast<double>(now_ - capacity_since_);
  capacity_since_ = now_;
}

double Simulation::Rate(size_t index, int32_t tasks) const {
  const int32_t traced = trace_.jobs[index].spec.ntasks;
  if (tasks == traced || traced <= 0) return 1.0;
  return std::pow(static_cast<double>(tasks) / static_cast<double>(traced), options_.speedup_exponent);
}

Duration Simulation::PendingLimit(size_t index) const {
  const TraceJob& tj = trace_.jobs[index];
  const double slowest = Rate(index, tj.spec.elastic.min_tasks);
  const Duration remaining = tj.run_time - live_[index].progress;
  return std::max<Duration>(1, static_cast<Duration>(std::ceil(static_cast<double>(remaining) / slowest - 1e-9)) +
                                   live_[index].next_dead_s);
}

int64_t Simulation::SizeAt(size_t index, int32_t tasks) const {
  const TraceJob& tj = trace_.jobs[index];
  if (tasks == tj.spec.ntasks || tj.spec.ntasks <= 0) return tj.size;
  return tj.size * tasks / tj.spec.ntasks;
}

Duration Simulation::WorkDone(size_t index, Duration wall) const {
  const Live& live = live_[index];
  const Duration useful = std::max<Duration>(0, wall - live.dead_s);
  if (live.rate == 1.0) return useful;
  return static_cast<Duration>(std::floor(static_cast<double>(useful) * live.rate + 1e-9));
}

void Simulation::CloseAttempt(size_t index) {
  JobOutcome& out = result_.jobs[index];
  Live& live = live_[index];
  const Duration elapsed = now_ - live.attempt_start;
  const int64_t size = SizeAt(index, live.tasks);
  out.busy_s += elapsed;
  out.runs.push_back(RunSpan{live.attempt_start, now_});
  live.resource_s += static_cast<double>(size) * static_cast<double>(elapsed);
  if (live.dead_s > 0) {
    const double dead_h = static_cast<double>(size) * static_cast<double>(std::min(live.dead_s, elapsed)) / 3600.0;
    out.lost_resize_resource_hours += dead_h;
    out.lost_resource_hours += dead_h;
  }
  if (core::IsElastic(trace_.jobs[index].spec)) out.resource_s = live.resource_s;
  busy_ -= size;
  live.dead_s = 0;
  live.hung_since = 0;
}

void Simulation::Resize(const core::ResizeDecision& decision) {
  const int64_t index = decision.job - 1;
  if (index < 0 || index >= static_cast<int64_t>(live_.size()) || live_[index].slot < 0 || !live_[index].running) {
    throw std::logic_error("core planned to resize job " + std::to_string(decision.job) + ", which is not running");
  }
  const auto i = static_cast<size_t>(index);
  // Changed since the plan (the daemon's check): not the size it runs with, or being stopped. Any
  // other resize (a size change; a move back to another accelerator on cores that plan those) is
  // one checkpoint, requeue and restart.
  if (JobOf(i).preempting || live_[i].tasks != decision.from) return;
  ++result_.jobs[i].resizes;
  ++result_.resizes;
  live_[i].next_dead_s = std::max<Duration>(0, decision.cost);
  Requeue(i, StopCause::kResize);
}

void Simulation::Provision(const core::CyclePlan& plan) {
  core::ProvisioningPlan p = core::PlanProvisioning(state_, plan, options_.policy, ledger_, now_);
  for (const auto& request : p.resume) {
    PoolUsage& usage = result_.pools[PoolKey(request.pool, true)];
    for (const auto& name : request.nodes) {
      booting_[next_boot_] = Boot{name, request.pool};
      Push(now_ + options_.boot_delay_s, EventKind::kNodeBoot, next_boot_++);
      held_since_[name] = {now_, request.pool};
      ++usage.requested;
    }
  }
  for (const auto& release : p.suspend) ReleaseNode(release);
  ledger_ = std::move(p.ledger);
  if (!p.resume.empty()) {
    std::map<core::Pool, int64_t> held;
    for (const auto& [name, since] : held_since_) ++held[since.second];
    for (const auto& [pool, count] : held) {
      const core::ProvisioningPolicy* config = FindPoolPolicy(options_.policy, pool);
      if (config == nullptr) continue;
      double& peak = result_.pools[PoolKey(pool, true)].peak_cost_per_hour;
      peak = std::max(peak, static_cast<double>(count) * core::NodeCostPerHour(config->shape, options_.policy));
    }
  }
  // Wake the provisioner when a node's idle time or boot timeout is up (nothing else may happen then).
  for (const auto& n : ledger_.nodes) {
    const core::ProvisioningPolicy* pool = FindPoolPolicy(options_.policy, n.pool);
    if (pool == nullptr) continue;
    const Timestamp due = !n.registered ? n.requested_at + pool->resume_timeout
                                        : (n.idle_since > 0 ? n.idle_since + pool->idle_time : -1);
    if (due > now_ && ticks_.insert(due).second) Push(due, EventKind::kProvisionTick, 0);
  }
}

void Simulation::BootNode(int64_t boot) {
  auto it = booting_.find(boot);
  if (it == booting_.end()) return;  // released (boot timeout) before it came up
  const Boot b = it->second;
  booting_.erase(it);
  const core::ProvisioningPolicy* pool = FindPoolPolicy(options_.policy, b.pool);
  if (pool == nullptr) return;
  core::Node node = pool->shape;
  node.name = b.name;
  node.pool = b.pool;
  node.health = core::NodeHealth::kUp;
  const auto rate = fleet_.provisioned_eviction_rate_per_hour.find(b.pool);
  NodeInfo info{next_node_id_++, rate == fleet_.provisioned_eviction_rate_per_hour.end() ? 0.0 : rate->second, 0,
                true, 0, false, false, 0, {}};
  capacity_now_ += result_.resource == "gpu" ? static_cast<double>(node.capacity.GpuCount())
                                             : static_cast<double>(node.capacity.cpu_millis / 1000);
  state_.nodes.push_back(std::move(node));
  node_info_.push_back(info);
  if (info.rate_per_hour > 0) Push(now_ + EvictionDelay(node_info_.size() - 1), EventKind::kEviction, info.id);
  dirty_ = true;
}

void Simulation::ReleaseNode(const core::ProvisionRelease& release) {
  PoolUsage& usage = result_.pools[PoolKey(release.pool, true)];
  ++(release.failed ? usage.failed : usage.released);
  for (auto it = booting_.begin(); it != booting_.end(); ++it) {
    if (it->second.name != release.node) continue;
    booting_.erase(it);
    break;
  }
  for (size_t i = 0; i < state_.nodes.size(); ++i) {
    if (state_.nodes[i].name != release.node) continue;
    RequeueJobsOn(i);  // none: the core releases only nodes without tasks
    const core::Node& n = state_.nodes[i];
    capacity_now_ -= result_.resource == "gpu" ? static_cast<double>(n.capacity.GpuCount())
                                               : static_cast<double>(n.capacity.cpu_millis / 1000);
    state_.nodes.erase(state_.nodes.begin() + static_cast<std::ptrdiff_t>(i));
    node_info_.erase(node_info_.begin() + static_cast<std::ptrdiff_t>(i));
    break;
  }
  BillProvisioned(release.node, release.pool);
  dirty_ = true;
}

void Simulation::BillProvisioned(const std::string& name, core::Pool pool) {
  auto it = held_since_.find(name);
  if (it == held_since_.end()) return;
  const double hours = static_cast<double>(now_ - it->second.first) / 3600.0;
  held_since_.erase(it);
  const core::ProvisioningPolicy* config = FindPoolPolicy(options_.policy, pool);
  PoolUsage& usage = result_.pools[PoolKey(pool, true)];
  usage.node_hours += hours;
  if (config != nullptr) usage.cost += hours * core::NodeCostPerHour(config->shape, options_.policy);
}

void Simulation::FinishCapacity() {
  if (!provisioning_ && !options_.report_cost) return;
  AccrueCapacity();
  // Static nodes are billed from the first admitted submission (the makespan's start) to now.
  Timestamp first = now_;
  for (const JobOutcome& j : result_.jobs)
    if (j.infeasible.empty()) first = std::min(first, j.submit);
  const double span_h = static_cast<double>(now_ - first) / 3600.0;
  for (const core::Node& n : fleet_.nodes) {
    PoolUsage& usage = result_.pools[PoolKey(n.pool, false)];
    ++usage.static_nodes;
    usage.node_hours += span_h;
    usage.cost += span_h * core::NodeCostPerHour(n, options_.policy);
  }
  while (!held_since_.empty()) {
    const auto [name, held] = *held_since_.begin();
    BillProvisioned(name, held.second);
  }
}

}  // namespace mlsched::sim::detail
