// Backfill scenarios (world in -> starts, reservations, reasons) and properties over random
// workloads: reservations never move later because of a backfilled job.
#include <catch2/catch.hpp>

#include <random>

#include "tests/core/support.h"

using namespace mlsched::core;
using namespace mlsched::core::testing;
using namespace std::chrono_literals;

namespace {

PolicySet WithBackfill(BackfillMode mode, BackfillOrder order = BackfillOrder::kQueue) {
  PolicySet p;
  p.backfill.mode = mode;
  p.backfill.order = order;
  return p;
}

// One node of `cpus` cores: the single processor pool of the SWF/pyss model.
ClusterState CpuPool(int64_t cpus) {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("pool").Cpus(cpus).Build();
  return s;
}

Job CpuJob(JobId id, int64_t cores, Duration limit) {
  return JobBuilder(id).CpusPerTask(cores).TimeLimit(std::chrono::seconds(limit)).Build();
}

Job RunningCpu(JobId id, int64_t cores, Timestamp start, Duration limit) {
  return JobBuilder(id).CpusPerTask(cores).TimeLimit(std::chrono::seconds(limit))
      .Running(start, Allocation{{Task(0, "pool", {}, "", cores * 1000)}}).Build();
}

}  // namespace

TEST_CASE("EASY reserves for the head and backfills short and narrow jobs", "[core][backfill]") {
  ClusterState s = CpuPool(10);
  s.jobs = {RunningCpu(1, 6, 0, 100),  // ends at 100
            CpuJob(2, 8, 500),         // head: blocked until 100
            CpuJob(3, 3, 50),          // ends before the shadow time: backfills
            CpuJob(4, 1, 1000),        // fits in the extra (10 - 8 = 2) at the shadow: backfills
            CpuJob(5, 2, 1000)};       // nothing free now
  SECTION("EASY") {
    CyclePlan plan = RunChecked(s, WithBackfill(BackfillMode::kEasy), 0);
    CHECK(StartedIds(plan) == std::vector<JobId>{3, 4});
    CHECK(PendingOf(plan, 2).reason == PendingReason::kResources);
    CHECK(PendingOf(plan, 2).expected_start == 100);
    CHECK(PendingOf(plan, 2).detail == "needs 1x8000 CPU millicores, 4000 free now");
    CHECK(PendingOf(plan, 5).reason == PendingReason::kPriority);
    CHECK_FALSE(PendingOf(plan, 5).expected_start.has_value());
  }
  SECTION("no backfill: strict FIFO") {
    CyclePlan plan = RunChecked(s, WithBackfill(BackfillMode::kNone), 0);
    CHECK(plan.starts.empty());
    CHECK(PendingOf(plan, 3).reason == PendingReason::kPriority);
  }
  SECTION("a backfill job that would delay the head waits") {
    s.jobs[3] = CpuJob(4, 3, 1000);  // 3 > extra 2 and runs past the shadow time
    CyclePlan plan = RunChecked(s, WithBackfill(BackfillMode::kEasy), 0);
    CHECK(StartedIds(plan) == std::vector<JobId>{3});
  }
}

TEST_CASE("conservative protects every reservation, EASY only the head's", "[core][backfill]") {
  ClusterState s = CpuPool(10);
  s.jobs = {RunningCpu(1, 5, 0, 300), CpuJob(2, 8, 100), CpuJob(3, 9, 100), CpuJob(4, 2, 450)};
  SECTION("EASY starts job 4: it leaves 8 cores for job 2 at 300") {
    CyclePlan plan = RunChecked(s, WithBackfill(BackfillMode::kEasy), 0);
    CHECK(StartedIds(plan) == std::vector<JobId>{4});
    CHECK(PendingOf(plan, 2).expected_start == 300);
    CHECK_FALSE(PendingOf(plan, 3).expected_start.has_value());
  }
  SECTION("conservative holds job 4: it would delay job 3 planned at 400") {
    CyclePlan plan = RunChecked(s, WithBackfill(BackfillMode::kConservative), 0);
    CHECK(plan.starts.empty());
    CHECK(PendingOf(plan, 2).expected_start == 300);
    CHECK(PendingOf(plan, 3).expected_start == 400);
    CHECK(PendingOf(plan, 3).reason == PendingReason::kPriority);
    CHECK(PendingOf(plan, 4).expected_start == 500);
  }
  SECTION("conservative with depth 1 behaves like EASY") {
    PolicySet p = WithBackfill(BackfillMode::kConservative);
    p.backfill.depth = 1;
    CHECK(StartedIds(RunChecked(s, p, 0)) == std::vector<JobId>{4});
  }
}

