// Controller: the idle-GPU policy's actions ([idle]; core::IdlePolicy). IdleGpus decides which
// running attempts' GPUs stayed below their rule for its `after` (once per idle period); here each
// gets an IDLE event, the metric, a line in its tasks' stderr through their agents (Notice), and,
// by its rule, a checkpoint-requeue or a cancel (reason IdleGPUs). No clock: `now` comes from Tick.
#include <spdlog/spdlog.h>

#include "schedd/server/controller.h"

namespace mlsched::server {

void Controller::ObserveGpuUtilLocked(JobRec& j, const v1::RunningTask& r, int32_t gpus, int64_t now) {
  if (gpus <= 0 || !r.has_gpu_util_percent()) return;
  const std::optional<core::IdleRule> rule = core::IdleRuleFor(policy_, j.spec);
  idle_gpus_.OnSample(j.id, r.attempt(), r.rank(), gpus, r.gpu_util_percent(), rule ? rule->gpu_util_below : 0, now);
}

void Controller::CheckIdleGpusLocked(int64_t now) {
  auto rule_of = [&](int64_t id, int32_t attempt) -> std::optional<core::IdleRule> {
    JobRec* j = Find(id);
    if (!j || j->state != core::JobState::kRunning || j->attempt != attempt || !j->requeue_on_stop.empty()) return std::nullopt;
    return core::IdleRuleFor(policy_, j->spec);
  };
  for (const IdleGpus::Due& due : idle_gpus_.TakeDue(now, rule_of)) {
    JobRec& j = *Find(due.idle.job);
    spdlog::warn("job {} attempt {}: idle GPUs: {}", j.id, j.attempt, due.what);
    Await(store_.AppendEvent(j.id, "", "IDLE", due.what));
    if (metrics_) metrics_->CountIdleGpuAction(core::IdleActionName(due.rule.action));
    const int grace = static_cast<int>(std::clamp<int64_t>(policy_.idle.requeue_grace, 0, 3600));
    std::string text = "WARNING: job " + std::to_string(j.id) + " holds " + due.what;
    if (due.rule.action == core::IdleRule::Action::kRequeue) text += ": requeued now (checkpoint within " + std::to_string(grace) + "s)";
    if (due.rule.action == core::IdleRule::Action::kCancel) text += ": cancelled now";
    v1::SchedulerMessage m;
    m.mutable_notice()->set_job_id(j.id);
    m.mutable_notice()->set_attempt(j.attempt);
    m.mutable_notice()->set_text(text);
    SendToNodes(j, m);
    if (due.rule.action == core::IdleRule::Action::kRequeue) StopToRequeueLocked(j, "IdleGPUs", "idle-gpus", "idle GPUs", grace, now);
    if (due.rule.action == core::IdleRule::Action::kCancel) CancelOne(j, now, "IdleGPUs");
    if (due.rule.action != core::IdleRule::Action::kNotify) Trigger();
  }
}

}  // namespace mlsched::server
