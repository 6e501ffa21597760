// Scenario tables for the FIFO gang scheduler (no backfill): world in -> starts and reasons.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "tests/core/support.h"

using namespace mlsched::core;
using namespace mlsched::core::testing;
using namespace std::chrono_literals;

TEST_CASE("FIFO starts gangs whole, in submit order, and stops at the first blocked job",
          "[core][fifo]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("gpu-[01-04]").Gpus("h100", 8).Build();
  s.jobs = {JobBuilder(1).Tasks(2).GpusPerTask(8).Build(),    // 2 nodes
            JobBuilder(2).Tasks(3).GpusPerTask(8).Build(),    // needs 3, only 2 left: blocks
            JobBuilder(3).Tasks(1).GpusPerTask(1).Build(),    // fits, but strict FIFO
            JobBuilder(4).Tasks(1).GpusPerTask(1).Hold().Build()};
  CyclePlan plan = RunChecked(s, PolicySet{}, 100);
  CHECK(StartedIds(plan) == std::vector<JobId>{1});
  CHECK(PendingOf(plan, 2).reason == PendingReason::kResources);
  CHECK(PendingOf(plan, 3).reason == PendingReason::kPriority);
  CHECK(PendingOf(plan, 4).reason == PendingReason::kJobHeldUser);
}

TEST_CASE("submit time, not id, orders the queue", "[core][fifo]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("n1").Gpus("a100", 4).Build();
  s.jobs = {JobBuilder(1).GpusPerTask(4).Submit(50).Build(), JobBuilder(2).GpusPerTask(4).Submit(10).Build()};
  CyclePlan plan = RunChecked(s, PolicySet{}, 100);
  CHECK(StartedIds(plan) == std::vector<JobId>{2});
  CHECK(PendingOf(plan, 1).reason == PendingReason::kResources);
}

TEST_CASE("tasks of a gang share a node and get disjoint devices", "[core][fifo]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("gpu-[01-02]").Gpus("h100", 8).Build();
  s.jobs = {JobBuilder(1).Running(0, Allocation{{Task(0, "gpu-01", {0, 1, 2}, "h100")}}).Build(),
            JobBuilder(2).Tasks(4).GpusPerTask(2).Build()};
  CyclePlan plan = RunChecked(s, PolicySet{}, 100);
  REQUIRE(plan.starts.size() == 1);
  // Best fit: 4 tasks x 2 GPUs fit on the empty node; gpu-01 has only 5 free.
  for (const TaskPlacement& t : plan.starts[0].allocation.tasks) CHECK(t.node == "gpu-02");
  std::set<int32_t> devs;
  for (const TaskPlacement& t : plan.starts[0].allocation.tasks)
    for (int32_t d : t.gpu_indices) devs.insert(d);
  CHECK(devs == std::set<int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
}

TEST_CASE("only up nodes in the partition's pools with an acceptable GPU type get work",
          "[core][fifo]") {
  ClusterState s;
  s.nodes = ClusterBuilder()
                .Pool("spot").Nodes("spot-[1-2]").Gpus("h100", 8)
                .Pool("on-demand").Nodes("od-1").Gpus("h100", 8).Health(NodeHealth::kDrain)
                .Nodes("od-2").Gpus("a100", 8)
                .Nodes("od-3").Gpus("h100", 8)
                .Build();
  PolicySet policy;
  policy.partitions[0].pools = {"on-demand"};
  struct Row { const char* what; Job job; std::optional<std::string> node; };
  std::vector<Row> table{
      {"h100 job goes to the only up on-demand h100 node", JobBuilder(1).GpusPerTask(8, "h100").Build(), "od-3"},
      {"gpu_types a100 goes to od-2", JobBuilder(1).GpusPerTask(8).GpuTypes({"a100"}).Build(), "od-2"},
      {"two h100 nodes needed: none", JobBuilder(1).Tasks(2).GpusPerTask(8, "h100").Build(), std::nullopt},
      {"feature missing: none", JobBuilder(1).GpusPerTask(1).Features({"ib"}).Build(), std::nullopt},
  };
  for (const Row& row : table) {
    SECTION(row.what) {
      s.jobs = {row.job};
      CyclePlan plan = RunChecked(s, policy, 0);
      if (row.node) {
        REQUIRE(plan.starts.size() == 1);
        CHECK(plan.starts[0].allocation.tasks[0].node == *row.node);
      } else {
        CHECK(plan.starts.empty());
        CHECK(PendingOf(plan, 1).reason == PendingReason::kResources);
      }
    }
  }
}

TEST_CASE("partition limits give their own reason and do not block the queue", "[core][fifo]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("n1").Gpus("l4", 1).Build();
  PolicySet policy;
  policy.partitions.push_back(MakePartition("closed"));
  policy.partitions.back().up = false;
  s.jobs = {JobBuilder(1).Partition("nope").Build(), JobBuilder(2).Partition("closed").Build(),
            JobBuilder(3).TimeLimit(30 * 24h).Build(), JobBuilder(4).GpusPerTask(1).Build()};
  CyclePlan plan = RunChecked(s, policy, 0);
  CHECK(PendingOf(plan, 1).reason == PendingReason::kPartitionLimit);
  CHECK(PendingOf(plan, 2).reason == PendingReason::kPartitionDown);
  CHECK(PendingOf(plan, 3).reason == PendingReason::kPartitionLimit);
  CHECK(StartedIds(plan) == std::vector<JobId>{4});
}

TEST_CASE("the invariant checker catches broken plans", "[core][invariants]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("n1").Gpus("h100", 2).Build();
  s.jobs = {JobBuilder(1).Running(0, Allocation{{Task(0, "n1", {0}, "h100", 1000)}}).GpusPerTask(1).Build(),
            JobBuilder(2).Tasks(2).GpusPerTask(1).Build()};
  PolicySet p;
  CyclePlan bad;
  bad.starts.push_back({2, Allocation{{Task(0, "n1", {0}, "h100", 1000)}}});  // device 0 twice, 1 of 2 ranks
  auto v = CheckInvariants(s, p, bad);
  auto has = [&v](const std::string& text) {
    return std::any_of(v.begin(), v.end(), [&](const std::string& x) { return x.find(text) != std::string::npos; });
  };
  CHECK(has("device 0 on n1 held twice"));
  CHECK(has("1 tasks placed of 2"));
  CHECK(has("rank 1 missing"));
  AccountPolicy a;
  a.name = "research";
  a.max_gpus = 1;
  p.accounts = {a};
  bad.starts = {{2, Allocation{{Task(0, "n1", {1}, "h100", 1000), Task(1, "n1", {1}, "h100", 1000)}}}};
  v = CheckInvariants(s, p, bad);
  CHECK(has("over-allocated"));
  CHECK(has("account research over max_gpus"));
  CHECK(CheckInvariants(s, p, CyclePlan{{}, {{2, PendingReason::kResources, std::nullopt, "", 0}}, {}, {}, {}}).empty());
}
