// Node failures and hangs in the simulator (SimOptions::faults): blind retry against health
// checks and the gang watchdog (drain_after), on a small GPU fleet with bad nodes.
#include <catch2/catch.hpp>

#include "schedd/sim/fleet.h"
#include "schedd/sim/metrics.h"
#include "schedd/sim/simulator.h"
#include "test_util.h"

using namespace mlsched::sim;
using mlsched::core::Duration;
using mlsched::sim::testing::CpuJob;

namespace {

/// `count` 2-node gangs of 8 GPUs per node, one every 10 min, each running `run` s (limit 2 x run),
/// checkpointing every 30 min.
Trace Gangs(int count, Duration run) {
  Trace t;
  t.name = "gangs";
  t.format = "synthetic";
  for (int i = 0; i < count; ++i) {
    TraceJob j = CpuJob(i + 1, i * 600, run, 1, 2 * run, "u" + std::to_string(i % 5));
    j.spec.ntasks = 2;
    j.spec.per_task.gpus[""] = 8;
    j.size = 16;
    j.accelerator = "gpu";
    j.checkpoint_interval_s = 1800;
    t.jobs.push_back(j);
  }
  FinalizeTrace(t);
  return t;
}

SimOptions Faulty(int32_t drain_after, double hang_fraction) {
  SimOptions o;
  o.seed = 7;
  o.faults.rate_per_node_hour = 0.0005;
  o.faults.bad_fraction = 0.25;
  o.faults.bad_rate_per_node_hour = 0.5;
  o.faults.hang_fraction = hang_fraction;
  o.faults.drain_after = drain_after;
  return o;
}

}  // namespace

TEST_CASE("bad nodes: health checks drain and repair them, losing far fewer GPU-hours than blind retry", "[sim][faults]") {
  const Fleet fleet = UniformFleet(16, 64, 512, 8, "a100");
  const Trace trace = Gangs(200, 4 * 3600);
  const SimResult blind = Simulate(trace, fleet, Faulty(0, 0.0));
  const SimResult health = Simulate(trace, fleet, Faulty(2, 0.0));
  const Metrics mb = ComputeMetrics(blind), mh = ComputeMetrics(health);
  INFO("blind: " << mb.lost_failure_resource_hours << " GPU-h lost, health: " << mh.lost_failure_resource_hours);
  CHECK(mb.node_failures > 0);
  CHECK(mb.health_drains == 0);
  CHECK(mh.health_drains >= 3);  // about 4 bad nodes of 16
  CHECK(mh.lost_failure_resource_hours < 0.5 * mb.lost_failure_resource_hours);
  CHECK(mb.unfinished == 0);
  CHECK(mh.unfinished == 0);
  // Every lost GPU-hour to failures is in the total.
  CHECK(mb.lost_resource_hours >= mb.lost_failure_resource_hours);
  // Deterministic: the same seed, the same failures.
  CHECK(ComputeMetrics(Simulate(trace, fleet, Faulty(0, 0.0))).lost_failure_resource_hours == mb.lost_failure_resource_hours);
}

TEST_CASE("hangs: without the watchdog a hung gang holds its nodes until its time limit", "[sim][faults]") {
  const Fleet fleet = UniformFleet(16, 64, 512, 8, "a100");
  const Trace trace = Gangs(100, 4 * 3600);
  const SimResult blind = Simulate(trace, fleet, Faulty(0, 1.0));
  const SimResult watched = Simulate(trace, fleet, Faulty(2, 1.0));
  const Metrics mb = ComputeMetrics(blind), mw = ComputeMetrics(watched);
  REQUIRE(mb.hangs > 0);
  REQUIRE(mw.hangs > 0);
  // Each blind hang holds 16 GPUs until the limit (8 h from the attempt's start); the watchdog
  // ends it after hang_detect_s (30.5 min).
  CHECK(mb.lost_failure_resource_hours / static_cast<double>(mb.hangs) > 2 * mw.lost_failure_resource_hours / static_cast<double>(mw.hangs));
  CHECK(mw.lost_failure_resource_hours < 0.5 * mb.lost_failure_resource_hours);
  CHECK(mb.unfinished == 0);
  CHECK(mw.unfinished == 0);
  for (const auto& j : watched.jobs) CHECK(j.state == mlsched::core::JobState::kCompleted);
}

TEST_CASE("node-failure settings out of range are refused", "[sim][faults]") {
  const Fleet fleet = UniformFleet(2, 8, 64, 0, "");
  SimOptions o;
  o.faults.hang_fraction = 1.5;
  CHECK_THROWS_WITH(Simulate(Gangs(1, 60), fleet, o), Catch::Contains("node-failure setting"));
}
