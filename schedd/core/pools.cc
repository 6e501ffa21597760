#include "schedd/core/pools.h"

#include "schedd/core/names.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <utility>

namespace mlsched::core {
namespace {

constexpr std::array<std::pair<SpotPreference, const char*>, 4> kSpot{{
    {SpotPreference::kAllow, "allow"},
    {SpotPreference::kNever, "never"},
    {SpotPreference::kPrefer, "prefer"},
    {SpotPreference::kOnly, "only"}}};

double GpuHourPrice(const PoolPricing& p, const JobSpec& spec) {
  auto price = [&](const std::string& type) -> std::optional<double> {
    auto it = p.gpu_hour.find(type);
    if (it == p.gpu_hour.end()) return std::nullopt;
    return it->second;
  };
  for (const std::string& t : spec.gpu_types)
    if (auto v = price(t)) return *v;
  for (const auto& [t, n] : spec.per_task.gpus)
    if (n > 0 && !t.empty())
      if (auto v = price(t)) return *v;
  if (auto v = price("")) return *v;
  double cheapest = 0;
  bool any = false;
  for (const auto& [t, v] : p.gpu_hour) {
    cheapest = any ? std::min(cheapest, v) : v;
    any = true;
  }
  return cheapest;
}

}  // namespace

const char* SpotPreferenceName(SpotPreference s) { return names::NameOf(kSpot, s); }

std::optional<SpotPreference> ParseSpotPreference(const std::string& s) {
  auto v = names::ParseName(kSpot, s);
  if (v == SpotPreference::kOnly) return std::nullopt;  // internal state, not a user choice
  return v;
}

bool PassesFilter(const Node& node, const NodeFilter& filter) {
  return (!filter.pool || node.pool == *filter.pool) && (filter.region.empty() || node.region == filter.region);
}

SpotPreference EffectiveSpot(const Job& job, const PolicySet& policy, Timestamp now) {
  const PlacementPolicy& p = policy.placement;
  if (p.spot_max_evictions > 0 && job.evictions >= p.spot_max_evictions) return SpotPreference::kNever;
  if (job.spec.spot == SpotPreference::kPrefer)
    return now - job.submit_time < p.spot_wait_budget ? SpotPreference::kOnly : SpotPreference::kAllow;
  return job.spec.spot;
}

double EvictionRate(const std::string& pool, const PolicySet& policy, const ClusterState& state) {
  if (auto it = state.observed_eviction_rates.find(pool); it != state.observed_eviction_rates.end())
    return it->second;
  auto it = policy.placement.eviction_rate_per_hour.find(pool);
  return it == policy.placement.eviction_rate_per_hour.end() ? 0.0 : it->second;
}

double ExpectedCost(const JobSpec& spec, Pool pool, bool in_region, const PolicySet& policy,
                    const ClusterState& state) {
  const PlacementPolicy& p = policy.placement;
  const double hours = static_cast<double>(spec.time_limit) / 3600.0;
  double per_hour = 0;
  if (auto it = p.pricing.find(PoolName(pool)); it != p.pricing.end()) {
    per_hour = it->second.cpu_hour * static_cast<double>(spec.per_task.cpu_millis) / 1000.0;
    per_hour += GpuHourPrice(it->second, spec) * static_cast<double>(spec.per_task.GpuCount());
    per_hour *= spec.ntasks;
  }
  const double lost_per_eviction =
      spec.checkpoint_interval > 0 ? static_cast<double>(spec.checkpoint_interval) / 7200.0 : hours / 2;
  const double evictions = static_cast<double>(spec.ntasks) * EvictionRate(PoolName(pool), policy, state) * hours;
  double cost = per_hour * (hours + evictions * lost_per_eviction);
  if (!in_region) cost += p.egress_per_gb * static_cast<double>(spec.data_bytes) / 1e9;
  return cost;
}

std::vector<PlacementTier> PlacementTiers(const JobSpec& spec, const PolicySet& policy, const ClusterState& state,
                                          const std::vector<Pool>& present) {
  std::vector<Pool> pools;
  for (Pool pool : present) {
    const bool spot = pool == Pool::kSpot;
    if (spot && spec.spot == SpotPreference::kNever) continue;
    if (!spot && spec.spot == SpotPreference::kOnly) continue;
    pools.push_back(pool);
  }
  const bool region_choice = !spec.data_region.empty() && !spec.region_strict;
  if (pools.size() <= 1 && !region_choice) return {};
  std::vector<PlacementTier> tiers;
  for (Pool pool : pools)
    for (bool in : {true, false}) {
      if (!in && !region_choice) continue;
      NodeFilter f{pool, in && region_choice ? spec.data_region : ""};
      tiers.push_back({f, ExpectedCost(spec, pool, in || !region_choice, policy, state)});
    }
  // In-region tiers come before the "any region" tier of the same pool, which also covers it.
  std::stable_sort(tiers.begin(), tiers.end(),
                   [](const PlacementTier& a, const PlacementTier& b) { return a.expected_cost < b.expected_cost; });
  return tiers;
}

void EvictionRateEstimator::Advance(Timestamp now, const std::map<std::string, int64_t>& nodes) {
  if (last_ == 0 || now <= last_) {
    last_ = std::max(last_, now);
    return;
  }
  const double dt = static_cast<double>(now - last_);
  const double decay = half_life_ > 0 ? std::exp2(-dt / static_cast<double>(half_life_)) : 1.0;
  for (auto& [pool, h] : node_hours_) h *= decay;
  for (auto& [pool, e] : evictions_) e *= decay;
  for (const auto& [pool, n] : nodes) node_hours_[pool] += static_cast<double>(n) * dt / 3600.0;
  last_ = now;
}

void EvictionRateEstimator::RecordEviction(const std::string& pool) { evictions_[pool] += 1; }

std::map<std::string, double> EvictionRateEstimator::Rates(double min_node_hours) const {
  std::map<std::string, double> out;
  for (const auto& [pool, h] : node_hours_)
    if (h >= min_node_hours) {
      auto e = evictions_.find(pool);
      out[pool] = (e == evictions_.end() ? 0.0 : e->second) / h;
    }
  return out;
}

}  // namespace mlsched::core
