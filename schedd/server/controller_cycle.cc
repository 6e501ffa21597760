// Controller: the scheduling pass. Builds a snapshot under the lock, runs the pure core outside it,
// then applies the plan, re-checking each decision against what changed meanwhile.
#include <spdlog/spdlog.h>

#include <chrono>

#include "schedd/core/fairshare.h"
#include "schedd/server/controller.h"

namespace mlsched::server {

core::ClusterState Controller::Snapshot(int64_t now) const {
  core::ClusterState s;
  std::map<std::string, std::string> gpu_type;  // node -> its GPU type
  s.nodes.reserve(nodes_.size());
  for (const auto& [name, n] : nodes_) {
    core::Node node = n.node;
    node.health = n.down || !n.connected ? core::NodeHealth::kDown
                  : n.drained            ? core::NodeHealth::kDrain
                                         : core::NodeHealth::kUp;
    if (!node.capacity.gpus.empty()) gpu_type[name] = node.capacity.gpus.begin()->first;
    s.nodes.push_back(std::move(node));
  }
  auto held_resources = [&](const core::ResourceVector& per_task, const std::string& node, size_t ngpus) {
    core::ResourceVector r = per_task;
    r.gpus.clear();
    if (ngpus > 0) r.gpus[gpu_type.count(node) ? gpu_type.at(node) : ""] = static_cast<int64_t>(ngpus);
    return r;
  };
  s.jobs.reserve(jobs_.size() + ghosts_.size());
  for (const auto& [id, j] : jobs_) {
    if (j.state == core::JobState::kPending) {
      // Held jobs take no part in the cycle (Slurm leaves them out of its queue too): Submit and
      // Hold set their reason, and a release triggers a cycle.
      if (j.spec.hold || j.eligible_after > now) continue;
      // An elastic job whose last attempt still has tasks exiting on usable nodes waits for them (a
      // SIGTERMed gang exits within its grace time): started now, it would take only the nodes
      // free before they exit, a smaller size than the cluster holds.
      if (core::IsElastic(j.spec) && OwnTasksExitingLocked(id)) continue;
      core::Job cj;
      cj.id = id;
      cj.spec = j.spec;
      cj.state = j.state;
      cj.submit_time = j.submit_time;
      cj.attempt = j.attempt;
      cj.evictions = j.evictions;
      if (j.expected_start > 0) cj.expected_start = j.expected_start;
      cj.predicted_runtime = PlannedRuntimeLocked(j, now);
      s.jobs.push_back(std::move(cj));
    } else if (j.state == core::JobState::kRunning) {
      core::Job cj;
      cj.id = id;
      cj.spec = j.spec;
      cj.state = j.state;
      cj.submit_time = j.submit_time;
      cj.start_time = j.start_time;
      cj.attempt = j.attempt;
      cj.last_checkpoint = j.last_checkpoint;
      cj.preempt_count = j.preempt_count;
      cj.evictions = j.evictions;
      cj.predicted_runtime = PlannedRuntimeLocked(j, now);
      cj.preempting = j.preempting || j.evicting || j.resizing;  // stopping: its resources free up soon
      cj.restart_cost = j.restart_cost;
      cj.launching = std::any_of(j.tasks.begin(), j.tasks.end(), [](const TaskRt& rt) {
        return rt.phase == Phase::kPreparing || rt.phase == Phase::kPrepared || rt.phase == Phase::kCommitted;
      });
      cj.running_since = j.running_since;
      core::Allocation a;
      for (const auto& t : j.placement.tasks())
        a.tasks.push_back(core::TaskPlacement{t.rank(), t.node(), {t.gpu_indices().begin(), t.gpu_indices().end()},
                                              held_resources(j.spec.per_task, t.node(), t.gpu_indices_size())});
      cj.allocation = std::move(a);
      s.jobs.push_back(std::move(cj));
    }
  }
  // Tasks of ended attempts that have not exited yet still hold their node's resources.
  int64_t ghost_id = -1;
  for (const auto& [key, g] : ghosts_) {
    core::Job cj;
    cj.id = ghost_id--;
    cj.state = core::JobState::kRunning;
    cj.spec.ntasks = static_cast<int32_t>(g.alive.size());
    cj.spec.per_task = g.per_task;
    cj.spec.time_limit = cfg_.kill_grace_s + cfg_.heartbeat_interval_s;
    cj.start_time = g.since;
    cj.preempting = true;  // exiting tasks: never a preemption victim, their room frees up soon
    core::Allocation a;
    for (const auto& [rank, node] : g.alive) {
      const auto& gpus = g.gpus.at(rank);
      a.tasks.push_back(core::TaskPlacement{rank, node, gpus, held_resources(g.per_task, node, gpus.size())});
    }
    cj.allocation = std::move(a);
    s.jobs.push_back(std::move(cj));
  }
  // States of the jobs that pending jobs depend on, for those the snapshot omits: ended ones (in
  // memory or in finished_) and pending ones left out above (held, backing off), which must read
  // as PENDING rather than unknown (an unknown job counts as purged: satisfied).
  for (const auto& [id, j] : jobs_) {
    if (j.state != core::JobState::kPending) continue;
    for (const core::Dependency& d : j.spec.dependencies)
      for (int64_t dep : d.jobs) {
        if (auto it = jobs_.find(dep); it != jobs_.end()) s.omitted[dep] = it->second.state;
        else if (auto f = finished_.find(dep); f != finished_.end()) s.omitted[dep] = f->second;
      }
  }
  s.observed_eviction_rates = eviction_rates_.Rates();
  return s;  // usage is added by the caller (RunCycle accrues it first)
}

bool Controller::OwnTasksExitingLocked(int64_t job) const {
  for (auto it = ghosts_.lower_bound({job, 0}); it != ghosts_.end() && it->first.first == job; ++it)
    for (const auto& [rank, node] : it->second.alive) {
      auto n = nodes_.find(node);
      if (n != nodes_.end() && n->second.connected && !n->second.down && !n->second.drained) return true;
    }
  return false;
}

namespace {
// What the predictor knows of `j`: its user and request.
core::JobFeatures FeaturesOf(const std::string& user, const core::JobSpec& spec) {
  return core::JobFeatures{user, spec.time_limit, spec.ntasks, spec.per_task};
}
}  // namespace

core::Duration Controller::PlannedRuntimeLocked(const JobRec& j, int64_t now) const {
  if (!policy_.prediction.enabled || j.spec.time_limit <= 0) return 0;
  const core::Duration predicted = predictor_->Predict(FeaturesOf(j.user, j.spec));
  if (j.state != core::JobState::kRunning) return predicted;
  // The history may have grown since the job started; the correction only ever raises it.
  return core::CorrectedPrediction(predicted, now - j.start_time, j.spec.time_limit, policy_.prediction.correction);
}

void Controller::ObserveRuntimeLocked(const JobRec& j, core::JobState final_state, int64_t now) {
  if (!policy_.prediction.enabled || j.start_time <= 0 || now < j.start_time) return;
  if (final_state != core::JobState::kCompleted && final_state != core::JobState::kTimeout) return;
  const core::JobFeatures features = FeaturesOf(j.user, j.spec);
  predictor_->Observe(features, now - j.start_time);
  for (const std::string& key : predictor_->HistoryKeys(features)) {  // advisory: not waited for
    const auto& runs = predictor_->history().runs.at(key);
    store_.SaveRuntimes(key, {runs.begin(), runs.end()});
  }
  SaveDroppedHistoryLocked();
  if (std::string model = predictor_->ModelState(); !model.empty()) store_.SavePredictorModel(std::move(model));
}

void Controller::SaveDroppedHistoryLocked() {
  for (std::string& key : predictor_->TakeDroppedHistory()) store_.SaveRuntimes(std::move(key), {});
}

void Controller::PreemptLocked(const core::PreemptDecision& d, int64_t now) {
  JobRec* v = Find(d.victim);
  if (!v || v->state != core::JobState::kRunning || v->preempting || v->evicting) return;
  v->preempting = true;
  v->preempt_cancel = d.mode == core::PreemptMode::kCancel;
  v->reason = "Preempting";  // RUNNING while its tasks checkpoint within the grace time
  v->stop_cause = "preemption by job " + std::to_string(d.preemptor);
  v1::SchedulerMessage m;
  auto* sig = m.mutable_signal();
  sig->set_job_id(v->id);
  sig->set_attempt(v->attempt);
  sig->set_kill(true);
  sig->set_grace_s(static_cast<int32_t>(std::max<int64_t>(1, d.grace)));
  sig->set_reason("preemption");
  SendToNodes(*v, m);
  std::string detail = "by job " + std::to_string(d.preemptor) + ", mode " + core::PreemptModeName(d.mode) +
                       ", grace " + std::to_string(d.grace) + " s, " + std::to_string(d.lost_work) +
                       " s since its last checkpoint";
  Await(store_.AppendEvent(v->id, "", "preempt", detail));
  if (metrics_) metrics_->CountPreemption();
  spdlog::info("job {} attempt {}: preempted {}", v->id, v->attempt, detail);
}

void Controller::ResizeLocked(const core::ResizeDecision& d, int64_t now) {
  JobRec* j = Find(d.job);
  if (!j || j->state != core::JobState::kRunning || j->preempting || j->evicting || j->resizing) return;
  if (j->placement.tasks_size() != d.from) return;  // changed since the snapshot
  j->resizing = true;
  j->reason = "Resizing";  // RUNNING while its tasks checkpoint
  j->stop_cause = d.accelerator.empty() ? "resize (capacity freed)" : "resize (back to " + d.accelerator + ")";
  j->stop_requested_at = now;
  v1::SchedulerMessage m;
  auto* sig = m.mutable_signal();
  sig->set_job_id(j->id);
  sig->set_attempt(j->attempt);
  sig->set_kill(true);
  sig->set_grace_s(cfg_.kill_grace_s);
  sig->set_reason("resize");
  SendToNodes(*j, m);
  const std::string what = d.accelerator.empty()
                               ? "to " + std::to_string(d.to) + " tasks from " + std::to_string(d.from)
                               : "back to " + d.accelerator + " from fallback tier " + d.from_accelerator + " (" +
                                     std::to_string(d.from) + "->" + std::to_string(d.to) + " tasks)";
  const std::string detail = what + ": expected gain " + std::to_string(d.gain) + " s > restart cost " +
                             std::to_string(d.cost) + " s";
  Await(store_.AppendEvent(j->id, "", "resize", detail));
  spdlog::info("job {} attempt {}: resize {}", j->id, j->attempt, detail);
}

void Controller::AccrueUsageLocked(const core::ClusterState& snap, int64_t now) {
  if (usage_until_ <= 0 || usage_until_ > now) usage_until_ = now;
  if (now == usage_until_) return;
  std::vector<core::Job> running;
  for (const auto& j : snap.jobs)
    if (j.id > 0 && j.state == core::JobState::kRunning) {  // ghosts have ids < 0
      running.push_back(j);
      // [fairshare] charge = "busy": its GPUs charged at their measured utilization.
      if (policy_.fairshare.charge == core::FairsharePolicy::Charge::kBusy)
        if (auto util = idle_gpus_.MeanUtil(j.id, j.attempt, now)) running.back().gpu_busy_fraction = *util / 100.0;
    }
  core::AccrueUsage(usage_, running, policy_.fairshare, usage_until_, now);
  usage_until_ = now;
  if (now - usage_saved_at_ >= kUsageSaveEvery) {
    usage_saved_at_ = now;
    store_.SaveUsage(usage_, usage_until_);  // durable within a group commit; not waited for
  }
}

std::map<std::string, double> Controller::Usage() {
  std::lock_guard lk(mu_);
  return usage_;
}

std::vector<core::PriorityBreakdown> Controller::ExplainPriorities(int64_t now) {
  core::ClusterState snap;
  core::PolicySet policy;
  {
    std::lock_guard lk(mu_);
    snap = Snapshot(now);
    snap.usage = usage_;
    policy = policy_;
  }
  return core::ExplainPriorities(snap, policy, now);
}

std::string Controller::StartBasis(int64_t job_id, int64_t now) {
  std::lock_guard lk(mu_);
  const JobRec* me = Find(job_id);
  if (!me || me->state != core::JobState::kPending) return "";
  int running = 0, predicted = 0, ahead = 0;
  for (const auto& [id, j] : jobs_) {
    if (j.state == core::JobState::kRunning) {
      ++running;
      predicted += PlannedRuntimeLocked(j, now) > 0;
    } else if (j.state == core::JobState::kPending && id != job_id && j.priority > me->priority) {
      ++ahead;
    }
  }
  const std::string behind = std::to_string(running) + " running job(s)" +
                             (policy_.prediction.enabled ? " (" + std::to_string(predicted) + " predicted, " +
                                                               std::to_string(running - predicted) + " by time limit)"
                                                         : "") +
                             " and " + std::to_string(ahead) + " higher-priority pending job(s)";
  if (!policy_.prediction.enabled)
    return "the time limits of " + behind + " (Slurm's way; [prediction] plans with users' actual run times)";
  return "predicted run times ([prediction] " + policy_.prediction.predictor + " of the last " +
         std::to_string(policy_.prediction.history) + ") of " + behind;
}

void Controller::RunCycle(int64_t now) {
  core::ClusterState snap;
  core::PolicySet policy;
  {
    std::lock_guard lk(mu_);
    std::map<std::string, int64_t> up;  // exposure of each pool to evictions
    for (const auto& [name, n] : nodes_)
      if (n.connected && !n.down) up[core::PoolName(n.node.pool)] += 1;
    eviction_rates_.Advance(now, up);
    snap = Snapshot(now);
    pending_by_user_.clear();  // the exact count; submissions until the next cycle add to it
    ++pending_recounts_;
    for (const auto& [id, j] : jobs_)
      if (j.state == core::JobState::kPending) {
        PendingUse& u = pending_by_user_[j.user];
        u.jobs += 1;
        u.bytes += j.spec_bytes;
      }
    AccrueUsageLocked(snap, now);
    snap.usage = usage_;
    policy = policy_;
  }
  auto t0 = std::chrono::steady_clock::now();
  core::CyclePlan plan = core::SchedulingCycle::Run(snap, policy, now);
  auto us = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
  if (metrics_) metrics_->ObserveCycle(static_cast<double>(us) / 1e6);
  // The starts' writes share one group commit, waited for with the lock released; their prepares
  // go out once RUNNING is durable (Batched).
  Batched([&] { ApplyPlanLocked(plan, snap, policy, now, us); });
}

void Controller::ApplyPlanLocked(const core::CyclePlan& plan, const core::ClusterState& snap,
                                 const core::PolicySet& policy, int64_t now, int64_t us) {
  for (const auto& s : plan.starts) {
    JobRec* j = Find(s.job);
    if (!j || j->state != core::JobState::kPending || j->spec.hold || j->eligible_after > now) continue;
    bool nodes_ok = !s.allocation.tasks.empty();
    for (const auto& t : s.allocation.tasks) {
      auto it = nodes_.find(t.node);
      nodes_ok &= it != nodes_.end() && it->second.connected && !it->second.down && !it->second.drained;
    }
    if (!nodes_ok) continue;  // the world changed since the snapshot; the next cycle decides again
    StartAttempt(*j, s.allocation, now);
  }
  for (const auto& d : plan.preemptions) PreemptLocked(d, now);
  for (const auto& d : plan.resizes) ResizeLocked(d, now);
  ProvisionLocked(snap, plan, policy, now);
  for (const auto& p : plan.pending) {
    JobRec* j = Find(p.job);
    if (!j || j->state != core::JobState::kPending || j->spec.hold) continue;  // held since the snapshot: keeps its reason
    j->reason = core::PendingReasonName(p.reason);
    j->expected_start = p.expected_start.value_or(0);
    j->priority = p.priority;
    j->reason_detail = p.detail;
    if (!j->provision_note.empty()) j->reason_detail += (p.detail.empty() ? "" : "; ") + j->provision_note;
  }
  if (!plan.starts.empty() || !plan.preemptions.empty())
    spdlog::debug("cycle: {} jobs in snapshot, {} starts, {} us", snap.jobs.size(), plan.starts.size(), us);
}

}  // namespace mlsched::server

