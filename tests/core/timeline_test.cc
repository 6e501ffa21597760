// The availability timeline builds its profiles lazily: until a question about a later time, it
// answers from the free resources now. A lazy timeline must give exactly the answers of one built
// at construction, whatever the sequence of starts, reservations and questions.
#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "schedd/core/timeline.h"
#include "tests/core/support.h"

using namespace mlsched::core;
using namespace mlsched::core::testing;
using namespace std::chrono_literals;

namespace {

bool Same(const TaskDemand& a, const TaskDemand& b) {
  return std::tie(a.cpu_millis, a.memory_bytes, a.gpus) == std::tie(b.cpu_millis, b.memory_bytes, b.gpus);
}

bool Same(const std::vector<FreeStep>& a, const std::vector<FreeStep>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tie(a[i].time, a[i].cpu_millis, a[i].memory_bytes, a[i].gpus) !=
        std::tie(b[i].time, b[i].cpu_millis, b[i].memory_bytes, b[i].gpus))
      return false;
  return true;
}

// A cluster of `nodes` 8-GPU nodes (one of them down when `with_down`), with running one-node jobs
// of random size and end (some past their limit) filling part of it.
ClusterState RandomCluster(std::mt19937& rng, int nodes, bool with_down) {
  ClusterState s;
  ClusterBuilder b;
  b.Nodes("g[1-" + std::to_string(nodes) + "]").Gpus("h100", 8).Cpus(64);
  s.nodes = b.Build();
  if (with_down) s.nodes.back().health = NodeHealth::kDown;
  JobId id = 1;
  for (int n = 0; n < nodes; ++n) {
    int32_t next_gpu = 0;
    while (rng() % 3 != 0) {
      const int32_t g = 1 + static_cast<int32_t>(rng() % 3);
      if (next_gpu + g > 8) break;
      std::vector<int32_t> idx;
      for (int32_t k = 0; k < g; ++k) idx.push_back(next_gpu++);
      Allocation a;
      a.tasks.push_back(Task(0, s.nodes[n].name, idx, "h100", 4000));
      const Timestamp start = -static_cast<Timestamp>(rng() % 5000);
      s.jobs.push_back(JobBuilder(id++).GpusPerTask(g, "h100").CpusPerTask(4)
                           .TimeLimit(std::chrono::seconds(100 + rng() % 6000)).Running(start, a).Build());
    }
  }
  return s;
}

}  // namespace

