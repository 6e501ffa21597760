// The event loop over the real core: FIFO starts, same-timestamp ordering, time limits,
// evictions with requeue and lost work, runtime predictions, determinism.
#include <catch2/catch.hpp>

#include <sstream>

#include "schedd/sim/report.h"
#include "schedd/sim/simulator.h"
#include "test_util.h"

using namespace mlsched::sim;
using mlsched::sim::testing::CpuJob;

namespace {
Trace MakeTrace(std::vector<TraceJob> jobs) {
  Trace t;
  t.name = "test";
  t.format = "swf";
  t.jobs = std::move(jobs);
  FinalizeTrace(t);
  return t;
}
}  // namespace

TEST_CASE("FIFO on a 4-processor pool: a blocked head holds back later jobs", "[sim]") {
  // A(4 cpus, 100 s) at 0; B(3, 50) at 5 waits for A; C(1, 10) at 6 waits behind B (no backfill).
  Trace t = MakeTrace({CpuJob(1, 0, 100, 4), CpuJob(2, 5, 50, 3), CpuJob(3, 6, 10, 1)});
  Fleet fleet = UniformFleet(1, 4, 16, 0, "gpu");
  SimResult r = Simulate(t, fleet, {});
  CHECK(r.jobs[0].first_start == 0);
  CHECK(r.jobs[1].first_start == 100);
  CHECK(r.jobs[2].first_start == 100);
  CHECK(r.jobs[2].end == 110);
  CHECK(r.jobs[1].state == mlsched::core::JobState::kCompleted);
}

TEST_CASE("a submission at the moment a job ends starts in that same pass", "[sim]") {
  // Termination is handled before the pass at t=100, so B starts at 100, not later.
  Trace t = MakeTrace({CpuJob(1, 0, 100, 4), CpuJob(2, 100, 10, 4)});
  SimResult r = Simulate(t, UniformFleet(1, 4, 16, 0, "gpu"), {});
  CHECK(r.jobs[1].first_start == 100);
  CHECK(r.cycles == 2);
}

TEST_CASE("jobs no node set can hold are reported infeasible, not simulated", "[sim]") {
  Trace t = MakeTrace({CpuJob(1, 0, 10, 8), CpuJob(2, 1, 10, 2)});
  SimResult r = Simulate(t, UniformFleet(1, 4, 16, 0, "gpu"), {});
  CHECK_FALSE(r.jobs[0].infeasible.empty());
  CHECK(r.jobs[1].end == 11);
}

TEST_CASE("a job that reached its requested time ends as TIMEOUT", "[sim]") {
  TraceJob j = CpuJob(1, 0, 60, 1, 60);
  j.hits_time_limit = true;
  SimResult r = Simulate(MakeTrace({j}), UniformFleet(1, 4, 16, 0, "gpu"), {});
  CHECK(r.jobs[0].state == mlsched::core::JobState::kTimeout);
  CHECK(r.jobs[0].end == 60);
}

TEST_CASE("GPU gangs start whole and are labelled by the GPU type they got", "[sim]") {
  TraceJob g = CpuJob(1, 0, 100, 1);
  g.spec.ntasks = 8;
  g.spec.per_task.gpus[""] = 1;
  g.size = 8;
  TraceJob h = g;
  h.id = 2;
  h.submit_time = 1;
  Fleet fleet = UniformFleet(4, 32, 64, 4, "v100");  // 16 GPUs: two 8-GPU gangs fit
  TraceJob k = g;
  k.id = 3;
  k.submit_time = 2;  // third gang waits
  SimResult r = Simulate(MakeTrace({g, h, k}), fleet, {});
  CHECK(r.resource == "gpu");
  CHECK(r.capacity == 16);
  CHECK(r.jobs[1].first_start == 1);
  CHECK(r.jobs[2].first_start == 100);
  CHECK(r.jobs[0].accelerator == "v100");
}

