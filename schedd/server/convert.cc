#include "schedd/server/convert.h"

#include <algorithm>

#include "schedd/core/dependency.h"
#include "schedd/core/pools.h"

namespace mlsched::server {

core::JobSpec ToCoreSpec(const v1::JobSpec& s, const std::string& user) {
  core::JobSpec c;
  c.name = s.name();
  c.user = user;
  c.account = s.account();
  c.partition = s.partition();
  c.qos = s.qos();
  c.ntasks = s.ntasks();
  if (s.min_tasks() > 0) c.elastic = core::TaskRange{s.min_tasks(), std::max(s.task_step(), 1)};
  c.per_task.cpu_millis = s.cpu_millis_per_task();
  c.per_task.memory_bytes = s.memory_bytes_per_task();
  if (s.gpus_per_task() > 0) c.per_task.gpus[""] = s.gpus_per_task();
  c.gpu_types.assign(s.gpu_types().begin(), s.gpu_types().end());
  c.time_limit = s.time_limit_s();
  c.topology = core::ParseTopology(s.topology()).value_or(core::Topology::kNone);
  c.nice = s.nice();
  c.hold = s.hold();
  for (const auto& f : s.fallback()) c.fallback.push_back({f.accelerator(), f.after_s()});
  for (const auto& d : s.dependencies()) {
    // Written by the server from a parsed type; an unknown name (a newer schedd) waits forever.
    const auto type = core::ParseDependencyType(d.type()).value_or(core::DependencyType::kAfterOk);
    c.dependencies.push_back({type, {d.job_ids().begin(), d.job_ids().end()}});
  }
  c.dependency_any = s.dependency_any();
  c.spot = core::ParseSpotPreference(s.spot()).value_or(s.checkpoint_interval_s() > 0 ? core::SpotPreference::kAllow
                                                                                        : core::SpotPreference::kNever);
  c.checkpoint_interval = s.checkpoint_interval_s();
  c.data_region = s.data_region();
  c.data_bytes = s.data_bytes();
  c.region_strict = s.region_strict();
  c.interactive = s.interactive();
  c.array = core::ArrayIndex{s.array_index().array_job_id(), s.array_index().task_id(),
                             s.array_index().max_running(), s.array_index().task_count()};
  return c;
}

core::ResourceVector ToCoreResources(const v1::Resources& r) {
  core::ResourceVector v;
  v.cpu_millis = r.cpu_millis();
  v.memory_bytes = r.memory_bytes();
  for (const auto& g : r.gpus())
    if (g.count() > 0) v.gpus[g.type()] += g.count();
  return v;
}

v1::Resources ToProtoResources(const core::ResourceVector& r) {
  v1::Resources out;
  out.set_cpu_millis(r.cpu_millis);
  out.set_memory_bytes(r.memory_bytes);
  for (const auto& [type, count] : r.gpus) {
    auto* g = out.add_gpus();
    g->set_type(type);
    g->set_count(count);
  }
  return out;
}

core::Pool ToCorePool(v1::Pool p) {
  switch (p) {
    case v1::POOL_SPOT: return core::Pool::kSpot;
    case v1::POOL_RESERVED: return core::Pool::kReserved;
    default: return core::Pool::kOnDemand;
  }
}

v1::Pool ToProtoPool(core::Pool p) {
  switch (p) {
    case core::Pool::kSpot: return v1::POOL_SPOT;
    case core::Pool::kReserved: return v1::POOL_RESERVED;
    default: return v1::POOL_ON_DEMAND;
  }
}

core::Node ToCoreNode(const v1::RegisterNode& reg) {
  core::Node n;
  n.name = reg.name();
  n.pool = ToCorePool(reg.pool());
  n.region = reg.region();
  n.zone = reg.zone();
  n.domain = reg.domain();
  n.capacity = ToCoreResources(reg.capacity());
  if (reg.root_jobs()) n.features.push_back(core::kRootJobsFeature);
  if (!reg.container_runtime().empty()) n.features.push_back(core::kContainersFeature);
  return n;
}

core::JobSpec ToCoreSpecOf(const v1::JobSpec& spec, const std::string& user, uint32_t uid) {
  core::JobSpec c = ToCoreSpec(spec, user);
  if (uid == 0) c.features.push_back(core::kRootJobsFeature);
  if (spec.has_container()) c.features.push_back(core::kContainersFeature);
  return c;
}

v1::JobState ToProtoState(core::JobState s) {
  v1::JobState out = v1::JOB_STATE_UNSPECIFIED;
  v1::JobState_Parse(core::JobStateName(s), &out);
  return out;
}

void RedactJobDetails(v1::JobSpec* spec) {
  spec->clear_env();
  spec->clear_script();
  spec->clear_argv();
}

void RedactJobInfo(v1::JobInfo* info) {
  RedactJobDetails(info->mutable_spec());
  info->clear_usage();
}

v1::JobInfo JobInfoFromRow(const JobRow& row) {
  v1::JobInfo info;
  info.set_job_id(row.id);
  info.mutable_spec()->ParseFromString(row.spec);
  info.mutable_spec()->clear_script();
  info.mutable_spec()->clear_env();
  info.set_user(row.user);
  info.set_uid(row.uid);
  info.set_gid(row.gid);
  v1::JobState st = v1::JOB_STATE_UNSPECIFIED;
  v1::JobState_Parse(row.state, &st);
  info.set_state(st);
  info.set_reason(row.reason);
  info.set_submit_time(row.submit_time);
  info.set_start_time(row.start_time);
  info.set_end_time(row.end_time);
  info.set_exit_code(row.exit_code);
  info.set_attempt(row.attempt);
  info.set_requeue_count(row.requeue_count);
  info.set_preempt_count(row.preempt_count);
  info.set_evictions(row.evictions);
  info.set_image_digest(row.image_digest);
  if (!row.usage.empty()) info.mutable_usage()->ParseFromString(row.usage);
  v1::Placement p;
  if (p.ParseFromString(row.placement)) *info.mutable_tasks() = p.tasks();
  return info;
}

}  // namespace mlsched::server
