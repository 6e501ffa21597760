// PolicyReader: [interactive], what interactive allocations (mlrun, mlalloc) may ask for and when
// an idle one is released (core::InteractivePolicy; enforced by schedd's admission and its
// AllocationWatch).
#include <set>

#include "schedd/policy/policy_reader.h"

namespace mlsched::policy {

void PolicyReader::ReadInteractive(const toml::table& t, core::InteractivePolicy& p) {
  const std::string ctx = "[interactive]";
  CheckKeys(t, {"partitions", "max_time", "idle_timeout", "idle_warning", "idle_cpu_below", "idle_gpu_below"}, ctx);
  StrList(t, "partitions", p.partitions, ctx);
  Dur(t, "max_time", p.max_time, ctx);
  Dur(t, "idle_timeout", p.idle_timeout, ctx);
  Dur(t, "idle_warning", p.idle_warning, ctx);
  Num(t, "idle_cpu_below", p.idle_cpu_below, ctx);
  if (const toml::node* n = t.get("idle_cpu_below"); n && p.idle_cpu_below > 100000)
    Error(n->source(), "'idle_cpu_below' in [interactive]: at most 100000 cores");
  Num(t, "idle_gpu_below", p.idle_gpu_below, ctx);
  if (const toml::node* n = t.get("idle_gpu_below"); n && p.idle_gpu_below > 100)
    Error(n->source(), "'idle_gpu_below' in [interactive]: a utilization in percent, at most 100");
  if (const toml::node* n = t.get("idle_warning"); n && p.idle_timeout > 0 && p.idle_warning >= p.idle_timeout)
    Error(n->source(), "'idle_warning' in [interactive] must be shorter than idle_timeout (the warning comes first)");
  KeepLines(t, {"partitions", "max_time", "idle_timeout"}, p.source);
}

void PolicyReader::CheckInteractive(const toml::table& root, const core::PolicySet& p) {
  const toml::table* t = root.get("interactive") ? root.get("interactive")->as_table() : nullptr;
  if (!t) return;
  const toml::node* list = t->get("partitions");
  std::set<std::string> seen;
  for (const auto& name : p.interactive.partitions) {
    if (name.empty() || !core::FindPartition(p, name))
      Error(list->source(), "[interactive] partitions names '" + name + "', which is not a defined partition");
    else if (!seen.insert(name).second)
      Error(list->source(), "[interactive] partitions names '" + name + "' twice");
  }
}

}  // namespace mlsched::policy
