// Elastic gangs (mlsub -n MIN-MAX:STEP): the size the core chooses (the largest that fits now, the
// step respected, MIN when only MIN fits), backfill at a smaller size that never delays a
// reservation, the restart at once at a smaller size after an eviction or beside a QoS preemptor,
// and usage at the size run.
#include <catch2/catch.hpp>

#include <set>

#include "schedd/core/fairshare.h"
#include "tests/core/support.h"

using namespace mlsched::core;
using namespace mlsched::core::testing;
using namespace std::chrono_literals;

namespace {

// Four nodes of 8 H100s; one task takes a whole node.
std::vector<Node> FourNodes() { return ClusterBuilder().Nodes("gpu-[1-4]").Gpus("h100", 8).Build(); }

Allocation WholeNodes(std::vector<std::string> nodes) {
  Allocation a;
  for (size_t r = 0; r < nodes.size(); ++r)
    a.tasks.push_back(Task(static_cast<int32_t>(r), nodes[r], {0, 1, 2, 3, 4, 5, 6, 7}, "h100"));
  return a;
}

Job Busy(JobId id, std::vector<std::string> nodes, Duration limit = 3600) {
  return JobBuilder(id).Tasks(static_cast<int32_t>(nodes.size())).GpusPerTask(8, "h100")
      .TimeLimit(std::chrono::seconds(limit)).Running(0, WholeNodes(std::move(nodes))).Build();
}

size_t StartedTasks(const CyclePlan& plan, JobId job) {
  for (const StartDecision& s : plan.starts)
    if (s.job == job) return s.allocation.tasks.size();
  return 0;
}

}  // namespace

TEST_CASE("GangSizes lists an elastic range largest first, a rigid gang as one size", "[core][elastic]") {
  CHECK(GangSizes(JobBuilder().Tasks(4).Build().spec) == std::vector<int32_t>{4});
  CHECK(GangSizes(JobBuilder().Elastic(2, 4).Build().spec) == std::vector<int32_t>{4, 3, 2});
  CHECK(GangSizes(JobBuilder().Elastic(2, 8, 2).Build().spec) == std::vector<int32_t>{8, 6, 4, 2});
  CHECK_FALSE(CheckGangSize(JobBuilder().Elastic(2, 8, 2).Build().spec).has_value());
  CHECK(CheckGangSize(JobBuilder().Elastic(5, 4).Build().spec) == "min_tasks 5 is above the largest size 4");
  CHECK(CheckGangSize(JobBuilder().Elastic(2, 7, 2).Build().spec) ==
        "task range 2-7 is not a multiple of task_step 2");
  CHECK(CheckGangSize(JobBuilder().Elastic(2, 4, 0).Build().spec) == "task_step must be >= 1 (got 0)");
}

TEST_CASE("an elastic job starts with the largest size in its range that fits now", "[core][elastic]") {
  struct Row {
    const char* name;
    std::vector<std::string> busy;  // nodes held by a running job
    int32_t min, max, step;
    size_t started;                 // tasks started (0 = pending)
  };
  const Row rows[] = {
      {"all free: MAX", {}, 2, 4, 1, 4},
      {"3 free: the largest that fits", {"gpu-1"}, 2, 4, 1, 3},
      {"3 free, step 2: an even size", {"gpu-1"}, 2, 4, 2, 2},
      {"2 free: only MIN fits", {"gpu-1", "gpu-2"}, 2, 4, 1, 2},
      {"1 free: below MIN, waits", {"gpu-1", "gpu-2", "gpu-3"}, 2, 4, 1, 0},
  };
  for (const Row& row : rows) {
    DYNAMIC_SECTION(row.name) {
      ClusterState s;
      s.nodes = FourNodes();
      if (!row.busy.empty()) s.jobs.push_back(Busy(1, row.busy));
      s.jobs.push_back(JobBuilder(2).Elastic(row.min, row.max, row.step).GpusPerTask(8, "h100").Build());
      const CyclePlan plan = RunChecked(s, PolicySet{}, 0);
      CHECK(StartedTasks(plan, 2) == row.started);
      if (row.started == 0) {
        CHECK(PendingOf(plan, 2).reason == PendingReason::kResources);
        CHECK(PendingOf(plan, 2).detail == "needs 2-4x8 GPUs, 8 free now");
      }
    }
  }
}

TEST_CASE("a rigid gang of the same size still waits for all its tasks", "[core][elastic]") {
  ClusterState s;
  s.nodes = FourNodes();
  s.jobs = {Busy(1, {"gpu-1"}), JobBuilder(2).Tasks(4).GpusPerTask(8, "h100").Build()};
  CHECK(RunChecked(s, PolicySet{}, 0).starts.empty());
}