TEST_CASE("backfill parameters: order, window, resolution, max_job_test", "[core][backfill]") {
  ClusterState s = CpuPool(10);
  s.jobs = {RunningCpu(1, 8, 0, 100), CpuJob(2, 10, 100), CpuJob(3, 2, 90), CpuJob(4, 2, 10)};
  SECTION("queue order backfills job 3 first") {
    CHECK(StartedIds(RunChecked(s, WithBackfill(BackfillMode::kEasy), 0)) == std::vector<JobId>{3});
  }
  SECTION("shortest-first order backfills job 4 first") {
    auto plan = RunChecked(s, WithBackfill(BackfillMode::kEasy, BackfillOrder::kShortestFirst), 0);
    CHECK(StartedIds(plan) == std::vector<JobId>{4});
  }
  SECTION("a reservation beyond the window is not planned") {
    PolicySet p = WithBackfill(BackfillMode::kEasy);
    p.backfill.window = 50;
    auto plan = RunChecked(s, p, 0);
    CHECK_FALSE(PendingOf(plan, 2).expected_start.has_value());
    // Without a reservation nothing protects job 2: job 3 starts (and so would anything).
    CHECK(StartedIds(plan) == std::vector<JobId>{3});
  }
  SECTION("planned starts round up to the resolution") {
    PolicySet p = WithBackfill(BackfillMode::kEasy);
    p.backfill.resolution = 60;
    CHECK(PendingOf(RunChecked(s, p, 0), 2).expected_start == 120);
  }
  SECTION("max_job_test stops examining") {
    PolicySet p = WithBackfill(BackfillMode::kEasy);
    p.backfill.max_job_test = 1;
    auto plan = RunChecked(s, p, 0);
    CHECK(plan.starts.empty());
    CHECK(PendingOf(plan, 3).detail == "not examined (max_job_test)");
  }
}

TEST_CASE("a gang's reservation pins nodes - backfill uses the others", "[core][backfill]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("gpu-[1-4]").Gpus("h100", 8).Build();
  auto busy = [](JobId id, const std::string& node, Duration limit) {
    return JobBuilder(id).GpusPerTask(8).TimeLimit(std::chrono::seconds(limit))
        .Running(0, Allocation{{Task(0, node, {0, 1, 2, 3, 4, 5, 6, 7}, "h100", 1000)}}).Build();
  };
  s.jobs = {busy(1, "gpu-1", 100), busy(2, "gpu-2", 200),
            JobBuilder(3).Tasks(3).GpusPerTask(8).TimeLimit(1h).Build(),  // needs 3 nodes: at 100
            JobBuilder(4).GpusPerTask(8).TimeLimit(1h).Build(),           // would take the 4th
            JobBuilder(5).GpusPerTask(8).TimeLimit(50s).Build()};         // done before 100
  CyclePlan plan = RunChecked(s, WithBackfill(BackfillMode::kEasy), 0);
  CHECK(PendingOf(plan, 3).expected_start == 100);
  // gpu-1 frees at 100; with gpu-3 and gpu-4 that makes 3 nodes: job 4 may not take one.
  CHECK(StartedIds(plan) == std::vector<JobId>{5});
}

TEST_CASE("a 64-GPU gang behind a stream of 1-GPU jobs starts by its planned time",
          "[core][backfill][starvation]") {
  for (BackfillMode mode : {BackfillMode::kEasy, BackfillMode::kConservative}) {
    Replay r;
    r.state.nodes = ClusterBuilder().Nodes("gpu-[1-8]").Gpus("h100", 8).Build();
    // The cluster starts full of 1-GPU jobs with staggered ends; more keep arriving.
    JobId id = 1;
    for (int k = 0; k < 64; ++k) r.arrivals.push_back(JobBuilder(id++).GpusPerTask(1).Submit(0)
                                                          .TimeLimit(std::chrono::seconds(300 + 37 * k)).Build());
    const JobId gang = id++;
    r.arrivals.push_back(JobBuilder(gang).Tasks(8).GpusPerTask(8).Submit(1).TimeLimit(1h).Build());
    for (int k = 0; k < 400; ++k) r.arrivals.push_back(JobBuilder(id++).GpusPerTask(1).Submit(2 + 10 * k)
                                                           .TimeLimit(std::chrono::seconds(60 + (k % 7) * 40)).Build());
    std::optional<Timestamp> first_plan;
    r.Run(WithBackfill(mode), [&](const ClusterState&, const CyclePlan& plan, Timestamp) {
      for (const PendingUpdate& p : plan.pending)
        if (p.job == gang && p.expected_start && !first_plan) first_plan = p.expected_start;
    });
    REQUIRE(first_plan.has_value());
    REQUIRE(r.started.count(gang));
    CHECK(r.started[gang] <= *first_plan);
  }
}

