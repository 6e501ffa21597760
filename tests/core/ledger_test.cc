#include <catch2/catch.hpp>

#include "schedd/core/ledger.h"
#include "tests/core/support.h"

using namespace mlsched::core;
using namespace mlsched::core::testing;

namespace {
bool SameLedger(const NodeLedger& a, const NodeLedger& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const NodeSlot &x = a.slot(i), &y = b.slot(i);
    if (x.free.cpu_millis != y.free.cpu_millis || x.free.memory_bytes != y.free.memory_bytes ||
        x.free.gpus != y.free.gpus || x.used_devices.Count() != y.used_devices.Count())
      return false;
    for (int32_t d = 0; d < x.used_devices.Size(); ++d)
      if (x.used_devices.Contains(d) != y.used_devices.Contains(d)) return false;
  }
  return true;
}
}  // namespace

TEST_CASE("DeviceSet picks the lowest free indices", "[core][ledger]") {
  DeviceSet s(8);
  s.Insert(0);
  s.Insert(2);
  CHECK(s.Count() == 2);
  CHECK(s.LowestAbsent(3) == std::vector<int32_t>{1, 3, 4});
  s.Erase(0);
  CHECK(s.LowestAbsent(1) == std::vector<int32_t>{0});
  DeviceSet big(130);
  big.Insert(129);
  CHECK(big.Contains(129));
  CHECK_FALSE(big.Contains(64));
}

TEST_CASE("the ledger subtracts running allocations and avoids their devices", "[core][ledger]") {
  auto nodes = ClusterBuilder().Nodes("gpu-[01-02]").Gpus("h100", 8).Build();
  Allocation running{{Task(0, "gpu-01", {0, 1, 5}, "h100", 3000)}};
  std::vector<Job> jobs{JobBuilder(1).GpusPerTask(3).Running(0, running).Build()};
  NodeLedger ledger(nodes, jobs);
  CHECK(ledger.FreeGpus(0) == 5);
  CHECK(ledger.slot(0).free.cpu_millis == 61000);
  AllocationTxn txn(ledger);
  REQUIRE(txn.Take(0, TaskDemand{1000, 0, 4}, 0));
  CHECK(txn.placements()[0].gpu_indices == std::vector<int32_t>{2, 3, 4, 6});
  CHECK_FALSE(txn.Take(0, TaskDemand{1000, 0, 2}, 1));  // only device 7 left
}

TEST_CASE("AllocationTxn::Discard restores the ledger exactly", "[core][ledger]") {
  auto nodes = ClusterBuilder().Nodes("gpu-[01-03]").Gpus("a100", 4).Build();
  std::vector<Job> jobs{JobBuilder(1).Running(0, Allocation{{Task(0, "gpu-02", {1}, "a100", 500)}}).Build()};
  NodeLedger ledger(nodes, jobs);
  const NodeLedger before(nodes, jobs);
  {
    AllocationTxn txn(ledger);
    for (size_t n = 0; n < 3; ++n)
      for (int r = 0; r < 2; ++r) REQUIRE(txn.Take(n, TaskDemand{2000, 1 << 30, 1}, r));
    CHECK_FALSE(SameLedger(ledger, before));
    txn.Discard();
    CHECK(SameLedger(ledger, before));
  }
  {
    AllocationTxn txn(ledger);
    REQUIRE(txn.Take(1, TaskDemand{0, 0, 3}, 0));
  }  // destroyed open: discarded
  CHECK(SameLedger(ledger, before));
  AllocationTxn txn(ledger);
  REQUIRE(txn.Take(2, TaskDemand{0, 0, 2}, 0));
  Allocation a = txn.Commit();
  CHECK(a.tasks.size() == 1);
  CHECK(ledger.FreeGpus(2) == 2);
}

TEST_CASE("CheckFit tells feasible-later from never", "[core][ledger]") {
  auto nodes = ClusterBuilder().Nodes("n1").Gpus("l4", 2).Cpus(8).Build();
  std::vector<Job> jobs{JobBuilder(1).Running(0, Allocation{{Task(0, "n1", {0}, "l4", 4000)}}).Build()};
  NodeLedger ledger(nodes, jobs);
  CHECK(CheckFit(ledger.slot(0), TaskDemand{4000, 0, 1}) == Fit::kFits);
  CHECK(CheckFit(ledger.slot(0), TaskDemand{4000, 0, 2}) == Fit::kNotNow);
  CHECK(CheckFit(ledger.slot(0), TaskDemand{4000, 0, 3}) == Fit::kNever);
  CHECK(CheckFit(ledger.slot(0), TaskDemand{9000, 0, 0}) == Fit::kNever);
}