TEST_CASE("spot evictions requeue jobs, count lost work and are reproducible", "[sim]") {
  Fleet fleet = UniformFleet(2, 4, 16, 0, "gpu");
  for (auto& n : fleet.nodes) n.pool = mlsched::core::Pool::kSpot;
  fleet.eviction_rate_per_hour.assign(2, 2.0);  // mean 30 min between evictions per node
  fleet.recovery_s.assign(2, 300);
  std::vector<TraceJob> jobs;
  for (int i = 0; i < 40; ++i) jobs.push_back(CpuJob(i + 1, i * 60, 3000, 2, 3600));
  Trace t = MakeTrace(jobs);
  SimOptions options;
  options.seed = 7;
  options.checkpoint_interval_s = 600;
  SimResult a = Simulate(t, fleet, options);
  SimResult b = Simulate(t, fleet, options);
  REQUIRE(a.evictions > 0);
  int64_t requeued = 0;
  double lost = 0;
  for (const auto& j : a.jobs) {
    CHECK(j.end > 0);  // every job finishes eventually
    CHECK(j.attempts == j.evictions + 1);
    if (j.evictions > 0) {
      ++requeued;
      CHECK(j.busy_s > j.run_time);  // rework after the eviction
      CHECK(j.lost_resource_hours <= j.evictions * 2 * 600.0 / 3600 + 1e-9);  // < one interval
    }
    lost += j.lost_resource_hours;
  }
  CHECK(requeued > 0);
  CHECK(lost > 0);
  std::ostringstream ca, cb;
  WriteJobsCsv(ca, a);
  WriteJobsCsv(cb, b);
  CHECK(ca.str() == cb.str());
  options.seed = 8;
  std::ostringstream cc;
  WriteJobsCsv(cc, Simulate(t, fleet, options));
  CHECK(cc.str() != ca.str());
}

TEST_CASE("runtime predictions lower the planned limit but never kill early", "[sim]") {
  // User u1 ran 100 s twice; the third job (request 10000 s) is predicted at 100 s, outlives
  // it (runs 500 s) and is extended step by step, finishing at its real end.
  Trace t = MakeTrace({CpuJob(1, 0, 100, 1, 10000), CpuJob(2, 200, 100, 1, 10000),
                       CpuJob(3, 400, 500, 1, 10000)});
  mlsched::core::UserMeanPredictor predictor;
  SimOptions options;
  options.predictor = &predictor;
  SimResult r = Simulate(t, UniformFleet(1, 4, 16, 0, "gpu"), options);
  CHECK(r.jobs[2].first_start == 400);
  CHECK(r.jobs[2].end == 900);
  CHECK(r.jobs[2].state == mlsched::core::JobState::kCompleted);
}

TEST_CASE("periodic cycles run while jobs pend and do not change FIFO decisions", "[sim]") {
  Trace t = MakeTrace({CpuJob(1, 0, 1000, 4), CpuJob(2, 1, 10, 4)});
  Fleet fleet = UniformFleet(1, 4, 16, 0, "gpu");
  SimResult events_only = Simulate(t, fleet, {});
  SimOptions periodic;
  periodic.cycle_period_s = 100;
  SimResult r = Simulate(t, fleet, periodic);
  CHECK(events_only.cycles == 3);  // t=0 (A starts), t=1 (B blocked), t=1000 (B starts)
  CHECK(r.cycles == 12);           // the same plus t=101, 201, ..., 901 while B pends
  CHECK(r.jobs[1].first_start == events_only.jobs[1].first_start);
  CHECK(r.jobs[1].first_start == 1000);
}

TEST_CASE("conservative with kept plans: a job ending early never moves a reservation later",
          "[sim]") {
  // 4 processors. J1 (2, limit 100) and J2 (2, limit 200, ends at 20) run from 0. A (4, 50) at 1
  // is planned at 200; B (2, 100) at 2 is planned in J1's slot [100, 200). When J2 ends early:
  // kept plans (pyss): A may not move into B's slot, so B starts now (20) and A at 120 when B
  // ends. Re-planning from scratch: A takes [100, 150) and B waits until 150.
  Trace t = MakeTrace({CpuJob(1, 0, 100, 2), CpuJob(2, 0, 20, 2, 200), CpuJob(3, 1, 50, 4),
                       CpuJob(4, 2, 100, 2)});
  const Fleet fleet = UniformFleet(1, 4, 16, 0, "gpu");
  SimOptions options;
  options.policy.backfill.mode = mlsched::core::BackfillMode::kConservative;
  SimResult replanned = Simulate(t, fleet, options);
  CHECK(replanned.jobs[2].first_start == 100);
  CHECK(replanned.jobs[3].first_start == 150);
  options.policy.backfill.keep_plans = true;
  SimResult kept = Simulate(t, fleet, options);
  CHECK(kept.jobs[3].first_start == 20);
  CHECK(kept.jobs[2].first_start == 120);
}
