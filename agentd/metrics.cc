#include "agentd/metrics.h"

#include <prometheus/text_serializer.h>

namespace mlsched::agent {

AgentMetrics::AgentMetrics(const NodeIdentity& node)
    : registry_(std::make_shared<prometheus::Registry>()), node_(node.name), pool_(node.pool) {
  const std::map<std::string, std::string> labels{{"node", node_}, {"pool", pool_}};
  started_ = &prometheus::BuildCounter().Name("mlsched_agent_tasks_started_total").Help("Tasks launched on this node")
                  .Labels(labels).Register(*registry_).Add({});
  exits_ = &prometheus::BuildCounter().Name("mlsched_agent_task_exits_total")
                .Help("Task exits by outcome (completed, preempted = exit 75, failed, signaled)")
                .Labels(labels).Register(*registry_);
  notices_ = &prometheus::BuildCounter().Name("mlsched_agent_eviction_notices_total")
                  .Help("Spot eviction notices relayed to schedd").Labels(labels).Register(*registry_).Add({});
  stale_epoch_ = &prometheus::BuildCounter().Name("mlsched_agent_stale_epoch_messages_total")
                      .Help("Scheduler messages refused: their epoch is below the highest seen (a deposed leader)")
                      .Labels(labels).Register(*registry_).Add({});
  cutoffs_ = &prometheus::BuildCounter().Name("mlsched_agent_cutoffs_total")
                  .Help("Times the tasks were stopped after --cutoff-timeout without a controller")
                  .Labels(labels).Register(*registry_).Add({});
  pulls_ = &prometheus::BuildCounter().Name("mlsched_agent_image_pulls_total")
                .Help("Container images pulled and unpacked into this node's cache").Labels(labels).Register(*registry_).Add({});
  pull_seconds_ = &prometheus::BuildCounter().Name("mlsched_agent_image_pull_seconds_total")
                       .Help("Seconds spent pulling and unpacking images (with _pulls_total: the mean)")
                       .Labels(labels).Register(*registry_).Add({});
  epoch_ = &prometheus::BuildGauge().Name("mlsched_agent_controller_epoch").Help("The highest controller epoch seen")
                .Labels(labels).Register(*registry_).Add({});
  health_failures_ = &prometheus::BuildCounter().Name("mlsched_node_health_failures_total")
                          .Help("Rounds of health checks in which a check failed, by check (gpu, ecc, xid, disk, clock, program)")
                          .Labels(labels).Register(*registry_);
  for (const char* c : {"gpu", "ecc", "xid", "disk", "clock", "program"}) health_failures_->Add({{"check", c}});
  healthy_ = &prometheus::BuildGauge().Name("mlsched_node_healthy")
                  .Help("1 when the last round of health checks passed, 0 when one failed")
                  .Labels(labels).Register(*registry_).Add({});
  healthy_->Set(1);
  connected_ = &prometheus::BuildGauge().Name("mlsched_agent_connected").Help("1 while registered with schedd")
                    .Labels(labels).Register(*registry_).Add({});
  running_ = &prometheus::BuildGauge().Name("mlsched_agent_running_tasks").Help("Tasks running now")
                  .Labels(labels).Register(*registry_).Add({});
  task_memory_ = &prometheus::BuildGauge().Name("mlsched_agent_tasks_memory_bytes")
                     .Help("Anonymous memory of the running tasks at the last heartbeat (their cgroups), summed")
                     .Labels(labels).Register(*registry_).Add({});
  task_cpu_ = &prometheus::BuildGauge().Name("mlsched_agent_tasks_cpu_seconds")
                  .Help("CPU time the running tasks have used so far (their cgroups), summed")
                  .Labels(labels).Register(*registry_).Add({});
  gpu_util_ = &prometheus::BuildGauge().Name("mlsched_agent_gpu_utilization_percent")
                  .Help("Mean NVML utilization of the running tasks' GPUs at the last heartbeat (-1: none measured)")
                  .Labels(labels).Register(*registry_).Add({});
  gpu_util_->Set(-1);
  gpu_power_ = &prometheus::BuildGauge().Name("mlsched_agent_gpu_power_watts")
                   .Help("Power drawn by the running tasks' GPUs at the last heartbeat (NVML), summed")
                   .Labels(labels).Register(*registry_).Add({});
  auto& cap = prometheus::BuildGauge().Name("mlsched_agent_capacity").Help("Resources this node offers, by resource")
                  .Labels(labels).Register(*registry_);
  cap.Add({{"resource", "cpu_millicores"}}).Set(static_cast<double>(node.cpu_millis));
  cap.Add({{"resource", "memory_bytes"}}).Set(static_cast<double>(node.memory_bytes));
  for (const auto& g : node.gpus) cap.Add({{"resource", "gpu:" + g.type}}).Set(static_cast<double>(g.count));
}

void AgentMetrics::SetTaskUsage(const TaskUsage& u) {
  task_memory_->Set(u.memory_bytes);
  task_cpu_->Set(u.cpu_seconds);
  gpu_util_->Set(u.gpu_util_percent);
  gpu_power_->Set(u.gpu_power_watts);
}

void AgentMetrics::CountTaskStarted() { started_->Increment(); }
void AgentMetrics::CountTaskExit(const std::string& outcome) { exits_->Add({{"outcome", outcome}}).Increment(); }
void AgentMetrics::CountEvictionNotice() { notices_->Increment(); }
void AgentMetrics::CountStaleEpoch() { stale_epoch_->Increment(); }
void AgentMetrics::CountCutoff() { cutoffs_->Increment(); }
void AgentMetrics::CountHealthFailure(const std::string& check) { health_failures_->Add({{"check", check}}).Increment(); }
void AgentMetrics::SetHealthy(bool healthy) { healthy_->Set(healthy ? 1 : 0); }
void AgentMetrics::ObserveImagePull(double seconds) {
  pulls_->Increment();
  pull_seconds_->Increment(seconds);
}
void AgentMetrics::SetEpoch(int64_t epoch) { epoch_->Set(static_cast<double>(epoch)); }

std::string AgentMetrics::Render(bool connected, size_t running_tasks) {
  std::lock_guard lk(mu_);
  connected_->Set(connected ? 1 : 0);
  running_->Set(static_cast<double>(running_tasks));
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace mlsched::agent
