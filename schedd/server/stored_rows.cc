#include "schedd/server/stored_rows.h"

namespace mlsched::server {

v1::StoredJob ToStored(const JobRow& r) {
  v1::StoredJob s;
  s.set_id(r.id);
  s.set_user(r.user);
  s.set_uid(r.uid);
  s.set_gid(r.gid);
  s.set_state(r.state);
  s.set_reason(r.reason);
  s.set_submit_time(r.submit_time);
  s.set_start_time(r.start_time);
  s.set_end_time(r.end_time);
  s.set_exit_code(r.exit_code);
  s.set_attempt(r.attempt);
  s.set_requeue_count(r.requeue_count);
  s.set_placement(r.placement);
  s.set_preempt_count(r.preempt_count);
  s.set_evictions(r.evictions);
  s.set_image_digest(r.image_digest);
  s.set_usage(r.usage);
  return s;
}

JobRow FromStored(const v1::StoredJob& s) {
  JobRow r;
  r.id = s.id();
  r.user = s.user();
  r.uid = s.uid();
  r.gid = s.gid();
  r.state = s.state();
  r.reason = s.reason();
  r.submit_time = s.submit_time();
  r.start_time = s.start_time();
  r.end_time = s.end_time();
  r.exit_code = s.exit_code();
  r.attempt = s.attempt();
  r.requeue_count = s.requeue_count();
  r.placement = s.placement();
  r.preempt_count = s.preempt_count();
  r.evictions = s.evictions();
  r.image_digest = s.image_digest();
  r.usage = s.usage();
  return r;
}

v1::StoredAttempt ToStored(const AttemptRow& r) {
  v1::StoredAttempt s;
  s.set_job_id(r.job_id);
  s.set_attempt(r.attempt);
  s.set_start_time(r.start_time);
  s.set_end_time(r.end_time);
  s.set_outcome(r.outcome);
  s.set_ntasks(r.ntasks);
  s.set_cpu_millis(r.cpu_millis);
  s.set_gpus(r.gpus);
  s.set_gpu_type(r.gpu_type);
  s.set_pool(r.pool);
  s.set_nodes(r.nodes);
  s.set_lost_work_s(r.lost_work_s);
  if (r.cpu_usec >= 0) s.set_cpu_usec(r.cpu_usec);
  if (r.max_rss_bytes >= 0) s.set_max_rss_bytes(r.max_rss_bytes);
  s.set_gpu_seconds(r.gpu_seconds);
  s.set_gpu_busy_seconds(r.gpu_busy_seconds);
  s.set_gpu_energy_joules(r.gpu_energy_joules);
  s.set_oom_kills(r.oom_kills);
  s.set_gpu_util_max_percent(r.gpu_util_max_percent);
  s.set_gpu_memory_max_bytes(r.gpu_memory_max_bytes);
  return s;
}

AttemptRow FromStored(const v1::StoredAttempt& s) {
  AttemptRow r;
  r.job_id = s.job_id();
  r.attempt = s.attempt();
  r.start_time = s.start_time();
  r.end_time = s.end_time();
  r.outcome = s.outcome();
  r.ntasks = s.ntasks();
  r.cpu_millis = s.cpu_millis();
  r.gpus = s.gpus();
  r.gpu_type = s.gpu_type();
  r.pool = s.pool();
  r.nodes = s.nodes();
  r.lost_work_s = s.lost_work_s();
  r.cpu_usec = s.has_cpu_usec() ? s.cpu_usec() : -1;
  r.max_rss_bytes = s.has_max_rss_bytes() ? s.max_rss_bytes() : -1;
  r.gpu_seconds = s.gpu_seconds();
  r.gpu_busy_seconds = s.gpu_busy_seconds();
  r.gpu_energy_joules = s.gpu_energy_joules();
  r.oom_kills = s.oom_kills();
  r.gpu_util_max_percent = s.gpu_util_max_percent();
  r.gpu_memory_max_bytes = s.gpu_memory_max_bytes();
  return r;
}

v1::StoredStep ToStored(const StepRow& r) {
  v1::StoredStep s;
  s.set_job_id(r.job_id);
  s.set_step_id(r.step_id);
  s.set_name(r.name);
  s.set_ntasks(r.ntasks);
  s.set_nodes(r.nodes);
  s.set_uid(r.uid);
  s.set_user(r.user);
  s.set_state(r.state);
  s.set_exit_code(r.exit_code);
  s.set_start_time(r.start_time);
  s.set_end_time(r.end_time);
  if (r.cpu_usec >= 0) s.set_cpu_usec(r.cpu_usec);
  if (r.max_rss_bytes >= 0) s.set_max_rss_bytes(r.max_rss_bytes);
  return s;
}

StepRow FromStored(const v1::StoredStep& s) {
  StepRow r;
  r.job_id = s.job_id();
  r.step_id = s.step_id();
  r.name = s.name();
  r.ntasks = s.ntasks();
  r.nodes = s.nodes();
  r.uid = s.uid();
  r.user = s.user();
  r.state = s.state();
  r.exit_code = s.exit_code();
  r.start_time = s.start_time();
  r.end_time = s.end_time();
  r.cpu_usec = s.has_cpu_usec() ? s.cpu_usec() : -1;
  r.max_rss_bytes = s.has_max_rss_bytes() ? s.max_rss_bytes() : -1;
  return r;
}

}  // namespace mlsched::server