// Under EASY the head's plan never moves later, on multi-GPU nodes and on 1-GPU nodes. Conservative
// re-plans every blocked job each cycle with reservations pinned to nodes; its plans are stable on
// one pool of cores (the SWF/pyss model). On several nodes a re-plan may pin other nodes than last
// time, so a later job's plan can move (Slurm's conservative mode behaves the same way).
TEST_CASE("planned starts never move later because of backfilled jobs (random workloads)",
          "[core][backfill][property]") {
  std::mt19937_64 rng(20261122);
  for (int trial = 0; trial < 60; ++trial) {
    const int kind = trial % 3;  // 0: EASY on multi-GPU nodes; 1: conservative on a core pool;
                                 // 2: EASY on 1-GPU nodes
    const bool conservative = kind == 1;
    Replay r;
    const int nodes = 2 + static_cast<int>(rng() % 6);
    if (kind == 0)
      r.state.nodes = ClusterBuilder().Nodes("n[1-" + std::to_string(nodes) + "]").Gpus("h100", 4).Cpus(16).Build();
    else if (kind == 1)
      r.state.nodes = ClusterBuilder().Nodes("pool").Cpus(64).Build();
    else
      r.state.nodes = ClusterBuilder().Nodes("g[1-" + std::to_string(4 * nodes) + "]").Gpus("l4", 1).Build();
    for (JobId id = 1; id <= 60; ++id) {
      JobBuilder b(id);
      b.Submit(static_cast<Timestamp>(rng() % 2000)).TimeLimit(std::chrono::seconds(50 + rng() % 1000));
      if (kind == 0) b.Tasks(1 + static_cast<int>(rng() % std::min(nodes, 4))).GpusPerTask(1 + rng() % 4).CpusPerTask(1 + rng() % 8);
      if (kind == 1) b.CpusPerTask(1 + rng() % 64);
      if (kind == 2) b.Tasks(1 + static_cast<int>(rng() % (4 * nodes))).GpusPerTask(1);
      r.arrivals.push_back(b.Build());
    }
    std::map<JobId, Timestamp> planned;  // latest plan of each job
    std::optional<JobId> head;
    r.Run(WithBackfill(conservative ? BackfillMode::kConservative : BackfillMode::kEasy),
          [&](const ClusterState&, const CyclePlan& plan, Timestamp now) {
            // Arrivals are later in FIFO order than every queued job, so they cannot push a plan.
            for (const PendingUpdate& p : plan.pending) {
              if (!p.expected_start) continue;
              auto it = planned.find(p.job);
              if ((conservative || head == p.job) && it != planned.end()) {
                INFO("trial " << trial << " job " << p.job << " at " << now);
                CHECK(*p.expected_start <= it->second);
              }
              planned[p.job] = *p.expected_start;
              if (!conservative) head = p.job;
            }
            for (const StartDecision& st : plan.starts) {
              auto it = planned.find(st.job);
              if (it != planned.end() && (conservative || head == st.job)) CHECK(now <= it->second);
            }
          });
    CHECK(r.started.size() == 60);
  }
}

