#include "schedd/server/metrics.h"

#include <prometheus/text_serializer.h>

namespace mlsched::server {

namespace {
const prometheus::Histogram::BucketBoundaries kWaitBuckets{1, 5, 15, 30, 60, 300, 900, 1800, 3600, 4 * 3600, 12 * 3600, 86400};
const prometheus::Histogram::BucketBoundaries kCycleBuckets{0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5};
}  // namespace

SchedMetrics::SchedMetrics() : registry_(std::make_shared<prometheus::Registry>()) {
  wait_ = &prometheus::BuildHistogram().Name("mlsched_queue_wait_seconds")
               .Help("Time from submission to the first start of a job, by partition and accelerator")
               .Register(*registry_);
  requeues_ = &prometheus::BuildCounter().Name("mlsched_requeues_total")
                   .Help("Jobs sent back to PENDING, by reason (NodeFail, Preempted, Evicted, LaunchFailedRequeue)")
                   .Register(*registry_);
  job_ends_ = &prometheus::BuildCounter().Name("mlsched_jobs_ended_total").Help("Jobs that ended, by final state")
                   .Register(*registry_);
  health_drains_ = &prometheus::BuildCounter().Name("mlsched_node_health_drains_total")
                       .Help("Nodes drained because their agent's health checks failed, by failing check")
                       .Register(*registry_);
  // Every check's series from the start at 0 (a dashboard's rate() has data before the first drain).
  for (const char* c : {"gpu", "ecc", "xid", "disk", "clock", "program"}) health_drains_->Add({{"check", c}});
  evictions_ = &prometheus::BuildCounter().Name("mlsched_evictions_total").Help("Spot eviction notices handled")
                    .Register(*registry_).Add({});
  preemptions_ = &prometheus::BuildCounter().Name("mlsched_preemptions_total")
                      .Help("Running jobs signalled for QoS preemption").Register(*registry_).Add({});
  rejected_ = &prometheus::BuildCounter().Name("mlsched_rejected_requests_total")
                   .Help("Requests refused for security, by reason (authentication, agent_message)")
                   .Register(*registry_);
  rejected_->Add({{"reason", "authentication"}});
  rejected_->Add({{"reason", "agent_message"}});
  internal_errors_ = &prometheus::BuildCounter().Name("mlsched_internal_errors_total")
                         .Help("Requests and agent streams that failed inside schedd (e.g. store errors); schedd kept serving")
                         .Register(*registry_).Add({});
  quarantined_ = &prometheus::BuildCounter().Name("mlsched_store_rows_quarantined_total")
                      .Help("Jobs whose stored row or spec failed the checks a client's submission gets (FAILED, never run)")
                      .Register(*registry_).Add({});
  cycle_ = &prometheus::BuildHistogram().Name("mlsched_cycle_seconds").Help("Duration of one scheduling cycle")
                .Register(*registry_).Add({}, kCycleBuckets);
  jobs_ = &prometheus::BuildGauge().Name("mlsched_jobs").Help("Jobs in memory by state and partition").Register(*registry_);
  gpus_ = &prometheus::BuildGauge().Name("mlsched_running_gpus").Help("GPUs held by running tasks, by pool").Register(*registry_);
  nodes_ = &prometheus::BuildGauge().Name("mlsched_nodes").Help("Nodes by state").Register(*registry_);
  provision_ = &prometheus::BuildCounter().Name("mlsched_provision_nodes_total")
                    .Help("Nodes of provisioned pools by event (requested, registered, failed, released), and failed program runs (resume_program_failed, suspend_program_failed)")
                    .Register(*registry_);
  provisioned_ = &prometheus::BuildGauge().Name("mlsched_provisioned_nodes")
                      .Help("Nodes created by schedd, by pool and state (requested, registered)").Register(*registry_);
  provision_cost_ = &prometheus::BuildGauge().Name("mlsched_provision_cost_per_hour")
                         .Help("Cost per hour of the nodes schedd created, by pool ([pricing.POOL] units)")
                         .Register(*registry_);
  session_bytes_ = &prometheus::BuildCounter().Name("mlsched_session_bytes_total")
                        .Help("Bytes interactive sessions relayed through schedd, by direction (in: to the process, out)")
                        .Register(*registry_);
  session_bytes_->Add({{"direction", "in"}});
  session_bytes_->Add({{"direction", "out"}});
  idle_actions_ = &prometheus::BuildCounter().Name("mlsched_idle_gpu_actions_total")
                       .Help("Jobs the idle-GPU policy ([idle]) acted on, by action (notify, requeue, cancel)")
                       .Register(*registry_);
  for (const char* a : {"notify", "requeue", "cancel"}) idle_actions_->Add({{"action", a}});
  lost_work_ = &prometheus::BuildCounter().Name("mlsched_lost_work_seconds_total")
                    .Help("Seconds of work requeues lost (since each job's last checkpoint), by requeue reason")
                    .Register(*registry_);
  lost_gpu_work_ = &prometheus::BuildCounter().Name("mlsched_lost_gpu_seconds_total")
                        .Help("GPU-seconds of work requeues lost (lost seconds x the GPUs the job held), by requeue reason")
                        .Register(*registry_);
  for (const char* r : {"Preempted", "Evicted", "NodeFail"}) {
    lost_work_->Add({{"reason", r}});
    lost_gpu_work_->Add({{"reason", r}});
  }
  leader_ = &prometheus::BuildGauge().Name("mlsched_leader")
                 .Help("1 while this schedd serves: the only one, or in HA the elected leader with its state loaded; 0 on a standby")
                 .Register(*registry_).Add({});
  busy_gpus_ = &prometheus::BuildGauge().Name("mlsched_busy_gpus")
                    .Help("GPUs held by running tasks times their utilization at the latest sample (NVML through the agents), by pool")
                    .Register(*registry_);
  idle_gpu_jobs_ = &prometheus::BuildGauge().Name("mlsched_idle_gpu_jobs")
                        .Help("Running jobs the idle-GPU policy ([idle]) flagged: GPUs below gpu_util_below for its `after`")
                        .Register(*registry_).Add({});
  idle_gpus_ = &prometheus::BuildGauge().Name("mlsched_idle_gpus").Help("GPUs held by the jobs of mlsched_idle_gpu_jobs")
                    .Register(*registry_).Add({});
  sessions_open_ = &prometheus::BuildGauge().Name("mlsched_sessions_open")
                        .Help("Interactive sessions (mlrun) relayed now").Register(*registry_).Add({});
  allocations_watched_ = &prometheus::BuildGauge().Name("mlsched_allocations_watched")
                              .Help("Allocations (mlrun, mlalloc) bound to a client that is connected now")
                              .Register(*registry_).Add({});
}

void SchedMetrics::CountSessionBytes(const std::string& direction, double bytes) {
  session_bytes_->Add({{"direction", direction}}).Increment(bytes);
}

void SchedMetrics::ObserveQueueWait(const std::string& partition, const std::string& accelerator, double seconds) {
  wait_->Add({{"partition", partition}, {"accelerator", accelerator}}, kWaitBuckets).Observe(seconds);
}

void SchedMetrics::CountRequeue(const std::string& reason) { requeues_->Add({{"reason", reason}}).Increment(); }
void SchedMetrics::CountEviction() { evictions_->Increment(); }
void SchedMetrics::CountHealthDrain(const std::string& check) { health_drains_->Add({{"check", check}}).Increment(); }
void SchedMetrics::CountPreemption() { preemptions_->Increment(); }
void SchedMetrics::CountJobEnd(const std::string& state) { job_ends_->Add({{"state", state}}).Increment(); }
void SchedMetrics::CountQuarantined() { quarantined_->Increment(); }
void SchedMetrics::CountRejected(const std::string& reason) { rejected_->Add({{"reason", reason}}).Increment(); }
void SchedMetrics::CountInternalError() { internal_errors_->Increment(); }
void SchedMetrics::CountLostWork(const std::string& reason, double seconds, double gpu_seconds) {
  lost_work_->Add({{"reason", reason}}).Increment(seconds);
  lost_gpu_work_->Add({{"reason", reason}}).Increment(gpu_seconds);
}
void SchedMetrics::CountIdleGpuAction(const std::string& action) { idle_actions_->Add({{"action", action}}).Increment(); }
void SchedMetrics::ObserveCycle(double seconds) { cycle_->Observe(seconds); }
void SchedMetrics::CountProvision(const std::string& pool, const std::string& event, double nodes) {
  provision_->Add({{"pool", pool}, {"event", event}}).Increment(nodes);
}

std::string SchedMetrics::Render(const Gauges& g) {
  std::lock_guard lk(mu_);
  // Label sets that disappeared must read 0, not their last value: reset everything, then refill.
  for (auto* fam : {jobs_, gpus_, busy_gpus_, nodes_, provisioned_, provision_cost_})
    for (auto& mf : fam->Collect())
      for (auto& m : mf.metric) {
        std::map<std::string, std::string> labels;
        for (auto& l : m.label) labels[l.name] = l.value;
        fam->Add(labels).Set(0);
      }
  for (const auto& [key, v] : g.jobs) jobs_->Add({{"state", key.first}, {"partition", key.second}}).Set(v);
  for (const auto& [pool, v] : g.running_gpus) gpus_->Add({{"pool", pool}}).Set(v);
  for (const auto& [pool, v] : g.busy_gpus) busy_gpus_->Add({{"pool", pool}}).Set(v);
  idle_gpu_jobs_->Set(g.idle_gpu_jobs);
  idle_gpus_->Set(g.idle_gpus);
  leader_->Set(g.leader);
  for (const auto& [state, v] : g.nodes) nodes_->Add({{"state", state}}).Set(v);
  for (const auto& [key, v] : g.provisioned) provisioned_->Add({{"pool", key.first}, {"state", key.second}}).Set(v);
  for (const auto& [pool, v] : g.provision_cost) provision_cost_->Add({{"pool", pool}}).Set(v);
  sessions_open_->Set(g.sessions_open);
  allocations_watched_->Set(g.allocations_watched);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace mlsched::server
