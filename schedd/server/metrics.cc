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
void SchedMetrics::ObserveCycle(double seconds) { cycle_->Observe(seconds); }
void SchedMetrics::CountProvision(const std::string& pool, const std::string& event, double nodes) {
  provision_->Add({{"pool", pool}, {"event", event}}).Increment(nodes);
}

std::string SchedMetrics::Render(const Gauges& g) {
  std::lock_guard lk(mu_);
  // Label sets that disappeared must read 0, not their last value: reset everything, then refill.
  for (auto* fam : {jobs_, gpus_, nodes_, provisioned_, provision_cost_})
    for (auto& mf : fam->Collect())
      for (auto& m : mf.metric) {
        std::map<std::string, std::string> labels;
        for (auto& l : m.label) labels[l.name] = l.value;
        fam->Add(labels).Set(0);
      }
  for (const auto& [key, v] : g.jobs) jobs_->Add({{"state", key.first}, {"partition", key.second}}).Set(v);
  for (const auto& [pool, v] : g.running_gpus) gpus_->Add({{"pool", pool}}).Set(v);
  for (const auto& [state, v] : g.nodes) nodes_->Add({{"state", state}}).Set(v);
  for (const auto& [key, v] : g.provisioned) provisioned_->Add({{"pool", key.first}, {"state", key.second}}).Set(v);
  for (const auto& [pool, v] : g.provision_cost) provision_cost_->Add({{"pool", pool}}).Set(v);
  sessions_open_->Set(g.sessions_open);
  allocations_watched_->Set(g.allocations_watched);
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

}  // namespace mlsched::server
