// Preemption-aware, cost-aware placement: spot preference, expected cost, tier order, data
// locality, the spot wait budget and the eviction limit, and the learned eviction rate.
#include <catch2/catch.hpp>

#include "schedd/core/pools.h"
#include "tests/core/support.h"

using namespace mlsched::core;
using namespace mlsched::core::testing;
using namespace std::chrono_literals;

namespace {

PolicySet Priced() {
  PolicySet p;
  p.placement.pricing["on-demand"] = PoolPricing{0.05, {{"h100", 4.0}}};
  p.placement.pricing["spot"] = PoolPricing{0.02, {{"h100", 1.6}}};
  p.placement.eviction_rate_per_hour["spot"] = 0.05;
  p.placement.spot_wait_budget = 600;
  p.placement.spot_max_evictions = 2;
  p.placement.egress_per_gb = 0.1;
  return p;
}

const std::vector<Pool> kBoth{Pool::kOnDemand, Pool::kSpot};

std::vector<Node> TwoPools() {
  return ClusterBuilder().Pool("on-demand").Region("us").Nodes("od-[1-2]").Gpus("h100", 8).Cpus(64)
      .Pool("spot").Nodes("sp-[1-2]").Gpus("h100", 8).Cpus(64)
      .Pool("on-demand").Region("eu").Nodes("eu-1").Gpus("h100", 8).Cpus(64).Build();
}

std::string PoolOf(const CyclePlan& plan, JobId id, const std::vector<Node>& nodes) {
  for (const auto& s : plan.starts)
    if (s.job == id)
      for (const Node& n : nodes)
        if (n.name == s.allocation.tasks.at(0).node) return PoolName(n.pool) + std::string("@") + n.region;
  return "";
}

}  // namespace

TEST_CASE("expected cost: price x resources x time, plus expected lost work and egress", "[core][pools]") {
  PolicySet p = Priced();
  ClusterState s;
  JobSpec spec = JobBuilder(1).Tasks(4).GpusPerTask(8, "h100").CpusPerTask(8).TimeLimit(10h).Build().spec;
  // on-demand: 4 x (8 x 4.0 + 8 x 0.05) = 129.6 per hour, 10 h.
  CHECK(ExpectedCost(spec, Pool::kOnDemand, true, p, s) == Approx(1296.0));
  // spot, never checkpoints: 4 x (8 x 1.6 + 8 x 0.02) = 51.84 /h; evictions 4 x 0.05 x 10 = 2, each
  // losing 5 h (half the run): 51.84 x (10 + 10) = 1036.8.
  CHECK(ExpectedCost(spec, Pool::kSpot, true, p, s) == Approx(1036.8));
  spec.checkpoint_interval = 1800;  // loses 0.25 h per eviction: 51.84 x 10.5
  CHECK(ExpectedCost(spec, Pool::kSpot, true, p, s) == Approx(544.32));
  spec.data_bytes = int64_t{500} * 1000 * 1000 * 1000;  // 500 GB x 0.1 outside the region
  CHECK(ExpectedCost(spec, Pool::kSpot, false, p, s) == Approx(594.32));
  s.observed_eviction_rates["spot"] = 0.5;  // learned rate wins: 20 evictions x 0.25 h
  CHECK(ExpectedCost(spec, Pool::kSpot, true, p, s) == Approx(51.84 * 15));
}

TEST_CASE("tier order: cheap checkpointing jobs to spot, big gangs without checkpoints to on-demand", "[core][pools]") {
  PolicySet p = Priced();
  p.placement.eviction_rate_per_hour["spot"] = 0.2;
  ClusterState s;
  JobSpec small = JobBuilder(1).GpusPerTask(1, "h100").TimeLimit(2h).Build().spec;
  small.checkpoint_interval = 600;
  auto tiers = PlacementTiers(small, p, s, kBoth);
  REQUIRE(tiers.size() == 2);
  CHECK(tiers[0].filter.pool == Pool::kSpot);
  CHECK(tiers[1].filter.pool == Pool::kOnDemand);
  JobSpec big = JobBuilder(2).Tasks(16).GpusPerTask(8, "h100").TimeLimit(24h).Build().spec;
  CHECK(PlacementTiers(big, p, s, kBoth)[0].filter.pool == Pool::kOnDemand);
  big.spot = SpotPreference::kNever;
  CHECK(PlacementTiers(big, p, s, kBoth).empty());  // one pool left: nothing to choose
  small.data_region = "eu";
  tiers = PlacementTiers(small, p, s, kBoth);
  REQUIRE(tiers.size() == 4);
  CHECK(tiers[0].filter == NodeFilter{Pool::kSpot, "eu"});
  small.region_strict = true;  // strict: region is an eligibility rule, not a preference
  CHECK(PlacementTiers(small, p, s, kBoth).size() == 2);
}

TEST_CASE("effective spot: prefer waits its budget, K evictions keep a job on on-demand", "[core][pools]") {
  PolicySet p = Priced();
  Job j = JobBuilder(1).Submit(1000).Build();
  j.spec.spot = SpotPreference::kPrefer;
  CHECK(EffectiveSpot(j, p, 1000 + 599) == SpotPreference::kOnly);
  CHECK(EffectiveSpot(j, p, 1000 + 600) == SpotPreference::kAllow);
  j.evictions = 2;
  CHECK(EffectiveSpot(j, p, 1000) == SpotPreference::kNever);
  CHECK(ParseSpotPreference("prefer") == SpotPreference::kPrefer);
  CHECK_FALSE(ParseSpotPreference("only"));
}

