// Elastic gangs that grow at checkpoints (PlanGrows, issue 16 point 3): a shrunk job grows back
// when nodes free and nothing waits for them, never inside min_resize_interval, never when the
// gain is below the restart cost, never past a reservation, and free nodes go to one grow only.
#include <catch2/catch.hpp>

#include "schedd/core/elastic.h"
#include "tests/core/support.h"

using namespace mlsched::core;
using namespace mlsched::core::testing;
using namespace std::chrono_literals;

namespace {

// Whole 8-GPU nodes, one task each.
Allocation OnNodes(std::vector<std::string> nodes) {
  Allocation a;
  for (size_t r = 0; r < nodes.size(); ++r)
    a.tasks.push_back(Task(static_cast<int32_t>(r), nodes[r], {0, 1, 2, 3, 4, 5, 6, 7}, "h100"));
  return a;
}

// An elastic job of min..max whole-node tasks running on `nodes` since t = 0 (1 h limit).
Job ElasticRunning(JobId id, int32_t min, int32_t max, std::vector<std::string> nodes, int32_t step = 1) {
  return JobBuilder(id).Elastic(min, max, step).GpusPerTask(8, "h100").TimeLimit(3600s)
      .Running(0, OnNodes(std::move(nodes))).Build();
}

ClusterState Nodes(const char* hostlist) {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes(hostlist).Gpus("h100", 8).Build();
  return s;
}

}  // namespace

TEST_CASE("a shrunk elastic job grows back to its largest size once a node is free", "[core][elastic][grow]") {
  ClusterState s = Nodes("gpu-[1-4]");
  s.jobs = {ElasticRunning(1, 2, 4, {"gpu-1", "gpu-2", "gpu-3"})};
  const CyclePlan plan = RunChecked(s, PolicySet{}, 700);
  REQUIRE(plan.resizes.size() == 1);
  CHECK(plan.resizes[0].job == 1);
  CHECK(plan.resizes[0].from == 3);
  CHECK(plan.resizes[0].to == 4);
  CHECK(plan.resizes[0].gain == (3600 - 700) / 4);
  CHECK(plan.resizes[0].cost == 60);
}

TEST_CASE("grows: the conditions one by one", "[core][elastic][grow]") {
  struct Row {
    const char* name;
    Timestamp now;
    Duration interval, default_cost, job_cost;
    bool grow_on;
    size_t resizes;
  };
  const Row rows[] = {
      {"interval passed: grows", 700, 600, 60, 0, true, 1},
      {"inside min_resize_interval: no resize thrash", 599, 600, 60, 0, true, 0},
      {"gain (3600-700)/4 = 725 s below the default cost: stays", 700, 600, 800, 0, true, 0},
      {"the job's own measured cost wins over the default", 700, 600, 800, 30, true, 1},
      {"measured cost above the gain: stays", 700, 600, 60, 900, true, 0},
      {"time limit used up: no remainder", 3600, 600, 60, 0, true, 0},
      {"[elastic] grow = false", 700, 600, 60, 0, false, 0},
  };
  for (const Row& row : rows) {
    DYNAMIC_SECTION(row.name) {
      ClusterState s = Nodes("gpu-[1-4]");
      s.jobs = {ElasticRunning(1, 2, 4, {"gpu-1", "gpu-2", "gpu-3"})};
      s.jobs[0].restart_cost = row.job_cost;
      PolicySet p;
      p.elastic.min_resize_interval = row.interval;
      p.elastic.restart_cost = row.default_cost;
      p.elastic.grow = row.grow_on;
      CHECK(RunChecked(s, p, row.now).resizes.size() == row.resizes);
    }
  }
}

TEST_CASE("grows: the interval counts from all ranks started, never while the attempt launches", "[core][elastic][grow]") {
  struct Row {
    const char* name;
    bool launching;
    Timestamp running_since, now;
    size_t resizes;
  };
  const Row rows[] = {
      {"running since placement (unknown): from start_time", false, 0, 700, 1},
      {"still launching (image pull): never", true, 0, 5000, 0},
      {"all ranks started at 200: 500 s run at 700, inside the interval", false, 200, 700, 0},
      {"all ranks started at 200: 600 s run at 800", false, 200, 800, 1},
  };
  for (const Row& row : rows) {
    DYNAMIC_SECTION(row.name) {
      ClusterState s = Nodes("gpu-[1-4]");
      s.jobs = {JobBuilder(1).Elastic(2, 4, 1).GpusPerTask(8, "h100").TimeLimit(36000s)
                    .Running(0, OnNodes({"gpu-1", "gpu-2", "gpu-3"})).Build()};
      s.jobs[0].launching = row.launching;
      s.jobs[0].running_since = row.running_since;
      PolicySet p;
      p.elastic.min_resize_interval = 600;
      CHECK(RunChecked(s, p, row.now).resizes.size() == row.resizes);
      CHECK(RunningFor(s.jobs[0], row.now) == (row.launching ? 0 : row.now - row.running_since));
    }
  }
}

