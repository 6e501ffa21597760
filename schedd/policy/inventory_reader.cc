// PolicyReader: the node inventory, [inventory] and [[nodes]] (slurm.conf's NodeName= lines):
//   [inventory]
//   strict = true               # nodes no [[nodes]] entry names are refused
//   over_capacity = "refuse"    # or "clamp": a registration above its shape is cut down to it
//   [[nodes]]
//   names = "gpu-[01-16]"       # a hostlist
//   pool = "on-demand"          # optional
//   cpus = 64                   # the most each may register (agentd's words, as [provisioning.POOL])
//   memory = "512G"
//   gpus = "h100:8"
//   region/zone/domain          # optional: must match what the node registers
//   features = ["nvlink"]       # given to the node
#include "common/units.h"
#include "schedd/policy/policy_reader.h"

namespace mlsched::policy {

void PolicyReader::ReadInventory(const toml::table& t, core::NodeInventory& inv) {
  const std::string ctx = "[inventory]";
  CheckKeys(t, {"strict", "over_capacity"}, ctx);
  Bool(t, "strict", inv.strict, ctx);
  std::string mode = "refuse";
  Str(t, "over_capacity", mode, ctx);
  if (mode == "clamp") inv.clamp = true;
  else if (mode != "refuse")
    Error(t.get("over_capacity")->source(),
          ctx + ": 'over_capacity' must be \"refuse\" or \"clamp\", got \"" + mode.substr(0, 64) + "\"");
}

void PolicyReader::ReadNodeDeclaration(const toml::table& t, const std::string& ctx, core::NodeInventory& inv) {
  CheckKeys(t, {"names", "pool", "cpus", "memory", "gpus", "region", "zone", "domain", "features"}, ctx);
  core::NodeDeclaration d;
  std::string names, pool;
  Str(t, "names", names, ctx);
  if (names.empty()) return Error(t.source(), ctx + ": 'names' (a hostlist such as \"gpu-[01-16]\") is required");
  Parsed<std::vector<std::string>> expanded = ExpandHostlist(names);
  if (!expanded) return Error(t.get("names")->source(), ctx + ": 'names': " + expanded.error);
  d.names = std::move(*expanded.value);
  Str(t, "pool", pool, ctx);
  if (!pool.empty()) {
    d.pool = core::ParsePool(pool);
    if (!d.pool)
      Error(t.get("pool")->source(), ctx + ": unknown pool '" + pool.substr(0, 64) + "' (on-demand, spot, reserved)");
  }
  ReadShape(t, ctx, d.shape);
  if (d.pool) d.shape.pool = *d.pool;
  const size_t entry = inv.nodes.size();
  for (const std::string& n : d.names)
    if (!inv.index.emplace(n, entry).second)
      Error(t.get("names")->source(), ctx + ": node '" + n + "' is declared by an earlier [[nodes]] entry too");
  inv.nodes.push_back(std::move(d));
}

}  // namespace mlsched::policy
