// NowFitIndex (the planner's incremental "fits now" index) must choose exactly the nodes that a full
// scan + ChooseNodes chooses, as the cycle's starts change the ledger and reservations change the
// timeline. ChooseNodes itself must match its sort-based specification.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <random>
#include <tuple>

#include "schedd/core/fit_index.h"
#include "tests/core/support.h"

using namespace mlsched::core;
using namespace mlsched::core::testing;
using namespace std::chrono_literals;

namespace {

// The full scan the planner does without the index (Planner::Candidates at `now`).
std::optional<NodeChoice> FullScan(const NodeLedger& ledger, const AvailabilityTimeline& timeline, int32_t type_id,
                                   const TaskDemand& demand, int64_t ntasks, Timestamp now, Timestamp to,
                                   Topology topology) {
  std::vector<NodeCandidate> out;
  for (size_t i = 0; i < ledger.size(); ++i) {
    const NodeSlot& slot = ledger.slot(i);
    if (demand.gpus > 0 && slot.gpu_type_id != type_id) continue;
    TaskDemand free = slot.free;
    free.gpus = ledger.FreeGpus(i);
    int64_t k = TasksThatFit(free, demand, ntasks);
    if (k > 0 && !timeline.NonDecreasing(i)) k = TasksThatFit(timeline.MinFree(i, now, to), demand, k);
    if (k > 0) out.push_back({i, k, slot.domain_id, slot.zone_id, slot.region_id, 0});
  }
  return ChooseNodes(out, ntasks, topology);
}

}  // namespace

TEST_CASE("NowFitIndex chooses what the full scan chooses, start after start", "[core][placement][property]") {
  for (uint32_t seed = 1; seed <= 30; ++seed) {
    INFO("seed " << seed);
    std::mt19937 rng(seed);
    ClusterState s;
    ClusterBuilder b;
    for (int d = 0; d < 6; ++d)
      b.Domain("nvl-" + std::to_string(d)).Nodes("g" + std::to_string(d) + "-[1-" + std::to_string(2 + rng() % 5) + "]")
          .Gpus(d % 3 == 2 ? "a100" : "h100", 8).Cpus(64);
    s.nodes = b.Build();
    NodeLedger ledger(s.nodes, s.jobs);
    AvailabilityTimeline timeline(ledger, s.jobs, 0);
    std::vector<size_t> all(ledger.size());
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    // A future reservation on a few nodes (what EASY's first blocked job leaves).
    for (size_t i = 0; i < ledger.size(); i += 5) timeline.Reserve(i, TaskDemand{0, 0, 4}, 1, 50, 500);
    std::map<std::pair<int64_t, int64_t>, NowFitIndex> indexes;  // (gpus, ntasks) -> index
    std::vector<size_t> touched;
    int decided = 0;
    for (int step = 0; step < 60; ++step) {
      const int64_t gpus = int64_t{1} << (rng() % 4), ntasks = 1 + rng() % 4;
      const Topology topo = rng() % 2 ? Topology::kNone : Topology::kSameDomain;
      const TaskDemand demand{1000, 0, gpus};
      const int32_t type = ledger.GpuTypeId("h100");
      const Timestamp to = 10 + rng() % 200;  // some windows reach the reservation at 50
      auto it = indexes.try_emplace({gpus, ntasks}, ledger, all, type, demand, ntasks).first;
      it->second.Update(ledger, touched);
      const auto want = FullScan(ledger, timeline, type, demand, ntasks, 0, to, topo);
      const auto got = it->second.Choose(ledger, timeline, 0, to, topo);
      if (got) {
        ++decided;
        REQUIRE(got->has_value() == want.has_value());
        if (want) CHECK(**got == *want);
      }
      if (want) {  // start it, as the planner would
        AllocationTxn txn(ledger);
        REQUIRE(TakeChoice(txn, *want, demand));
        txn.Commit();
        for (auto [node, count] : *want) touched.push_back(node);
      }
    }
    CHECK(decided > 30);
  }
}

namespace {
// The rule ChooseNodes applies to domains and then to nodes inside each domain, written the slow
// way: from `items` (amount, id) sorted by amount desc (ties in preference order), take the
// largest while none holds the remainder, then the first of the smallest amounts that does.
// Returns (id, taken) in pick order.
std::vector<std::pair<int64_t, int64_t>> LargestThenTightest(const std::vector<std::pair<int64_t, int64_t>>& items,
                                                             int64_t need) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (size_t f = 0; need > 0; ++f) {
    if (items[f].first < need) {
      out.emplace_back(items[f].second, items[f].first);
      need -= items[f].first;
      continue;
    }
    size_t best = f;
    for (size_t j = f; j < items.size() && items[j].first >= need; ++j)
      if (items[j].first < items[best].first) best = j;
    out.emplace_back(items[best].second, need);
    need = 0;
  }
  return out;
}

// The specification of gang placement inside one group: domains by the rule above (sums desc,
// lowest id first), then each domain's nodes by the rule, sorted by (tasks desc, tiebreak, node).
std::optional<NodeChoice> ReferenceChoose(const std::vector<NodeCandidate>& c, int64_t ntasks) {
  std::map<int32_t, int64_t> sums;
  for (const auto& n : c)
    if (n.tasks > 0) sums[n.domain] += n.tasks;
  std::vector<std::pair<int64_t, int64_t>> domains;
  int64_t total = 0;
  for (auto [d, s] : sums) {
    domains.emplace_back(s, d);
    total += s;
  }
  if (total < ntasks) return std::nullopt;
  std::stable_sort(domains.begin(), domains.end(), [](auto a, auto b) { return a.first > b.first; });
  NodeChoice out;
  for (auto [d, quota] : LargestThenTightest(domains, ntasks)) {
    std::vector<NodeCandidate> in;
    for (const auto& n : c)
      if (n.tasks > 0 && n.domain == d) in.push_back(n);
    std::sort(in.begin(), in.end(), [](const NodeCandidate& a, const NodeCandidate& b) {
      return std::tie(b.tasks, a.tiebreak, a.node) < std::tie(a.tasks, b.tiebreak, b.node);
    });
    std::vector<std::pair<int64_t, int64_t>> nodes;
    for (const auto& n : in) nodes.emplace_back(n.tasks, static_cast<int64_t>(n.node));
    for (auto [node, taken] : LargestThenTightest(nodes, quota)) out.emplace_back(static_cast<size_t>(node), taken);
  }
  return out;
}
}  // namespace

TEST_CASE("ChooseNodes matches the sort-based specification on random candidates", "[core][placement][property]") {
  std::mt19937_64 rng(17);
  for (int round = 0; round < 400; ++round) {
    std::vector<NodeCandidate> c;
    const int n = 1 + static_cast<int>(rng() % 40);
    const int domains = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < n; ++i)
      c.push_back({static_cast<size_t>(i), static_cast<int64_t>(rng() % 9), static_cast<int32_t>(rng() % domains), 0, 0,
                   static_cast<int64_t>(rng() % 3)});
    std::shuffle(c.begin(), c.end(), rng);
    const int64_t ntasks = 1 + static_cast<int64_t>(rng() % 30);
    INFO("round " << round << " ntasks " << ntasks);
    CHECK(ChooseNodes(c, ntasks, Topology::kNone) == ReferenceChoose(c, ntasks));
  }
}
