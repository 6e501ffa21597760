// The availability timeline builds its profiles lazily: until a question about a later time, it
// answers from the free resources now. A lazy timeline must give exactly the answers of one built
// at construction, whatever the sequence of starts, reservations and questions.
#include <catch2/catch.hpp>

#include <algorithm>
#include <optional>
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

namespace {

// The free resources of a fresh timeline (no reservations) less a list of reservations, point by
// point: the reference the timeline's step lists are checked against.
struct BruteProfile {
  struct Held {
    size_t node;
    TaskDemand amount;
    Timestamp from, to;
  };
  const AvailabilityTimeline& fresh;
  size_t nodes;
  std::vector<Held> held;
  std::vector<Timestamp> base_changes;  // the fresh timeline's change times

  TaskDemand FreeAt(size_t node, Timestamp x) const {
    TaskDemand f = fresh.MinFree(node, x, x + 1);
    for (const Held& h : held)
      if (h.node == node && h.from <= x && x < h.to) {
        f.cpu_millis -= h.amount.cpu_millis;
        f.memory_bytes -= h.amount.memory_bytes;
        f.gpus -= h.amount.gpus;
      }
    return f;
  }
  TaskDemand AggregateAt(Timestamp x) const {
    TaskDemand sum{};
    for (size_t n = 0; n < nodes; ++n) {
      const TaskDemand f = FreeAt(n, x);
      sum.cpu_millis += f.cpu_millis;
      sum.memory_bytes += f.memory_bytes;
      sum.gpus += f.gpus;
    }
    return sum;
  }
  // Every time the reference may change: the fresh timeline's changes and every reservation's ends.
  std::vector<Timestamp> Points() const {
    std::vector<Timestamp> pts = base_changes;
    for (const Held& h : held) pts.insert(pts.end(), {h.from, h.to});
    std::sort(pts.begin(), pts.end());
    pts.erase(std::unique(pts.begin(), pts.end()), pts.end());
    return pts;
  }
  // True when `covers` holds at x and at every point in (x, x + d).
  template <typename F>
  bool Holds(Timestamp x, Duration d, const std::vector<Timestamp>& pts, F covers) const {
    if (!covers(x)) return false;
    for (Timestamp p : pts)
      if (p > x && p < x + d && !covers(p)) return false;
    return true;
  }
  // NextAggregateFit by definition: the first candidate (from, then every change after it) whose
  // window holds `need` throughout.
  std::optional<Timestamp> Fit(Timestamp from, Duration d, const TaskDemand& need) const {
    const std::vector<Timestamp> pts = Points();
    auto covers = [&](Timestamp x) {
      const TaskDemand a = AggregateAt(x);
      return a.cpu_millis >= need.cpu_millis && a.memory_bytes >= need.memory_bytes && a.gpus >= need.gpus;
    };
    if (Holds(from, d, pts, covers)) return from;
    for (Timestamp p : pts)
      if (p > from && Holds(p, d, pts, covers)) return p;
    return std::nullopt;
  }
};

}  // namespace

TEST_CASE("Aggregate searches and the reservations made at their answers match a brute-force profile",
          "[core][backfill][property]") {
  const Timestamp now = 0;
  for (uint32_t seed = 1; seed <= 60; ++seed) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    const int nodes = seed % 3 == 0 ? 1 : 2 + static_cast<int>(rng() % 6);  // one node: the aggregate is its profile
    const ClusterState s = RandomCluster(rng, nodes, false);
    const NodeLedger ledger(s.nodes, s.jobs);
    const AvailabilityTimeline fresh(ledger, s.jobs, now, AvailabilityTimeline::Build::kNow);
    AvailabilityTimeline t(ledger, s.jobs, now);
    BruteProfile ref{fresh, ledger.size(), {}, {now}};
    for (auto c = fresh.NextChange(now); c; c = fresh.NextChange(*c)) ref.base_changes.push_back(*c);
    for (int step = 0; step < 30; ++step) {
      const TaskDemand per_task{1000 * (1 + static_cast<int64_t>(rng() % 4)), 0, static_cast<int64_t>(rng() % 3)};
      const int64_t count = 1 + static_cast<int64_t>(rng() % 3);
      const Duration d = 1 + static_cast<Duration>(rng() % 5000);
      const Timestamp from = rng() % 2 ? now : now + static_cast<Timestamp>(rng() % 4000);
      const TaskDemand need{per_task.cpu_millis * count, 0, per_task.gpus * count};
      const auto fit = t.NextAggregateFit(from, d, per_task, count);
      REQUIRE(fit == ref.Fit(from, d, need));
      if (!fit || rng() % 4 == 0) continue;
      // Reserve as many tasks as one node holds over the window (the planner's next step), most
      // often at the answer; else now or a random time (a start now after a search that found a
      // later time, as the planner does for the next job).
      const uint32_t where = rng() % 6;
      const Timestamp at = where < 4 ? *fit : where == 4 ? now : now + static_cast<Timestamp>(rng() % 6000);
      const size_t node = rng() % ledger.size();
      const std::vector<Timestamp> pts = ref.Points();
      int64_t k = count;
      for (; k > 0; --k) {
        auto holds = [&](Timestamp x) {
          const TaskDemand f = ref.FreeAt(node, x);
          return f.cpu_millis >= per_task.cpu_millis * k && f.gpus >= per_task.gpus * k;
        };
        if (ref.Holds(at, d, pts, holds)) break;
      }
      if (k == 0) continue;
      t.Reserve(node, per_task, k, at, at + d);
      ref.held.push_back({node, {per_task.cpu_millis * k, 0, per_task.gpus * k}, at, at + d});
    }
    // Every node's steps and the aggregate's, point by point.
    for (Timestamp p : ref.Points()) {
      for (size_t n = 0; n < ledger.size(); ++n) CHECK(Same(t.MinFree(n, p, p + 1), ref.FreeAt(n, p)));
      CHECK(Same(t.AggregateMinFree(p, p + 1), ref.AggregateAt(p)));
    }
  }
}
