// Controller: what callers read — job summaries and details (ListJobs in bounded pages,
// listing.h), and the nodes as operators see them.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>
#include <optional>
#include <set>

#include "common/units.h"
#include "schedd/server/controller.h"
#include "schedd/server/convert.h"
#include "schedd/server/listing.h"

namespace mlsched::server {

v1::JobInfo Controller::ToInfo(const JobRec& j) const {
  v1::JobInfo info;
  info.set_job_id(j.id);
  auto* s = info.mutable_spec();
  s->set_name(j.spec.name);
  s->set_ntasks(j.spec.ntasks);
  if (core::IsElastic(j.spec)) {
    s->set_min_tasks(j.spec.elastic.min_tasks);
    s->set_task_step(j.spec.elastic.step);
  }
  s->set_cpu_millis_per_task(j.spec.per_task.cpu_millis);
  s->set_memory_bytes_per_task(j.spec.per_task.memory_bytes);
  s->set_gpus_per_task(static_cast<int32_t>(j.spec.per_task.GpuCount()));
  for (const auto& t : j.spec.gpu_types) s->add_gpu_types(t);
  s->set_time_limit_s(j.spec.time_limit);
  s->set_partition(j.spec.partition);
  s->set_account(j.spec.account);
  s->set_qos(j.spec.qos);
  s->set_nice(j.spec.nice);
  s->set_hold(j.spec.hold);
  s->set_dependency(core::FormatDependencies(j.spec));
  s->set_spot(core::SpotPreferenceName(j.spec.spot));
  s->set_checkpoint_interval_s(j.spec.checkpoint_interval);
  s->set_data_region(j.spec.data_region);
  s->set_data_bytes(j.spec.data_bytes);
  s->set_region_strict(j.spec.region_strict);
  s->set_interactive(j.spec.interactive);
  if (j.spec.array.job_id != 0) {
    s->mutable_array_index()->set_array_job_id(j.spec.array.job_id);
    s->mutable_array_index()->set_task_id(j.spec.array.task_id);
    s->mutable_array_index()->set_max_running(j.spec.array.max_running);
    s->mutable_array_index()->set_task_count(j.spec.array.task_count);
  }
  info.set_user(j.user);
  info.set_uid(j.uid);
  info.set_gid(j.gid);
  bool completing = false;
  for (const auto& [key, g] : ghosts_)
    if (key.first == j.id) completing = true;
  // Tasks of the ended attempt still exiting: a final job is COMPLETING; a job requeued by
  // preemption or eviction shows PREEMPTED until they are gone, then PENDING.
  bool requeued_by_preemption = j.state == core::JobState::kPending && j.preempted;
  info.set_state(completing && core::IsFinal(j.state)     ? v1::COMPLETING
                 : completing && requeued_by_preemption ? v1::PREEMPTED
                                                        : ToProtoState(j.state));
  info.set_reason(j.reason);
  info.set_submit_time(j.submit_time);
  info.set_start_time(j.start_time);
  info.set_end_time(j.end_time);
  info.set_exit_code(j.exit_code);
  info.set_attempt(j.attempt);
  info.set_requeue_count(j.requeue_count);
  info.set_preempt_count(j.preempt_count);
  info.set_evictions(j.evictions);
  std::set<std::string> pools, gpu_types;
  for (const auto& t : j.placement.tasks())
    if (auto n = nodes_.find(t.node()); n != nodes_.end()) {
      pools.insert(core::PoolName(n->second.node.pool));
      const auto& gpus = n->second.node.capacity.gpus;
      gpu_types.insert(t.gpu_indices_size() == 0 || gpus.empty() ? "cpu" : gpus.begin()->first);
    }
  std::string joined;
  for (const auto& p : pools) joined += (joined.empty() ? "" : ",") + p;
  info.set_pools(joined);
  joined.clear();
  for (const auto& g : gpu_types) joined += (joined.empty() ? "" : ",") + g;
  info.set_accelerator(joined);
  info.set_resize(j.resize);
  info.set_stall(j.stall_note);
  // Accounting: its ended attempts' figures plus the running attempt's so far.
  v1::JobUsage live;
  if (j.state == core::JobState::kRunning) live = attempt_usage_.Of(j.id, j.attempt);  // wall_seconds: ended attempts
  if (live.ranks() > 0) *info.mutable_usage() = AddUsage(j.usage_total.get(), live);
  else if (j.usage_total) *info.mutable_usage() = *j.usage_total;
  if (j.state == core::JobState::kRunning)
    if (auto idle = idle_gpus_.Flagged(j.id, j.attempt)) {
      info.set_idle_gpus_since(idle->since);
      info.set_idle_gpu_util(idle->util);
    }
  info.set_image_digest(j.image_digest);
  info.set_expected_start(j.expected_start);
  info.set_priority(static_cast<double>(j.priority));
  if (j.state == core::JobState::kPending) info.set_reason_detail(j.reason_detail);
  if (j.state == core::JobState::kRunning || core::IsFinal(j.state)) *info.mutable_tasks() = j.placement.tasks();
  return info;
}

Status Controller::List(const Caller& caller, const v1::ListJobsRequest& req, int64_t now, v1::ListJobsResponse* resp) {
  const std::optional<int64_t> after = ParsePageToken(req.page_token());
  if (!after) return {Status::kInvalidArgument, "page token is not one this server gave"};
  const int32_t page = PageSize(req.page_size());
  std::set<int64_t> ids;
  if (!req.job_ids().empty() || !req.job_refs().empty()) {
    // Unknown references simply list nothing, like squeue -j; the store is read without the lock.
    for (int64_t id : SelectJobs(req.job_ids(), req.job_refs()).ids) ids.insert(id);
    if (ids.empty()) return {};  // a selection that matched nothing lists nothing
  }
  std::set<std::string> users(req.users().begin(), req.users().end());
  std::set<int> states(req.states().begin(), req.states().end());
  std::set<std::string> parts(req.partitions().begin(), req.partitions().end());
  auto keep = [&](const v1::JobInfo& i) {
    return (users.empty() || users.count(i.user())) && (states.empty() || states.count(i.state())) &&
           (parts.empty() || parts.count(i.spec().partition()));
  };
  // Each source: the first `page` kept jobs above the token, in id order (ListSource).
  auto add = [&](ListSource& src, v1::JobInfo info) {
    if (!keep(info)) return;
    if (!MaySeeDetails(caller, info.uid(), info.user())) RedactJobInfo(&info);
    Summarize(info.mutable_spec());
    src.jobs.push_back(std::move(info));
  };
  auto full = [&](const ListSource& src) { return src.jobs.size() >= static_cast<size_t>(page); };
  ListSource memory;
  std::vector<int64_t> from_disk;  // selected ids not in memory
  {
    std::lock_guard lk(mu_);
    size_t scanned = 0;
    if (!ids.empty()) {
      // Selected ids in order, up to a page of them whether found in memory or to be read.
      size_t taken = 0;
      for (auto it = ids.upper_bound(*after); it != ids.end(); ++it) {
        if (taken == static_cast<size_t>(page)) {
          memory.limit_id = *std::prev(it);
          break;
        }
        ++taken;
        if (JobRec* j = Find(*it)) add(memory, ToInfo(*j));
        else from_disk.push_back(*it);
      }
    } else {
      for (auto it = jobs_.upper_bound(*after); it != jobs_.end(); ++it) {
        if (full(memory) || ++scanned > kMaxListScan) {
          memory.limit_id = std::prev(it)->first;
          break;
        }
        add(memory, ToInfo(it->second));
      }
    }
  }
  std::vector<ListSource> sources{std::move(memory)};
  // Jobs no longer in memory come from disk: selected ids always, finished ones on request
  // (within the time window: finished_since, else kDefaultFinishedWindowS).
  if (!from_disk.empty()) {
    ListSource disk;
    for (int64_t id : from_disk)
      if (auto row = store_.LoadJob(id)) add(disk, JobInfoFromRow(*row));
    sources.push_back(std::move(disk));
  }
  if (req.include_all_finished() && ids.empty()) {
    const int64_t since = req.finished_since() > 0 ? req.finished_since() : now - kDefaultFinishedWindowS;
    Store::FinishedFilter filter;  // what the store can select by index; `keep` checks everything
    filter.users.assign(users.begin(), users.end());
    for (int st : states)
      if (st == v1::COMPLETED || st == v1::FAILED || st == v1::CANCELLED || st == v1::TIMEOUT)
        filter.states.push_back(v1::JobState_Name(static_cast<v1::JobState>(st)));
    if (!states.empty() && filter.states.empty()) filter.states.push_back("-");  // only live states: no finished job
    ListSource disk;
    int64_t cursor = *after;
    for (size_t scanned = 0; !full(disk);) {
      auto rows = store_.LoadFinishedJobsPage(since, cursor, static_cast<size_t>(page), filter);
      for (const auto& row : rows) add(disk, JobInfoFromRow(row));
      scanned += rows.size();
      if (rows.size() < static_cast<size_t>(page)) break;  // the store has no more
      cursor = rows.back().id;
      if (full(disk) || scanned >= kMaxListScan) {
        disk.limit_id = cursor;
        break;
      }
    }
    sources.push_back(std::move(disk));
  }
  FillPage(std::move(sources), page, resp);
  return {};
}

Status Controller::Get(const Caller& caller, int64_t job_id, v1::JobInfo* out) {
  {
    std::lock_guard lk(mu_);
    if (JobRec* j = Find(job_id)) *out = ToInfo(*j);
  }
  auto row = store_.LoadJob(job_id);
  if (!row) return {Status::kNotFound, "job " + std::to_string(job_id) + ": no such job"};
  if (out->job_id() == 0) *out = JobInfoFromRow(*row);
  out->mutable_spec()->ParseFromString(row->spec);  // the full spec for `show job`
  if (!MaySeeDetails(caller, out->uid(), out->user())) RedactJobInfo(out);
  return {};
}

std::vector<v1::NodeInfo> Controller::Nodes() {
  std::lock_guard lk(mu_);
  std::map<std::string, core::ResourceVector> used;
  std::map<std::string, std::set<int64_t>> running;
  for (const auto& [id, j] : jobs_) {
    if (j.state != core::JobState::kRunning) continue;
    for (const auto& t : j.placement.tasks()) {
      auto& u = used[t.node()];
      u.cpu_millis += j.spec.per_task.cpu_millis;
      u.memory_bytes += j.spec.per_task.memory_bytes;
      if (t.gpu_indices_size() > 0) {
        const auto& cap = nodes_[t.node()].node.capacity.gpus;
        u.gpus[cap.empty() ? "gpu" : cap.begin()->first] += t.gpu_indices_size();
      }
      running[t.node()].insert(id);
    }
  }
  std::vector<v1::NodeInfo> out;
  for (const auto& [name, n] : nodes_) {
    v1::NodeInfo info = n.info;
    info.set_rejected_reports(n.rejected_reports);
    const auto& u = used[name];
    *info.mutable_allocated() = ToProtoResources(u);
    std::string state;
    if (n.down) state = "DOWN";
    else if (n.drained) state = running[name].empty() ? "DRAIN" : "DRAINING";
    else if (u.cpu_millis == 0 && u.GpuCount() == 0 && running[name].empty()) state = "IDLE";
    else if (n.node.capacity.FitsIn(u)) state = "ALLOCATED";
    else state = "MIXED";
    info.set_state(state);
    info.set_last_heartbeat(n.last_heartbeat);
    for (int64_t id : running[name]) info.add_running_jobs(id);
    out.push_back(std::move(info));
  }
  return out;
}

}  // namespace mlsched::server
