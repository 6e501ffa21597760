// NowFitIndex (the planner's incremental "fits now" index) must choose exactly the nodes that a full
// scan + ChooseNodes chooses, as the cycle's starts change the ledger and reservations change the
// timeline.
#include <catch2/catch.hpp>

#include <random>

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
