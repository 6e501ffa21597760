// Preemption-aware, cost-aware placement across pools (on-demand, spot, reserved) and regions.
// A job's effective spot preference (after its wait budget and eviction count), the expected cost
// of running it in each pool and region, and the preference order the planner tries. Spot eviction
// rates come from the policy, then from observed evictions (EvictionRateEstimator).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "schedd/core/types.h"

namespace mlsched::core {

/// "allow" | "never" | "prefer" (and "only", the core's internal state).
const char* SpotPreferenceName(SpotPreference s);
/// Parses "allow", "never", "prefer" (not "only").
std::optional<SpotPreference> ParseSpotPreference(const std::string& s);

/// A subset of the nodes a job may use: one pool (nullopt = any) and one region ("" = any).
struct NodeFilter {
  std::optional<Pool> pool;
  std::string region;
  bool operator==(const NodeFilter&) const = default;
};
/// True when `node` is in the filter's pool and region.
bool PassesFilter(const Node& node, const NodeFilter& filter);

/// One place to run and what it is expected to cost.
struct PlacementTier {
  NodeFilter filter;
  double expected_cost = 0;  // currency units of the policy's [pricing]
};

/// The spot preference the job is placed with at `now`: kNever once it was evicted
/// spot_max_evictions times (K > 0); kPrefer becomes kOnly until it has waited spot_wait_budget
/// seconds since submission, then kAllow; otherwise spec.spot.
SpotPreference EffectiveSpot(const Job& job, const PolicySet& policy, Timestamp now);

/// Spot evictions per node-hour in `pool`: the observed rate when ClusterState has one, else the
/// policy's eviction_rate_per_hour, else 0.
double EvictionRate(const std::string& pool, const PolicySet& policy, const ClusterState& state);

/// Expected cost of running `spec` for its time limit T (hours) in `pool`, inside or outside its
/// data region: price x resources x T x (1 + n x rate x L) + egress, where price is the pool's
/// [pricing] per core-hour and GPU-hour (the job's first named GPU type, else "", else the pool's
/// cheapest GPU), n = ntasks (nodes at risk; an upper bound), rate = EvictionRate, L = hours lost
/// per eviction = checkpoint_interval / 2, or T / 2 when the job never checkpoints (expected work
/// since start); egress = egress_per_gb x data GB when outside data_region.
double ExpectedCost(const JobSpec& spec, Pool pool, bool in_region, const PolicySet& policy,
                    const ClusterState& state);

/// The order in which the planner tries pools and regions for `spec` (an effective spec: spot
/// already resolved by EffectiveSpot): every allowed (pool, in/out of data region) pair, cheapest
/// expected cost first; ties keep on-demand, spot, reserved order, in-region first. Empty when the
/// job has nothing to choose between (one pool allowed and no data region preference), so the
/// planner places it as usual. Only pools in `present` (those the cluster has nodes in) are tried.
std::vector<PlacementTier> PlacementTiers(const JobSpec& spec, const PolicySet& policy, const ClusterState& state,
                                          const std::vector<Pool>& present);

/// Learns each pool's eviction rate (evictions per node-hour) from what happened, forgetting with a
/// half-life: exposure accrues as node-hours between Advance calls, evictions count at
/// RecordEviction; both decay by 2^(-dt / half_life).
class EvictionRateEstimator {
 public:
  explicit EvictionRateEstimator(Duration half_life = 7 * 24 * 3600) : half_life_(half_life) {}
  /// Accrues exposure from the last call to `now` for `nodes` up nodes per pool name.
  void Advance(Timestamp now, const std::map<std::string, int64_t>& nodes);
  /// One eviction of a node of `pool`.
  void RecordEviction(const std::string& pool);
  /// Rates of pools with at least `min_node_hours` of decayed exposure (fewer hours say too little).
  std::map<std::string, double> Rates(double min_node_hours = 24) const;

 private:
  Duration half_life_;
  Timestamp last_ = 0;
  std::map<std::string, double> node_hours_, evictions_;
};

}  // namespace mlsched::core
