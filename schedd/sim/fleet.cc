#include "schedd/sim/fleet.h"

#include <cstdio>
#include <stdexcept>

#include <toml++/toml.h>

namespace mlsched::sim {
namespace {

std::string NodeName(const std::string& prefix, int index) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%03d", index);
  return prefix + "-" + buf;
}

void AddGroup(Fleet& fleet, const std::string& prefix, int count, const core::ResourceVector& cap,
              core::Pool pool, const std::string& zone, const std::string& region,
              int domain_size, double rate, core::Duration recovery) {
  for (int i = 0; i < count; ++i) {
    core::Node node;
    node.name = NodeName(prefix, i);
    node.pool = pool;
    node.zone = zone;
    node.region = region;
    node.domain = prefix + "-d" + std::to_string(domain_size > 0 ? i / domain_size : 0);
    node.capacity = cap;
    fleet.nodes.push_back(std::move(node));
    fleet.eviction_rate_per_hour.push_back(rate);
    fleet.recovery_s.push_back(recovery);
  }
}

/// Reads the optional [provisioned.POOL] tables into fleet.provisioned_eviction_rate_per_hour.
void ReadProvisioned(const toml::table& root, const std::string& path, Fleet& fleet) {
  const toml::node* node = root.get("provisioned");
  if (node == nullptr) return;
  const toml::table* pools = node->as_table();
  if (pools == nullptr) throw std::runtime_error(path + ": [provisioned] must be a table of pools");
  for (auto&& [name, value] : *pools) {
    const std::string where = path + ": [provisioned." + std::string(name.str()) + "]";
    auto pool = core::ParsePool(std::string(name.str()));
    if (!pool) throw std::runtime_error(where + ": unknown pool (want on-demand, spot or reserved)");
    const toml::table* t = value.as_table();
    if (t == nullptr) throw std::runtime_error(where + ": not a table");
    for (auto&& [key, v] : *t) {
      if (key.str() != "eviction_rate_per_hour") {
        throw std::runtime_error(where + ": unknown key '" + std::string(key.str()) + "'");
      }
    }
    const double rate = (*t)["eviction_rate_per_hour"].value_or(-1.0);
    if (!(rate >= 0 && rate <= kMaxEvictionRatePerHour) || (rate > 0 && *pool != core::Pool::kSpot)) {
      throw std::runtime_error(where + ": 'eviction_rate_per_hour' must be a number in 0.." +
                               std::to_string(static_cast<int>(kMaxEvictionRatePerHour)) +
                               ", and above 0 only for spot");
    }
    fleet.provisioned_eviction_rate_per_hour[*pool] = rate;
  }
}

}  // namespace

Fleet FleetFromNodes(std::vector<core::Node> nodes) {
  Fleet fleet;
  fleet.eviction_rate_per_hour.assign(nodes.size(), 0.0);
  fleet.recovery_s.assign(nodes.size(), 0);
  fleet.nodes = std::move(nodes);
  return fleet;
}

Fleet UniformFleet(int count, int cpus, int64_t memory_gib, int gpus, const std::string& gpu_type,
                   int domain_size) {
  core::ResourceVector cap;
  cap.cpu_millis = int64_t{cpus} * 1000;
  cap.memory_bytes = memory_gib << 30;
  if (gpus > 0) cap.gpus[gpu_type] = gpus;
  Fleet fleet;
  AddGroup(fleet, "node", count, cap, core::Pool::kOnDemand, "", "", domain_size, 0.0, 0);
  return fleet;
}

Fleet ReadClusterFile(const std::string& path) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    throw std::runtime_error(path + ":" + std::to_string(e.source().begin.line) + ": " +
                             std::string(e.description()));
  }
  const toml::array* groups = root["nodes"].as_array();
  if (groups == nullptr || groups->empty()) {
    throw std::runtime_error(path + ": no [[nodes]] tables");
  }
  Fleet fleet;
  for (size_t g = 0; g < groups->size(); ++g) {
    const toml::table* t = (*groups)[g].as_table();
    const std::string where = path + ": [[nodes]] #" + std::to_string(g + 1);
    if (t == nullptr) throw std::runtime_error(where + ": not a table");
    auto bad = [&](const char* key, const char* want) {
      return std::runtime_error(where + ": '" + key + "' " + want);
    };
    for (auto&& [key, value] : *t) {
      static const char* kKnown[] = {"prefix", "count", "cpus", "memory_gib", "gpus", "gpu_type",
                                     "pool", "zone", "region", "domain_size",
                                     "eviction_rate_per_hour", "recovery_s"};
      bool known = false;
      for (const char* k : kKnown) known = known || key.str() == k;
      if (!known) throw std::runtime_error(where + ": unknown key '" + std::string(key.str()) + "'");
    }
    const int64_t count = t->get_as<int64_t>("count") ? **t->get_as<int64_t>("count") : -1;
    if (count <= 0 || count > 1000000) throw bad("count", "must be an integer in 1..1000000");
    const int64_t cpus = (*t)["cpus"].value_or<int64_t>(1);
    const int64_t mem = (*t)["memory_gib"].value_or<int64_t>(0);
    const int64_t gpus = (*t)["gpus"].value_or<int64_t>(0);
    if (cpus <= 0) throw bad("cpus", "must be positive");
    if (mem < 0 || gpus < 0) throw bad(mem < 0 ? "memory_gib" : "gpus", "must not be negative");
    const std::string gpu_type = (*t)["gpu_type"].value_or<std::string>("gpu");
    auto pool = core::ParsePool((*t)["pool"].value_or<std::string>("on-demand"));
    if (!pool) throw bad("pool", "must be on-demand, spot or reserved");
    const double rate = (*t)["eviction_rate_per_hour"].value_or(0.0);
    if (rate < 0 || (rate > 0 && *pool != core::Pool::kSpot)) {
      throw bad("eviction_rate_per_hour", "must be >= 0 and only set on spot nodes");
    }
    core::ResourceVector cap;
    cap.cpu_millis = cpus * 1000;
    cap.memory_bytes = mem << 30;
    if (gpus > 0) cap.gpus[gpu_type] = gpus;
    AddGroup(fleet, (*t)["prefix"].value_or<std::string>("node" + std::to_string(g)),
             static_cast<int>(count), cap, *pool, (*t)["zone"].value_or<std::string>(""),
             (*t)["region"].value_or<std::string>(""),
             static_cast<int>((*t)["domain_size"].value_or<int64_t>(0)), rate,
             (*t)["recovery_s"].value_or<int64_t>(600));
  }
  ReadProvisioned(root, path, fleet);
  return fleet;
}

int64_t TotalGpus(const Fleet& fleet) {
  int64_t total = 0;
  for (const auto& n : fleet.nodes) {
    for (const auto& [type, count] : n.capacity.gpus) total += count;
  }
  return total;
}

int64_t TotalCpuMillis(const Fleet& fleet) {
  int64_t total = 0;
  for (const auto& n : fleet.nodes) total += n.capacity.cpu_millis;
  return total;
}

}  // namespace mlsched::sim