namespace mlsched::server {

SchedMetrics::Gauges Controller::CollectGauges() {
  SchedMetrics::Gauges g;
  for (const auto& n : Nodes()) g.nodes[n.state()] += 1;
  std::lock_guard lk(mu_);
  for (const auto& [id, j] : jobs_) {
    g.jobs[{core::JobStateName(j.state), j.spec.partition}] += 1;
    if (j.state != core::JobState::kRunning) continue;
    for (const auto& t : j.placement.tasks()) {
      auto it = nodes_.find(t.node());
      if (it == nodes_.end()) continue;
      const std::string pool = core::PoolName(it->second.node.pool);
      g.running_gpus[pool] += t.gpu_indices_size();
      if (t.gpu_indices_size() == 0) continue;
      if (auto util = idle_gpus_.RankUtil(id, j.attempt, t.rank(), last_tick_)) g.busy_gpus[pool] += t.gpu_indices_size() * *util / 100.0;
    }
    if (auto idle = idle_gpus_.Flagged(id, j.attempt)) {
      g.idle_gpu_jobs += 1;
      g.idle_gpus += idle->gpus;
    }
  }
  for (const auto& n : provisioned_.nodes) g.provisioned[{core::PoolName(n.pool), n.registered ? "registered" : "requested"}] += 1;
  g.provision_cost = provision_cost_;
  return g;
}

}  // namespace mlsched::server
