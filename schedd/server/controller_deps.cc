// Controller: job dependencies and job arrays. Resolves what users write ("afterok:12_3", an array
// job id, "--array=0-99%10") into job ids, submits arrays as consecutive jobs, and keeps the final
// states of ended jobs that pending jobs still depend on (core::ClusterState::finished).
#include <spdlog/spdlog.h>

#include <set>

#include "schedd/core/dependency.h"
#include "schedd/server/controller.h"
#include "schedd/server/convert.h"

namespace mlsched::server {

std::vector<int64_t> Controller::ArrayElementsLocked(int64_t array_job_id, const RowLookup& rows) {
  // Elements have consecutive ids from the array job id; any one in memory tells their number.
  int32_t count = 0;
  if (auto it = jobs_.lower_bound(array_job_id); it != jobs_.end() && it->second.spec.array.job_id == array_job_id) {
    count = it->second.spec.array.task_count;
  } else if (!Find(array_job_id)) {
    if (auto row = rows(array_job_id)) {  // an array that ended long ago
      v1::JobSpec spec;
      spec.ParseFromString(row->spec);
      if (spec.array_index().array_job_id() == array_job_id) count = spec.array_index().task_count();
    }
  }
  std::vector<int64_t> ids;
  for (int32_t i = 0; i < count; ++i) ids.push_back(array_job_id + i);
  return ids;
}

std::vector<int64_t> Controller::ResolveRefLocked(const core::JobRef& ref, std::string* error, const RowLookup& rows) {
  const std::string text = std::to_string(ref.job) + (ref.array_task ? "_" + std::to_string(*ref.array_task) : "");
  std::vector<int64_t> elements = ArrayElementsLocked(ref.job, rows);
  if (!ref.array_task) {
    if (!elements.empty()) return elements;  // an array job id: every element
    if (Find(ref.job) || rows(ref.job)) return {ref.job};
    *error = "job " + text + ": no such job";
    return {};
  }
  if (elements.empty()) {
    *error = "job " + text + ": " + std::to_string(ref.job) + " is not a job array";
    return {};
  }
  for (int64_t id : elements) {
    int32_t task = -1;
    if (const JobRec* j = Find(id)) {
      task = j->spec.array.task_id;
    } else if (auto row = rows(id)) {
      v1::JobSpec spec;
      spec.ParseFromString(row->spec);
      task = spec.array_index().task_id();
    }
    if (task == *ref.array_task) return {id};
  }
  *error = "job " + text + ": array " + std::to_string(ref.job) + " has no element " + std::to_string(*ref.array_task);
  return {};
}

void Controller::RememberFinishedLocked(int64_t id, const RowLookup& rows) {
  if (Find(id) || finished_.count(id)) return;
  if (auto row = rows(id))
    if (auto st = core::ParseJobState(row->state); st && core::IsFinal(*st)) finished_[id] = *st;
}

Status Controller::ResolveDependencyLocked(v1::JobSpec& spec, const RowLookup& rows) {
  spec.clear_dependencies();
  spec.clear_dependency_any();
  if (spec.dependency().empty()) return {};
  core::DependencyRequest req;
  if (auto err = core::ParseDependency(spec.dependency(), &req))
    return {Status::kInvalidArgument, "dependency: " + *err};
  spec.set_dependency_any(req.any);
  for (const core::DependencyTerm& term : req.terms) {
    auto* d = spec.add_dependencies();
    d->set_type(core::DependencyTypeName(term.type));
    for (const core::JobRef& ref : term.jobs) {
      std::string error;
      const std::vector<int64_t> ids = ResolveRefLocked(ref, &error, rows);
      if (ids.empty()) return {Status::kInvalidArgument, "dependency " + spec.dependency() + ": " + error};
      for (int64_t id : ids) {
        d->add_job_ids(id);
        RememberFinishedLocked(id, rows);
      }
    }
  }
  return {};
}

Status Controller::SubmitArray(const Caller& caller, const v1::JobSpec& spec, int64_t now, int64_t* job_id,
                               const std::string& submission_key, int64_t admitted_at) {
  core::ArrayRequest arr;
  if (auto err = core::ParseArray(spec.array(), cfg_.max_array_size, &arr))
    return {Status::kInvalidArgument, "array: " + *err};
  JobRow row = NewRow(caller, spec, now);
  row.submission_key = submission_key;
  auto element = [spec, arr](int64_t first, size_t i) {
    v1::JobSpec e = spec;
    auto* a = e.mutable_array_index();
    a->set_array_job_id(first);
    a->set_task_id(arr.task_ids[i]);
    a->set_max_running(arr.max_running);
    a->set_task_count(static_cast<int32_t>(arr.task_ids.size()));
    a->set_task_min(arr.task_ids.front());
    a->set_task_max(arr.task_ids.back());
    return e;
  };
  const InsertedJob inserted =
      store_.InsertJobArray(row, arr.task_ids.size(), [element](int64_t f, size_t i) {
        return element(f, i).SerializeAsString();
      }).get();  // durable from here on
  const int64_t first = inserted.id;
  *job_id = first;
  if (inserted.existed) {  // a retry, or a concurrent one stored it first: counted once
    bool adopt = false;
    {
      std::lock_guard lk(mu_);
      if (jobs_.count(first) || finished_.count(first))
        UnadmitUserLocked(caller, static_cast<int64_t>(arr.task_ids.size()),
                          static_cast<int64_t>(arr.task_ids.size() * spec.ByteSizeLong()), admitted_at);
      else
        adopt = true;  // its answer was lost: this admission's count stands for its elements
    }
    if (adopt) AdoptStored(first, now);
    return {};
  }
  {
    std::lock_guard lk(mu_);
    for (size_t i = 0; i < arr.task_ids.size(); ++i) {
      const int64_t id = first + static_cast<int64_t>(i);
      jobs_.emplace(id, NewRec(id, caller, element(first, i), now));
    }
  }
  spdlog::info("job array {}: {} elements ({}) for {}", first, arr.task_ids.size(), spec.array(), caller.user);
  *job_id = first;
  if (!spec.hold()) Trigger();  // held elements change no decision until released
  return {};
}

Controller::RowLookup Controller::StoreRows() {
  return [this](int64_t id) { return store_.LoadJob(id); };
}

std::vector<int64_t> Controller::SelectJobsLocked(const google::protobuf::RepeatedField<int64_t>& ids,
                                                  const google::protobuf::RepeatedPtrField<std::string>& refs,
                                                  std::vector<std::string>* errors, const RowLookup& rows) {
  std::vector<int64_t> out;
  std::set<int64_t> seen;
  auto add = [&](const std::vector<int64_t>& found) {
    for (int64_t id : found)
      if (seen.insert(id).second) out.push_back(id);
  };
  for (int64_t id : ids) {
    std::vector<int64_t> elements = ArrayElementsLocked(id, rows);
    add(elements.empty() ? std::vector<int64_t>{id} : elements);  // unknown ids: the caller reports
  }
  for (const std::string& text : refs) {
    auto ref = core::ParseJobRef(text);
    std::string error = "job '" + text + "': not a job id (expected N or N_TASK)";
    std::vector<int64_t> found = ref ? ResolveRefLocked(*ref, &error, rows) : std::vector<int64_t>{};
    if (found.empty()) errors->push_back(error);
    add(found);
  }
  return out;
}

Controller::Selection Controller::SelectJobs(const google::protobuf::RepeatedField<int64_t>& ids,
                                            const google::protobuf::RepeatedPtrField<std::string>& refs) {
  // Rounds: resolve under the lock from memory and the rows loaded so far, noting which rows it
  // asked for; load those from the store with the lock released; again, until nothing is missing
  // (an old array's head, then its elements). The store is never read under the lock here.
  Selection sel;
  size_t max_rows = 0;
  for (int round = 0;; ++round) {
    std::set<int64_t> missing;
    RowLookup lookup = [&](int64_t id) -> std::optional<JobRow> {
      if (auto it = sel.rows.find(id); it != sel.rows.end()) return it->second;
      missing.insert(id);
      return std::nullopt;
    };
    {
      std::lock_guard lk(mu_);
      max_rows = 4 * static_cast<size_t>(policy_.limits.max_ids_per_request);
      sel.errors.clear();
      sel.ids = SelectJobsLocked(ids, refs, &sel.errors, lookup);
    }
    if (missing.empty() || round == 3 || sel.rows.size() >= max_rows) return sel;
    for (int64_t id : missing) {
      if (sel.rows.size() >= max_rows) break;
      sel.rows[id] = store_.LoadJob(id);
    }
  }
}

void Controller::ExpireLocked(const std::vector<int64_t>& expired) {
  if (expired.empty()) return;
  std::set<int64_t> wanted;  // ids that non-final jobs depend on
  for (const auto& [id, j] : jobs_)
    if (!core::IsFinal(j.state))
      for (const core::Dependency& d : j.spec.dependencies) wanted.insert(d.jobs.begin(), d.jobs.end());
  for (int64_t id : expired) {
    auto it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    if (wanted.count(id)) finished_[id] = it->second.state;
    jobs_.erase(it);
  }
  std::erase_if(finished_, [&](const auto& kv) { return !wanted.count(kv.first); });
}

void Controller::RecoverDependenciesLocked() {
  for (const auto& [id, j] : jobs_)
    if (!core::IsFinal(j.state))
      for (const core::Dependency& d : j.spec.dependencies)
        for (int64_t dep : d.jobs) RememberFinishedLocked(dep, StoreRows());  // at start, before serving
}

}  // namespace mlsched::server