TEST_CASE("backfill at a smaller size never delays a reservation", "[core][elastic][backfill]") {
  // 10 cores; 6 busy until 100; job 2 (8 cores, rigid) is reserved at 100. The elastic job 3 (1 to
  // 4 one-core tasks, 1000 s) runs past 100, where only 10 - 8 = 2 cores are spare: it backfills
  // with 2 tasks, not with the 4 that are free now.
  for (BackfillMode mode : {BackfillMode::kEasy, BackfillMode::kConservative}) {
    DYNAMIC_SECTION(BackfillModeName(mode)) {
      ClusterState s;
      s.nodes = ClusterBuilder().Nodes("pool").Cpus(10).Build();
      s.jobs = {JobBuilder(1).CpusPerTask(6).TimeLimit(100s).Running(0, Allocation{{Task(0, "pool", {}, "", 6000)}}).Build(),
                JobBuilder(2).CpusPerTask(8).TimeLimit(500s).Build(),
                JobBuilder(3).Elastic(1, 4).CpusPerTask(1).TimeLimit(1000s).Build()};
      PolicySet p;
      p.backfill.mode = mode;
      const CyclePlan plan = RunChecked(s, p, 0);
      CHECK(StartedTasks(plan, 3) == 2);
      CHECK(PendingOf(plan, 2).expected_start == 100);
      // Replayed: job 2 still starts at 100.
      ClusterState after = s;
      ApplyPlan(after, plan, 0);
      after.jobs.erase(after.jobs.begin());  // job 1 ends at 100
      const CyclePlan at_100 = RunChecked(after, p, 100);
      CHECK(StartedIds(at_100) == std::vector<JobId>{2});
    }
  }
}

TEST_CASE("a blocked elastic job is reserved at MAX, a smaller size that fits starts now", "[core][elastic][backfill]") {
  ClusterState s;
  s.nodes = FourNodes();
  s.jobs = {Busy(1, {"gpu-1", "gpu-2", "gpu-3", "gpu-4"}, 100),
            JobBuilder(2).Elastic(2, 4).GpusPerTask(8, "h100").Build()};
  PolicySet p;
  p.backfill.mode = BackfillMode::kEasy;
  CyclePlan plan = RunChecked(s, p, 0);
  CHECK(plan.starts.empty());
  CHECK(PendingOf(plan, 2).expected_start == 100);
  // A lower job of 3 nodes may not backfill past 100: the reservation holds all 4 nodes.
  s.jobs[0] = Busy(1, {"gpu-1"}, 100);
  s.jobs.push_back(JobBuilder(3).Tasks(1).GpusPerTask(8, "h100").TimeLimit(1000s).Build());
  plan = RunChecked(s, p, 0);
  CHECK(StartedTasks(plan, 2) == 3);  // 3 free now: starts at once with 3
  CHECK(StartedTasks(plan, 3) == 0);
}

TEST_CASE("after an eviction takes a node, an elastic job restarts at once with fewer tasks", "[core][elastic]") {
  // The 4-task job was evicted from gpu-4 (now down) and requeued: it restarts at 3 at once.
  ClusterState s;
  s.nodes = FourNodes();
  s.nodes[3].health = NodeHealth::kDown;
  Job job = JobBuilder(2).Elastic(1, 4).GpusPerTask(8, "h100").Build();
  job.attempt = 1;
  job.evictions = 1;
  s.jobs = {job};
  PolicySet p;
  p.backfill.mode = BackfillMode::kEasy;
  const CyclePlan plan = RunChecked(s, p, 50);
  REQUIRE(StartedTasks(plan, 2) == 3);
  for (const TaskPlacement& t : plan.starts[0].allocation.tasks) CHECK(t.node != "gpu-4");
}

TEST_CASE("an elastic job accrues usage at the size it runs", "[core][elastic][fairshare]") {
  Job job = JobBuilder(2).Elastic(2, 4).CpusPerTask(1).Account("a").User("u")
                .Running(0, Allocation{{Task(0, "n", {}, "", 1000), Task(1, "n", {}, "", 1000)}}).Build();
  std::map<std::string, double> usage;
  FairsharePolicy policy;
  policy.half_life = 0;
  AccrueUsage(usage, {job}, policy, 0, 100);
  CHECK(usage.at(UsageKey("a", "u")) == Approx(200.0));  // 2 tasks x 1 core x 100 s, not 4
}

TEST_CASE("an elastic job is feasible when its smallest size can run", "[core][elastic]") {
  const std::vector<Node> nodes = FourNodes();
  CHECK_FALSE(CheckJobFeasible(nodes, PolicySet{}, JobBuilder().Elastic(2, 6).GpusPerTask(8, "h100").Build().spec));
  CHECK(CheckJobFeasible(nodes, PolicySet{}, JobBuilder().Elastic(5, 6).GpusPerTask(8, "h100").Build().spec).has_value());
  CHECK(CheckJobFeasible(nodes, PolicySet{}, JobBuilder().Elastic(2, 5, 2).Build().spec) ==
        "job task range 2-5 is not a multiple of task_step 2");
}

