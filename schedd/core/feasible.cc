// CheckJobFeasible: can this spec ever run on this cluster (every node empty and up)?
#include <algorithm>
#include <string>

#include "schedd/core/ledger.h"
#include "schedd/core/placement.h"
#include "schedd/core/types.h"

namespace mlsched::core {

const PartitionPolicy* FindPartition(const PolicySet& policy, const std::string& name) {
  const std::string& wanted = name.empty() ? policy.default_partition : name;
  for (const PartitionPolicy& p : policy.partitions)
    if (p.name == wanted) return &p;
  return nullptr;
}

namespace {

std::string Plural(int64_t n, const char* unit) {
  return std::to_string(n) + " " + unit + (n == 1 ? "" : "s");
}

// Per-dimension message when no single node's capacity can hold one task.
std::string PerTaskMessage(const std::vector<const NodeSlot*>& nodes, const TaskDemand& d) {
  int64_t max_cpu = 0, max_mem = 0, max_gpu = 0;
  for (const NodeSlot* s : nodes) {
    max_cpu = std::max(max_cpu, s->capacity.cpu_millis);
    max_mem = std::max(max_mem, s->capacity.memory_bytes);
    max_gpu = std::max(max_gpu, s->capacity.gpus);
  }
  if (d.gpus > max_gpu)
    return "job needs " + Plural(d.gpus, "GPU") + " per task but no node has more than " +
           std::to_string(max_gpu);
  if (d.cpu_millis > max_cpu)
    return "job needs " + std::to_string(d.cpu_millis) +
           " CPU millicores per task but no node has more than " + std::to_string(max_cpu);
  if (d.memory_bytes > max_mem)
    return "job needs " + std::to_string(d.memory_bytes) +
           " bytes of memory per task but no node has more than " + std::to_string(max_mem);
  return "no single node can hold one task of the job (cpu, memory and GPUs together)";
}

}  // namespace

std::optional<std::string> CheckJobFeasible(const std::vector<Node>& nodes, const PolicySet& policy,
                                            const JobSpec& elastic_spec) {
  if (elastic_spec.ntasks < 1) return "job needs at least 1 task, got " + std::to_string(elastic_spec.ntasks);
  if (auto bad = CheckGangSize(elastic_spec)) return "job " + *bad;
  // An elastic job can run once its smallest size can.
  JobSpec spec = elastic_spec;
  spec.ntasks = GangSizes(elastic_spec).back();
  if (spec.time_limit <= 0) return "time limit must be positive, got " + std::to_string(spec.time_limit);
  const PartitionPolicy* partition = FindPartition(policy, spec.partition);
  if (!partition)
    return "unknown partition '" + (spec.partition.empty() ? policy.default_partition : spec.partition) + "'";
  if (spec.time_limit > partition->max_time_limit)
    return "time limit " + std::to_string(spec.time_limit) + " s exceeds partition '" +
           partition->name + "' maximum of " + std::to_string(partition->max_time_limit) + " s";
  // Every node considered empty and up: feasibility ignores load and health.
  std::vector<Node> empty_nodes = nodes;
  for (Node& n : empty_nodes) n.health = NodeHealth::kUp;
  NodeLedger ledger(empty_nodes, {});
  std::vector<const NodeSlot*> in_partition, compatible;
  JobSpec any_type = spec;
  any_type.per_task.gpus.clear();
  any_type.gpu_types.clear();
  for (size_t i = 0; i < ledger.size(); ++i) {
    const NodeSlot& s = ledger.slot(i);
    if (NodeEligible(s, any_type, partition)) in_partition.push_back(&s);
    if (NodeEligible(s, spec, partition)) compatible.push_back(&s);
  }
  if (in_partition.empty())
    return "partition '" + partition->name + "' has no nodes" +
           (spec.features.empty() ? std::string() : " with the requested features");
  if (compatible.empty()) return "no node in partition '" + partition->name + "' has an acceptable GPU type";
  const TaskDemand demand = *ResolveTaskDemand(spec, *compatible.front()->node);
  std::vector<const NodeSlot*> fitting;
  for (const NodeSlot* s : compatible)
    if (CheckFit(*s, demand) != Fit::kNever) fitting.push_back(s);
  if (fitting.empty()) return PerTaskMessage(compatible, demand);
  std::vector<size_t> eligible;
  for (const NodeSlot* s : fitting) eligible.push_back(static_cast<size_t>(s - &ledger.slot(0)));
  AllocationTxn txn(ledger);
  if (PlaceGangNow(txn, ledger, eligible, spec, demand)) return std::nullopt;
  int64_t most = 0;
  for (const NodeSlot* s : fitting) most += TasksThatFit(s->capacity, demand, spec.ntasks);
  if (spec.topology == Topology::kNone || most < spec.ntasks)
    return "job needs " + Plural(spec.ntasks, "task") + " but partition '" + partition->name +
           "' can hold at most " + std::to_string(most) + " at once";
  return "job needs " + Plural(spec.ntasks, "task") + " with topology " +
         TopologyName(spec.topology) + " but no group of nodes in partition '" + partition->name +
         "' satisfying it can hold them";
}

}  // namespace mlsched::core
