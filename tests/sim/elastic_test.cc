// mlsim's elastic gangs and elastic capacity (issue 16 point 5): an elastic job's end follows its
// speed-up at the size it runs with, grows planned by the core are executed as checkpoint +
// restart, provisioned nodes join after the boot delay and are billed until released, and
// nothing changes when these options are off.
#include <catch2/catch.hpp>

#include <cmath>
#include <sstream>

#include "schedd/sim/metrics.h"
#include "schedd/sim/report.h"
#include "schedd/sim/sim_config.h"
#include "schedd/sim/simulator.h"
#include "test_util.h"

using namespace mlsched::sim;
namespace core = mlsched::core;

namespace {

/// A gang of `ntasks` one-GPU tasks running `run` seconds at that size; elastic down to
/// `min_tasks` when it is above 0.
TraceJob GpuGang(core::JobId id, core::Timestamp submit, core::Duration run, int32_t ntasks,
                 int32_t min_tasks = 0) {
  TraceJob j;
  j.id = id;
  j.submit_time = submit;
  j.run_time = run;
  j.requested_time = run;
  j.spec.time_limit = run;
  j.spec.user = j.spec.account = "u1";
  j.spec.ntasks = ntasks;
  j.spec.per_task.cpu_millis = 1000;
  j.spec.per_task.gpus[""] = 1;
  j.spec.elastic.min_tasks = min_tasks;
  j.size = ntasks;
  j.accelerator = "gpu";
  j.origin = "test:" + std::to_string(id);
  return j;
}

Trace MakeTrace(std::vector<TraceJob> jobs) {
  Trace t;
  t.name = "test";
  t.format = "philly";
  t.jobs = std::move(jobs);
  FinalizeTrace(t);
  return t;
}

/// `count` nodes of 32 cores and `gpus` V100s in `pool`, named PREFIX-000...
void AddNodes(Fleet& fleet, const std::string& prefix, int count, int gpus, core::Pool pool, double rate,
              core::Duration recovery) {
  for (int i = 0; i < count; ++i) {
    core::Node n;
    n.name = prefix + "-" + std::to_string(i);
    n.pool = pool;
    n.capacity.cpu_millis = 32000;
    n.capacity.memory_bytes = int64_t{256} << 30;
    n.capacity.gpus["v100"] = gpus;
    fleet.nodes.push_back(n);
    fleet.eviction_rate_per_hour.push_back(rate);
    fleet.recovery_s.push_back(recovery);
  }
}

}  // namespace

TEST_CASE("an elastic gang starts at the size that fits and runs at the linear speed-up", "[sim][elastic]") {
  // One 4-GPU node. A (rigid, 2 GPUs, 1000 s) starts first; B (4 tasks traced, 1000 s, elastic
  // 2..4) starts beside it at 2 tasks: half the rate, so 2000 s (grows are off).
  Fleet fleet;
  AddNodes(fleet, "n", 1, 4, core::Pool::kOnDemand, 0, 0);
  SimOptions options;
  options.policy.elastic.grow = false;
  SimResult r = Simulate(MakeTrace({GpuGang(1, 0, 1000, 2), GpuGang(2, 0, 1000, 4, 2)}), fleet, options);
  CHECK(r.elastic_jobs == 1);
  CHECK(r.jobs[1].first_start == 0);
  CHECK(r.jobs[1].end == 2000);
  CHECK(r.jobs[1].resource_s == Approx(2.0 * 2000));
  CHECK(r.resizes == 0);
  // Rigid, B waits for A: the same end with a linear speed-up, 1000 s of waiting instead.
  SimResult rigid = Simulate(MakeTrace({GpuGang(1, 0, 1000, 2), GpuGang(2, 0, 1000, 4)}), fleet, options);
  CHECK(rigid.jobs[1].first_start == 1000);
  CHECK(rigid.jobs[1].end == 2000);
  CHECK(rigid.jobs[1].resource_s == -1);
}

