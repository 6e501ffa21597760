// The free-resource ledger one cycle works on: every node's free resources and GPU devices,
// the one CheckFit used by admission, placement, backfill and feasibility, and AllocationTxn,
// which takes resources with an undo log so a gang is committed whole or not at all.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "schedd/core/types.h"

namespace mlsched::core {

/// A set of GPU device indices on one node (0..size-1), e.g. for CUDA_VISIBLE_DEVICES. Up to 64
/// devices live in one inline word (no allocation: a cycle builds one set per node).
class DeviceSet {
 public:
  explicit DeviceSet(int32_t size = 0);
  int32_t Size() const { return size_; }
  bool Contains(int32_t index) const;
  void Insert(int32_t index);  // index must be in [0, Size())
  void Erase(int32_t index);
  int32_t Count() const { return count_; }
  /// The `k` lowest indices NOT in the set (k <= Size() - Count()).
  std::vector<int32_t> LowestAbsent(int32_t k) const;

 private:
  uint64_t& Word(int32_t index) { return size_ <= 64 ? inline_ : overflow_[index / 64]; }
  uint64_t Word(int32_t index) const { return size_ <= 64 ? inline_ : overflow_[index / 64]; }

  int32_t size_ = 0;
  int32_t count_ = 0;
  uint64_t inline_ = 0;              // the set when size_ <= 64
  std::vector<uint64_t> overflow_;   // the set's words when size_ > 64
};

/// The per-task demand of a job resolved against one node: gpus keyed by the node's GPU type.
struct TaskDemand {
  int64_t cpu_millis = 0;
  int64_t memory_bytes = 0;
  int64_t gpus = 0;
};

/// The compatibility of a job's per-task request with a node's GPU type, independent of load:
/// returns the demand with GPUs counted on that node, or nullopt when the node's GPU type is not
/// acceptable (a named type other than the node's, or not in spec.gpu_types).
std::optional<TaskDemand> ResolveTaskDemand(const JobSpec& spec, const Node& node);

/// One node's row in the ledger.
struct NodeSlot {
  const Node* node = nullptr;
  std::string_view gpu_type;  // the node's GPU type ("" when it has none), a key of node->capacity.gpus
  TaskDemand capacity;      // totals
  TaskDemand free;          // capacity minus running allocations (may go negative if oversubscribed)
  DeviceSet used_devices;   // GPU indices held by running allocations
  int32_t domain_id = 0;    // dense ids of the node's domain, zone (region+zone) and region
  int32_t zone_id = 0;
  int32_t region_id = 0;
  int32_t gpu_type_id = -1;  // index into NodeLedger::gpu_types(), -1 without GPUs
};

/// Result of CheckFit: kFits (available now), kNotNow (feasible on the empty node, but busy),
/// kNever (the node's total can never hold one task).
enum class Fit { kFits, kNotNow, kNever };

/// The one fit test: how one task of `demand` relates to `slot`.
Fit CheckFit(const NodeSlot& slot, const TaskDemand& demand);
/// How many tasks of `demand` fit in `free` (at most `cap`), counting only requested dimensions.
inline int64_t TasksThatFit(const TaskDemand& free, const TaskDemand& demand, int64_t cap) {
  int64_t n = cap;
  if (demand.cpu_millis > 0) n = std::min(n, free.cpu_millis <= 0 ? 0 : free.cpu_millis / demand.cpu_millis);
  if (demand.memory_bytes > 0)
    n = std::min(n, free.memory_bytes <= 0 ? 0 : free.memory_bytes / demand.memory_bytes);
  if (demand.gpus > 0) n = std::min(n, free.gpus <= 0 ? 0 : free.gpus / demand.gpus);
  return std::max<int64_t>(n, 0);
}

/// Free resources of every node, built from a snapshot's nodes and running allocations.
class NodeLedger {
 public:
  /// Subtracts every non-pending, non-final job's allocation from its nodes. Allocations naming
  /// unknown nodes are ignored (the node left the cluster); device indices out of range too.
  NodeLedger(const std::vector<Node>& nodes, const std::vector<Job>& jobs);

  size_t size() const { return slots_.size(); }
  const NodeSlot& slot(size_t i) const { return slots_[i]; }
  NodeSlot& mutable_slot(size_t i) { return slots_[i]; }
  /// Index of the node called `name`, or -1. The name index is built on first use (a cycle whose
  /// allocations all carry valid node hints never builds it); not thread-safe.
  int64_t Find(const std::string& name) const;
  /// Index of the task's node: its node_hint when that slot has the task's node name, else Find.
  int64_t Find(const TaskPlacement& task) const {
    const size_t h = static_cast<size_t>(task.node_hint);
    if (task.node_hint >= 0 && h < slots_.size() && slots_[h].node->name == task.node) return task.node_hint;
    return Find(task.node);
  }
  /// Free GPUs usable now: the resource count, bounded by the free device indices.
  int64_t FreeGpus(size_t i) const {
    const NodeSlot& s = slots_[i];
    return std::min<int64_t>(s.free.gpus, s.used_devices.Size() - s.used_devices.Count());
  }
  /// Subtracts (Occupy) or gives back (Release) an allocation's resources and device indices,
  /// e.g. to see what a gang would free if it were preempted. Unknown nodes are ignored.
  void Occupy(const Allocation& allocation);
  void Release(const Allocation& allocation);
  /// True once an occupied allocation held a negative resource amount (never for validated jobs;
  /// the availability timeline then cannot assume that releases only add resources).
  bool NegativeAllocation() const { return negative_allocation_; }
  /// The distinct GPU types of the nodes, in name order.
  const std::vector<std::string>& gpu_types() const { return gpu_types_; }
  /// Index of `type` in gpu_types(), or -1.
  int32_t GpuTypeId(const std::string& type) const;

 private:
  std::vector<NodeSlot> slots_;
  mutable std::unordered_map<std::string_view, size_t> index_;  // built by the first Find(name)
  std::vector<std::string> gpu_types_;
  bool negative_allocation_ = false;
};

/// A transaction over a NodeLedger: Take() subtracts a task's resources and picks its device
/// indices; Discard() restores the ledger exactly; Commit() keeps the changes. Destroying an
/// open transaction discards it.
class AllocationTxn {
 public:
  explicit AllocationTxn(NodeLedger& ledger) : ledger_(ledger) {}
  ~AllocationTxn();
  AllocationTxn(const AllocationTxn&) = delete;
  AllocationTxn& operator=(const AllocationTxn&) = delete;

  /// Takes one task of `demand` on node `node_index`; false (and no change) if it does not fit.
  bool Take(size_t node_index, const TaskDemand& demand, int32_t rank);
  /// The placements taken so far (ranks in Take order), with resources keyed by GPU type.
  const std::vector<TaskPlacement>& placements() const { return placements_; }
  /// Keeps the changes and returns the placements taken, sorted by rank.
  Allocation Commit();
  void Discard();

 private:
  NodeLedger& ledger_;
  struct Undo {
    size_t node_index;
    TaskDemand demand;
  };
  std::vector<Undo> undo_;
  std::vector<TaskPlacement> placements_;
};

}  // namespace mlsched::core
