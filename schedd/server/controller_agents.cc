// Controller: the agent-facing half. Two-phase gang launch (prepare on every node, then commit, or
// abort everywhere and requeue), task exits, heartbeats and fencing (nodes: controller_nodes.cc).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <csignal>

#include "common/container_ref.h"
#include "common/safe_text.h"
#include "schedd/server/controller.h"
#include "schedd/server/convert.h"
#include "schedd/server/rendezvous_token.h"

namespace mlsched::server {
namespace {
// A job that runs in a container image (convert.cc gives it the containers feature).
bool InImage(const core::JobSpec& spec) {
  return std::find(spec.features.begin(), spec.features.end(), core::kContainersFeature) != spec.features.end();
}
}  // namespace

AttemptRow Controller::AttemptOf(const JobRec& j) const {
  AttemptRow a;
  a.job_id = j.id;
  a.attempt = j.attempt;
  a.start_time = j.start_time;
  a.ntasks = j.placement.tasks_size();
  a.cpu_millis = j.spec.per_task.cpu_millis * a.ntasks;
  for (const auto& t : j.placement.tasks()) {
    a.gpus += t.gpu_indices_size();
    if (a.nodes.find(t.node()) == std::string::npos) a.nodes += (a.nodes.empty() ? "" : ",") + t.node();
  }
  if (a.ntasks > 0) {
    auto it = nodes_.find(j.placement.tasks(0).node());
    if (it != nodes_.end()) {
      a.pool = core::PoolName(it->second.node.pool);
      if (a.gpus > 0 && !it->second.node.capacity.gpus.empty()) a.gpu_type = it->second.node.capacity.gpus.begin()->first;
    }
  }
  return a;
}

void Controller::SendToNodes(const JobRec& j, const v1::SchedulerMessage& msg) {
  std::set<std::string> sent;
  for (const auto& t : j.placement.tasks())
    if (sent.insert(t.node()).second) SendLocked(t.node(), msg);
}

void Controller::NoteResizeLocked(JobRec& j, int prev_size, int size, const std::string& requeue_reason) {
  const std::string cause = j.stop_cause.empty() ? "requeue (" + requeue_reason + ")" : j.stop_cause;
  j.stop_cause.clear();
  if (!core::IsElastic(j.spec) || prev_size <= 0 || prev_size == size) return;
  const char* verb = size < prev_size ? "shrunk" : "grew";
  const std::string what = std::string(verb) + " " + std::to_string(prev_size) + "->" + std::to_string(size) + " after " + cause;
  j.resize = what + " (attempt " + std::to_string(j.attempt) + ")";
  Await(store_.AppendEvent(j.id, "", size < prev_size ? "shrink" : "grow", what));
  spdlog::info("job {} attempt {}: {}", j.id, j.attempt, what);
}

void Controller::StartAttempt(JobRec& j, const core::Allocation& alloc, int64_t now) {
  // The spec is read back from the store and checked as if a client sent it before anything runs.
  v1::JobSpec spec;
  const std::optional<std::string> blob = store_.LoadSpec(j.id);
  if (std::string why = !blob || !spec.ParseFromString(*blob) ? "its stored spec is missing or does not parse"
                                                               : CheckStoredSpec(spec, policy_.limits);
      !why.empty()) {
    QuarantineLocked(j, why, now);
    return;
  }
  const int prev_size = j.attempt > 0 ? j.placement.tasks_size() : 0;  // the last attempt's size
  const std::string requeue_reason = j.reason;  // why it was pending: "Evicted", "Preempted", ...
  j.attempt += 1;
  j.state = core::JobState::kRunning;
  j.reason = "None";
  j.start_time = now;
  j.end_time = 0;
  j.exit_code = 0;
  j.preempted = false;
  j.evicting = false;
  j.requeue_on_stop.clear();
  j.stall_at = 0;
  j.stacks.clear();
  j.preempting = false;
  j.resizing = false;
  j.preempt_cancel = false;
  j.expected_start = 0;
  j.launched_at = now;
  j.running_since = 0;
  j.launch_deadline = now + cfg_.launch_timeout_s + (InImage(j.spec) ? cfg_.image_pull_timeout_s : 0);
  j.placement.Clear();
  std::map<std::string, int32_t> local;  // next local rank per node
  std::vector<core::TaskPlacement> tasks = alloc.tasks;
  std::sort(tasks.begin(), tasks.end(), [](const auto& a, const auto& b) { return a.rank < b.rank; });
  for (const auto& t : tasks) {
    auto* p = j.placement.add_tasks();
    p->set_rank(t.rank);
    p->set_node(t.node);
    for (int32_t g : t.gpu_indices) p->add_gpu_indices(g);
    p->set_local_rank(local[t.node]++);
  }
  const std::string& rank0 = tasks.front().node;
  j.placement.set_master_addr(nodes_[rank0].info.address().empty() ? "127.0.0.1" : nodes_[rank0].info.address());
  j.placement.set_master_port(0);  // reserved by rank 0's agent at prepare (OnPrepareResult)
  j.tasks.assign(tasks.size(), TaskRt{});
  IndexRunningLocked(j);
  // The accelerator this attempt got: rank 0's GPU type, or "cpu" (also a CPU fallback tier).
  const auto& cap = nodes_[rank0].node.capacity.gpus;
  const std::string accel = !tasks.front().gpu_indices.empty() && !cap.empty() ? cap.begin()->first : "cpu";
  if (metrics_ && j.attempt == 1)
    metrics_->ObserveQueueWait(j.spec.partition, accel, static_cast<double>(now - j.submit_time));
  Persist(j, "start", "attempt " + std::to_string(j.attempt) + " on " + accel);  // RUNNING is durable before any task starts
  NoteResizeLocked(j, prev_size, static_cast<int>(tasks.size()), requeue_reason);
  if (j.spec.per_task.GpuCount() > 0 &&
      (accel == "cpu" || (!j.spec.gpu_types.empty() && accel != j.spec.gpu_types.front()))) {
    std::string wanted = j.spec.gpu_types.empty() ? "any GPU" : j.spec.gpu_types.front();
    Await(store_.AppendEvent(j.id, rank0, "fallback", "started on " + accel + " instead of " + wanted +
                                                            " after waiting " + std::to_string(now - j.submit_time) + " s"));
  }
  Await(store_.SaveAttempt(AttemptOf(j)), j.id, AttemptOf(j));

  const std::string rendezvous_token = NewRendezvousToken();  // this attempt's, on every node; never logged
  for (const auto& [node, count] : local) {
    v1::SchedulerMessage m;
    auto* p = m.mutable_prepare();
    p->set_job_id(j.id);
    p->set_attempt(j.attempt);
    *p->mutable_spec() = spec;
    p->set_user(j.user);
    p->set_uid(j.uid);
    p->set_gid(j.gid);
    p->set_world_size(static_cast<int32_t>(tasks.size()));
    p->set_local_world_size(count);
    p->set_master_addr(j.placement.master_addr());
    p->set_rendezvous_token(rendezvous_token);
    for (const auto& t : j.placement.tasks()) {
      if (t.node() != node) continue;
      auto* l = p->add_tasks();
      l->set_rank(t.rank());
      l->set_local_rank(t.local_rank());
      *l->mutable_gpu_indices() = t.gpu_indices();
    }
    (*p->mutable_env())["MLSCHED_JOB_NAME"] = j.spec.name;
    (*p->mutable_env())["MLSCHED_PARTITION"] = j.spec.partition;
    (*p->mutable_env())["MLSCHED_ACCOUNT"] = j.spec.account;
    (*p->mutable_env())["MLSCHED_ACCELERATOR"] = accel;
    if (!SendLocked(node, std::move(m))) {  // in a batch: sent once the RUNNING state above is durable
      spdlog::warn("job {}: agent of node {} is not connected; requeueing", j.id, node);
      EndAttempt(j, core::JobState::kPending, "LaunchFailedRequeue", 0, now, "launch-failed");
      j.eligible_after = now + cfg_.requeue_backoff_s;
      return;
    }
  }
  spdlog::info("job {} attempt {}: preparing on {} node(s)", j.id, j.attempt, local.size());
}

void Controller::EndAttempt(JobRec& j, core::JobState final_state, const std::string& reason, int32_t exit_code,
                            int64_t now, const std::string& event) {
  watchdog_.Forget(j.id);
  // Tasks that may still be alive are terminated and keep their resources as a ghost until they exit.
  Ghost g;
  g.job = j.id;
  g.attempt = j.attempt;
  g.per_task = j.spec.per_task;
  g.since = now;
  bool any_committed = false;
  for (int i = 0; i < j.placement.tasks_size() && i < static_cast<int>(j.tasks.size()); ++i) {
    const auto& t = j.placement.tasks(i);
    Phase ph = j.tasks[i].phase;
    if (ph == Phase::kCommitted || ph == Phase::kRunning) {
      any_committed = true;
      g.alive[t.rank()] = t.node();
      g.gpus[t.rank()].assign(t.gpu_indices().begin(), t.gpu_indices().end());
    }
  }
  bool any_prepared = !j.tasks.empty();
  if (any_committed) {
    v1::SchedulerMessage m;
    auto* s = m.mutable_signal();
    s->set_job_id(j.id);
    s->set_attempt(j.attempt);
    s->set_kill(true);
    s->set_grace_s(cfg_.kill_grace_s);
    SendToNodes(j, m);
    ghosts_[{j.id, j.attempt}] = std::move(g);
  } else if (any_prepared) {
    v1::SchedulerMessage m;
    m.mutable_abort()->set_job_id(j.id);
    m.mutable_abort()->set_attempt(j.attempt);
    m.mutable_abort()->set_reason(reason);
    SendToNodes(j, m);
  }
  j.tasks.clear();
  j.awaiting_node.clear();  // a verdict waits only within its attempt
  ObserveRuntimeLocked(j, final_state, now);
  // A stop that a resize or an eviction asked for ends here; the restart's launch is measured next.
  j.stop_seconds = final_state == core::JobState::kPending && j.stop_requested_at > 0 ? now - j.stop_requested_at : -1;
  j.stop_requested_at = 0;
  AttemptRow acct = AttemptOf(j);
  acct.end_time = now;
  // What the attempt used (its agents' samples and the ranks' final figures).
  v1::JobUsage used = attempt_usage_.Of(j.id, j.attempt);
  attempt_usage_.Forget(j.id, j.attempt);
  idle_gpus_.Forget(j.id, j.attempt);
  used.set_wall_seconds(std::max<int64_t>(0, now - j.start_time));
  acct.cpu_usec = used.cpu_usec();
  acct.max_rss_bytes = used.max_rss_bytes();
  acct.gpu_seconds = used.gpu_seconds();
  acct.gpu_busy_seconds = used.gpu_busy_seconds();
  acct.gpu_energy_joules = used.gpu_energy_joules();
  acct.oom_kills = used.oom_kills();
  acct.gpu_util_max_percent = used.gpu_util_max_percent();
  acct.gpu_memory_max_bytes = used.gpu_memory_max_bytes();
  used.set_cost(AttemptCost(acct, policy_.placement.pricing));
  acct.outcome = final_state == core::JobState::kPending ? reason : core::JobStateName(final_state);
  // Work lost to a requeue: the time since the last checkpoint its tasks reported (or since the
  // attempt started); none when the tasks stopped with exit 75, which means "checkpointed".
  if (final_state == core::JobState::kPending && any_committed && !j.clean_stop)
    acct.lost_work_s = now - std::max(j.start_time, j.last_checkpoint);
  used.set_lost_work_seconds(acct.lost_work_s);
  if (used.ranks() > 0 || used.cost() > 0 || used.lost_work_seconds() > 0)
    j.usage_total = std::make_shared<const v1::JobUsage>(AddUsage(j.usage_total.get(), used));
  if (metrics_ && acct.lost_work_s > 0) {
    int64_t gpus = 0;
    for (const auto& t : j.placement.tasks()) gpus += t.gpu_indices_size();
    metrics_->CountLostWork(reason, static_cast<double>(acct.lost_work_s), static_cast<double>(acct.lost_work_s * gpus));
  }
  j.clean_stop = false;
  j.last_checkpoint = 0;
  // Memory first, then the store: if a write fails, memory is whole and is written again later
  // (FlushUnpersisted), never left half-way.
  if (final_state == core::JobState::kPending) {
    j.state = core::JobState::kPending;
    j.requeue_count += 1;
    j.reason = reason;
    j.start_time = 0;
  } else {
    j.state = final_state;
    j.reason = reason;
    j.exit_code = exit_code;
    j.end_time = now;
  }
  if (j.attempt > 0 && batch_) {
    Await(store_.SaveAttempt(acct), j.id, acct);
  } else if (j.attempt > 0) {
    try {
      store_.SaveAttempt(acct).get();
    } catch (...) {
      unpersisted_attempts_.push_back(acct);
      unpersisted_jobs_.insert(j.id);
      throw;
    }
  }
  Persist(j, event, reason);
  if (metrics_) {
    if (final_state == core::JobState::kPending) metrics_->CountRequeue(reason);
    else metrics_->CountJobEnd(core::JobStateName(final_state));
  }
  spdlog::info("job {} attempt {}: {} -> {} ({})", j.id, j.attempt, event, core::JobStateName(j.state), reason);
  Trigger();
}

Controller::AppliedMessage Controller::ApplyAgentMessage(const std::string& node, const v1::AgentMessage& msg,
                                                         int64_t now) {
  AppliedMessage out;
  out.batch = std::make_unique<WriteBatch>();
  out.keep = Collect(*out.batch, [&] { return OnAgentMessageLocked(node, msg, now); });
  return out;
}

bool Controller::OnAgentMessage(const std::string& node, const v1::AgentMessage& msg, int64_t now) {
  return Batched([&] { return OnAgentMessageLocked(node, msg, now); });  // durable on return; the lock not held while waiting
}

bool Controller::OnAgentMessageLocked(const std::string& node, const v1::AgentMessage& msg, int64_t now) {
  if (auto it = nodes_.find(node); it != nodes_.end() && it->second.down) return false;
  switch (msg.msg_case()) {
    case v1::AgentMessage::kHeartbeat: OnHeartbeat(node, msg.heartbeat(), now); break;
    case v1::AgentMessage::kPrepareResult: OnPrepareResult(node, msg.prepare_result(), now); break;
    case v1::AgentMessage::kTaskStarted: OnTaskStarted(node, msg.task_started(), now); break;
    case v1::AgentMessage::kTaskExited: OnTaskExited(node, msg.task_exited(), now); break;
    case v1::AgentMessage::kStacks: OnStacksLocked(node, msg.stacks(), now); break;
    case v1::AgentMessage::kEviction:
      if (auto it = nodes_.find(node); it != nodes_.end())
        EvictLocked(it->second, msg.eviction().deadline(), msg.eviction().source(), now);
      break;
    default: break;
  }
  return true;
}

namespace {

// The task of `rank` in `p`: placements list ranks in order, so tasks(rank) first, then a scan.
const v1::TaskPlacement* RankTask(const v1::Placement& p, int32_t rank) {
  if (rank >= 0 && rank < p.tasks_size() && p.tasks(rank).rank() == rank) return &p.tasks(rank);
  for (const auto& t : p.tasks())
    if (t.rank() == rank) return &t;
  return nullptr;
}

}  // namespace

bool Controller::PlacedOn(const JobRec& j, const std::string& node, int32_t rank) const {
  if (rank >= 0) {
    const v1::TaskPlacement* t = RankTask(j.placement, rank);
    return t && t->node() == node;
  }
  for (const auto& t : j.placement.tasks())
    if (t.node() == node) return true;
  return false;
}

void Controller::RejectAgentMessage(const std::string& node, const std::string& what) {
  spdlog::warn("node {}: rejected {}: not placed on this node", node, what);
  if (auto it = nodes_.find(node); it != nodes_.end()) it->second.rejected_reports += 1;
  if (metrics_) metrics_->CountRejected("agent_message");
}

void Controller::OnPrepareResult(const std::string& node, const v1::PrepareResult& r, int64_t now) {
  JobRec* j = Find(r.job_id());
  if (!j || j->state != core::JobState::kRunning || j->attempt != r.attempt()) return;  // stale
  if (!PlacedOn(*j, node, -1))
    return RejectAgentMessage(node, "prepare result for job " + std::to_string(j->id) + " attempt " + std::to_string(j->attempt));
  // The rendezvous port is rank 0's agent's (it holds the socket); any other node's is ignored.
  const bool rank0_node = j->placement.tasks_size() > 0 && j->placement.tasks(0).node() == node;
  std::string error = r.ok() ? "" : SafeText(r.error().substr(0, kMaxPrepareEventBytes));
  if (r.ok() && rank0_node && (r.master_port() < 0 || r.master_port() > 65535))
    error = "rendezvous port " + std::to_string(r.master_port()) + " out of range";
  for (int i = 0; i < std::min(r.events_size(), kMaxPrepareEvents); ++i)
    if (IsSafeText(r.events(i))) Await(store_.AppendEvent(j->id, node, "image", r.events(i).substr(0, kMaxPrepareEventBytes)));
  if (r.ok() && !r.image_digest().empty() && InImage(j->spec) && IsSafeText(r.image_digest()))
    j->image_digest = r.image_digest().substr(0, 80);
  if (!error.empty() && r.fatal() && InImage(j->spec)) {
    spdlog::warn("job {} attempt {}: prepare failed on {} for good: {}", j->id, j->attempt, node, error);
    EndAttempt(*j, core::JobState::kFailed, "ImagePullFailed: " + error, 0, now, "image-failed");
    return;
  }
  if (!error.empty()) {
    spdlog::warn("job {} attempt {}: prepare failed on {}: {}", j->id, j->attempt, node, error);
    EndAttempt(*j, core::JobState::kPending, "LaunchFailedRequeue", 0, now, "prepare-failed");
    j->eligible_after = now + cfg_.requeue_backoff_s;
    return;
  }
  if (rank0_node) j->placement.set_master_port(r.master_port());
  bool all = true;
  for (int i = 0; i < j->placement.tasks_size(); ++i) {
    if (j->placement.tasks(i).node() == node && j->tasks[i].phase == Phase::kPreparing) j->tasks[i].phase = Phase::kPrepared;
    if (j->tasks[i].phase == Phase::kPreparing) all = false;
  }
  if (!all) return;
  for (auto& t : j->tasks) t.phase = Phase::kCommitted;
  j->launch_deadline = now + cfg_.launch_timeout_s;
  if (j->placement.master_port() == 0)
    spdlog::warn("job {} attempt {}: the agent of rank 0's node {} reserved no rendezvous port (an agentd older than "
                 "schedd?): MASTER_PORT is not set", j->id, j->attempt, j->placement.tasks(0).node());
  // The placement keeps the port (a recovered schedd still knows it); a failed write is retried by
  // Tick, and never holds the commit back.
  try {
    Persist(*j, "", "");
  } catch (const std::exception& e) {
    spdlog::warn("job {}: rendezvous port not written to the store yet: {}", j->id, e.what());
  }
  v1::SchedulerMessage m;
  m.mutable_commit()->set_job_id(j->id);
  m.mutable_commit()->set_attempt(j->attempt);
  m.mutable_commit()->set_master_port(j->placement.master_port());
  SendToNodes(*j, m);
  spdlog::info("job {} attempt {}: all nodes prepared, committed (MASTER_PORT {})", j->id, j->attempt,
               j->placement.master_port());
}

void Controller::OnTaskStarted(const std::string& node, const v1::TaskStarted& t, int64_t now) {
  JobRec* j = Find(t.job_id());
  if (!j || j->state != core::JobState::kRunning || j->attempt != t.attempt()) return;
  if (!PlacedOn(*j, node, t.rank()))
    return RejectAgentMessage(node, "task-started for job " + std::to_string(j->id) + " rank " + std::to_string(t.rank()));
  for (int i = 0; i < j->placement.tasks_size(); ++i)
    if (j->placement.tasks(i).rank() == t.rank() && j->placement.tasks(i).node() == node &&
        j->tasks[i].phase == Phase::kCommitted)
      j->tasks[i].phase = Phase::kRunning;
  if (!std::all_of(j->tasks.begin(), j->tasks.end(), [](const TaskRt& rt) { return rt.phase == Phase::kRunning; }))
    return;
  if (j->running_since == 0) j->running_since = now;
  // The restart after a resize or an eviction is done once every rank runs: that stop's cost.
  if (j->stop_seconds >= 0) {
    j->restart_cost = std::max<int64_t>(1, j->stop_seconds + std::max<int64_t>(0, now - j->launched_at));
    j->stop_seconds = -1;
  }
}

void Controller::OnTaskExited(const std::string& node, const v1::TaskExited& t, int64_t now) {
  if (auto g = ghosts_.find({t.job_id(), t.attempt()}); g != ghosts_.end()) {
    auto rank = g->second.alive.find(t.rank());
    if (rank == g->second.alive.end()) return;
    if (rank->second != node)
      return RejectAgentMessage(node, "task-exited for job " + std::to_string(t.job_id()) + " rank " + std::to_string(t.rank()));
    g->second.alive.erase(rank);
    if (g->second.alive.empty()) ghosts_.erase(g);
    Trigger();
    return;
  }
  JobRec* j = Find(t.job_id());
  if (!j || j->state != core::JobState::kRunning || j->attempt != t.attempt()) {
    // An ended attempt's exit, e.g. from an agent back from a partition: it changes nothing.
    if (j) spdlog::info("job {}: exit of attempt {} rank {} on {} ignored: that attempt has ended", j->id, t.attempt(), t.rank(), node);
    return;
  }
  if (!PlacedOn(*j, node, t.rank()))
    return RejectAgentMessage(node, "task-exited for job " + std::to_string(j->id) + " rank " + std::to_string(t.rank()));
  if (t.rank() < 0) {
    // The agent could not launch this attempt on `node` at all (e.g. a commit for an attempt it
    // never prepared): a launch failure, retried after the backoff.
    spdlog::warn("job {} attempt {}: launch failed on {}: {}", j->id, j->attempt, node, t.error());
    EndAttempt(*j, core::JobState::kPending, "LaunchFailedRequeue", 0, now, "launch-failed");
    j->eligible_after = now + cfg_.requeue_backoff_s;
    return;
  }
  int idx = -1;
  for (int i = 0; i < j->placement.tasks_size(); ++i)
    if (j->placement.tasks(i).rank() == t.rank() && j->placement.tasks(i).node() == node) idx = i;
  if (idx < 0 || j->tasks[idx].phase == Phase::kExited) return;
  attempt_usage_.OnExited(t);  // before the attempt may end below: its final figures count
  j->tasks[idx].phase = Phase::kExited;
  j->tasks[idx].exit_code = t.exit_code();
  if (!t.error().empty()) spdlog::warn("job {} rank {}: {}", j->id, t.rank(), t.error());
  constexpr int kPreemptedExit = 75;  // the trainer's "checkpointed, requeue me"
  // Ended by the stop schedd asked for: killed by its SIGTERM or the SIGKILL after the grace, or a
  // shell or a container's init reporting that death of its child as 128 + the signal.
  const bool killed = t.signaled() || t.exit_code() == 128 + SIGTERM || t.exit_code() == 128 + SIGKILL;
  if (!j->requeue_on_stop.empty() && t.exit_code() != 0) {
    // Stopped to be requeued (a node failed its health checks, the gang stalled): back to PENDING
    // whatever the failure (a rank on a broken GPU often dies before the SIGTERM); a rank that
    // exits 0 finishes as usual.
    j->clean_stop = t.exit_code() == kPreemptedExit;
    Await(store_.AppendEvent(j->id, node, "REQUEUED", j->stop_cause + " (rank " + std::to_string(t.rank()) + " exited " +
                                                         std::to_string(t.exit_code()) + ")"));
    EndAttempt(*j, core::JobState::kPending, j->requeue_on_stop, 0, now, "requeue");
    return;
  }
  if (j->resizing && !j->evicting && !j->preempting && (t.exit_code() == kPreemptedExit || killed)) {
    // Stopped to restart at another size: requeued at once, not a preemption (no count, no PREEMPTED).
    j->clean_stop = t.exit_code() == kPreemptedExit;
    Await(store_.AppendEvent(j->id, node, "RESIZE", "rank " + std::to_string(t.rank()) + " stopped for a resize"));
    EndAttempt(*j, core::JobState::kPending, "Resize", 0, now, "requeue");
    return;
  }
  if (t.exit_code() == kPreemptedExit || ((j->evicting || j->preempting) && killed)) {
    // PREEMPTED, then back to PENDING with its original submit time (or CANCELLED in QoS mode cancel).
    j->preempted = true;
    j->clean_stop = t.exit_code() == kPreemptedExit;
    if (j->preempting) j->preempt_count += 1;
    if (j->evicting) j->evictions += 1;
    Await(store_.AppendEvent(j->id, node, "PREEMPTED",
                             j->evicting ? "spot eviction" : j->preempting ? "QoS preemption" : "rank exited 75"));
    if (j->preempt_cancel && !j->evicting) {
      EndAttempt(*j, core::JobState::kCancelled, "Preempted", t.exit_code(), now, "preempt-cancel");
      return;
    }
    EndAttempt(*j, core::JobState::kPending, j->evicting ? "Evicted" : "Preempted", 0, now, "requeue");
    return;
  }
  if (!j->awaiting_node.empty() && (node == j->awaiting_node || SpeaksLocked(j->awaiting_node, now))) {
    // A verdict waited on this node (or it spoke again since): the gang broke with the partition.
    RequeueForSilentNodeLocked(*j, "rank " + std::to_string(t.rank()) + " on " + node + " exited " + std::to_string(t.exit_code()), now);
    return;
  }
  if (t.exit_code() != 0) {
    std::string why = t.error().empty() ? "rank " + std::to_string(t.rank()) + " exited " + std::to_string(t.exit_code())
                                        : "rank " + std::to_string(t.rank()) + ": " + t.error();
    // The agent's cgroup saw the kernel's OOM killer: Slurm's OUT_OF_MEMORY, kept as FAILED with
    // the reason OutOfMemory and the agent's text ("... more than its 64 MiB memory limit ...").
    const bool oom = t.error().rfind("OUT_OF_MEMORY", 0) == 0;
    if (oom) why = "OutOfMemory: " + why;
    if (!oom && AwaitSilentPeerLocked(*j, node, idx, why, now)) return;
    EndAttempt(*j, core::JobState::kFailed, why, t.exit_code(), now, oom ? "out-of-memory" : "failed");
    return;
  }
  if (std::all_of(j->tasks.begin(), j->tasks.end(), [](const TaskRt& rt) { return rt.phase == Phase::kExited; })) {
    EndAttempt(*j, core::JobState::kCompleted, "None", 0, now, "completed");
    return;
  }
  // Others still run: the exit goes to the store before its report is acknowledged, so that a
  // restarted or new leader knows this rank ended (RecFromRow) instead of finding it "vanished".
  j->placement.mutable_tasks(idx)->set_exited(true);
  j->placement.mutable_tasks(idx)->set_exit_code(t.exit_code());
  Persist(*j, "", "");
}

void Controller::OnHeartbeat(const std::string& node, const v1::Heartbeat& hb, int64_t now) {
  auto nit = nodes_.find(node);
  if (nit == nodes_.end()) return;
  nit->second.last_heartbeat = now;
  // The image cache's use, for mladmin nodes (bounded: at most an exabyte, a million images).
  nit->second.info.set_image_cache_bytes(std::clamp<int64_t>(hb.image_cache_bytes(), 0, int64_t{1} << 60));
  nit->second.info.set_image_cache_images(std::min<uint32_t>(hb.image_cache_images(), 1000000));
  if (hb.has_health()) ApplyHealthLocked(nit->second, hb.health(), now);
  std::set<std::tuple<int64_t, int32_t, int32_t>> running;
  for (const auto& r : hb.running()) {
    running.insert({r.job_id(), r.attempt(), r.rank()});
    JobRec* j = Find(r.job_id());
    if (j && j->state == core::JobState::kRunning && j->attempt == r.attempt()) {
      j->last_checkpoint = std::max(j->last_checkpoint, r.last_checkpoint_time());
      const core::WatchdogPolicy& wp = policy_.watchdog;
      if (r.step() > 0 && (wp.stall_after > 0 || wp.straggler_ratio > 0) && PlacedOn(*j, node, r.rank()))
        watchdog_.Observe(j->id, r.attempt(), r.rank(), node, r.step(), r.has_compute_ms() ? r.compute_ms() : -1, now);
      // An agent speaks for its own ranks only.
      if (const v1::TaskPlacement* t = RankTask(j->placement, r.rank()); t && t->node() == node) {
        attempt_usage_.OnRunning(r, t->gpu_indices_size(), now);
        ObserveGpuUtilLocked(*j, r, t->gpu_indices_size(), now);
      }
    }
  }
  // A started task missing from two consecutive heartbeats of its node is lost, unless reports
  // are still queued behind the heartbeat on the agent (its exit may be among them).
  if (hb.unsent_reports() > 0) return;
  std::vector<int64_t> lost;
  auto& mine = running_on_[node];
  for (auto rit = mine.begin(); rit != mine.end();) {
    auto jit = jobs_.find(*rit);
    bool here = false;
    if (jit != jobs_.end() && jit->second.state == core::JobState::kRunning)
      for (const auto& t : jit->second.placement.tasks()) here |= t.node() == node;
    if (!here) {
      rit = mine.erase(rit);
      continue;
    }
    ++rit;
    auto& [id, j] = *jit;
    for (int i = 0; i < j.placement.tasks_size(); ++i) {
      if (j.placement.tasks(i).node() != node || j.tasks[i].phase != Phase::kRunning) continue;
      if (running.count({id, j.attempt, j.placement.tasks(i).rank()})) {
        j.tasks[i].missed_heartbeats = 0;
      } else if (++j.tasks[i].missed_heartbeats >= 2) {
        lost.push_back(id);
      }
    }
  }
  for (int64_t id : lost) {
    JobRec& j = jobs_[id];
    if (j.state != core::JobState::kRunning) continue;
    spdlog::warn("job {}: a task on {} vanished; requeueing", id, node);
    EndAttempt(j, core::JobState::kPending, "NodeFail", 0, now, "task-lost");
  }
  for (auto it = ghosts_.begin(); it != ghosts_.end();) {
    auto& g = it->second;
    std::erase_if(g.alive, [&](const auto& kv) { return kv.second == node && !running.count({g.job, g.attempt, kv.first}); });
    it = g.alive.empty() ? ghosts_.erase(it) : std::next(it);
  }
}

void Controller::Tick(int64_t now) {
  Batched([&] { TickLocked(now); });
}

void Controller::TickLocked(int64_t now) {
  if (!unpersisted_jobs_.empty() || !unpersisted_attempts_.empty()) {
    try {
      FlushUnpersistedLocked();
    } catch (const std::exception& e) {
      spdlog::warn("{} job(s) still not written to the store: {}", unpersisted_jobs_.size(), e.what());
    }
  }
  last_tick_ = std::max(last_tick_, now);
  WatchGangsLocked(now);
  CheckIdleGpusLocked(now);
  for (auto& [name, n] : nodes_) {
    // An agent cut off from every controller stops its tasks within its cutoff (its kill grace
    // included); its tasks count as lost only after that, so two attempts never run at once.
    const int64_t silence = n.info.cutoff_timeout_s() > 0
                                ? std::max<int64_t>(cfg_.heartbeat_timeout_s, n.info.cutoff_timeout_s() + kCutoffMargin)
                                : cfg_.heartbeat_timeout_s;
    if (n.down || now - n.last_heartbeat <= silence) continue;
    const int64_t heard = std::max(n.last_heartbeat, sink_.LastHeard(name, now));
    if (now - heard > silence)
      MarkNodeDown(n, "no heartbeat for " + std::to_string(now - n.last_heartbeat) + " s", now);
  }
  std::vector<int64_t> expired;
  for (auto& [id, j] : jobs_) {
    if (j.state == core::JobState::kRunning) {
      if (!j.awaiting_node.empty() && SpeaksLocked(j.awaiting_node, now)) {
        RequeueForSilentNodeLocked(j, "node " + j.awaiting_node + " speaks again", now);
        continue;
      }
      bool launching = false;
      for (const auto& t : j.tasks) launching |= t.phase == Phase::kPreparing || t.phase == Phase::kPrepared;
      if (launching && now > j.launch_deadline) {
        EndAttempt(j, core::JobState::kPending, "LaunchFailedRequeue", 0, now, "launch-timeout");
        j.eligible_after = now + cfg_.requeue_backoff_s;
      } else if (j.spec.time_limit > 0 && now >= j.start_time + j.spec.time_limit) {
        EndAttempt(j, core::JobState::kTimeout, "TimeLimit", 0, now, "timeout");
      }
    } else if (core::IsFinal(j.state) && now - j.end_time > cfg_.min_job_age_s) {
      bool has_ghost = false;
      for (const auto& [key, g] : ghosts_) has_ghost |= key.first == id;
      if (!has_ghost) expired.push_back(id);
    }
  }
  ExpireLocked(expired);
}

}  // namespace mlsched::server