TEST_CASE("a grow respects the step and takes no node a start of the same cycle took", "[core][elastic][grow]") {
  SECTION("step 2: one free node is not enough to go from 2 to 4") {
    ClusterState s = Nodes("gpu-[1-3]");
    s.jobs = {ElasticRunning(1, 2, 4, {"gpu-1", "gpu-2"}, 2)};
    CHECK(RunChecked(s, PolicySet{}, 700).resizes.empty());
  }
  SECTION("a pending job that starts now on the free node leaves nothing to grow into") {
    ClusterState s = Nodes("gpu-[1-4]");
    s.jobs = {ElasticRunning(1, 2, 4, {"gpu-1", "gpu-2", "gpu-3"}),
              JobBuilder(2).Tasks(1).GpusPerTask(8, "h100").Submit(650).Build()};
    const CyclePlan plan = RunChecked(s, PolicySet{}, 700);
    CHECK(StartedIds(plan) == std::vector<JobId>{2});
    CHECK(plan.resizes.empty());
  }
  SECTION("two shrunk jobs and one free node: only the older attempt grows") {
    ClusterState s = Nodes("gpu-[1-3]");
    s.jobs = {ElasticRunning(1, 1, 2, {"gpu-1"}), ElasticRunning(2, 1, 2, {"gpu-2"})};
    s.jobs[1].start_time = 50;
    const CyclePlan plan = RunChecked(s, PolicySet{}, 700);
    REQUIRE(plan.resizes.size() == 1);
    CHECK(plan.resizes[0].job == 1);
    CHECK(plan.resizes[0].to == 2);
  }
  SECTION("a job being stopped (preempting) does not grow") {
    ClusterState s = Nodes("gpu-[1-4]");
    s.jobs = {ElasticRunning(1, 2, 4, {"gpu-1", "gpu-2", "gpu-3"})};
    s.jobs[0].preempting = true;
    CHECK(RunChecked(s, PolicySet{}, 700).resizes.empty());
  }
}

TEST_CASE("no grow while a pending job waits for nodes: its reservation is not delayed", "[core][elastic][grow][backfill]") {
  // gpu-4 is free; job 2 needs 2 nodes and is reserved at 1000 when job 3 ends. Growing job 1
  // onto gpu-4 would hold it past 1000 and delay job 2: the grow waits.
  for (BackfillMode mode : {BackfillMode::kEasy, BackfillMode::kConservative}) {
    DYNAMIC_SECTION(BackfillModeName(mode)) {
      ClusterState s = Nodes("gpu-[1-4]");
      s.jobs = {ElasticRunning(1, 1, 3, {"gpu-1", "gpu-2"}),
                JobBuilder(3).Tasks(1).GpusPerTask(8, "h100").TimeLimit(1000s).Running(0, OnNodes({"gpu-3"})).Build(),
                JobBuilder(2).Tasks(2).GpusPerTask(8, "h100").TimeLimit(600s).Submit(600).Build()};
      PolicySet p;
      p.backfill.mode = mode;
      const CyclePlan plan = RunChecked(s, p, 700);
      CHECK(plan.starts.empty());
      CHECK(PendingOf(plan, 2).expected_start == 1000);
      CHECK(plan.resizes.empty());
      // Without job 2 nothing waits: the same job grows onto gpu-4.
      s.jobs.pop_back();
      const CyclePlan alone = RunChecked(s, p, 700);
      REQUIRE(alone.resizes.size() == 1);
      CHECK(alone.resizes[0].to == 3);
    }
  }
}

namespace {

// h1 (8 h100) free unless `h100_busy`, a1 (8 a100), c1 (64 cores); job 2 wants 8 h100 with
// fallback tiers a100 after 10 min and CPU after 1 h, and runs on `on` ("a1", "c1" or "h1") since
// t = 1000 (submitted at 0, 1 h limit).
ClusterState TierWorld(const std::string& on, bool h100_busy) {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("h1").Gpus("h100", 8).Cpus(64).Nodes("a1").Gpus("a100", 8).Cpus(64)
                .Nodes("c1").Cpus(64).Build();
  const std::vector<int32_t> all{0, 1, 2, 3, 4, 5, 6, 7};
  if (h100_busy)
    s.jobs.push_back(JobBuilder(1).GpusPerTask(8, "h100").TimeLimit(3600s).Running(0, Allocation{{Task(0, "h1", all, "h100")}}).Build());
  const std::string type = on == "h1" ? "h100" : on == "a1" ? "a100" : "";
  Job j = JobBuilder(2).GpusPerTask(8, "h100").CpusPerTask(8).TimeLimit(3600s).Submit(0)
              .Running(1000, Allocation{{Task(0, on, type.empty() ? std::vector<int32_t>{} : all, type, 8000)}}).Build();
  j.spec.fallback = {{"a100", 600}, {"cpu", 3600}};
  j.spec.checkpoint_interval = 600;  // keeps its progress across a restart
  s.jobs.push_back(j);
  return s;
}

}  // namespace

