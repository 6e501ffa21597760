// Controller: the idle-GPU policy ([idle]; core::IdlePolicy). IdleGpus finds the running attempts
// whose GPUs stayed below their job's gpu_util_below; once one has been for the rule's `after`,
// the rule's action runs once per idle period: notify (an IDLE event, the metric, mlq's IDLE flag
// and a line in each task's stderr through its agent), requeue (also a checkpoint-requeue, reason
// IdleGPUs) or cancel (the job ends CANCELLED, reason IdleGPUs). Exempt jobs are never sampled
// against a threshold (IdleRuleFor). No clock: `now` comes from Tick.
#include <spdlog/spdlog.h>

#include <cstdio>

#include "schedd/server/controller.h"

namespace mlsched::server {

namespace {

std::string Percent(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string Span(int64_t s) {
  if (s >= 3600 && s % 3600 == 0) return std::to_string(s / 3600) + "h";
  if (s >= 60 && s % 60 == 0) return std::to_string(s / 60) + "m";
  return std::to_string(s) + "s";
}

}  // namespace

void Controller::ObserveGpuUtilLocked(JobRec& j, const v1::RunningTask& r, int32_t gpus, int64_t now) {
  if (gpus <= 0 || !r.has_gpu_util_percent()) return;
  const std::optional<core::IdleRule> rule = core::IdleRuleFor(policy_, j.spec);
  idle_gpus_.OnSample(j.id, r.attempt(), r.rank(), gpus, r.gpu_util_percent(), rule ? rule->gpu_util_below : 0, now);
}

void Controller::CheckIdleGpusLocked(int64_t now) {
  for (const IdleGpus::Idle& idle : idle_gpus_.IdleNow(now)) {
    if (idle.flagged) continue;
    JobRec* j = Find(idle.job);
    if (!j || j->state != core::JobState::kRunning || j->attempt != idle.attempt || !j->requeue_on_stop.empty()) continue;
    const std::optional<core::IdleRule> rule = core::IdleRuleFor(policy_, j->spec);
    if (!rule || now - idle.since < rule->after) continue;
    idle_gpus_.Flag(idle.job, idle.attempt);
    const char* action = core::IdleActionName(rule->action);
    const std::string what = std::to_string(idle.gpus) + " GPU(s) " + Percent(idle.util) + " % busy (below " +
                             Percent(rule->gpu_util_below) + " %) for " + Span(now - idle.since) + "; policy [idle] action " +
                             action;
    spdlog::warn("job {} attempt {}: idle GPUs: {}", j->id, j->attempt, what);
    Await(store_.AppendEvent(j->id, "", "IDLE", what));
    if (metrics_) metrics_->CountIdleGpuAction(action);
    v1::SchedulerMessage m;
    m.mutable_notice()->set_job_id(j->id);
    m.mutable_notice()->set_attempt(j->attempt);
    std::string text = "WARNING: job " + std::to_string(j->id) + " holds " + what;
    if (rule->action == core::IdleRule::Action::kRequeue) text += ": requeued now (checkpoint within " + Span(policy_.idle.requeue_grace) + ")";
    if (rule->action == core::IdleRule::Action::kCancel) text += ": cancelled now";
    m.mutable_notice()->set_text(text);
    SendToNodes(*j, m);
    if (rule->action == core::IdleRule::Action::kRequeue) {
      StopToRequeueLocked(*j, "IdleGPUs", "idle-gpus", "idle GPUs",
                          static_cast<int>(std::clamp<int64_t>(policy_.idle.requeue_grace, 0, 3600)), now);
      Trigger();
    } else if (rule->action == core::IdleRule::Action::kCancel) {
      CancelOne(*j, now, "IdleGPUs");
      Trigger();
    }
  }
}

}  // namespace mlsched::server
