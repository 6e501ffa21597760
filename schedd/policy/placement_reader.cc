// PolicyReader: [placement] (spot and data-locality placement) and [pricing.POOL] (prices per
// core-hour and GPU-hour, also read by mlreport) into core::PlacementPolicy.
#include "schedd/policy/policy_reader.h"

#include <optional>

namespace mlsched::policy {
namespace {

const char* kPools = "\"on-demand\", \"spot\" or \"reserved\"";

}  // namespace

void PolicyReader::Num(const toml::table& t, const char* key, double& out, const std::string& ctx) {
  const toml::node* n = t.get(key);
  if (!n) return;
  std::optional<double> v = n->value<double>();  // integers convert
  if (!v || !(n->is_floating_point() || n->is_integer()))
    return Error(n->source(), std::string("'") + key + "' in " + ctx + ": expected a number");
  if (*v < 0) return Error(n->source(), std::string("'") + key + "' in " + ctx + ": must be >= 0");
  out = *v;
}

void PolicyReader::ReadPlacement(const toml::table& t, core::PlacementPolicy& p) {
  const std::string ctx = "[placement]";
  CheckKeys(t, {"spot_max_evictions", "spot_wait_budget", "egress_per_gb", "eviction_rate_per_hour"}, ctx);
  Int32(t, "spot_max_evictions", p.spot_max_evictions, 0, ctx);
  Dur(t, "spot_wait_budget", p.spot_wait_budget, ctx);
  Num(t, "egress_per_gb", p.egress_per_gb, ctx);
  const toml::node* rates = t.get("eviction_rate_per_hour");
  if (!rates) return;
  const toml::table* r = rates->as_table();
  if (!r)
    return Error(rates->source(), "'eviction_rate_per_hour' in [placement]: expected a table of pool = evictions per "
                                  "node-hour, e.g. { spot = 0.05 }");
  for (const auto& [pool, v] : *r) {
    if (!core::ParsePool(std::string(pool.str())))
      Error(v.source(), "'eviction_rate_per_hour' in [placement]: unknown pool '" + std::string(pool.str()) +
                            "' (expected " + kPools + ")");
    else
      Num(*r, std::string(pool.str()).c_str(), p.eviction_rate_per_hour[std::string(pool.str())],
          "[placement] eviction_rate_per_hour");
  }
}

void PolicyReader::ReadPricing(const toml::table& t, core::PlacementPolicy& p) {
  for (const auto& [pool, node] : t) {
    const std::string name(pool.str()), ctx = "[pricing." + name + "]";
    if (!core::ParsePool(name)) {
      Error(node.source(), "unknown pool '" + name + "' in [pricing] (expected " + kPools + ")");
      continue;
    }
    const toml::table* pt = node.as_table();
    if (!pt) {
      Error(node.source(), ctx + " must be a table");
      continue;
    }
    CheckKeys(*pt, {"cpu_hour", "gpu_hour"}, ctx);
    core::PoolPricing& price = p.pricing[name];
    Num(*pt, "cpu_hour", price.cpu_hour, ctx);
    const toml::node* gpu = pt->get("gpu_hour");
    if (!gpu) continue;
    if (const toml::table* types = gpu->as_table()) {
      for (const auto& [type, v] : *types) Num(*types, std::string(type.str()).c_str(), price.gpu_hour[std::string(type.str())], ctx + " gpu_hour");
    } else {
      Num(*pt, "gpu_hour", price.gpu_hour[""], ctx);
    }
  }
}

core::WarmPool PolicyReader::ReadWarmPool(const toml::table& t, const std::string& ctx) {
  core::WarmPool w;
  CheckKeys(t, {"pool", "nodes", "qos", "borrow_limit"}, ctx);
  Str(t, "pool", w.pool, ctx);
  Int32(t, "nodes", w.nodes, 1, ctx);
  Str(t, "qos", w.qos, ctx);
  Dur(t, "borrow_limit", w.borrow_limit, ctx);
  if (!core::ParsePool(w.pool))
    Error(t.get("pool") ? t.get("pool")->source() : t.source(),
          ctx + ": 'pool' must be " + kPools + " (got \"" + w.pool + "\")");
  if (w.qos.empty()) Error(t.source(), ctx + ": 'qos' names the QoS the nodes are held for");
  return w;
}

}  // namespace mlsched::policy