TEST_CASE("A lazy availability timeline answers as one built at construction", "[core][backfill][property]") {
  const Timestamp now = 0;
  for (uint32_t seed = 1; seed <= 40; ++seed) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    const int nodes = seed % 5 == 0 ? 1 : 2 + static_cast<int>(rng() % 12);  // one node: an SWF machine
    const ClusterState s = RandomCluster(rng, nodes, seed % 3 == 0 && nodes > 1);
    const NodeLedger ledger(s.nodes, s.jobs);
    AvailabilityTimeline lazy(ledger, s.jobs, now);
    AvailabilityTimeline eager(ledger, s.jobs, now, AvailabilityTimeline::Build::kNow);
    REQUIRE_FALSE(lazy.Built());
    REQUIRE(eager.Built());
    // Starts from now (counts 0..2) and questions about now; after a while, one about later.
    const int later_at = seed % 4 == 0 ? 1000 : static_cast<int>(rng() % 30);
    for (int step = 0; step < 40; ++step) {
      const size_t node = rng() % ledger.size();
      const TaskDemand demand{1000 * static_cast<int64_t>(rng() % 3), 0, 1 + static_cast<int64_t>(rng() % 2)};
      const Timestamp to = now + 1 + static_cast<Timestamp>(rng() % 8000);
      switch (rng() % 4) {
        case 0:
        case 1: {
          const int64_t count = static_cast<int64_t>(rng() % 3);
          const Timestamp from = rng() % 4 == 0 ? now - 100 : now;  // clamped to now
          lazy.Reserve(node, demand, count, from, to);
          eager.Reserve(node, demand, count, from, to);
          break;
        }
        case 2:
          CHECK(Same(lazy.MinFree(node, now, to), eager.MinFree(node, now, to)));
          CHECK(lazy.NonDecreasing(node) == eager.NonDecreasing(node));
          break;
        default:
          CHECK(Same(lazy.AggregateMinFree(now, to), eager.AggregateMinFree(now, to)));
          CHECK(Same(lazy.AggregateMinFree(now, now + 1), eager.AggregateMinFree(now, now + 1)));
          // Before now counts as now; an empty window too.
          CHECK(Same(lazy.AggregateMinFree(now - 50, to), eager.AggregateMinFree(now - 50, to)));
          CHECK(Same(lazy.MinFree(node, now - 50, now), eager.MinFree(node, now - 50, now)));
      }
      if (step < later_at) CHECK_FALSE(lazy.Built());  // nothing so far asked about a later time
      if (step == later_at) {
        const Timestamp from = now + 1 + static_cast<Timestamp>(rng() % 3000);
        if (rng() % 2) {  // a reservation for a blocked job
          lazy.Reserve(node, demand, 1, from, from + 500);
          eager.Reserve(node, demand, 1, from, from + 500);
        } else {
          CHECK(lazy.NextChange(from) == eager.NextChange(from));
        }
        CHECK(lazy.Built());
      }
    }
    CHECK(Same(lazy.AggregateSteps(), eager.AggregateSteps()));
    CHECK(lazy.FutureReservedNodes() == eager.FutureReservedNodes());
    for (size_t i = 0; i < ledger.size(); ++i) {
      CHECK(lazy.LastChange(i, now + 4000) == eager.LastChange(i, now + 4000));
      CHECK(Same(lazy.MinFree(i, now + 10, now + 9000), eager.MinFree(i, now + 10, now + 9000)));
    }
    CHECK(lazy.NextAggregateFit(now, 600, TaskDemand{0, 0, 8}, 1) == eager.NextAggregateFit(now, 600, TaskDemand{0, 0, 8}, 1));
  }
}

TEST_CASE("A timeline over an allocation with a negative amount is built at once", "[core][backfill]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Nodes("c[1-2]").Cpus(8).Build();
  Allocation a;
  a.tasks.push_back(Task(0, "c1", {}, "", -4000));  // a release that would take resources
  s.jobs.push_back(JobBuilder(1).CpusPerTask(1).TimeLimit(1h).Running(0, a).Build());
  const NodeLedger ledger(s.nodes, s.jobs);
  REQUIRE(ledger.NegativeAllocation());
  const AvailabilityTimeline t(ledger, s.jobs, 10);
  CHECK(t.Built());
  // Free now is 12 CPUs on c1; after the job's end at 3600 s, 8: the minimum from now on is 8.
  CHECK(t.MinFree(0, 10, 7200).cpu_millis == 8000);
}

TEST_CASE("Giving back a start from now builds a lazy timeline and matches an eager one", "[core][backfill]") {
  std::mt19937 rng(3);
  const ClusterState s = RandomCluster(rng, 4, false);
  const NodeLedger ledger(s.nodes, s.jobs);
  AvailabilityTimeline lazy(ledger, s.jobs, 0);
  AvailabilityTimeline eager(ledger, s.jobs, 0, AvailabilityTimeline::Build::kNow);
  const TaskDemand d{1000, 0, 1};
  for (AvailabilityTimeline* t : {&lazy, &eager}) t->Reserve(1, d, 2, 0, 900);
  CHECK_FALSE(lazy.Built());
  for (AvailabilityTimeline* t : {&lazy, &eager}) t->Reserve(1, d, -1, 0, 900);  // a kept plan released
  CHECK(lazy.Built());
  CHECK(Same(lazy.MinFree(1, 0, 5000), eager.MinFree(1, 0, 5000)));
  CHECK(Same(lazy.AggregateSteps(), eager.AggregateSteps()));
}