TEST_CASE("a task's node hint is checked against its node name", "[core][ledger]") {
  auto nodes = ClusterBuilder().Nodes("gpu-[01-03]").Gpus("h100", 8).Build();
  TaskPlacement right = Task(0, "gpu-03", {0, 1}, "h100", 2000);
  right.node_hint = 2;
  TaskPlacement stale = Task(0, "gpu-02", {4}, "h100", 1000);
  stale.node_hint = 0;  // the node list changed since the task was placed: gpu-01 is not gpu-02
  TaskPlacement gone = Task(0, "gpu-09", {0}, "h100", 1000);
  gone.node_hint = 1;
  std::vector<Job> jobs{JobBuilder(1).Running(0, Allocation{{right}}).Build(),
                        JobBuilder(2).Running(0, Allocation{{stale}}).Build(),
                        JobBuilder(3).Running(0, Allocation{{gone}}).Build()};
  NodeLedger ledger(nodes, jobs);
  CHECK(ledger.Find(right) == 2);
  CHECK(ledger.Find(stale) == 1);
  CHECK(ledger.Find(gone) == -1);
  CHECK(ledger.FreeGpus(0) == 8);  // the stale hint did not charge gpu-01
  CHECK(ledger.FreeGpus(1) == 7);
  CHECK(ledger.slot(1).used_devices.Contains(4));
  CHECK(ledger.FreeGpus(2) == 6);
  // Tasks the ledger places carry the hint of the node they went to.
  AllocationTxn txn(ledger);
  REQUIRE(txn.Take(1, TaskDemand{1000, 0, 1}, 0));
  CHECK(txn.placements()[0].node_hint == 1);
  CHECK(txn.placements()[0].node == "gpu-02");
}

TEST_CASE("a ledger kept by Occupy and Release drives the cycle as a fresh one does", "[core][ledger][property]") {
  // The simulator keeps one ledger across passes (Occupy on start, Release on stop) and passes it
  // to SchedulingCycle::Run; every pass must decide what a pass building its own ledger decides.
  PolicySet policy;
  policy.backfill.mode = BackfillMode::kEasy;
  ClusterState state;
  state.nodes = ClusterBuilder().Domain("a").Nodes("g[1-6]").Gpus("h100", 8).Cpus(64)
                    .Domain("b").Nodes("c[1-3]").Cpus(32).Build();
  NodeLedger kept(state.nodes, state.jobs);
  uint32_t rng = 7;
  auto next = [&rng] { return rng = rng * 1664525u + 1013904223u; };
  JobId id = 1;
  for (Timestamp now = 0; now < 40 * 600; now += 600) {
    for (int k = 0; k < 3; ++k) {
      JobBuilder j(id++);
      j.Tasks(1 + static_cast<int32_t>(next() % 3)).TimeLimit(std::chrono::seconds(600 * (1 + next() % 6))).Submit(now);
      if (next() % 3) j.GpusPerTask(1 + static_cast<int64_t>(next() % 4), "h100").CpusPerTask(2);
      else j.CpusPerTask(1 + static_cast<int64_t>(next() % 8));
      state.jobs.push_back(j.Build());
    }
    const CyclePlan fresh = SchedulingCycle::Run(state, policy, now);
    const CyclePlan with_kept = SchedulingCycle::Run(state, policy, now, kept);
    REQUIRE(StartedIds(with_kept) == StartedIds(fresh));
    REQUIRE(with_kept.pending.size() == fresh.pending.size());
    for (size_t p = 0; p < fresh.pending.size(); ++p) {
      CHECK(with_kept.pending[p].job == fresh.pending[p].job);
      CHECK(with_kept.pending[p].reason == fresh.pending[p].reason);
      CHECK(with_kept.pending[p].expected_start == fresh.pending[p].expected_start);
    }
    for (size_t s = 0; s < fresh.starts.size(); ++s) {
      const auto &a = with_kept.starts[s].allocation.tasks, &b = fresh.starts[s].allocation.tasks;
      REQUIRE(a.size() == b.size());
      for (size_t t = 0; t < a.size(); ++t) {
        CHECK(a[t].node == b[t].node);
        CHECK(a[t].gpu_indices == b[t].gpu_indices);
        CHECK(a[t].resources == b[t].resources);
      }
    }
    ApplyPlan(state, fresh, now);
    for (const StartDecision& s : fresh.starts) kept.Occupy(s.allocation);
    // Jobs past their time limit stop; the kept ledger gives their allocations back.
    for (Job& job : state.jobs)
      if (job.state == JobState::kRunning && job.start_time + job.spec.time_limit <= now + 600) {
        job.state = JobState::kCompleted;
        kept.Release(*job.allocation);
      }
    CHECK(SameLedger(kept, NodeLedger(state.nodes, state.jobs)));
  }
  CHECK(id > 100);
  // The cycle does read the kept ledger: one that holds a phantom allocation on every GPU of g1
  // keeps a one-GPU job off g1, where a fresh ledger puts it.
  ClusterState empty;
  empty.nodes = ClusterBuilder().Nodes("g[1-2]").Gpus("h100", 8).Cpus(64).Build();
  empty.jobs.push_back(JobBuilder(1).GpusPerTask(1, "h100").CpusPerTask(1).TimeLimit(std::chrono::seconds(600)).Build());
  NodeLedger phantom(empty.nodes, {});
  Allocation full;
  full.tasks.push_back(Task(0, "g1", {0, 1, 2, 3, 4, 5, 6, 7}, "h100", 1000));
  phantom.Occupy(full);
  const CyclePlan on_fresh = SchedulingCycle::Run(empty, policy, 0);
  const CyclePlan on_phantom = SchedulingCycle::Run(empty, policy, 0, phantom);
  REQUIRE(on_fresh.starts.size() == 1);
  REQUIRE(on_phantom.starts.size() == 1);
  CHECK(on_fresh.starts[0].allocation.tasks.at(0).node == "g1");
  CHECK(on_phantom.starts[0].allocation.tasks.at(0).node == "g2");
}
