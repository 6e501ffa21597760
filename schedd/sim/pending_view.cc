#include "schedd/sim/pending_view.h"

#include <algorithm>

namespace mlsched::sim {

Need NeedOf(const core::JobSpec& spec) {
  if (!spec.fallback.empty()) return {};
  const int64_t n = core::IsElastic(spec) ? std::min(spec.elastic.min_tasks, spec.ntasks) : spec.ntasks;
  return {n * spec.per_task.cpu_millis, n * spec.per_task.memory_bytes, n * spec.per_task.GpuCount()};
}

// The fleet's total CPUs, memory and GPUs.
Need FleetCapacity(const Fleet& fleet) {
  Need total;
  for (const core::Node& n : fleet.nodes) {
    total.cpu_millis += n.capacity.cpu_millis;
    total.memory_bytes += n.capacity.memory_bytes;
    total.gpus += n.capacity.GpuCount();
  }
  return total;
}

// The sum of an allocation's task resources.
Need Held(const core::Allocation& allocation) {
  Need held;
  for (const core::TaskPlacement& t : allocation.tasks) {
    held.cpu_millis += t.resources.cpu_millis;
    held.memory_bytes += t.resources.memory_bytes;
    held.gpus += t.resources.GpuCount();
  }
  return held;
}

bool PendingView::Covered(const Need& n) const {
  // A dimension the job does not ask for never holds it back (core::TasksThatFit's rule).
  const Need f = Free();
  return (n.cpu_millis <= 0 || n.cpu_millis <= f.cpu_millis) &&
         (n.memory_bytes <= 0 || n.memory_bytes <= f.memory_bytes) && (n.gpus <= 0 || n.gpus <= f.gpus);
}

void PendingView::AddPending(size_t index, Need need) {
  ++pending_needs_[need];
  need_of_[index] = need;
  visible_.emplace(index, need);
}

void PendingView::Started(size_t index, Need held) {
  auto it = need_of_.find(index);
  if (it != need_of_.end()) {
    auto count = pending_needs_.find(it->second);
    if (count != pending_needs_.end() && --count->second == 0) pending_needs_.erase(count);
    need_of_.erase(it);
  }
  visible_.erase(index);
  held_.cpu_millis += held.cpu_millis;
  held_.memory_bytes += held.memory_bytes;
  held_.gpus += held.gpus;
}

void PendingView::Stopped(Need held) {
  held_.cpu_millis -= held.cpu_millis;
  held_.memory_bytes -= held.memory_bytes;
  held_.gpus -= held.gpus;
}

bool PendingView::AnyMayStart() const {
  const int64_t free_cpu = Free().cpu_millis;
  // Ordered by CPUs first: past the first need with more CPUs than free (and some CPUs), none fits.
  for (const auto& [need, count] : pending_needs_) {
    if (need.cpu_millis > 0 && need.cpu_millis > free_cpu) break;
    if (Covered(need)) return true;
  }
  return false;
}

void PendingView::Arrange(bool covered_too, std::vector<size_t>* unpark, std::vector<size_t>* park) {
  unpark->clear();
  park->clear();
  // The first prefix_ pending jobs in index order: walk the visible and parked sets together.
  auto v = visible_.begin();
  auto p = parked_.begin();
  size_t cut = 0;  // the last index of the prefix
  for (size_t taken = 0; taken < prefix_ && (v != visible_.end() || p != parked_.end()); ++taken) {
    if (p == parked_.end() || (v != visible_.end() && v->first < *p)) {
      cut = v->first;
      ++v;
    } else {
      cut = *p;
      unpark->push_back(*p);
      ++p;
    }
  }
  if (covered_too) {
    const int64_t free_cpu = Free().cpu_millis;
    for (const auto& [need, members] : parked_by_need_) {
      if (need.cpu_millis > 0 && need.cpu_millis > free_cpu) break;
      if (!Covered(need)) continue;
      for (size_t i : members)
        if (i > cut) unpark->push_back(i);
    }
  }
  for (size_t i : *unpark) {
    const Need& need = need_of_.at(i);
    parked_.erase(i);
    auto bucket = parked_by_need_.find(need);
    bucket->second.erase(i);
    if (bucket->second.empty()) parked_by_need_.erase(bucket);
    visible_.emplace(i, need);
  }
  // Visible jobs past the prefix that may not start now go back out of sight.
  for (auto it = visible_.upper_bound(cut); it != visible_.end();) {
    if (covered_too && Covered(it->second)) {
      ++it;
      continue;
    }
    park->push_back(it->first);
    parked_.insert(it->first);
    parked_by_need_[it->second].insert(it->first);
    it = visible_.erase(it);
  }
}

}  // namespace mlsched::sim