TEST_CASE("placement follows the tiers, a gang still spans pools when no single pool holds it", "[core][pools]") {
  ClusterState s;
  s.nodes = TwoPools();
  PolicySet p = Priced();
  Job ckpt = JobBuilder(1).GpusPerTask(8, "h100").TimeLimit(2h).Build();
  ckpt.spec.checkpoint_interval = 600;
  Job never = JobBuilder(2).GpusPerTask(8, "h100").TimeLimit(2h).Submit(3).Build();
  never.spec.spot = SpotPreference::kNever;
  Job local = JobBuilder(3).GpusPerTask(8, "h100").TimeLimit(2h).Submit(1).Build();  // before job 2
  local.spec.spot = SpotPreference::kNever;
  local.spec.data_region = "eu";
  local.spec.data_bytes = int64_t{1} << 40;
  Job wide = JobBuilder(4).Tasks(2).GpusPerTask(8, "h100").TimeLimit(1h).Submit(4).Build();
  wide.spec.checkpoint_interval = 60;
  s.jobs = {ckpt, never, local, wide};
  CyclePlan plan = RunChecked(s, p, 10);
  CHECK(PoolOf(plan, 1, s.nodes) == "spot@us");
  CHECK(PoolOf(plan, 2, s.nodes) == "on-demand@us");
  CHECK(PoolOf(plan, 3, s.nodes) == "on-demand@eu");
  REQUIRE(StartedIds(plan).size() == 4);  // one spot and one on-demand node were left: it spans them
}

TEST_CASE("spot=prefer: waits for spot with its own reason, then takes on-demand", "[core][pools]") {
  ClusterState s;
  s.nodes = TwoPools();
  PolicySet p = Priced();
  s.jobs = {JobBuilder(1).GpusPerTask(8, "h100").Running(0, Allocation{{Task(0, "sp-1", {0, 1, 2, 3, 4, 5, 6, 7}, "h100")}}).Build(),
            JobBuilder(2).GpusPerTask(8, "h100").Running(0, Allocation{{Task(0, "sp-2", {0, 1, 2, 3, 4, 5, 6, 7}, "h100")}}).Build()};
  Job pref = JobBuilder(3).GpusPerTask(8, "h100").TimeLimit(1h).Submit(100).Build();
  pref.spec.spot = SpotPreference::kPrefer;
  s.jobs.push_back(pref);
  CyclePlan plan = RunChecked(s, p, 200);
  CHECK(plan.starts.empty());
  CHECK(PendingOf(plan, 3).reason == PendingReason::kWaitingForSpotBudget);
  plan = RunChecked(s, p, 700);  // waited 600 s
  CHECK(PoolOf(plan, 3, s.nodes).rfind("on-demand", 0) == 0);
  s.jobs.back().evictions = 2;   // evicted K times: on-demand only, even inside the budget
  plan = RunChecked(s, p, 200);
  CHECK(PoolOf(plan, 3, s.nodes).rfind("on-demand", 0) == 0);
}

TEST_CASE("region_strict: only nodes in the data region", "[core][pools]") {
  ClusterState s;
  s.nodes = TwoPools();
  Job strict = JobBuilder(1).Tasks(2).GpusPerTask(8, "h100").Build();
  strict.spec.data_region = "eu";
  strict.spec.region_strict = true;
  s.jobs = {strict};
  CyclePlan plan = RunChecked(s, PolicySet{}, 10);
  CHECK(plan.starts.empty());  // eu has one node
  CHECK(PendingOf(plan, 1).reason == PendingReason::kResources);
}

TEST_CASE("the eviction rate is learned from node-hours and evictions, with decay", "[core][pools]") {
  EvictionRateEstimator est(3600);
  est.Advance(1000, {{"spot", 10}});
  est.Advance(1000 + 3600, {{"spot", 10}});  // 10 node-hours (decay applies to what was before)
  est.RecordEviction("spot");
  est.RecordEviction("spot");
  CHECK(est.Rates(5).at("spot") == Approx(0.2));
  CHECK(est.Rates(50).empty());  // too little exposure to say
  est.Advance(1000 + 7200, {{"spot", 0}});  // one half-life later both halve: the rate stays
  CHECK(est.Rates(1).at("spot") == Approx(0.2));
}

TEST_CASE("warm pool: nodes held for a QoS, lent only to short jobs", "[core][pools]") {
  ClusterState s;
  s.nodes = ClusterBuilder().Pool("on-demand").Nodes("od-[1-3]").Gpus("h100", 8).Build();
  PolicySet p;
  QosPolicy normal, critical;
  normal.name = "normal";
  critical.name = "critical";
  p.qos = {normal, critical};
  p.warm_pools = {WarmPool{"on-demand", 2, "critical", 3600}};
  p.backfill.mode = BackfillMode::kEasy;
  s.jobs = {JobBuilder(1).GpusPerTask(8).TimeLimit(8h).Submit(0).Build(),   // takes the one lendable node
            JobBuilder(2).GpusPerTask(8).TimeLimit(8h).Submit(1).Build(),   // long: not on warm nodes
            JobBuilder(3).GpusPerTask(8).TimeLimit(30min).Submit(2).Build(),  // short: may borrow one
            JobBuilder(4).GpusPerTask(8).TimeLimit(8h).Qos("critical").Submit(3).Build()};
  CyclePlan plan = RunChecked(s, p, 10);
  CHECK(StartedIds(plan) == std::vector<JobId>{1, 3, 4});
  CHECK(PendingOf(plan, 2).reason == PendingReason::kResources);
  std::map<JobId, std::string> node;
  for (const auto& st : plan.starts) node[st.job] = st.allocation.tasks.at(0).node;
  CHECK(node.at(1) == "od-3");  // od-1 and od-2 are the warm ones
}