TEST_CASE("a grow the core plans is executed as checkpoint and restart at the larger size", "[sim][elastic]") {
  // As above with grows on: when A ends at 1000, B (2 tasks, 500 traced seconds done) has run
  // past min_resize_interval (600) and the gain 1000 x (1 - 2/4) = 500 s beats restart_cost 60:
  // it checkpoints (nothing lost), restarts at 4 tasks at 1000, spends 60 s restarting and
  // finishes its 500 remaining seconds at full rate: end 1560 (rigid: 2000).
  Fleet fleet;
  AddNodes(fleet, "n", 1, 4, core::Pool::kOnDemand, 0, 0);
  SimOptions options;
  SimResult r = Simulate(MakeTrace({GpuGang(1, 0, 1000, 2), GpuGang(2, 0, 1000, 4, 2)}), fleet, options);
  REQUIRE(r.resizes == 1);
  const JobOutcome& b = r.jobs[1];
  CHECK(b.resizes == 1);
  REQUIRE(b.runs.size() == 2);
  CHECK(b.runs[0].start == 0);
  CHECK(b.runs[0].end == 1000);
  CHECK(b.runs[1].start == 1000);
  CHECK(b.end == 1560);
  CHECK(b.lost_eviction_s == 0);
  CHECK(b.lost_resize_resource_hours == Approx(4.0 * 60 / 3600));
  CHECK(b.lost_resource_hours == Approx(4.0 * 60 / 3600));
  CHECK(b.resource_s == Approx(2.0 * 1000 + 4.0 * 560));
  const Metrics m = ComputeMetrics(r);
  CHECK(m.resizes == 1);
  CHECK(m.mean_response_s == Approx((1000.0 + 1560.0) / 2));
}

TEST_CASE("a spot eviction shrinks an elastic gang and its end follows the linear speed-up", "[sim][elastic]") {
  // Two 2-GPU nodes, the second spot (10 evictions per hour, down 10^6 s once evicted). The
  // 4-task elastic job (2..4, 3600 s, checkpoints every 100 s) starts on both; evicted at T it
  // keeps floor(T / 100) x 100 s of work and restarts at once at 2 tasks on the on-demand node,
  // at half the rate: end = T + 2 x (3600 - saved). Rigid, it waits for the spot node's recovery.
  Fleet fleet;
  AddNodes(fleet, "od", 1, 2, core::Pool::kOnDemand, 0, 0);
  AddNodes(fleet, "spot", 1, 2, core::Pool::kSpot, 10.0, 1000000);
  SimOptions options;
  options.checkpoint_interval_s = 100;
  options.seed = 7;
  SimResult r = Simulate(MakeTrace({GpuGang(1, 0, 3600, 4, 2)}), fleet, options);
  const JobOutcome& j = r.jobs[0];
  REQUIRE(j.evictions == 1);
  REQUIRE(j.runs.size() == 2);
  const core::Timestamp t = j.runs[0].end;
  const core::Duration saved = t / 100 * 100;
  CHECK(j.runs[1].start == t);
  CHECK(j.end == t + 2 * (3600 - saved));
  CHECK(j.lost_eviction_s == t - saved);
  CHECK(j.lost_resource_hours == Approx(4.0 * static_cast<double>(t - saved) / 3600));
  CHECK(j.resource_s == Approx(4.0 * static_cast<double>(t) + 2.0 * static_cast<double>(j.end - t)));
  SimResult rigid = Simulate(MakeTrace({GpuGang(1, 0, 3600, 4)}), fleet, options);
  REQUIRE(rigid.jobs[0].runs.size() >= 2);  // evicted again after the recovery
  CHECK(rigid.jobs[0].runs[0].end == t);  // same seed, same eviction
  CHECK(rigid.jobs[0].runs[1].start >= t + 1000000);
}

TEST_CASE("a sub-linear speed-up curve sets the rate at a smaller size", "[sim][elastic]") {
  // Exponent 0.5: at 1 of 4 tasks the job advances (1/4)^0.5 = 0.5 traced seconds per second.
  Fleet fleet;
  AddNodes(fleet, "n", 1, 4, core::Pool::kOnDemand, 0, 0);
  SimOptions options;
  options.policy.elastic.grow = false;
  options.speedup_exponent = 0.5;
  SimResult r = Simulate(MakeTrace({GpuGang(1, 0, 1000, 3), GpuGang(2, 0, 1000, 4, 1)}), fleet, options);
  CHECK(r.jobs[1].first_start == 0);
  CHECK(r.jobs[1].end == 2000);
  options.speedup_exponent = 0.01;
  CHECK_THROWS_WITH(Simulate(MakeTrace({GpuGang(1, 0, 10, 1)}), fleet, options), Catch::Contains("speedup_exponent"));
}

