// agentd's Prometheus metrics (prometheus-cpp model, text exposition; served by
// common/metrics_http.h on --metrics-port). Counters are updated by the agent as tasks start and
// exit and eviction notices arrive; gauges (connection, running tasks, capacity) are set per scrape.
// Thread-safe.
#pragma once

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "agentd/node_info.h"

namespace mlsched::agent {

class AgentMetrics {
 public:
  /// Every series carries the labels node and pool of `node`; capacity gauges come from it too.
  explicit AgentMetrics(const NodeIdentity& node);
  void CountTaskStarted();
  /// outcome: "completed" (exit 0), "preempted" (exit 75), "failed" (other code), "signaled".
  void CountTaskExit(const std::string& outcome);
  void CountEvictionNotice();
  /// A scheduler message refused because its epoch is below the highest seen (a deposed leader).
  void CountStaleEpoch();
  /// The tasks were stopped because no controller was reachable for --cutoff-timeout.
  void CountCutoff();
  /// An image pulled and unpacked into the node's cache (seconds: fetch + unpack).
  void ObserveImagePull(double seconds);
  /// A round of health checks found `check` failing (agentd/health.h: gpu, ecc, xid, disk, clock,
  /// program): mlsched_node_health_failures_total{check}.
  void CountHealthFailure(const std::string& check);
  /// The last round's verdict: mlsched_node_healthy 1 (every check passed) or 0.
  void SetHealthy(bool healthy);
  /// The highest controller epoch seen.
  void SetEpoch(int64_t epoch);
  /// What the running tasks use, from a heartbeat's samples (cgroups, NVML): their memory
  /// (bytes, summed), CPU time so far (seconds, summed), the mean GPU utilization of those with
  /// GPUs (percent; -1 = none measured) and their GPUs' power (watts, summed).
  struct TaskUsage {
    double memory_bytes = 0, cpu_seconds = 0, gpu_util_percent = -1, gpu_power_watts = 0;
  };
  void SetTaskUsage(const TaskUsage& u);
  /// Sets the per-scrape gauges and returns the text exposition of every metric.
  std::string Render(bool connected, size_t running_tasks);

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Counter* started_;
  prometheus::Family<prometheus::Counter>* exits_;
  prometheus::Counter* notices_;
  prometheus::Counter* stale_epoch_;
  prometheus::Counter* cutoffs_;
  prometheus::Gauge* epoch_;
  prometheus::Family<prometheus::Counter>* health_failures_;
  prometheus::Gauge* healthy_;
  prometheus::Counter* pulls_;
  prometheus::Counter* pull_seconds_;
  prometheus::Gauge* connected_;
  prometheus::Gauge* running_;
  prometheus::Gauge* task_memory_;
  prometheus::Gauge* task_cpu_;
  prometheus::Gauge* gpu_util_;
  prometheus::Gauge* gpu_power_;
  std::string node_, pool_;
  std::mutex mu_;
};

}  // namespace mlsched::agent
