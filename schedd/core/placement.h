// Gang placement: choose nodes for all tasks of a job at once, honouring its topology constraint,
// preferring the fewest topology domains and the best fit (the least free capacity left unusable).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "schedd/core/ledger.h"
#include "schedd/core/types.h"

namespace mlsched::core {

/// One node that could take `tasks` tasks of a gang (computed from free resources by the caller).
struct NodeCandidate {
  size_t node = 0;        // index into the ledger
  int64_t tasks = 0;      // how many tasks fit on it
  int32_t domain = 0, zone = 0, region = 0;
  int64_t tiebreak = 0;   // lower is preferred among otherwise equal nodes
};

/// How many tasks go on which node (ledger index, task count), in rank order.
using NodeChoice = std::vector<std::pair<size_t, int64_t>>;

/// Chooses nodes for `ntasks` identical tasks. Topology: kSameDomain/kSameZone/kSameRegion keep
/// the whole gang inside one domain/zone/region; kSpread puts at most one task on a node and
/// round-robins over domains; kNone may span anything. Among feasible groups the one with the least
/// spare capacity wins (best fit); within it the fewest domains, then the fewest nodes, finishing
/// on the tightest node that holds the remainder. Returns nullopt when the candidates cannot hold
/// the gang. O(c log c) for c candidates.
std::optional<NodeChoice> ChooseNodes(const std::vector<NodeCandidate>& candidates, int64_t ntasks,
                                      Topology topology);

/// True when node `slot` may run tasks of `spec` in partition `partition` (null = no pool limit):
/// the node is up, in one of the partition's pools, has the required features and an acceptable
/// GPU type, is off spot for SpotPreference::kNever (only spot for kOnly), and is in data_region
/// when region_strict, and is not in spec.exclude_nodes.
bool NodeEligible(const NodeSlot& slot, const JobSpec& spec, const PartitionPolicy* partition);

/// The GPU types a gang may be placed on, in the order tried: spec.gpu_types, else the named type
/// in spec.per_task.gpus, else every GPU type of `ledger` in name order. {""} for CPU-only jobs.
std::vector<std::string> GpuTypeChoices(const NodeLedger& ledger, const JobSpec& spec,
                                        const TaskDemand& demand);

/// Takes every task of `choice` inside `txn` (ranks 0.. in choice order); on any failure discards
/// the txn and returns false.
bool TakeChoice(AllocationTxn& txn, const NodeChoice& choice, const TaskDemand& demand);

/// Places a whole gang on the ledger's free resources now, inside `txn`, all tasks of one GPU
/// type. `eligible` lists candidate node indices (NodeEligible). On success the txn holds every
/// task (ranks 0..ntasks-1, contiguous per node) and true is returned; otherwise nothing is taken.
bool PlaceGangNow(AllocationTxn& txn, const NodeLedger& ledger, const std::vector<size_t>& eligible,
                  const JobSpec& spec, const TaskDemand& demand);

}  // namespace mlsched::core
