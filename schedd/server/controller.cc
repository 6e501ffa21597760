// Controller: the job-facing half (submit, cancel, list, hold), persistence and recovery.
#include "schedd/core/associations.h"
#include "schedd/core/fallback.h"
#include "schedd/server/controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <map>
#include <optional>
#include <set>

#include "common/units.h"
#include "schedd/server/admission.h"
#include "schedd/server/auth.h"
#include "schedd/server/convert.h"
#include "schedd/server/listing.h"

namespace mlsched::server {

const char* StatusCodeName(Status::Code c) {
  switch (c) {
    case Status::kOk: return "OK";
    case Status::kInvalidArgument: return "INVALID_ARGUMENT";
    case Status::kNotFound: return "NOT_FOUND";
    case Status::kPermissionDenied: return "PERMISSION_DENIED";
    case Status::kFailedPrecondition: return "FAILED_PRECONDITION";
    case Status::kInternal: return "INTERNAL";
    case Status::kResourceExhausted: return "RESOURCE_EXHAUSTED";
  }
  return "UNKNOWN";
}

bool IsOwner(const Caller& c, uint32_t uid, const std::string& user) { return c.uid == uid && c.user == user; }

bool MaySeeDetails(const Caller& c, uint32_t uid, const std::string& user) {
  return c.privileged || IsOwner(c, uid, user);
}

namespace {

// Who may charge what (core::CheckAssociation) and a negative nice (root and operators only: it
// raises the job's priority above everyone's). Fills in the default account.
Status CheckAccess(const core::PolicySet& policy, const Caller& caller, v1::JobSpec& spec) {
  if (spec.nice() < 0 && !caller.privileged)
    return {Status::kPermissionDenied, "a negative nice (" + std::to_string(spec.nice()) +
                                           ") needs root or an operator (you are " + caller.user + ")"};
  core::AssociationRequest req{caller.user, caller.privileged, spec.account(), spec.partition(), spec.qos()};
  core::AssociationResult r = core::CheckAssociation(policy, req);
  if (r.code == core::AssociationResult::Code::kDenied) return {Status::kPermissionDenied, r.error};
  if (!r.ok()) return {Status::kInvalidArgument, r.error};
  spec.set_account(r.account);
  return {};
}

// The predictor [prediction] names (the loader admits only known names; user-mean otherwise).
std::unique_ptr<core::RuntimePredictor> MakePredictorFor(const core::PredictionPolicy& p,
                                                         core::RuntimeHistory history = {}) {
  std::unique_ptr<core::RuntimePredictor> made = core::MakePredictor(p.predictor, p.history, 1.0, history, p.history_by);
  if (!made) made = std::make_unique<core::UserMeanPredictor>(p.history, 1.0, std::move(history), p.history_by);
  made->set_correction(p.correction);
  return made;
}

}  // namespace

Controller::Controller(Store& store, AgentSink& sink, core::PolicySet policy, ControllerConfig config)
    : store_(store), sink_(sink), cfg_(config), policy_(std::move(policy)),
      predictor_(MakePredictorFor(policy_.prediction)) {}

core::InputLimits Controller::Limits() {
  std::lock_guard lk(mu_);
  return policy_.limits;
}

void Controller::CountInternalError() {
  if (metrics_) metrics_->CountInternalError();
}

void Controller::CountRejected(const std::string& reason) {
  if (metrics_) metrics_->CountRejected(reason);
}

void Controller::SetPolicy(core::PolicySet policy) {
  std::lock_guard lk(mu_);
  policy_ = std::move(policy);
  // A new predictor keeps the recorded run times, and a learned model's state when it is the same kind.
  auto next = MakePredictorFor(policy_.prediction, predictor_->HistorySnapshot());
  if (!next->ModelState().empty()) next->RestoreModel(predictor_->ModelState());
  predictor_ = std::move(next);
  SaveDroppedHistoryLocked();
  Trigger();
}

core::PolicySet Controller::Policy() {
  std::lock_guard lk(mu_);
  return policy_;
}

core::InteractivePolicy Controller::Interactive() {
  std::lock_guard lk(mu_);
  return policy_.interactive;
}

bool Controller::IsOperator(const std::string& user) {
  std::lock_guard lk(mu_);
  return std::find(policy_.operators.begin(), policy_.operators.end(), user) != policy_.operators.end();
}

size_t Controller::JobsInMemory() {
  std::lock_guard lk(mu_);
  return jobs_.size();
}

Controller::JobRec* Controller::Find(int64_t id) {
  auto it = jobs_.find(id);
  return it == jobs_.end() ? nullptr : &it->second;
}

JobRow Controller::ToRow(const JobRec& j, bool /*with_spec*/) const {
  JobRow r;
  r.id = j.id;
  r.user = j.user;
  r.uid = j.uid;
  r.gid = j.gid;
  r.state = core::JobStateName(j.state);
  r.reason = j.reason;
  r.submit_time = j.submit_time;
  r.start_time = j.start_time;
  r.end_time = j.end_time;
  r.exit_code = j.exit_code;
  r.attempt = j.attempt;
  r.requeue_count = j.requeue_count;
  r.placement = j.placement.SerializeAsString();
  r.preempt_count = j.preempt_count;
  r.evictions = j.evictions;
  r.image_digest = j.image_digest;
  if (j.usage_total) r.usage = j.usage_total->SerializeAsString();
  return r;
}

void Controller::Persist(const JobRec& j, const std::string& event, const std::string& detail) {
  if (batch_) {
    batch_->writes.push_back({store_.UpdateJob(ToRow(j), event, detail), j.id, std::nullopt});
    return;
  }
  try {
    store_.UpdateJob(ToRow(j), event, detail).get();
  } catch (...) {
    unpersisted_jobs_.insert(j.id);
    throw;
  }
  unpersisted_jobs_.erase(j.id);
}

void Controller::Await(std::future<void> write, int64_t job, std::optional<AttemptRow> attempt) {
  if (batch_) {
    batch_->writes.push_back({std::move(write), job, std::move(attempt)});
    return;
  }
  write.get();
}

bool Controller::SendLocked(const std::string& node, v1::SchedulerMessage msg) {
  if (!batch_) return sink_.Send(node, std::move(msg));
  auto it = nodes_.find(node);
  if (it == nodes_.end() || !it->second.connected) return false;
  batch_->sends.emplace_back(node, std::move(msg));
  return true;
}

void Controller::FinishBatch(WriteBatch& b) {
  if (b.writes.empty() && b.sends.empty()) return;
  std::exception_ptr error;
  std::vector<int64_t> written, failed_jobs;
  std::vector<AttemptRow> failed_attempts;
  for (auto& w : b.writes) {
    try {
      w.done.get();
      if (w.job) written.push_back(w.job);
    } catch (...) {
      if (!error) error = std::current_exception();
      if (w.job) failed_jobs.push_back(w.job);
      if (w.attempt) failed_attempts.push_back(*w.attempt);
    }
  }
  std::lock_guard lk(mu_);
  for (int64_t id : written) unpersisted_jobs_.erase(id);
  for (int64_t id : failed_jobs) unpersisted_jobs_.insert(id);
  for (auto& a : failed_attempts) unpersisted_attempts_.push_back(std::move(a));
  // Sent under the lock, in order: whatever another operation sent meanwhile (an abort of this
  // attempt, say) is judged against by the attempt check below.
  for (auto& [node, m] : b.sends) {
    int64_t job = 0;
    int32_t attempt = 0;
    if (m.has_prepare()) job = m.prepare().job_id(), attempt = m.prepare().attempt();
    if (m.has_commit()) job = m.commit().job_id(), attempt = m.commit().attempt();
    if (job != 0) {
      if (error) continue;  // its state is not durable: the launch times out and is retried
      JobRec* j = Find(job);
      if (!j || j->state != core::JobState::kRunning || j->attempt != attempt) continue;
    }
    sink_.Send(node, std::move(m));
  }
  if (error) std::rethrow_exception(error);
}

void Controller::IndexRunningLocked(const JobRec& j) {
  for (const auto& t : j.placement.tasks()) running_on_[t.node()].insert(j.id);
}

void Controller::FlushUnpersisted() {
  std::lock_guard lk(mu_);
  FlushUnpersistedLocked();
}

void Controller::FlushUnpersistedLocked() {
  while (!unpersisted_attempts_.empty()) {
    store_.SaveAttempt(unpersisted_attempts_.back()).get();  // INSERT OR REPLACE: a repeat is harmless
    unpersisted_attempts_.pop_back();
  }
  for (auto it = unpersisted_jobs_.begin(); it != unpersisted_jobs_.end();) {
    const int64_t id = *it++;
    if (auto j = jobs_.find(id); j != jobs_.end()) {
      Persist(j->second, "resync", "written again after a failed store write");
      spdlog::info("job {}: state {} written after an earlier store failure", id, core::JobStateName(j->second.state));
    } else {
      unpersisted_jobs_.erase(id);
    }
  }
}

bool Controller::CanControl(const Caller& c, const JobRec& j) const {
  return c.privileged || IsOwner(c, j.uid, j.user);
}

Status Controller::ValidateSpec(v1::JobSpec& spec, const Caller& caller, const RowLookup& rows) {
  auto bad = [](std::string m) { return Status{Status::kInvalidArgument, std::move(m)}; };
  if (std::string err = CheckSpecValues(spec); !err.empty()) return bad(err);
  if (std::string err = CheckSpecText(spec); !err.empty()) return bad(err);
  if (auto range = core::CheckGangSize(ToCoreSpec(spec, ""))) return bad(*range);
  if (spec.cpu_millis_per_task() == 0) spec.set_cpu_millis_per_task(1000);
  if (!spec.topology().empty() && !core::ParseTopology(spec.topology()))
    return bad("unknown topology '" + spec.topology() + "' (none, domain, zone, region, spread)");
  if (spec.partition().empty()) spec.set_partition(policy_.default_partition);
  const core::PartitionPolicy* part = nullptr;
  std::string known;
  for (const auto& p : policy_.partitions) {
    if (p.name == spec.partition()) part = &p;
    known += (known.empty() ? "" : ", ") + p.name;
  }
  if (!part) return bad("unknown partition '" + spec.partition() + "' (partitions: " + known + ")");
  if (std::string err = CheckInteractiveSpec(spec, policy_.interactive, *part); !err.empty()) return bad(err);
  if (spec.time_limit_s() == 0) spec.set_time_limit_s(part->default_time_limit);
  if (spec.time_limit_s() > part->max_time_limit)
    return bad("time limit " + FormatDuration(spec.time_limit_s()) + " exceeds partition '" + part->name +
               "' maximum " + FormatDuration(part->max_time_limit));
  if (Status st = CheckAccess(policy_, caller, spec); !st.ok()) return st;
  if (spec.name().empty()) {
    std::string n = spec.argv().empty() ? "script" : spec.argv(0);
    if (auto slash = n.rfind('/'); slash != std::string::npos) n = n.substr(slash + 1);
    spec.set_name(n);
  }
  if (spec.has_array_index() || (!spec.array().empty() && spec.array().size() > 256))
    return bad("array: array_index is set by the server; give --array as text (at most 256 characters)");
  if (Status st = ResolveDependencyLocked(spec, rows); !st.ok()) return st;
  if (spec.spot().empty()) spec.set_spot(spec.checkpoint_interval_s() > 0 ? "allow" : "never");
  if (!core::ParseSpotPreference(spec.spot()))
    return bad("unknown spot preference '" + spec.spot() + "' (never, allow, prefer)");
  if (spec.region_strict() && spec.data_region().empty()) return bad("region_strict needs a data region");
  for (const auto& f : spec.fallback()) {
    if (f.accelerator().empty()) return bad("fallback tier without an accelerator");
    if (f.after_s() < 0) return bad("fallback tier " + f.accelerator() + ": wait must be >= 0");
  }
  std::vector<core::Node> nodes;
  for (const auto& [name, n] : nodes_) nodes.push_back(n.node);
  core::AppendProvisionable(policy_, nodes);  // nodes [provisioning.POOL] may create count as well
  std::vector<core::Node> typed = nodes;  // GPU types: also those of declared nodes not registered yet
  for (const auto& d : policy_.inventory.nodes) typed.push_back(d.shape);
  if (std::string err = CheckGpuTypesKnown(spec, typed); !err.empty()) return bad(err);
  auto none_has = [&nodes](const char* feature) {
    return !nodes.empty() && std::none_of(nodes.begin(), nodes.end(), [feature](const core::Node& n) {
      return std::find(n.features.begin(), n.features.end(), feature) != n.features.end();
    });
  };
  if (caller.uid == 0 && none_has(core::kRootJobsFeature))
    return bad("no node runs jobs of root (uid 0): agentd refuses them unless started with --allow-root-jobs "
               "(Slurm's DisableRootJobs); submit as an ordinary user");
  if (spec.has_container() && none_has(core::kContainersFeature))
    return bad("no node runs container jobs: every agent lacks its OCI runtime (runc), skopeo or umoci "
               "(`mladmin nodes` shows each node's runtime); submit without --container-image or ask an admin");
  if (!nodes.empty()) {
    // Feasible when the job, or the last of its fallback tiers (all tiers open), could ever run.
    core::JobSpec c = ToCoreSpecOf(spec, caller.user, caller.uid);
    auto why = core::CheckJobFeasible(nodes, policy_, c);
    if (why && !c.fallback.empty()) {
      core::JobSpec widest = c;
      if (core::CpuTierOpen(c, INT64_MAX / 2)) {
        widest.per_task.gpus.clear();
        widest.gpu_types.clear();
      } else {
        widest.gpu_types = core::OpenGpuTiers(c, INT64_MAX / 2);
      }
      if (!core::CheckJobFeasible(nodes, policy_, widest)) why.reset();
    }
    if (why) return bad(*why + ": rejected");
  }
  return {};
}

JobRow Controller::NewRow(const Caller& caller, const v1::JobSpec& spec, int64_t now) {
  JobRow row;
  row.user = caller.user;
  row.uid = caller.uid;
  row.gid = caller.gid;
  row.state = "PENDING";
  row.submit_time = now;
  row.reason = spec.hold() ? "JobHeldUser" : "None";
  return row;
}

Controller::JobRec Controller::NewRec(int64_t id, const Caller& caller, const v1::JobSpec& spec, int64_t now) {
  JobRec j;
  j.id = id;
  j.spec = ToCoreSpecOf(spec, caller.user, caller.uid);
  j.user = caller.user;
  j.uid = caller.uid;
  j.gid = caller.gid;
  j.submit_time = now;
  j.reason = spec.hold() ? "JobHeldUser" : "None";
  j.spec_bytes = static_cast<int32_t>(spec.ByteSizeLong());
  return j;
}

Status Controller::CheckSizesLocked(const v1::JobSpec& spec, int64_t* jobs_out) {
  const core::InputLimits& l = policy_.limits;
  if (std::string err = CheckSpecLimits(spec, l); !err.empty()) return {Status::kInvalidArgument, err};
  int64_t jobs = 1;
  if (!spec.array().empty()) {
    core::ArrayRequest arr;
    if (auto err = core::ParseArray(spec.array(), cfg_.max_array_size, &arr)) return {Status::kInvalidArgument, "array: " + *err};
    jobs = static_cast<int64_t>(arr.task_ids.size());
    const int64_t bytes = jobs * static_cast<int64_t>(spec.ByteSizeLong());
    if (bytes > l.max_array_bytes)
      return {Status::kInvalidArgument, "array of " + std::to_string(jobs) + " elements stores " + std::to_string(bytes) +
                                            " bytes; the limit is " + std::to_string(l.max_array_bytes) +
                                            " (policy [limits] max_array_bytes): use a smaller array or script"};
  }
  // HA mode: one submission is one etcd transaction (etcd_store.h).
  if (const size_t max = store_.MaxSpecBytes(); max && spec.ByteSizeLong() > max)
    return {Status::kInvalidArgument, "the job spec is " + std::to_string(spec.ByteSizeLong()) +
                                          " bytes; in HA mode one job's spec may take at most " + std::to_string(max) +
                                          " (etcd's request limit): move the script into a file"};
  if (const size_t max = store_.MaxArrayJobs(); max && static_cast<size_t>(jobs) > max)
    return {Status::kInvalidArgument, "array of " + std::to_string(jobs) + " elements; in HA mode one submission "
                                          "may create at most " + std::to_string(max) +
                                          " jobs (one etcd transaction; raise etcd's --max-txn-ops and schedd's "
                                          "--ha-max-txn-ops together, or split the array)"};
  *jobs_out = jobs;
  return {};
}

Status Controller::AdmitUserLocked(const Caller& caller, int64_t jobs, int64_t bytes, int64_t now) {
  const core::InputLimits& l = policy_.limits;
  if (caller.privileged) return {};
  PendingUse& pending = pending_by_user_[caller.user];
  if (l.max_pending_jobs_per_user > 0 && pending.jobs + jobs > l.max_pending_jobs_per_user)
    return {Status::kResourceExhausted, "user " + caller.user + " has " + std::to_string(pending.jobs) +
                                            " pending jobs; the limit is " + std::to_string(l.max_pending_jobs_per_user) +
                                            " (policy [limits] max_pending_jobs_per_user)"};
  if (l.max_pending_bytes_per_user > 0 && pending.bytes + bytes > l.max_pending_bytes_per_user)
    return {Status::kResourceExhausted, "user " + caller.user + " has pending jobs whose specs take " +
                                            std::to_string(pending.bytes) + " bytes; " + std::to_string(bytes) +
                                            " more would pass the limit of " + std::to_string(l.max_pending_bytes_per_user) +
                                            " (policy [limits] max_pending_bytes_per_user)"};
  if (!submit_rate_.Take(caller.user, now, l))
    return {Status::kResourceExhausted, "user " + caller.user + " submits faster than " +
                                            std::to_string(l.submit_rate_per_user) +
                                            " jobs/s (policy [limits] submit_rate_per_user); retry in a second"};
  pending.jobs += static_cast<int32_t>(jobs);
  pending.bytes += bytes;
  return {};
}

void Controller::UnadmitUserLocked(const Caller& caller, int64_t jobs, int64_t bytes, int64_t admitted_at) {
  if (caller.privileged || admitted_at != pending_recounts_) return;  // a recount since: already exact
  PendingUse& pending = pending_by_user_[caller.user];
  pending.jobs = std::max<int32_t>(0, pending.jobs - static_cast<int32_t>(jobs));
  pending.bytes = std::max<int64_t>(0, pending.bytes - bytes);
}

Status Controller::Submit(const Caller& caller, v1::JobSpec spec, int64_t now, int64_t* job_id,
                          const std::string& submission_key) {
  if (submission_key.size() > 64 ||
      !std::all_of(submission_key.begin(), submission_key.end(),
                   [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.'; }))
    return {Status::kInvalidArgument, "submission key: at most 64 letters, digits, '-', '_' or '.'"};
  // A retry of a submission that was stored (its answer lost) gets the same job. The store's
  // insert finds the key in the same transaction (InsertedJob::existed), so the common case reads
  // nothing first; a retry that would now be refused (the user at a limit that the stored job
  // itself fills, a lowered limit, a dependency purged since) is looked up when refused, with the
  // lock released.
  auto refused = [&](Status st) -> Status {
    if (!submission_key.empty())
      if (auto id = store_.LookupSubmission(caller.user, caller.uid, submission_key)) {
        *job_id = *id;
        AdoptStored(*id, now);  // the stored submission's answer may have been lost
        return {};
      }
    return st;
  };
  // Rounds, as in SelectJobs: validate under the lock from memory and the rows loaded so far,
  // noting the rows a dependency needed (jobs that ended long ago, an old array's elements); load
  // them with the lock released; again until nothing is missing. The store is never read under
  // the lock for what a caller wrote; at most 4 x [limits] max_ids_per_request rows are loaded.
  std::map<int64_t, std::optional<JobRow>> loaded;
  int64_t admitted_at = 0;  // pending_recounts_ when admitted (UnadmitUserLocked)
  for (int round = 0;; ++round) {
    std::set<int64_t> missing;
    RowLookup lookup = [&](int64_t id) -> std::optional<JobRow> {
      if (auto it = loaded.find(id); it != loaded.end()) return it->second;
      missing.insert(id);
      return std::nullopt;
    };
    v1::JobSpec checked = spec;
    size_t max_rows = 0;
    Status refusal;
    {
      std::lock_guard lk(mu_);
      int64_t jobs = 1;
      if (refusal = CheckSizesLocked(checked, &jobs); refusal.ok()) {
        Status st = ValidateSpec(checked, caller, lookup);
        max_rows = 4 * static_cast<size_t>(policy_.limits.max_ids_per_request);
        const bool settled = missing.empty() || round == 3 || loaded.size() >= max_rows;
        if (settled && st.ok()) st = AdmitUserLocked(caller, jobs, jobs * static_cast<int64_t>(checked.ByteSizeLong()), now);
        if (settled && st.ok()) {
          admitted_at = pending_recounts_;
          spec = std::move(checked);
          break;
        }
        if (settled) refusal = st;
      }
    }
    if (!refusal.ok()) return refused(refusal);
    for (int64_t id : missing) {
      if (loaded.size() >= max_rows) break;
      loaded[id] = store_.LoadJob(id);
    }
  }
  if (!spec.array().empty()) return SubmitArray(caller, spec, now, job_id, submission_key, admitted_at);
  JobRow row = NewRow(caller, spec, now);
  row.spec = spec.SerializeAsString();
  row.submission_key = submission_key;
  const InsertedJob inserted = store_.InsertJob(std::move(row)).get();  // durable from here on
  const int64_t id = inserted.id;
  bool adopt = false;
  {
    std::lock_guard lk(mu_);
    if (!inserted.existed) jobs_.emplace(id, NewRec(id, caller, spec, now));
    else if (jobs_.count(id) || finished_.count(id))
      UnadmitUserLocked(caller, 1, static_cast<int64_t>(spec.ByteSizeLong()), admitted_at);  // counted when admitted
    else adopt = true;  // its answer was lost: this admission's count stands for it
  }
  if (adopt) AdoptStored(id, now);
  *job_id = id;
  if (!spec.hold()) Trigger();  // a held job changes no decision until it is released (Hold triggers)
  return {};
}

void Controller::CancelOne(JobRec& j, int64_t now, const std::string& reason) {
  if (j.state == core::JobState::kRunning) {
    EndAttempt(j, core::JobState::kCancelled, reason, 0, now, "cancel");
    return;
  }
  j.state = core::JobState::kCancelled;
  j.reason = reason;
  j.end_time = now;
  Persist(j, "cancel", reason == "Cancelled" ? "" : reason);
}

v1::CancelJobsResponse Controller::Cancel(const Caller& caller, const v1::CancelJobsRequest& req, int64_t now,
                                          const std::string& reason) {
  v1::CancelJobsResponse resp;
  const bool listed = !req.job_ids().empty() || !req.job_refs().empty();
  Selection sel;
  if (listed) sel = SelectJobs(req.job_ids(), req.job_refs());  // reads the store without the lock
  std::lock_guard lk(mu_);
  std::vector<JobRec*> selected;
  std::set<int> states(req.states().begin(), req.states().end());
  auto state_ok = [&](const JobRec& j) { return states.empty() || states.count(ToProtoState(j.state)); };
  if (listed) {
    for (const std::string& e : sel.errors) resp.add_errors(e);
    for (int64_t id : sel.ids) {
      JobRec* j = Find(id);
      if (!j) {
        auto row = sel.rows.find(id);
        const bool known = row != sel.rows.end() && row->second;
        resp.add_errors("job " + std::to_string(id) + (known ? ": already " + row->second->state : ": no such job"));
        continue;
      }
      if (!req.user().empty() && j->user != req.user()) continue;
      if (!state_ok(*j)) continue;
      if (!CanControl(caller, *j)) {
        resp.add_errors("job " + std::to_string(id) + ": permission denied: owned by " + j->user);
        continue;
      }
      selected.push_back(j);
    }
  } else {
    for (auto& [id, j] : jobs_) {
      if (!req.user().empty() && j.user != req.user()) continue;
      if (!state_ok(j) || core::IsFinal(j.state)) continue;
      if (!CanControl(caller, j)) {
        if (!req.user().empty()) resp.add_errors("job " + std::to_string(id) + ": permission denied: owned by " + j.user);
        continue;
      }
      selected.push_back(&j);
    }
  }
  for (JobRec* j : selected) {
    if (core::IsFinal(j->state)) {
      resp.add_errors("job " + std::to_string(j->id) + ": already " + core::JobStateName(j->state));
      continue;
    }
    if (req.signal() != 0) {
      if (j->state != core::JobState::kRunning) {
        resp.add_errors("job " + std::to_string(j->id) + ": not running, cannot signal");
        continue;
      }
      v1::SchedulerMessage m;
      m.mutable_signal()->set_job_id(j->id);
      m.mutable_signal()->set_attempt(j->attempt);
      m.mutable_signal()->set_signal(req.signal());
      SendToNodes(*j, m);
    } else {
      CancelOne(*j, now, reason);
    }
    resp.add_cancelled(j->id);
  }
  if (!selected.empty()) Trigger();
  return resp;
}

Status Controller::Hold(const Caller& caller, int64_t job_id, bool release, int64_t now) {
  std::lock_guard lk(mu_);
  JobRec* j = Find(job_id);
  if (!j) return {Status::kNotFound, "job " + std::to_string(job_id) + ": no such job"};
  if (!CanControl(caller, *j)) return {Status::kPermissionDenied, "job " + std::to_string(job_id) + ": permission denied: owned by " + j->user};
  if (j->state != core::JobState::kPending)
    return {Status::kFailedPrecondition, "job " + std::to_string(job_id) + " is " + core::JobStateName(j->state) + ", not PENDING"};
  // An operator's hold on someone else's job is an admin hold (Slurm's JobHeldAdmin): its owner
  // cannot release it.
  const bool admin = caller.privileged && !IsOwner(caller, j->uid, j->user);
  const bool admin_held = j->spec.hold && j->reason == "JobHeldAdmin";
  if (release && admin_held && !caller.privileged)
    return {Status::kPermissionDenied, "job " + std::to_string(job_id) +
                                           " was held by an operator (JobHeldAdmin): only an operator may release it"};
  const std::string held_reason = admin || admin_held ? "JobHeldAdmin" : "JobHeldUser";
  if (j->spec.hold == !release && (release || j->reason == held_reason)) return {};
  j->spec.hold = !release;
  j->reason = release ? "None" : held_reason;
  if (!release) {  // out of the cycle while held (Snapshot): nothing it planned stays shown
    j->priority = 0;
    j->expected_start = 0;
    j->reason_detail.clear();
  }
  JobRow row = ToRow(*j);
  v1::JobSpec spec;
  if (auto blob = store_.LoadSpec(job_id)) spec.ParseFromString(*blob);
  spec.set_hold(!release);
  row.spec = spec.SerializeAsString();
  store_.UpdateJob(row, release ? "release" : "hold", caller.user).get();
  Trigger();
  return {};
}

Status Controller::Drain(const Caller& caller, const std::string& node, const std::string& reason, bool resume) {
  if (!caller.privileged) return {Status::kPermissionDenied, "drain/resume needs root or an operator (you are " + caller.user + ")"};
  std::lock_guard lk(mu_);
  auto it = nodes_.find(node);
  if (it == nodes_.end()) return {Status::kNotFound, "node '" + node + "': no such node"};
  NodeRec& n = it->second;
  n.drained = !resume;
  n.info.set_reason(resume ? "" : reason);
  store_.SaveNode(NodeRow{node, n.info.SerializeAsString(), n.drained, n.info.reason()}).get();
  store_.AppendEvent(0, node, resume ? "resume" : "drain", reason + " by " + caller.user).get();
  Trigger();
  return {};
}

void Controller::Recover(int64_t now) {
  std::lock_guard lk(mu_);
  usage_until_ = store_.LoadUsage(&usage_);  // the first cycle accrues the downtime of jobs that kept running
  core::RuntimeHistory history;
  for (auto& [key, runs] : store_.LoadRuntimes()) {  // least recently saved first
    history.runs[key].assign(runs.begin(), runs.end());
    history.recent.push_back(key);  // HistoryBook takes the templates' order from it
  }
  predictor_ = MakePredictorFor(policy_.prediction, std::move(history));
  SaveDroppedHistoryLocked();
  // Only a learned predictor has a state; a stored one of another kind is left alone.
  if (const std::string model = store_.LoadPredictorModel();
      !model.empty() && !predictor_->ModelState().empty() && !predictor_->RestoreModel(model))
    spdlog::warn("stored run-time predictor state is not one the '{}' predictor wrote; it starts afresh",
                 policy_.prediction.predictor);
  usage_saved_at_ = now;
  RecoverProvisionedLocked();
  for (const auto& row : store_.LoadNodes()) {
    NodeRec n;
    n.info.ParseFromString(row.info);
    v1::RegisterNode reg;
    reg.set_name(row.name);
    reg.set_pool(n.info.pool());
    reg.set_region(n.info.region());
    reg.set_zone(n.info.zone());
    reg.set_domain(n.info.domain());
    reg.set_root_jobs(n.info.root_jobs());
    reg.set_container_runtime(n.info.container_runtime());
    *reg.mutable_capacity() = n.info.capacity();
    n.node = ToCoreNode(reg);
    n.drained = row.drained;
    n.last_heartbeat = now;  // silent from now on: DOWN after the heartbeat timeout
    nodes_[row.name] = std::move(n);
  }
  std::unordered_map<uint32_t, std::string> users;  // for this load only: accounts may change later
  for (const auto& row : store_.LoadJobs(now - cfg_.min_job_age_s)) {
    JobRec j = RecFromRow(row);
    QuarantineIfForgedLocked(j, row, now, &users);
    if (j.state == core::JobState::kRunning) IndexRunningLocked(j);
    jobs_.emplace(j.id, std::move(j));
  }
  RecoverDependenciesLocked();
  spdlog::info("recovered {} jobs and {} nodes from the store", jobs_.size(), nodes_.size());
  Trigger();
}

Controller::JobRec Controller::RecFromRow(const JobRow& row) {
  JobRec j;
  v1::JobSpec spec;
  spec.ParseFromString(row.spec);
  j.id = row.id;
  j.spec = ToCoreSpecOf(spec, row.user, row.uid);
  j.user = row.user;
  j.uid = row.uid;
  j.gid = row.gid;
  j.state = core::ParseJobState(row.state).value_or(core::JobState::kPending);
  if (j.state == core::JobState::kPreempted || j.state == core::JobState::kNodeFail ||
      j.state == core::JobState::kCompleting)
    j.state = core::JobState::kPending;
  j.reason = row.reason;
  j.submit_time = row.submit_time;
  j.start_time = row.start_time;
  j.end_time = row.end_time;
  j.exit_code = row.exit_code;
  j.attempt = row.attempt;
  j.requeue_count = row.requeue_count;
  j.preempt_count = row.preempt_count;
  j.evictions = row.evictions;
  j.image_digest = row.image_digest;
  if (!row.usage.empty()) {
    auto u = std::make_shared<v1::JobUsage>();
    if (u->ParseFromString(row.usage)) j.usage_total = std::move(u);
  }
  j.placement.ParseFromString(row.placement);
  j.spec_bytes = static_cast<int32_t>(row.spec.size());
  if (j.state == core::JobState::kRunning) {
    // Assume running until the agents say otherwise (see OnRegister / OnHeartbeat).
    j.tasks.assign(j.placement.tasks_size(), TaskRt{Phase::kRunning, 0, 0});
    // Ranks whose exit was stored while the others ran (OnTaskExited) stay ended.
    for (int i = 0; i < j.placement.tasks_size(); ++i)
      if (j.placement.tasks(i).exited()) j.tasks[i] = TaskRt{Phase::kExited, j.placement.tasks(i).exit_code(), 0};
    // A stored failed exit means a verdict waited on a silent node: it waits again, for a node
    // still running a rank, one without a failed rank when there is one (the silent one then).
    std::set<std::string> failed_on;
    for (const auto& t : j.placement.tasks())
      if (t.exited() && t.exit_code() != 0) failed_on.insert(t.node());
    if (!failed_on.empty())
      for (const auto& t : j.placement.tasks())
        if (!t.exited() && (j.awaiting_node.empty() || (failed_on.count(j.awaiting_node) && !failed_on.count(t.node()))))
          j.awaiting_node = t.node();
  }
  return j;
}

void Controller::AdoptStored(int64_t first, int64_t now) {
  {
    std::lock_guard lk(mu_);
    if (jobs_.count(first) || finished_.count(first)) return;  // known: the usual retry
  }
  int64_t count = 1;  // an array's elements follow its first job
  if (auto spec = store_.LoadSpec(first)) {
    v1::JobSpec s;
    if (s.ParseFromString(*spec) && s.array_index().task_count() > 1) count = s.array_index().task_count();
  }
  for (int64_t id = first; id < first + count; ++id) {
    std::optional<JobRow> row = store_.LoadJob(id);  // without the lock
    if (!row || core::IsFinal(core::ParseJobState(row->state).value_or(core::JobState::kPending))) continue;
    std::lock_guard lk(mu_);
    if (jobs_.count(id) || finished_.count(id)) continue;
    JobRec j = RecFromRow(*row);
    if (j.state == core::JobState::kRunning) IndexRunningLocked(j);
    jobs_.emplace(id, std::move(j));
    spdlog::warn("job {}: stored by a submission whose answer was lost; its retry adopts it", id);
  }
  Trigger();
}

bool Controller::QuarantineIfForgedLocked(JobRec& j, const JobRow& row, int64_t now,
                                          std::unordered_map<uint32_t, std::string>* user_cache) {
  if (core::IsFinal(j.state)) return false;  // never runs again: nothing to guard
  auto lookup = [&] { return cfg_.user_of_uid ? cfg_.user_of_uid(row.uid) : UserName(row.uid); };
  std::string user;
  if (!user_cache) {
    user = lookup();
  } else {
    auto it = user_cache->find(row.uid);
    if (it == user_cache->end()) it = user_cache->emplace(row.uid, lookup()).first;
    user = it->second;
  }
  const std::string why = CheckStoredJob(row, user, policy_.limits);
  if (why.empty()) return false;
  QuarantineLocked(j, why, now);
  return true;
}

void Controller::QuarantineLocked(JobRec& j, const std::string& why, int64_t now) {
  spdlog::error("job {}: its stored state is refused and it will never run: {} (written by someone other than "
                "schedd? the job is FAILED with reason StoredRowRejected)",
                j.id, why);
  if (metrics_) metrics_->CountQuarantined();
  j.state = core::JobState::kFailed;
  j.reason = "StoredRowRejected";
  j.end_time = now;
  j.tasks.clear();
  Persist(j, "quarantine", why);
}

void Controller::Trigger() {
  {
    std::lock_guard lk(wake_mu_);
    dirty_ = true;
  }
  wake_cv_.notify_all();
}

void Controller::WaitForWork(int timeout_ms) {
  std::unique_lock lk(wake_mu_);
  wake_cv_.wait_for(lk, std::chrono::milliseconds(timeout_ms), [&] { return dirty_; });
  dirty_ = false;
}

}  // namespace mlsched::server