namespace {

// A spot pool creating nodes shaped like `like`: at most `max_nodes`, idle_time 300 s.
core::ProvisioningPolicy SpotPoolLike(const core::Node& like, int32_t max_nodes, core::Duration resume_timeout) {
  core::ProvisioningPolicy pool;
  pool.pool = core::Pool::kSpot;
  pool.resume_program = pool.suspend_program = "/bin/true";
  pool.max_nodes = max_nodes;
  pool.idle_time = 300;
  pool.resume_timeout = resume_timeout;
  pool.shape = like;
  pool.shape.name.clear();
  pool.shape.pool = core::Pool::kSpot;
  return pool;
}

}  // namespace

TEST_CASE("provisioned nodes join after the boot delay and are billed until released idle", "[sim][provisioning]") {
  // One static 4-GPU node (unpriced) runs A (4 GPUs, 1000 s). B (4 GPUs, 500 s) waits: the spot
  // pool is asked for one node at 0, it joins at 120 (boot delay), B runs 120..620, the node is
  // idle from 620 and released at 920 (idle_time 300). Billed 0..920 at 4 GPUs x 1.0 per hour.
  Fleet fleet;
  AddNodes(fleet, "od", 1, 4, core::Pool::kOnDemand, 0, 0);
  SimOptions options;
  options.policy.provisioning.push_back(SpotPoolLike(fleet.nodes[0], 2, 600));
  options.policy.placement.pricing["spot"].gpu_hour["v100"] = 1.0;
  options.boot_delay_s = 120;
  SimResult r = Simulate(MakeTrace({GpuGang(1, 0, 1000, 4), GpuGang(2, 0, 500, 4)}), fleet, options);
  CHECK(r.jobs[1].first_start == 120);
  CHECK(r.jobs[1].end == 620);
  REQUIRE(r.pools.count("spot/provisioned") == 1);
  const PoolUsage& spot = r.pools.at("spot/provisioned");
  CHECK(spot.requested == 1);
  CHECK(spot.released == 1);
  CHECK(spot.failed == 0);
  CHECK(spot.node_hours == Approx(920.0 / 3600));
  CHECK(spot.cost == Approx(4.0 * 920 / 3600));
  CHECK(spot.peak_cost_per_hour == Approx(4.0));
  const PoolUsage& od = r.pools.at("on-demand/static");
  CHECK(od.static_nodes == 1);
  CHECK(od.node_hours == Approx(1000.0 / 3600));
  CHECK(od.cost == 0);
  // Offered: 4 GPUs x 1000 s static + 4 x (920 - 120) provisioned; held 4 x 1000 + 4 x 500.
  CHECK(r.capacity_s == Approx(4.0 * 1000 + 4.0 * 800));
  const Metrics m = ComputeMetrics(r);
  CHECK(m.utilization == Approx(6000.0 / 7200));
  CHECK(m.cost == Approx(4.0 * 920 / 3600));
}

TEST_CASE("a node that boots later than resume_timeout is released as failed and never used", "[sim][provisioning]") {
  Fleet fleet;
  AddNodes(fleet, "od", 1, 4, core::Pool::kOnDemand, 0, 0);
  SimOptions options;
  options.policy.provisioning.push_back(SpotPoolLike(fleet.nodes[0], 1, 100));
  options.boot_delay_s = 300;  // later than resume_timeout: every request fails
  SimResult r = Simulate(MakeTrace({GpuGang(1, 0, 1000, 4), GpuGang(2, 0, 500, 4)}), fleet, options);
  CHECK(r.jobs[1].first_start == 1000);  // on the static node once A ended
  const PoolUsage& spot = r.pools.at("spot/provisioned");
  CHECK(spot.failed >= 1);
  CHECK(spot.failed == spot.requested);
}

TEST_CASE("with the new options off a rigid replay reports exactly what it did before", "[sim][elastic]") {
  Fleet fleet;
  AddNodes(fleet, "od", 1, 4, core::Pool::kOnDemand, 0, 0);
  AddNodes(fleet, "spot", 1, 4, core::Pool::kSpot, 2.0, 600);
  Trace t = MakeTrace({GpuGang(1, 0, 3000, 4), GpuGang(2, 10, 2000, 8), GpuGang(3, 20, 500, 2)});
  SimOptions a;
  a.checkpoint_interval_s = 300;
  SimOptions b = a;
  b.speedup_exponent = 0.5;  // only elastic jobs read these
  b.boot_delay_s = 999;
  auto json = [&](const SimOptions& o) {
    SimResult r = Simulate(t, fleet, o);
    std::ostringstream out;
    WriteJson(out, RunInfo{}, r, ComputeMetrics(r));
    WriteJobsCsv(out, r);
    return out.str();
  };
  const std::string text = json(a);
  CHECK(text == json(b));
  for (const char* key : {"resizes", "cost", "pools", "elastic_jobs"}) {
    CHECK(text.find(std::string("\"") + key + "\"") == std::string::npos);
  }
}