// keep_plans (pyss's conservative): previous plans are kept and jobs only move earlier, so on a
// pool of cores (the SWF/pyss model) no planned start moves later, even when jobs end before
// their time limits. (Across several nodes the kept plan is re-placed at its old time on nodes
// chosen again, which can fail; that job is then re-planned and may move later.)
TEST_CASE("conservative with keep_plans: no planned start ever moves later",
          "[core][backfill][property]") {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 30; ++trial) {
    Replay r;
    r.state.nodes = ClusterBuilder().Nodes("pool").Cpus(64).Build();
    for (JobId id = 1; id <= 60; ++id) {
      JobBuilder b(id);
      const Duration limit = 50 + static_cast<Duration>(rng() % 1000);
      b.Submit(static_cast<Timestamp>(rng() % 2000)).TimeLimit(std::chrono::seconds(limit));
      b.CpusPerTask(1 + rng() % 64);
      r.arrivals.push_back(b.Build());
      r.run_time[id] = 1 + static_cast<Duration>(rng() % static_cast<uint64_t>(limit));  // early ends
    }
    PolicySet p = WithBackfill(BackfillMode::kConservative);
    p.backfill.keep_plans = true;
    std::map<JobId, Timestamp> planned;
    r.Run(p, [&](const ClusterState&, const CyclePlan& plan, Timestamp now) {
      for (const PendingUpdate& u : plan.pending) {
        REQUIRE(u.expected_start.has_value());  // conservative plans every feasible job
        auto it = planned.find(u.job);
        if (it != planned.end()) {
          INFO("trial " << trial << " job " << u.job << " at " << now);
          CHECK(*u.expected_start <= it->second);
        }
        planned[u.job] = *u.expected_start;
      }
      for (const StartDecision& st : plan.starts)
        if (auto it = planned.find(st.job); it != planned.end()) CHECK(now <= it->second);
    });
    CHECK(r.started.size() == 60);
  }
}

TEST_CASE("reserve_after plans jobs that waited too long first - each with a reservation", "[core][backfill]") {
  ClusterState s = CpuPool(10);
  const Timestamp now = 10000;
  s.jobs = {JobBuilder(1).CpusPerTask(6).TimeLimit(200s).Running(9900, Allocation{{Task(0, "pool", {}, "", 6000)}}).Build(),
            JobBuilder(2).CpusPerTask(8).TimeLimit(500s).Submit(0).Build(),     // head: reserved at 10100
            JobBuilder(3).CpusPerTask(9).TimeLimit(500s).Submit(1).Build(),     // waited ~2.8 h
            JobBuilder(4).CpusPerTask(2).TimeLimit(2000s).Submit(9999).Build(), // would hold 2 cores past 10600
            JobBuilder(5).CpusPerTask(1).TimeLimit(50s).Submit(9999).Build()};  // ends before anything
  PolicySet p = WithBackfill(BackfillMode::kEasy);
  SECTION("plain EASY backfills past the second job, which waits on") {
    CyclePlan plan = RunChecked(s, p, now);
    CHECK(StartedIds(plan) == std::vector<JobId>{4, 5});
    CHECK_FALSE(PendingOf(plan, 3).expected_start.has_value());
  }
  SECTION("with the guard the starved job is planned and nothing delays it") {
    p.backfill.reserve_after = 3600;
    CyclePlan plan = RunChecked(s, p, now);
    CHECK(StartedIds(plan) == std::vector<JobId>{5});
    CHECK(PendingOf(plan, 2).expected_start == 10100);
    CHECK(PendingOf(plan, 3).expected_start == 10600);
    CHECK(PendingOf(plan, 3).detail == "needs 1x9000 CPU millicores, 4000 free now (waited past reserve_after: planned first)");
    CHECK(PendingOf(plan, 4).expected_start >= 10600);  // the young job waits behind both
  }
  SECTION("a job younger than the threshold gets no reservation") {
    p.backfill.reserve_after = 20000;
    CHECK(StartedIds(RunChecked(s, p, now)) == std::vector<JobId>{4, 5});
  }
}

TEST_CASE("reserve_after_wide guards wide jobs sooner than narrow ones", "[core][backfill]") {
  ClusterState s = CpuPool(10);
  const Timestamp now = 10000;
  s.jobs = {JobBuilder(1).CpusPerTask(6).TimeLimit(200s).Running(9900, Allocation{{Task(0, "pool", {}, "", 6000)}}).Build(),
            JobBuilder(2).CpusPerTask(8).TimeLimit(500s).Submit(0).Build(),     // head: reserved at 10100
            JobBuilder(3).CpusPerTask(9).TimeLimit(500s).Submit(5000).Build(),  // wide (9 of 10), waited 5000 s
            JobBuilder(4).CpusPerTask(2).TimeLimit(2000s).Submit(9999).Build(), // would hold 2 cores past 10600
            JobBuilder(5).CpusPerTask(1).TimeLimit(50s).Submit(9999).Build()};  // ends before anything
  PolicySet p = WithBackfill(BackfillMode::kEasy);
  p.backfill.reserve_after = 20000;
  p.backfill.reserve_after_wide = 3600;
  SECTION("a wide job past reserve_after_wide is planned first") {
    CyclePlan plan = RunChecked(s, p, now);
    CHECK(StartedIds(plan) == std::vector<JobId>{5});
    CHECK(PendingOf(plan, 3).expected_start == 10600);
  }
  SECTION("the same job is narrow when wide_fraction is above its share") {
    p.backfill.wide_fraction = 0.95;
    CyclePlan plan = RunChecked(s, p, now);
    CHECK(StartedIds(plan) == std::vector<JobId>{4, 5});
    CHECK_FALSE(PendingOf(plan, 3).expected_start.has_value());
  }
  SECTION("not yet past reserve_after_wide") {
    p.backfill.reserve_after_wide = 12000;  // longer than every wait here
    CHECK(StartedIds(RunChecked(s, p, now)) == std::vector<JobId>{4, 5});
  }
}

