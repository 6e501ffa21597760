// QoS preemption in the simulator: the core's PreemptDecisions are applied (victims stop after
// their grace time, lose the work since their last checkpoint and are requeued keeping their
// submit time), checkpoints reach the core, checkpoint-aware victim choice loses no more work than
// youngest-first, and the policy file's preemption keys (read by schedd's loader, as mlsim does).
#include <catch2/catch.hpp>

#include <string>

#include "schedd/sim/metrics.h"
#include "schedd/sim/preemption_workload.h"
#include "schedd/sim/sim_config.h"
#include "schedd/sim/simulator.h"
#include "test_util.h"

using namespace mlsched::sim;
using mlsched::core::Duration;
using mlsched::core::JobState;
using mlsched::core::VictimOrder;
using mlsched::sim::testing::CpuJob;
using mlsched::sim::testing::WriteTemp;

namespace {

/// A gang of `gpus` one-GPU tasks in `qos`, checkpointing every `checkpoint` s (0 = never).
TraceJob GpuJob(mlsched::core::JobId id, mlsched::core::Timestamp submit, Duration run,
                int64_t gpus, const std::string& qos, Duration checkpoint) {
  TraceJob j = CpuJob(id, submit, run, 1);
  j.spec.ntasks = static_cast<int32_t>(gpus);
  j.spec.per_task.gpus[""] = 1;
  j.spec.qos = qos;
  j.size = gpus;
  j.accelerator = "gpu";
  j.checkpoint_interval_s = checkpoint;
  return j;
}

Trace MakeTrace(std::vector<TraceJob> jobs) {
  Trace t;
  t.name = "test";
  t.format = "synthetic";
  t.jobs = std::move(jobs);
  FinalizeTrace(t);
  return t;
}

/// "high" may preempt "low"; GPU-only billing; victims get `grace` seconds.
mlsched::core::PolicySet TwoQos(Duration grace, const std::string& order = "least-lost-work") {
  const std::string path = WriteTemp("qos-" + order + "-" + std::to_string(grace) + ".toml",
                                     "default_qos = \"low\"\n"
                                     "[preemption]\nvictim_order = \"" + order + "\"\n"
                                     "[fairshare]\nbilling_weights = { cpu = 0.0, gpu = 1.0 }\n"
                                     "[[qos]]\nname = \"high\"\npreempt = [\"low\"]\n"
                                     "[[qos]]\nname = \"low\"\ngrace_time = " +
                                         std::to_string(grace) + "\n");
  return *ReadPolicy(path).policy;
}

SimOptions WithPolicy(mlsched::core::PolicySet policy) {
  SimOptions o;
  o.policy = std::move(policy);
  return o;
}

}  // namespace

TEST_CASE("a preempted job loses the work since its last checkpoint and keeps its submit time",
          "[sim][preemption]") {
  // 8 GPUs. Low A (8 GPUs, 3000 s, checkpoint every 600 s) from 0; high H (8 GPUs, 500 s) at 1000.
  const Fleet fleet = UniformFleet(1, 64, 512, 8, "a100");
  const Trace t = MakeTrace({GpuJob(1, 0, 3000, 8, "low", 600), GpuJob(2, 1000, 500, 8, "high", 0)});

  SECTION("no grace: stops at once, 400 s since the checkpoint at 600 are lost") {
    SimResult r = Simulate(t, fleet, WithPolicy(TwoQos(0)));
    REQUIRE(r.preemptions == 1);
    REQUIRE(r.preemption_log.size() == 1);
    const PreemptionRecord& p = r.preemption_log[0];
    CHECK(p.victim == 1);
    CHECK(p.preemptor == 2);
    CHECK(p.decided == 1000);
    CHECK(p.stopped == 1000);
    CHECK(p.planned_lost_s == 400);  // the core saw last_checkpoint = 600
    CHECK(p.lost_s == 400);
    const JobOutcome& a = r.jobs[0];
    CHECK(a.lost_preemption_s == 400);
    CHECK(a.lost_eviction_s == 0);
    CHECK(a.lost_resource_hours == Approx(8 * 400 / 3600.0));
    CHECK(a.preemptions == 1);
    CHECK(a.attempts == 2);
    CHECK(a.submit == 0);  // requeued keeping its submit time
    CHECK(r.jobs[1].first_start == 1000);
    // A resumes at 1500 from its checkpoint (600 s done): 2400 s more.
    CHECK(a.end == 3900);
    CHECK(a.state == JobState::kCompleted);
    CHECK(a.busy_s == a.run_time + a.lost_preemption_s);
    CHECK(ComputeMetrics(r).lost_preemption_resource_hours == Approx(8 * 400 / 3600.0));
  }
  SECTION("60 s grace: the victim runs on until SIGKILL and the preemptor waits for it") {
    SimResult r = Simulate(t, fleet, WithPolicy(TwoQos(60)));
    REQUIRE(r.preemption_log.size() == 1);
    CHECK(r.preemption_log[0].stopped == 1060);
    CHECK(r.preemption_log[0].planned_lost_s == 400);
    CHECK(r.preemption_log[0].lost_s == 460);
    CHECK(r.jobs[1].first_start == 1060);
    CHECK(r.jobs[0].end == 1560 + 2400);
  }
  SECTION("a periodic checkpoint inside the grace time saves the work before it") {
    SimResult r = Simulate(t, fleet, WithPolicy(TwoQos(300)));  // checkpoint at 1200, stop 1300
    REQUIRE(r.preemption_log.size() == 1);
    CHECK(r.preemption_log[0].lost_s == 100);
    CHECK(r.jobs[0].end == 1300 + 500 + 1800);  // resumes from 1200 s of progress
  }
  SECTION("preempt mode cancel: the victim ends CANCELLED and never finishes") {
    mlsched::core::PolicySet policy = TwoQos(0);
    policy.qos[1].preempt_mode = mlsched::core::PreemptMode::kCancel;
    SimResult r = Simulate(t, fleet, WithPolicy(policy));
    REQUIRE(r.preemption_log.size() == 1);
    CHECK(r.preemption_log[0].cancelled);
    CHECK(r.jobs[0].state == JobState::kCancelled);
    CHECK(r.jobs[0].end == -1);
    CHECK(r.jobs[1].end == 1500);
    CHECK(ComputeMetrics(r).unfinished == 1);
  }
}

