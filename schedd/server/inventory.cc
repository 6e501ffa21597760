#include "schedd/server/inventory.h"

#include <algorithm>
#include <map>

#include "schedd/server/convert.h"

namespace mlsched::server {

namespace {

std::map<std::string, int64_t> GpusOf(const v1::Resources& r) {
  std::map<std::string, int64_t> out;
  for (const auto& g : r.gpus()) out[g.type()] += g.count();
  return out;
}

std::string Cpus(int64_t millis) {
  return millis % 1000 == 0 ? std::to_string(millis / 1000) : std::to_string(millis / 1000.0);
}

/// What of `got` is above `limit` (`only_over`) or differs from it, each "what N (LABEL M)".
std::string Compare(const v1::Resources& got, const core::ResourceVector& limit, bool only_over, const std::string& label) {
  std::string out;
  auto add = [&](const std::string& what) { out += (out.empty() ? "" : ", ") + what; };
  auto differs = [&](int64_t a, int64_t b) { return only_over ? a > b : a != b; };
  if (differs(got.cpu_millis(), limit.cpu_millis)) add("cpus " + Cpus(got.cpu_millis()) + " (" + label + " " + Cpus(limit.cpu_millis) + ")");
  if (differs(got.memory_bytes(), limit.memory_bytes))
    add("memory " + std::to_string(got.memory_bytes()) + " bytes (" + label + " " + std::to_string(limit.memory_bytes) + ")");
  for (const auto& [type, n] : GpusOf(got)) {
    auto it = limit.gpus.find(type);
    const int64_t declared = it == limit.gpus.end() ? 0 : it->second;
    if (differs(n, declared)) add("gpus " + type + ":" + std::to_string(n) + " (" + label + " " + std::to_string(declared) + ")");
  }
  return out;
}

}  // namespace

const core::NodeDeclaration* FindDeclaration(const core::NodeInventory& inv, const std::string& node) {
  auto it = inv.index.find(node);
  return it == inv.index.end() ? nullptr : &inv.nodes[it->second];
}

InventoryVerdict AdmitRegistration(const core::NodeInventory& inv, const v1::RegisterNode& reg,
                                   const core::Node* provisioned) {
  InventoryVerdict v;
  v.admitted = reg;
  const core::NodeDeclaration* d = FindDeclaration(inv, reg.name());
  const core::Node* shape = d ? &d->shape : provisioned;
  if (!shape) {
    if (inv.strict)
      v.error = "node " + reg.name() + " is not in the policy's node inventory ([[nodes]]; [inventory] strict = true)";
    return v;
  }
  const bool pool_fixed = d ? d->pool.has_value() : true;
  if (pool_fixed && ToCorePool(reg.pool()) != shape->pool)
    return v.error = "node " + reg.name() + " registers pool " + core::PoolName(ToCorePool(reg.pool())) +
                     "; the inventory declares " + core::PoolName(shape->pool), v;
  for (const auto& [what, got, want] : {std::tuple<const char*, std::string, std::string>{"region", reg.region(), shape->region},
                                        {"zone", reg.zone(), shape->zone},
                                        {"domain", reg.domain(), shape->domain}})
    if (!want.empty() && got != want)
      return v.error = "node " + reg.name() + " registers " + what + " '" + got + "'; the inventory declares '" + want + "'", v;
  const std::string over = Compare(reg.capacity(), shape->capacity, true, "declared");
  if (over.empty()) return v;
  if (!inv.clamp)
    return v.error = "node " + reg.name() + " registers more than the inventory declares: " + over +
                     " ([inventory] over_capacity = \"refuse\")", v;
  // Clamp: each resource at most what is declared; GPU types not declared are dropped.
  v1::Resources* cap = v.admitted.mutable_capacity();
  cap->set_cpu_millis(std::min(cap->cpu_millis(), shape->capacity.cpu_millis));
  cap->set_memory_bytes(std::min(cap->memory_bytes(), shape->capacity.memory_bytes));
  cap->clear_gpus();
  for (const auto& [type, n] : GpusOf(reg.capacity())) {
    auto it = shape->capacity.gpus.find(type);
    const int64_t keep = std::min(n, it == shape->capacity.gpus.end() ? 0 : it->second);
    if (keep <= 0) continue;
    auto* g = cap->add_gpus();
    g->set_type(type);
    g->set_count(static_cast<int32_t>(keep));
  }
  v.clamped = over;
  return v;
}

std::string CapacityChange(const v1::Resources& before, const v1::Resources& after) {
  core::ResourceVector b = ToCoreResources(before);
  std::string out = Compare(after, b, false, "was");
  for (const auto& [type, n] : GpusOf(before))  // types that disappeared
    if (!GpusOf(after).count(type)) out += (out.empty() ? "" : ", ") + std::string("gpus ") + type + ":0 (was " + std::to_string(n) + ")";
  return out;
}

}  // namespace mlsched::server