TEST_CASE("mlsim --elastic turns multi-task gangs into ranges and checks its fraction", "[sim][elastic]") {
  Trace t = MakeTrace({GpuGang(1, 0, 10, 1), GpuGang(2, 0, 10, 4), GpuGang(3, 0, 10, 7), GpuGang(4, 0, 10, 2)});
  MakeElastic(t, 0.5);
  CHECK(t.jobs[0].spec.elastic.min_tasks == 0);  // one task: rigid
  CHECK(t.jobs[1].spec.elastic.min_tasks == 2);
  CHECK(t.jobs[2].spec.elastic.min_tasks == 4);  // ceil(3.5)
  CHECK(t.jobs[3].spec.elastic.min_tasks == 1);
  CHECK(t.jobs[3].spec.elastic.step == 1);
  CHECK_THROWS_WITH(MakeElastic(t, 0), Catch::Contains("outside (0, 1]"));
  CHECK_THROWS_WITH(MakeElastic(t, 1.5), Catch::Contains("outside (0, 1]"));
}

TEST_CASE("cluster files give provisioned pools an eviction rate and reject bad ones", "[sim][provisioning]") {
  const std::string nodes = "[[nodes]]\ncount = 1\ngpus = 4\n";
  Fleet f = ReadClusterFile(testing::WriteTemp("prov-ok.toml", nodes + "[provisioned.spot]\neviction_rate_per_hour = 0.5\n"));
  CHECK(f.provisioned_eviction_rate_per_hour.at(core::Pool::kSpot) == 0.5);
  CHECK_THROWS_WITH(
      ReadClusterFile(testing::WriteTemp("prov-od.toml", nodes + "[provisioned.on-demand]\neviction_rate_per_hour = 1.0\n")),
      Catch::Contains("above 0 only for spot"));
  CHECK_THROWS_WITH(
      ReadClusterFile(testing::WriteTemp("prov-big.toml", nodes + "[provisioned.spot]\neviction_rate_per_hour = 1000.0\n")),
      Catch::Contains("0..60"));
  CHECK_THROWS_WITH(ReadClusterFile(testing::WriteTemp("prov-key.toml", nodes + "[provisioned.spot]\nrate = 1.0\n")),
                    Catch::Contains("unknown key 'rate'"));
  CHECK_THROWS_WITH(ReadClusterFile(testing::WriteTemp("prov-pool.toml", nodes + "[provisioned.cheap]\n")),
                    Catch::Contains("unknown pool"));
}

TEST_CASE("an elastic replay on a provisioned spot fleet is deterministic and within its budget", "[sim][elastic][provisioning]") {
  // bench/sim/elastic.sh's provisioned configuration on the Pollux workload in tests/data.
  const std::string bench = std::string(MLSCHED_SIM_POLICY_DIR) + "/../../../bench/sim/elastic";
  SimConfig c;
  c.trace_path = testing::DataDir() + "/traces/pollux-workload-1.csv";
  c.app_runtimes_path = bench + "/apps.toml";
  c.cluster_path = bench + "/fleet-provisioned.toml";
  c.policy_path = bench + "/policy-provisioned.toml";
  c.checkpoint_interval_s = 1800;
  c.seed = 3;
  c.elastic_min_fraction = 0.25;
  c.speedup_exponent = 0.7;
  auto render = [](const SimConfig& config) {
    Replay r = RunReplay(config);
    std::ostringstream out;
    WriteJson(out, r.info, r.result, r.metrics);
    return out.str();
  };
  const std::string first = render(c);
  CHECK(render(c) == first);
  Replay r = RunReplay(c);
  CHECK(r.metrics.finished == r.metrics.jobs);
  CHECK(r.result.elastic_jobs > 0);
  const PoolUsage& spot = r.result.pools.at("spot/provisioned");
  CHECK(spot.requested > 0);
  CHECK(spot.peak_cost_per_hour > 0);
  CHECK(spot.peak_cost_per_hour <= 21.6 + 1e-9);  // the policy's max_cost_per_hour
  CHECK(r.result.capacity_s > 0);
  CHECK(r.metrics.utilization <= 1.0);
}