TEST_CASE("checkpoint-aware victims lose less than youngest-first on a hand-built case",
          "[sim][preemption]") {
  // 8 GPUs. Low A (4 GPUs, checkpoint every 300 s) from 0; low B (4 GPUs, never checkpoints) from
  // 100; high H (4 GPUs) at 1000. Least lost work: A (100 s since its checkpoint at 900) rather
  // than B (900 s since its start). Youngest first: B.
  const Fleet fleet = UniformFleet(1, 64, 512, 8, "a100");
  const Trace t = MakeTrace({GpuJob(1, 0, 5000, 4, "low", 300), GpuJob(2, 100, 5000, 4, "low", 0),
                             GpuJob(3, 1000, 600, 4, "high", 0)});
  const SimResult aware = Simulate(t, fleet, WithPolicy(TwoQos(0, "least-lost-work")));
  const SimResult young = Simulate(t, fleet, WithPolicy(TwoQos(0, "youngest-first")));
  REQUIRE(aware.preemption_log.size() == 1);
  REQUIRE(young.preemption_log.size() == 1);
  CHECK(aware.preemption_log[0].victim == 1);
  CHECK(aware.preemption_log[0].lost_s == 100);
  CHECK(young.preemption_log[0].victim == 2);
  CHECK(young.preemption_log[0].lost_s == 900);
  CHECK(ComputeMetrics(aware).lost_preemption_resource_hours ==
        Approx(4 * 100 / 3600.0));
  CHECK(ComputeMetrics(young).lost_preemption_resource_hours == Approx(4 * 900 / 3600.0));
}

TEST_CASE("on a generated spot workload, lost work is accounted exactly and checkpoint-aware "
          "victims lose no more than youngest-first",
          "[sim][preemption]") {
  // 32 GPUs: 2 on-demand and 2 spot nodes of 8; the spot nodes are evicted ~ every 5 hours.
  Fleet fleet = UniformFleet(4, 64, 512, 8, "a100");
  for (size_t n = 2; n < 4; ++n) {
    fleet.nodes[n].pool = mlsched::core::Pool::kSpot;
    fleet.eviction_rate_per_hour[n] = 0.2;
    fleet.recovery_s[n] = 1800;
  }
  PreemptionWorkload w;
  w.jobs = 150;
  w.capacity_gpus = 32;
  w.low_sizes = {1, 2, 4, 8};
  w.seed = 11;
  const Trace t = MakePreemptionTrace(w);
  REQUIRE(t.jobs.size() == 150);
  double lost_by_order[2] = {0, 0};
  for (int o = 0; o < 2; ++o) {
    SimOptions options = WithPolicy(TwoQos(0, o == 0 ? "least-lost-work" : "youngest-first"));
    options.seed = 3;
    const SimResult r = Simulate(t, fleet, options);
    REQUIRE(r.preemptions > 0);
    REQUIRE(r.evictions > 0);
    Duration logged = 0;
    for (const PreemptionRecord& p : r.preemption_log) {
      CHECK(p.lost_s == p.planned_lost_s);  // no grace: the core's view is the simulator's
      logged += p.lost_s;
    }
    Duration summed = 0;
    for (const JobOutcome& j : r.jobs) {
      CHECK(j.end > 0);
      CHECK(j.attempts == 1 + j.evictions + j.preemptions);
      // Work conservation: time held = useful run + work lost to either cause.
      CHECK(j.busy_s == j.run_time + j.lost_preemption_s + j.lost_eviction_s);
      summed += j.lost_preemption_s;
    }
    CHECK(summed == logged);
    const Metrics m = ComputeMetrics(r);
    CHECK(m.lost_resource_hours ==
          Approx(m.lost_preemption_resource_hours + m.lost_eviction_resource_hours));
    lost_by_order[o] = m.lost_preemption_resource_hours;
    // Deterministic: the same run again gives the same preemptions.
    const SimResult again = Simulate(t, fleet, options);
    REQUIRE(again.preemption_log.size() == r.preemption_log.size());
    for (size_t i = 0; i < r.preemption_log.size(); ++i) {
      CHECK(again.preemption_log[i].victim == r.preemption_log[i].victim);
      CHECK(again.preemption_log[i].stopped == r.preemption_log[i].stopped);
    }
  }
  CHECK(lost_by_order[0] <= lost_by_order[1]);
}