TEST_CASE("a job on a fallback tier moves back to its preferred accelerator by the grow rule", "[core][elastic][fallback]") {
  struct Row {
    const char* name;
    std::string on;
    bool h100_busy;
    Timestamp now;
    double speedup;
    bool grow;
    const char* from;  // nullptr: no decision
  };
  const Row rows[] = {
      {"on a100 with h100 free: back to h100", "a1", false, 1700, 2.0, true, "a100"},
      {"on the CPU tier with h100 free: back to h100", "c1", false, 1700, 2.0, true, "cpu"},
      {"h100 busy: stays", "a1", true, 1700, 2.0, true, nullptr},
      {"inside min_resize_interval: stays", "a1", false, 1599, 2.0, true, nullptr},
      {"tier_speedup 1: no gain", "a1", false, 1700, 1.0, true, nullptr},
      {"gain 2900 x (1 - 1/1.02) = 56 s below the 60 s cost: stays", "a1", false, 1700, 1.02, true, nullptr},
      {"already on its own h100: nothing", "h1", false, 1700, 2.0, true, nullptr},
      {"[elastic] grow = false", "a1", false, 1700, 2.0, false, nullptr},
      {"a rigid job that never checkpoints would lose its work: stays", "a1", false, 1700, 2.0, true, nullptr},
  };
  for (const Row& row : rows) {
    DYNAMIC_SECTION(row.name) {
      ClusterState s = TierWorld(row.on, row.h100_busy);
      if (std::string(row.name).find("never checkpoints") != std::string::npos) s.jobs.back().spec.checkpoint_interval = 0;
      PolicySet p;
      p.elastic.tier_speedup = row.speedup;
      p.elastic.grow = row.grow;
      const CyclePlan plan = RunChecked(s, p, row.now);
      if (!row.from) {
        CHECK(plan.resizes.empty());
        continue;
      }
      REQUIRE(plan.resizes.size() == 1);
      const ResizeDecision& d = plan.resizes[0];
      CHECK(d.job == 2);
      CHECK(d.accelerator == "h100");
      CHECK(d.from_accelerator == row.from);
      CHECK(d.from == 1);
      CHECK(d.to == 1);
      CHECK(d.gain == (3600 - 700) / 2);
      CHECK(d.cost == 60);
    }
  }
}

TEST_CASE("after a tier return's stop the next placement takes the preferred accelerator", "[core][elastic][fallback]") {
  ClusterState s = TierWorld("a1", false);
  Job& j = s.jobs.back();
  j.state = JobState::kPending;  // its ranks checkpointed and exited: requeued, fallback tiers still open
  j.allocation.reset();
  const CyclePlan plan = RunChecked(s, PolicySet{}, 1710);
  REQUIRE(plan.starts.size() == 1);
  CHECK(plan.starts[0].allocation.tasks[0].node == "h1");
}

TEST_CASE("a fallback tier open at once is still a fallback: the job returns to its own type", "[core][elastic][fallback]") {
  ClusterState s = TierWorld("a1", false);
  s.jobs.back().spec.fallback = {{"a100", 0}};
  const CyclePlan plan = RunChecked(s, PolicySet{}, 1700);
  REQUIRE(plan.resizes.size() == 1);
  CHECK(plan.resizes[0].accelerator == "h100");
  CHECK(plan.resizes[0].from_accelerator == "a100");
}

TEST_CASE("a tier return and a grow never take the same free node", "[core][elastic][fallback]") {
  ClusterState s = TierWorld("a1", false);
  // An elastic h100 job shrunk to 1 of 2 tasks on a second h100 node: h1 is the only free h100.
  s.nodes.push_back(ClusterBuilder().Nodes("h2").Gpus("h100", 8).Cpus(64).Build()[0]);
  s.jobs.push_back(JobBuilder(3).Elastic(1, 2).GpusPerTask(8, "h100").TimeLimit(3600s)
                       .Running(500, Allocation{{Task(0, "h2", {0, 1, 2, 3, 4, 5, 6, 7}, "h100")}}).Build());
  const CyclePlan plan = RunChecked(s, PolicySet{}, 1700);
  REQUIRE(plan.resizes.size() == 1);  // the tier return is planned first and takes h1
  CHECK(plan.resizes[0].job == 2);
  CHECK(plan.resizes[0].accelerator == "h100");
}
