// Accelerator fallback tiers: the next tier opens exactly when the job has waited its budget.
#include <catch2/catch.hpp>

#include "schedd/core/fallback.h"
#include "tests/core/support.h"

using namespace mlsched::core;
using namespace mlsched::core::testing;

namespace {

// h100 busy, a100 free, and a CPU-only node free.
ClusterState World() {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("h1").Gpus("h100", 8).Nodes("a1").Gpus("a100", 8).Nodes("c1").Cpus(64).Build();
  s.jobs.push_back(JobBuilder(1).GpusPerTask(8, "h100").Running(0, Allocation{{Task(0, "h1", {0, 1, 2, 3, 4, 5, 6, 7}, "h100")}}).Build());
  Job j = JobBuilder(2).GpusPerTask(8, "h100").CpusPerTask(8).Submit(1000).Build();
  j.spec.fallback = {{"a100", 600}, {"cpu", 3600}};
  s.jobs.push_back(j);
  return s;
}

}  // namespace

TEST_CASE("fallback: the next GPU tier opens exactly after its wait budget", "[core][fallback]") {
  ClusterState s = World();
  CyclePlan before = RunChecked(s, PolicySet{}, 1000 + 599);
  CHECK(before.starts.empty());
  CHECK(PendingOf(before, 2).reason == PendingReason::kResources);
  CyclePlan at = RunChecked(s, PolicySet{}, 1000 + 600);
  REQUIRE(at.starts.size() == 1);
  CHECK(at.starts[0].allocation.tasks[0].node == "a1");
  CHECK(at.starts[0].allocation.tasks[0].resources.gpus.at("a100") == 8);
}

TEST_CASE("fallback: the CPU tier runs without GPUs only when no GPU tier fits", "[core][fallback]") {
  ClusterState s = World();
  // a100 busy too: before the CPU budget nothing starts, after it the job runs on CPUs.
  s.jobs.push_back(JobBuilder(3).GpusPerTask(8, "a100").Running(0, Allocation{{Task(0, "a1", {0, 1, 2, 3, 4, 5, 6, 7}, "a100")}}).Build());
  CHECK(RunChecked(s, PolicySet{}, 1000 + 3599).starts.empty());
  CyclePlan plan = RunChecked(s, PolicySet{}, 1000 + 3600);
  REQUIRE(plan.starts.size() == 1);
  CHECK(plan.starts[0].allocation.tasks[0].gpu_indices.empty());
  CHECK(plan.starts[0].allocation.tasks[0].resources.GpuCount() == 0);
  // With the a100 node free again, the GPU tier still wins over CPUs.
  s.jobs.pop_back();
  CyclePlan gpu = RunChecked(s, PolicySet{}, 1000 + 3600);
  REQUIRE(gpu.starts.size() == 1);
  CHECK(gpu.starts[0].allocation.tasks[0].node == "a1");
}

TEST_CASE("fallback: open tiers keep the preferred order", "[core][fallback]") {
  JobSpec spec;
  spec.per_task.gpus = {{"h100", 4}};
  spec.fallback = {{"a100", 600}, {"l4", 1200}, {"cpu", 3600}};
  CHECK(OpenGpuTiers(spec, 0) == std::vector<std::string>{"h100"});
  CHECK(OpenGpuTiers(spec, 600) == std::vector<std::string>{"h100", "a100"});
  CHECK(OpenGpuTiers(spec, 5000) == std::vector<std::string>{"h100", "a100", "l4"});
  CHECK_FALSE(CpuTierOpen(spec, 3599));
  CHECK(CpuTierOpen(spec, 3600));
}