TEST_CASE("policy file: QoS preemption keys and victim_order", "[sim][preemption][policy]") {
  const std::string good = WriteTemp("preempt-good.toml",
                                     "default_qos = \"low\"\n"
                                     "[preemption]\nvictim_order = \"youngest-first\"\n"
                                     "[[qos]]\nname = \"high\"\npreempt = [\"low\", \"scavenger\"]\n"
                                     "[[qos]]\nname = \"low\"\npreempt = [\"scavenger\"]\n"
                                     "preempt_mode = \"cancel\"\ngrace_time = \"30s\"\n"
                                     "preempt_exempt_time = \"10m\"\nmax_preemptions = 2\n"
                                     "[[qos]]\nname = \"scavenger\"\n");
  mlsched::core::PolicySet p = *ReadPolicy(good).policy;
  CHECK(p.victim_order == VictimOrder::kYoungestFirst);
  REQUIRE(p.qos.size() == 3);
  CHECK(p.qos[0].preempt == std::vector<std::string>{"low", "scavenger"});
  CHECK(p.qos[1].preempt_mode == mlsched::core::PreemptMode::kCancel);
  CHECK(p.qos[1].grace_time == 30);
  CHECK(p.qos[1].preempt_exempt_time == 600);
  CHECK(p.qos[1].max_preemptions == 2);
  CHECK(p.qos[2].grace_time == 60);  // the core's default
  CHECK(DescribeSchedulingPolicy(p) == "fifo, youngest-first victims");
  SetVictimOrder(p, "least-lost-work");  // mlsim --victim-order
  CHECK(p.victim_order == VictimOrder::kLeastLostWork);
  CHECK_THROWS_AS(SetVictimOrder(p, "oldest-first"), std::invalid_argument);
  CHECK(ReadPolicy(WriteTemp("no-order.toml", "[scheduler]\nqueue_order = \"fifo\"\n")).policy->victim_order ==
        VictimOrder::kLeastLostWork);

  auto error_of = [](const std::string& name, const std::string& text) -> std::string {
    const std::string path = WriteTemp(name, text);
    try {
      ReadPolicy(path);
    } catch (const std::runtime_error& e) {
      std::string what = e.what();
      CHECK(what.find(path) != std::string::npos);  // every error names the file
      return what;
    }
    return "";
  };
  CHECK_THAT(error_of("bad-order.toml", "[preemption]\nvictim_order = \"oldest-first\"\n"),
             Catch::Contains("bad-order.toml:2:") && Catch::Contains("victim_order") &&
                 Catch::Contains("oldest-first"));
  CHECK_THAT(error_of("int-order.toml", "[preemption]\nvictim_order = 3\n"), Catch::Contains("victim_order"));
  CHECK_THAT(error_of("unknown-qos.toml", "default_qos = \"high\"\n[[qos]]\nname = \"high\"\npreempt = [\"nope\"]\n"),
             Catch::Contains("preempt names 'nope', which is not a defined QoS"));
  CHECK_THAT(error_of("cycle.toml", "default_qos = \"a\"\n[[qos]]\nname = \"a\"\npreempt = [\"b\"]\n"
                                    "[[qos]]\nname = \"b\"\npreempt = [\"a\"]\n"),
             Catch::Contains("can preempt itself"));
  CHECK_THAT(error_of("bad-mode.toml", "default_qos = \"a\"\n[[qos]]\nname = \"a\"\npreempt_mode = \"suspend\"\n"),
             Catch::Contains("bad-mode.toml:4:") && Catch::Contains("preempt_mode"));
  CHECK_THAT(error_of("bad-grace.toml", "default_qos = \"a\"\n[[qos]]\nname = \"a\"\ngrace_time = -1\n"),
             Catch::Contains("bad-grace.toml:4:") && Catch::Contains("grace_time"));
}
