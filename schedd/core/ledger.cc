#include "schedd/core/ledger.h"

#include <algorithm>
#include <bit>

namespace mlsched::core {

DeviceSet::DeviceSet(int32_t size) : size_(std::max<int32_t>(size, 0)) {
  if (size_ > 64) overflow_.assign((size_ + 63) / 64, 0);
}

bool DeviceSet::Contains(int32_t index) const {
  if (index < 0 || index >= size_) return false;
  return (Word(index) >> (index % 64)) & 1u;
}

void DeviceSet::Insert(int32_t index) {
  if (index < 0 || index >= size_ || Contains(index)) return;
  Word(index) |= uint64_t{1} << (index % 64);
  ++count_;
}

void DeviceSet::Erase(int32_t index) {
  if (!Contains(index)) return;
  Word(index) &= ~(uint64_t{1} << (index % 64));
  --count_;
}

std::vector<int32_t> DeviceSet::LowestAbsent(int32_t k) const {
  std::vector<int32_t> out;
  out.reserve(std::max<int32_t>(k, 0));
  for (int32_t i = 0; i < size_ && static_cast<int32_t>(out.size()) < k; ++i)
    if (!Contains(i)) out.push_back(i);
  return out;
}

namespace {
// The node's single GPU type and count (the first type with a positive count; "" and 0 without).
std::pair<const std::string&, int64_t> NodeGpu(const Node& node) {
  static const std::string kNone;
  for (const auto& [type, count] : node.capacity.gpus)
    if (count > 0) return {type, count};
  return {kNone, 0};
}
}  // namespace

std::optional<TaskDemand> ResolveTaskDemand(const JobSpec& spec, const Node& node) {
  TaskDemand d{spec.per_task.cpu_millis, spec.per_task.memory_bytes, 0};
  const std::string& node_type = NodeGpu(node).first;
  for (const auto& [type, count] : spec.per_task.gpus) {
    if (count <= 0) continue;
    if (!type.empty() && type != node_type) return std::nullopt;
    d.gpus += count;
  }
  if (d.gpus > 0 && !spec.gpu_types.empty() &&
      std::find(spec.gpu_types.begin(), spec.gpu_types.end(), node_type) == spec.gpu_types.end())
    return std::nullopt;
  return d;
}

Fit CheckFit(const NodeSlot& slot, const TaskDemand& demand) {
  if (TasksThatFit(slot.capacity, demand, 1) == 0) return Fit::kNever;
  TaskDemand free = slot.free;
  free.gpus = std::min<int64_t>(free.gpus, slot.used_devices.Size() - slot.used_devices.Count());
  return TasksThatFit(free, demand, 1) == 1 ? Fit::kFits : Fit::kNotNow;
}

NodeLedger::NodeLedger(const std::vector<Node>& nodes, const std::vector<Job>& jobs) {
  slots_.reserve(nodes.size());
  std::unordered_map<std::string, int32_t> domains, zones, regions;
  auto id_of = [](std::unordered_map<std::string, int32_t>& ids, const std::string& key) {
    return ids.emplace(key, static_cast<int32_t>(ids.size())).first->second;
  };
  for (const Node& node : nodes) {
    const auto [type, count] = NodeGpu(node);
    const NodeSlot* prev = slots_.empty() ? nullptr : &slots_.back();  // reserved: stays valid
    NodeSlot& slot = slots_.emplace_back();
    slot.node = &node;
    slot.gpu_type = type;
    slot.capacity = {node.capacity.cpu_millis, node.capacity.memory_bytes, count};
    slot.free = slot.capacity;
    if (count > 0) slot.used_devices = DeviceSet(static_cast<int32_t>(count));
    // Domain names are scoped by zone and region: "rack1" in two zones are two domains. Nodes
    // usually come grouped by domain: the previous node's ids are reused without hashing.
    if (prev && prev->node->region == node.region && prev->node->zone == node.zone &&
        prev->node->domain == node.domain) {
      slot.region_id = prev->region_id;
      slot.zone_id = prev->zone_id;
      slot.domain_id = prev->domain_id;
    } else {
      slot.region_id = id_of(regions, node.region);
      slot.zone_id = id_of(zones, node.region + '\x1f' + node.zone);
      slot.domain_id = id_of(domains, node.region + '\x1f' + node.zone + '\x1f' + node.domain);
    }
    if (!type.empty() && (gpu_types_.empty() || gpu_types_.back() != type) &&
        std::find(gpu_types_.begin(), gpu_types_.end(), type) == gpu_types_.end())
      gpu_types_.push_back(type);
  }
  std::sort(gpu_types_.begin(), gpu_types_.end());
  for (size_t i = 0; i < slots_.size(); ++i) {
    NodeSlot& s = slots_[i];
    if (i > 0 && s.gpu_type == slots_[i - 1].gpu_type) {
      s.gpu_type_id = slots_[i - 1].gpu_type_id;  // nodes usually come grouped by type
    } else {
      s.gpu_type_id = s.gpu_type.empty() ? -1 : GpuTypeId(std::string(s.gpu_type));
    }
  }
  for (const Job& job : jobs) {
    if (job.state == JobState::kPending || IsFinal(job.state) || !job.allocation) continue;
    Occupy(*job.allocation);
  }
}

void NodeLedger::Occupy(const Allocation& allocation) {
  for (const TaskPlacement& task : allocation.tasks) {
    int64_t i = Find(task);
    if (i < 0) continue;
    NodeSlot& slot = slots_[i];
    const int64_t gpus = task.resources.GpuCount();
    slot.free.cpu_millis -= task.resources.cpu_millis;
    slot.free.memory_bytes -= task.resources.memory_bytes;
    slot.free.gpus -= gpus;
    if (task.resources.cpu_millis < 0 || task.resources.memory_bytes < 0 || gpus < 0) negative_allocation_ = true;
    for (int32_t d : task.gpu_indices) slot.used_devices.Insert(d);
  }
}

void NodeLedger::Release(const Allocation& allocation) {
  for (const TaskPlacement& task : allocation.tasks) {
    int64_t i = Find(task);
    if (i < 0) continue;
    NodeSlot& slot = slots_[i];
    slot.free.cpu_millis += task.resources.cpu_millis;
    slot.free.memory_bytes += task.resources.memory_bytes;
    slot.free.gpus += task.resources.GpuCount();
    for (int32_t d : task.gpu_indices) slot.used_devices.Erase(d);
  }
}

int64_t NodeLedger::Find(const std::string& name) const {
  if (index_.empty() && !slots_.empty()) {
    index_.reserve(slots_.size());
    for (size_t i = 0; i < slots_.size(); ++i) index_.emplace(slots_[i].node->name, i);
  }
  auto it = index_.find(name);
  return it == index_.end() ? -1 : static_cast<int64_t>(it->second);
}

int32_t NodeLedger::GpuTypeId(const std::string& type) const {
  auto it = std::lower_bound(gpu_types_.begin(), gpu_types_.end(), type);
  return it != gpu_types_.end() && *it == type ? static_cast<int32_t>(it - gpu_types_.begin()) : -1;
}

AllocationTxn::~AllocationTxn() { Discard(); }

bool AllocationTxn::Take(size_t node_index, const TaskDemand& demand, int32_t rank) {
  NodeSlot& slot = ledger_.mutable_slot(node_index);
  if (CheckFit(slot, demand) != Fit::kFits) return false;
  TaskPlacement p;
  p.rank = rank;
  p.node = slot.node->name;
  p.node_hint = static_cast<int32_t>(node_index);
  p.gpu_indices = slot.used_devices.LowestAbsent(static_cast<int32_t>(demand.gpus));
  for (int32_t d : p.gpu_indices) slot.used_devices.Insert(d);
  p.resources.cpu_millis = demand.cpu_millis;
  p.resources.memory_bytes = demand.memory_bytes;
  if (demand.gpus > 0) p.resources.gpus[std::string(slot.gpu_type)] = demand.gpus;
  slot.free.cpu_millis -= demand.cpu_millis;
  slot.free.memory_bytes -= demand.memory_bytes;
  slot.free.gpus -= demand.gpus;
  undo_.push_back({node_index, demand});
  placements_.push_back(std::move(p));
  return true;
}

Allocation AllocationTxn::Commit() {
  Allocation out;
  out.tasks = std::move(placements_);
  std::sort(out.tasks.begin(), out.tasks.end(),
            [](const TaskPlacement& a, const TaskPlacement& b) { return a.rank < b.rank; });
  undo_.clear();
  placements_.clear();
  return out;
}

void AllocationTxn::Discard() {
  // Undo in reverse order so the ledger returns to exactly its state before the first Take.
  for (size_t k = undo_.size(); k-- > 0;) {
    NodeSlot& slot = ledger_.mutable_slot(undo_[k].node_index);
    slot.free.cpu_millis += undo_[k].demand.cpu_millis;
    slot.free.memory_bytes += undo_[k].demand.memory_bytes;
    slot.free.gpus += undo_[k].demand.gpus;
    for (int32_t d : placements_[k].gpu_indices) slot.used_devices.Erase(d);
  }
  undo_.clear();
  placements_.clear();
}

}  // namespace mlsched::core