TEST_CASE("after a QoS preemption an elastic job restarts at once beside its preemptor with fewer tasks", "[core][elastic][preempt]") {
  // The low elastic job (2-4 tasks) holds all 4 nodes; a high job needs one. The whole gang is
  // signalled (it checkpoints); once it has exited, one cycle starts the high job and restarts
  // the elastic job on the 3 other nodes: it does not wait for its old size.
  PolicySet p;
  QosPolicy low, high;
  low.name = "low";
  low.grace_time = 30;
  high.name = "high";
  high.preempt = {"low"};
  p.qos = {low, high};
  p.default_qos = "low";
  ClusterState s;
  s.nodes = FourNodes();
  Job elastic = JobBuilder(1).Elastic(2, 4).GpusPerTask(8, "h100").Qos("low").TimeLimit(3600s)
                    .Running(0, WholeNodes({"gpu-1", "gpu-2", "gpu-3", "gpu-4"})).Build();
  s.jobs = {elastic, JobBuilder(2).Tasks(1).GpusPerTask(8, "h100").Qos("high").Submit(90).Build()};
  const CyclePlan first = RunChecked(s, p, 100);
  REQUIRE(first.preemptions.size() == 1);
  CHECK(first.preemptions[0].victim == 1);
  CHECK(first.starts.empty());
  // The victim's ranks exited 75: it is pending again, the high job still waits.
  s.jobs[0] = JobBuilder(1).Elastic(2, 4).GpusPerTask(8, "h100").Qos("low").TimeLimit(3600s).Build();
  s.jobs[0].attempt = 1;
  s.jobs[0].preempt_count = 1;
  const CyclePlan second = RunChecked(s, p, 110);
  CHECK(second.preemptions.empty());
  REQUIRE(StartedTasks(second, 2) == 1);
  REQUIRE(StartedTasks(second, 1) == 3);
  std::set<std::string> used;
  for (const StartDecision& d : second.starts)
    for (const TaskPlacement& t : d.allocation.tasks) CHECK(used.insert(t.node).second);
}

TEST_CASE("[elastic] start = earliest-finish: a smaller size starts only when it finishes before waiting for MAX",
          "[core][elastic][backfill]") {
  // gpu-[1-3] are busy until t = 1000; gpu-4 is free. Job 2 is elastic 1-4 (one whole node per
  // task); its limit L is its run time at 1 task, L/4 at 4 (ElasticRuntime). Starting now with 1
  // task finishes at L; waiting for 4 tasks at 1000 finishes at 1000 + L/4.
  struct Row {
    const char* name;
    ElasticStart rule;
    Duration limit;
    size_t started;            // tasks started now (0 = waits)
    Timestamp planned_start;   // of a waiting job
  };
  const Row rows[] = {
      {"L = 1200: 1 task now ends at 1200 before 1000 + 300", ElasticStart::kEarliestFinish, 1200, 1, 0},
      {"L = 4000: 1 task now would end at 4000 after 1000 + 1000: waits for 4", ElasticStart::kEarliestFinish, 4000, 0, 1000},
      {"L = 1332: 1332 vs 1000 + 333 - just before: starts", ElasticStart::kEarliestFinish, 1332, 1, 0},
      {"L = 1336: 1336 vs 1000 + 334 - just after: waits", ElasticStart::kEarliestFinish, 1336, 0, 1000},
      {"start = largest: 1 task now whatever L", ElasticStart::kLargest, 4000, 1, 0},
  };
  for (const Row& row : rows) {
    DYNAMIC_SECTION(row.name) {
      ClusterState s;
      s.nodes = FourNodes();
      s.jobs = {Busy(1, {"gpu-1", "gpu-2", "gpu-3"}, 1000),
                JobBuilder(2).Elastic(1, 4).GpusPerTask(8, "h100").TimeLimit(std::chrono::seconds(row.limit)).Build()};
      PolicySet p;
      p.elastic.start = row.rule;
      p.backfill.mode = BackfillMode::kEasy;
      const CyclePlan plan = RunChecked(s, p, 0);
      CHECK(StartedTasks(plan, 2) == row.started);
      if (row.started == 0) {
        CHECK(PendingOf(plan, 2).reason == PendingReason::kResources);
        REQUIRE(PendingOf(plan, 2).expected_start);
        CHECK(*PendingOf(plan, 2).expected_start == row.planned_start);
      }
    }
  }
}

TEST_CASE("ElasticRuntime scales the planned run time linearly from the smallest size", "[core][elastic]") {
  Job j = JobBuilder(1).Elastic(2, 8).TimeLimit(std::chrono::seconds(800)).Build();
  CHECK(ElasticRuntime(j, 2) == 800);
  CHECK(ElasticRuntime(j, 4) == 400);
  CHECK(ElasticRuntime(j, 8) == 200);
  const Job rigid = JobBuilder(2).Tasks(4).TimeLimit(std::chrono::seconds(800)).Build();
  CHECK(ElasticRuntime(rigid, 2) == 800);
}