TEST_CASE("one-node pool: conservative reservations from the aggregate fit alone", "[core][backfill]") {
  // Planner::OneNodeHoldsAll: on a fleet of one node that is up the aggregate fit is the node's fit.
  const PolicySet p = WithBackfill(BackfillMode::kConservative);
  SECTION("a gang is reserved whole where the node frees enough") {
    ClusterState s = CpuPool(10);
    s.jobs = {RunningCpu(1, 6, 0, 100), RunningCpu(2, 2, 0, 300),
              JobBuilder(3).Tasks(4).CpusPerTask(2).TimeLimit(200s).Build(),  // 8 cores: 100 .. 300
              CpuJob(4, 4, 50),    // 2 free now, 0 in [100, 300): after job 3
              CpuJob(5, 2, 100)};  // fits now for 100 s: starts
    CyclePlan plan = RunChecked(s, p, 0);
    CHECK(StartedIds(plan) == std::vector<JobId>{5});
    CHECK(PendingOf(plan, 3).expected_start == 100);
    CHECK(PendingOf(plan, 4).expected_start == 300);
  }
  SECTION("a spread gang of several tasks never fits one node") {
    ClusterState s = CpuPool(10);
    s.jobs = {RunningCpu(1, 6, 0, 100),
              JobBuilder(2).Tasks(2).CpusPerTask(3).Topo(Topology::kSpread).TimeLimit(100s).Build(),
              JobBuilder(3).Tasks(1).CpusPerTask(8).Topo(Topology::kSpread).TimeLimit(100s).Build()};
    CyclePlan plan = RunChecked(s, p, 0);
    CHECK_FALSE(PendingOf(plan, 2).expected_start.has_value());
    CHECK(PendingOf(plan, 3).expected_start == 100);
  }
  SECTION("a node that is down gets no reservation though its running job ends") {
    // The aggregate still counts the running job's release; the node is not eligible.
    ClusterState s;
    s.nodes = ClusterBuilder().Nodes("pool").Cpus(10).Health(NodeHealth::kDown).Build();
    s.jobs = {RunningCpu(1, 6, 0, 100), CpuJob(2, 4, 50)};
    CyclePlan plan = RunChecked(s, p, 0);
    CHECK(plan.starts.empty());
    CHECK_FALSE(PendingOf(plan, 2).expected_start.has_value());
  }
}

TEST_CASE("a shorter job of the same shape is planned in a gap a longer one skipped", "[core][backfill]") {
  // Planner::FirstAggregateFit starts a search where the last one of the shape's key ended only
  // for a run at least as long.
  ClusterState s = CpuPool(10);
  s.jobs = {RunningCpu(1, 6, 0, 100), RunningCpu(2, 4, 0, 1000),
            CpuJob(3, 8, 100),    // 1000 .. 1100
            CpuJob(4, 4, 1000),   // 1100: 2 cores free in [1000, 1100)
            CpuJob(5, 4, 100),    // 100: in the gap before 1000
            CpuJob(6, 4, 2000)};  // 1100 again: after job 5 only 2 free at 1000
  CyclePlan plan = RunChecked(s, WithBackfill(BackfillMode::kConservative), 0);
  CHECK(plan.starts.empty());
  CHECK(PendingOf(plan, 3).expected_start == 1000);
  CHECK(PendingOf(plan, 4).expected_start == 1100);
  CHECK(PendingOf(plan, 5).expected_start == 100);
  CHECK(PendingOf(plan, 6).expected_start == 1100);
}
