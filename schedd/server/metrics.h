// schedd's Prometheus metrics (prometheus-cpp model, text exposition). Counters and histograms are
// updated as events happen; gauges (jobs by state, GPUs by pool, nodes by state) are refreshed from
// the controller at each scrape. Thread-safe (prometheus-cpp metrics are atomic).
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace mlsched::server {

class SchedMetrics {
 public:
  SchedMetrics();
  /// Queue wait of a job at its start, seconds; accelerator = GPU type or "cpu".
  void ObserveQueueWait(const std::string& partition, const std::string& accelerator, double seconds);
  /// A job went back to PENDING; reason = NodeFail, Preempted, Evicted, LaunchFailedRequeue.
  void CountRequeue(const std::string& reason);
  void CountEviction();
  /// A node's agent reported failing health checks (agentd/health.h) and schedd drained it:
  /// mlsched_node_health_drains_total{check} for each failing check (gpu, ecc, xid, disk, clock, program).
  void CountHealthDrain(const std::string& check);
  /// A running job was chosen as a QoS preemption victim (signalled).
  void CountPreemption();
  void CountJobEnd(const std::string& state);
  void ObserveCycle(double seconds);
  /// An input refused for security: reason = "authentication" (bad or missing MUNGE credential,
  /// foreign node certificate) or "agent_message" (an agent reporting on a task not placed on it).
  void CountRejected(const std::string& reason);
  /// A stored job row or spec refused as if a client had sent it (Controller::QuarantineLocked).
  void CountQuarantined();
  /// A request or agent stream that failed inside schedd (a store error such as a full disk); it was
  /// answered with an error and schedd kept serving.
  void CountInternalError();
  /// Provisioning ([provisioning.POOL]): `nodes` nodes of `pool` requested, registered, failed (not
  /// registered within resume_timeout) or released (idle, drained or down, given to suspend_program).
  void CountProvision(const std::string& pool, const std::string& event, double nodes);
  /// Bytes an interactive session relayed: direction "in" (to the remote process) or "out".
  void CountSessionBytes(const std::string& direction, double bytes);
  /// Work a requeue lost (since the job's last checkpoint), by requeue reason: seconds of the job
  /// and GPU-seconds (those seconds x the GPUs it held).
  void CountLostWork(const std::string& reason, double seconds, double gpu_seconds);
  /// The idle-GPU policy ([idle]) acted on a job: action = notify, requeue or cancel.
  void CountIdleGpuAction(const std::string& action);
  /// Gauges: replaced wholesale at each scrape.
  struct Gauges {
    std::map<std::pair<std::string, std::string>, double> jobs;  // (state, partition) -> count
    std::map<std::string, double> running_gpus;                 // pool -> GPUs held by running tasks
    std::map<std::string, double> busy_gpus;                    // pool -> those GPUs x their NVML utilization
    double idle_gpu_jobs = 0;        // running jobs the idle-GPU policy flagged (mlq's IDLE)
    double idle_gpus = 0;            // GPUs those jobs hold
    double leader = 1;               // 1: this schedd serves (HA: the elected leader, its state loaded)
    std::map<std::string, double> nodes;                        // node state -> count
    std::map<std::pair<std::string, std::string>, double> provisioned;  // (pool, requested|registered) -> nodes
    std::map<std::string, double> provision_cost;               // pool -> cost per hour of its created nodes
    double sessions_open = 0;        // interactive sessions relayed now (SessionRelay::Open)
    double allocations_watched = 0;  // allocations bound to a live client (AllocationWatch::Watched)
  };
  /// Sets the gauges and returns the text exposition of every metric.
  std::string Render(const Gauges& g);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Histogram>* wait_;
  prometheus::Family<prometheus::Counter>* requeues_;
  prometheus::Family<prometheus::Counter>* health_drains_;
  prometheus::Family<prometheus::Counter>* job_ends_;
  prometheus::Counter* evictions_;
  prometheus::Counter* preemptions_;
  prometheus::Family<prometheus::Counter>* rejected_;
  prometheus::Counter* internal_errors_;
  prometheus::Counter* quarantined_;
  prometheus::Histogram* cycle_;
  prometheus::Family<prometheus::Gauge>* jobs_;
  prometheus::Family<prometheus::Gauge>* gpus_;
  prometheus::Family<prometheus::Gauge>* nodes_;
  prometheus::Family<prometheus::Counter>* provision_;
  prometheus::Family<prometheus::Gauge>* provisioned_;
  prometheus::Family<prometheus::Gauge>* provision_cost_;
  prometheus::Family<prometheus::Counter>* session_bytes_;
  prometheus::Family<prometheus::Counter>* idle_actions_;
  prometheus::Family<prometheus::Counter>* lost_work_;
  prometheus::Family<prometheus::Counter>* lost_gpu_work_;
  prometheus::Gauge* leader_;
  prometheus::Family<prometheus::Gauge>* busy_gpus_;
  prometheus::Gauge* idle_gpu_jobs_;
  prometheus::Gauge* idle_gpus_;
  prometheus::Gauge* sessions_open_;
  prometheus::Gauge* allocations_watched_;
  std::mutex mu_;  // Render: the gauge reset + refill is one step
};

}  // namespace mlsched::server
