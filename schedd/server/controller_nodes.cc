// Controller: nodes. Registration (checked against the policy's node inventory, inventory.h),
// disconnects, spot evictions and nodes going DOWN.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>
#include <set>
#include <tuple>

#include "schedd/server/controller.h"
#include "schedd/server/convert.h"

namespace mlsched::server {

InventoryVerdict Controller::AdmitNode(const v1::RegisterNode& reg, bool declared_only) {
  std::lock_guard lk(mu_);
  const core::Node* provisioned = nullptr;
  for (const auto& p : provisioned_.nodes) {
    if (p.name != reg.name()) continue;
    for (const auto& pool : policy_.provisioning)
      if (pool.pool == p.pool) provisioned = &pool.shape;
  }
  InventoryVerdict v = AdmitRegistration(policy_.inventory, reg, provisioned);
  if (v.error.empty() && declared_only && !provisioned && !FindDeclaration(policy_.inventory, reg.name()))
    v.error = "node " + reg.name() + ": an operator's agent on the Unix socket may register only nodes the policy's "
              "node inventory names ([[nodes]])";
  return v;
}

v1::Registered Controller::OnRegister(const v1::RegisterNode& reg, int64_t now) {
  return Batched([&] { return OnRegisterLocked(reg, now); });
}

v1::Registered Controller::OnRegisterLocked(const v1::RegisterNode& reg, int64_t now) {
  NodeRec& n = nodes_[reg.name()];
  bool was_down = n.down;
  // A node's resources do not change between registrations unless someone changed the node (or
  // its agent lies): drained until an operator resumes it.
  const std::string changed = n.info.has_capacity() ? CapacityChange(n.info.capacity(), reg.capacity()) : "";
  if (!changed.empty()) {
    n.drained = true;
    n.info.set_reason("capacity changed between registrations: " + changed);
    spdlog::warn("node {}: {}; drained until `mladmin node resume`", reg.name(), n.info.reason());
    Await(store_.AppendEvent(0, reg.name(), "drain", n.info.reason()));
  }
  n.node = ToCoreNode(reg);
  if (const core::NodeDeclaration* d = FindDeclaration(policy_.inventory, reg.name()))
    n.node.features.insert(n.node.features.end(), d->shape.features.begin(), d->shape.features.end());
  n.info.set_name(reg.name());
  n.info.set_pool(reg.pool());
  n.info.set_region(reg.region());
  n.info.set_zone(reg.zone());
  n.info.set_domain(reg.domain());
  *n.info.mutable_capacity() = reg.capacity();
  n.info.set_address(reg.address());
  n.info.set_isolation(reg.isolation());
  n.info.set_cutoff_timeout_s(reg.cutoff_timeout_s());
  n.info.set_root_jobs(reg.root_jobs());
  n.info.set_container_runtime(reg.container_runtime());
  n.info.set_agent_version(reg.version());
  n.connected = true;
  n.registered = true;
  n.down = false;
  n.last_heartbeat = now;
  Await(store_.SaveNode(NodeRow{reg.name(), n.info.SerializeAsString(), n.drained, n.info.reason()}));
  if (was_down) Await(store_.AppendEvent(0, reg.name(), "node-up", "agent registered"));

  std::set<std::tuple<int64_t, int32_t, int32_t>> reported;
  for (const auto& r : reg.running()) reported.insert({r.job_id(), r.attempt(), r.rank()});
  v1::Registered out;
  out.set_heartbeat_interval_s(cfg_.heartbeat_interval_s);
  out.set_time(now);  // the agent's clock check (agentd/health.h)
  // Only this node's jobs (running_on_), not every job in the cluster: a registration storm after
  // a network blip is 1,000 of these (issue 30).
  const std::set<int64_t> mine = running_on_[reg.name()];
  for (int64_t id : mine) {
    auto jit = jobs_.find(id);
    if (jit == jobs_.end() || jit->second.state != core::JobState::kRunning) continue;
    JobRec& j = jit->second;
    bool launch_lost = false;
    for (int i = 0; i < j.placement.tasks_size(); ++i) {
      const auto& t = j.placement.tasks(i);
      if (t.node() != reg.name()) continue;
      auto& rt = j.tasks[i];
      if (reported.count({id, j.attempt, t.rank()})) {
        auto* k = out.add_keep();
        k->set_job_id(id);
        k->set_attempt(j.attempt);
        k->set_rank(t.rank());
        if (rt.phase == Phase::kCommitted) rt.phase = Phase::kRunning;
      } else if (rt.phase == Phase::kPreparing || rt.phase == Phase::kPrepared) {
        launch_lost = true;  // the prepare died with the old stream
      } else if (rt.phase == Phase::kCommitted) {
        // Its commit was sent on the old stream: the task ran and ended (its exit report is queued
        // on the agent) or the commit died with that stream. Either way the heartbeats settle it,
        // as a running task's: the vanish rule below them applies to running tasks only.
        rt.phase = Phase::kRunning;
        rt.missed_heartbeats = 0;
      }
      // Running tasks not reported are settled by the next heartbeats (their exit reports,
      // buffered by the agent, arrive first on the stream; two heartbeats without them: lost).
    }
    if (launch_lost) {
      EndAttempt(j, core::JobState::kPending, "LaunchFailedRequeue", 0, now, "launch-failed");
      j.eligible_after = now + cfg_.requeue_backoff_s;
    }
  }
  // Ghost ranks on this node that the agent no longer runs are gone.
  for (auto it = ghosts_.begin(); it != ghosts_.end();) {
    auto& g = it->second;
    std::erase_if(g.alive, [&](const auto& kv) {
      return kv.second == reg.name() && !reported.count({g.job, g.attempt, kv.first});
    });
    it = g.alive.empty() ? ghosts_.erase(it) : std::next(it);
  }
  spdlog::info("node {} registered ({} running task(s) reported, {} kept)", reg.name(), reg.running_size(), out.keep_size());
  Trigger();
  return out;
}

void Controller::OnDisconnect(const std::string& node, int64_t now) {
  std::lock_guard lk(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return;
  it->second.connected = false;
  spdlog::warn("node {}: agent disconnected", node);
}

void Controller::EvictLocked(NodeRec& n, int64_t deadline, const std::string& source, int64_t now) {
  const std::string name = n.info.name();
  if (n.drained && n.info.reason().rfind("evicted", 0) == 0) return;  // one notice is enough
  n.drained = true;
  n.info.set_reason("evicted (" + source + ")");
  Await(store_.SaveNode(NodeRow{name, n.info.SerializeAsString(), true, n.info.reason()}));
  int grace = static_cast<int>(std::max<int64_t>(1, deadline - now - 2));
  if (metrics_) metrics_->CountEviction();
  eviction_rates_.RecordEviction(core::PoolName(n.node.pool));
  std::string jobs;
  for (int64_t id : RunningOnLocked(name)) {
    JobRec& j = jobs_[id];
    j.evicting = true;
    if (j.stop_cause.empty()) j.stop_cause = "eviction of " + name;
    if (core::IsElastic(j.spec) && j.stop_requested_at == 0) j.stop_requested_at = now;
    j.reason = "Evicting";  // RUNNING while its tasks checkpoint within the grace period
    v1::SchedulerMessage m;
    auto* s = m.mutable_signal();
    s->set_job_id(id);
    s->set_attempt(j.attempt);
    s->set_kill(true);
    s->set_grace_s(grace);
    s->set_reason("eviction");
    SendToNodes(j, m);
    jobs += (jobs.empty() ? "" : ",") + std::to_string(id);
    Await(store_.AppendEvent(id, name, "eviction", source + ", grace " + std::to_string(grace) + " s"));
  }
  Await(store_.AppendEvent(0, name, "eviction", source + ": jobs [" + jobs + "], deadline " + std::to_string(deadline)));
  spdlog::warn("node {} is being evicted ({}), deadline in {} s; signalled jobs [{}]", name, source, deadline - now, jobs);
  Trigger();
}

Status Controller::Evict(const Caller& caller, const std::string& node, int64_t deadline, const std::string& source,
                         int64_t now) {
  if (!caller.privileged) return {Status::kPermissionDenied, "evict needs root or an operator (you are " + caller.user + ")"};
  std::lock_guard lk(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return {Status::kNotFound, "node '" + node + "': no such node"};
  EvictLocked(it->second, deadline, source, now);
  return {};
}

void Controller::MarkNodeDown(NodeRec& n, const std::string& why, int64_t now) {
  n.down = true;
  n.connected = false;
  n.info.set_reason(why);
  const std::string name = n.info.name();
  spdlog::error("node {} DOWN: {}", name, why);
  Await(store_.AppendEvent(0, name, "node-down", why));
  for (int64_t id : RunningOnLocked(name)) {
    JobRec& j = jobs_[id];
    if (j.state != core::JobState::kRunning) continue;  // ended by an earlier one's requeue
    // NODE_FAIL, then back to PENDING: recorded as two events in order.
    Await(store_.AppendEvent(id, name, "NODE_FAIL", why));
    if (j.stop_cause.empty()) j.stop_cause = "failure of node " + name;
    EndAttempt(j, core::JobState::kPending, "NodeFail", 0, now, "requeue");
  }
  for (auto it = ghosts_.begin(); it != ghosts_.end();) {
    std::erase_if(it->second.alive, [&](const auto& kv) { return kv.second == name; });
    it = it->second.alive.empty() ? ghosts_.erase(it) : std::next(it);
  }
}

std::vector<int64_t> Controller::RunningOnLocked(const std::string& node) {
  std::vector<int64_t> out;
  for (int64_t id : running_on_[node]) {
    auto jit = jobs_.find(id);
    if (jit == jobs_.end() || jit->second.state != core::JobState::kRunning) continue;
    for (const auto& t : jit->second.placement.tasks())
      if (t.node() == node) {
        out.push_back(id);
        break;
      }
  }
  return out;
}

// A rank that fails while another node of its gang is silent (docs/operations.md, partition (c)).
bool Controller::HeardLatelyLocked(const std::string& node, const NodeRec& n, int64_t now) {
  const int64_t heard = std::max(n.last_heartbeat, sink_.LastHeard(node, now));
  return now - heard <= 2 * int64_t{cfg_.heartbeat_interval_s} + 1;
}

bool Controller::SilentLocked(const std::string& node, int64_t now) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.down) return true;
  if (!it->second.connected && it->second.registered) return true;  // its stream went down
  return !HeardLatelyLocked(node, it->second, now);
}

bool Controller::SpeaksLocked(const std::string& node, int64_t now) {
  auto it = nodes_.find(node);
  if (it == nodes_.end() || it->second.down || !it->second.registered || !it->second.connected) return false;
  return HeardLatelyLocked(node, it->second, now);
}

std::string Controller::SilentPeerLocked(const JobRec& j, const std::string& except, int64_t now) {
  for (size_t i = 0; i < j.tasks.size() && i < static_cast<size_t>(j.placement.tasks_size()); ++i) {
    const std::string& n = j.placement.tasks(static_cast<int>(i)).node();
    if (n != except && j.tasks[i].phase != Phase::kExited && SilentLocked(n, now)) return n;
  }
  return "";
}

bool Controller::AwaitSilentPeerLocked(JobRec& j, const std::string& node, int idx, const std::string& why, int64_t now) {
  if (j.awaiting_node.empty()) {
    j.awaiting_node = SilentPeerLocked(j, node, now);
    if (j.awaiting_node.empty()) return false;  // every peer speaks: the rank's own failure
    // A rank whose peer went silent often fails first ("peer lost", a broken collective): failing
    // the job would turn one node's partition into a user's failure, and requeueing it now could
    // start a second attempt beside ranks still running behind the partition. Wait for the node.
    spdlog::warn("job {} attempt {}: {} on {} while node {} is silent: the verdict waits for {} (requeued when it is "
                 "DOWN or speaks again)", j.id, j.attempt, why, node, j.awaiting_node, j.awaiting_node);
    Await(store_.AppendEvent(j.id, node, "AWAIT_NODE", why + " while node " + j.awaiting_node + " is silent"));
  }
  // Waiting: this exit is kept (stored, so a restarted controller knows the verdict waits).
  j.placement.mutable_tasks(idx)->set_exited(true);
  j.placement.mutable_tasks(idx)->set_exit_code(j.tasks[static_cast<size_t>(idx)].exit_code);
  Persist(j, "", "");
  return true;
}

void Controller::RequeueForSilentNodeLocked(JobRec& j, const std::string& why, int64_t now) {
  const std::string detail = "a rank failed while node " + j.awaiting_node + " was silent; then " + why;
  spdlog::warn("job {} attempt {}: requeued: {}", j.id, j.attempt, detail);
  Await(store_.AppendEvent(j.id, j.awaiting_node, "NODE_FAIL", detail));
  if (j.stop_cause.empty()) j.stop_cause = "silence of node " + j.awaiting_node;
  j.awaiting_node.clear();
  EndAttempt(j, core::JobState::kPending, "NodeFail", 0, now, "requeue");
}

}  // namespace mlsched::server
