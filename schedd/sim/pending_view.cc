#include "schedd/sim/pending_view.h"

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <utility>

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

void PendingView::AddPending(size_t index, Need need, std::optional<std::string> shape, int64_t planned_s) {
  ++pending_needs_[need];
  need_of_[index] = need;
  visible_.emplace(index, need);
  if (!shape) return;
  auto [id, fresh] = shape_ids_.try_emplace(std::move(*shape), shapes_.size());
  if (fresh) shapes_.push_back(Shape{need, {}, {}});
  shape_of_[index] = id->second;
  Shape& s = shapes_[id->second];
  if (s.members.empty()) live_shapes_.emplace(s.need, id->second);
  Join(s, index, planned_s);
}

void PendingView::Started(size_t index, Need held) {
  auto it = need_of_.find(index);
  if (it != need_of_.end()) {
    auto count = pending_needs_.find(it->second);
    if (count != pending_needs_.end() && --count->second == 0) pending_needs_.erase(count);
    need_of_.erase(it);
  }
  if (auto shape = shape_of_.find(index); shape != shape_of_.end()) {
    Shape& s = shapes_[shape->second];
    Leave(s, index);
    if (s.members.empty()) live_shapes_.erase({s.need, shape->second});
    shape_of_.erase(shape);
  }
  visible_.erase(index);
  held_.cpu_millis += held.cpu_millis;
  held_.memory_bytes += held.memory_bytes;
  held_.gpus += held.gpus;
}

void PendingView::Join(Shape& s, size_t index, int64_t planned_s) {
  s.members.emplace(index, planned_s);
  // The shortest run time before `index` is that of the last record before it.
  auto next = s.records.lower_bound(index);
  const int64_t best = next == s.records.begin() ? INT64_MAX : s.members.at(*std::prev(next));
  if (planned_s >= best) return;
  // A new record: the later records it is not longer than are records no more.
  while (next != s.records.end() && s.members.at(*next) >= planned_s) next = s.records.erase(next);
  s.records.insert(index);
}

void PendingView::Leave(Shape& s, size_t index) {
  const auto m = s.members.find(index);
  const auto r = s.records.find(index);
  if (r == s.records.end()) {
    s.members.erase(m);
    return;
  }
  // Its gap (the members up to the next record) gets the records it now lacks.
  int64_t best = r == s.records.begin() ? INT64_MAX : s.members.at(*std::prev(r));
  const auto next = std::next(r);
  const size_t end = next == s.records.end() ? SIZE_MAX : *next;
  s.records.erase(r);
  for (auto g = std::next(m); g != s.members.end() && g->first < end; ++g) {
    if (g->second < best) {
      s.records.insert(g->first);
      best = g->second;
    }
  }
  s.members.erase(m);
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

void PendingView::Unpark(size_t index, std::vector<size_t>* unpark) {
  const Need& need = need_of_.at(index);
  parked_.erase(index);
  if (!shape_of_.count(index)) {
    auto bucket = parked_by_need_.find(need);
    bucket->second.erase(index);
    if (bucket->second.empty()) parked_by_need_.erase(bucket);
  }
  visible_.emplace(index, need);
  unpark->push_back(index);
}

void PendingView::Arrange(bool covered_too, std::vector<size_t>* unpark, std::vector<size_t>* park) {
  unpark->clear();
  park->clear();
  std::vector<size_t> show;
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
      show.push_back(*p);
      ++p;
    }
  }
  if (covered_too) {
    const int64_t free_cpu = Free().cpu_millis;
    for (const auto& [need, members] : parked_by_need_) {
      if (need.cpu_millis > 0 && need.cpu_millis > free_cpu) break;
      if (!Covered(need)) continue;
      for (size_t i : members)
        if (i > cut) show.push_back(i);
    }
    for (const auto& [need, id] : live_shapes_) {
      if (need.cpu_millis > 0 && need.cpu_millis > free_cpu) break;  // ordered by CPUs first
      const Shape& s = shapes_[id];
      if (!Covered(need)) continue;
      for (auto r = s.records.upper_bound(cut); r != s.records.end(); ++r)
        if (parked_.count(*r)) show.push_back(*r);
    }
  }
  for (size_t i : show) Unpark(i, unpark);
  // Visible jobs past the prefix that may not start now, or that a record covers, go back out of
  // sight.
  for (auto it = visible_.upper_bound(cut); it != visible_.end();) {
    const auto shape = shape_of_.find(it->first);
    if (covered_too && Covered(it->second) &&
        (shape == shape_of_.end() || shapes_[shape->second].records.count(it->first))) {
      ++it;
      continue;
    }
    park->push_back(it->first);
    parked_.insert(it->first);
    if (shape == shape_of_.end()) parked_by_need_[it->second].insert(it->first);
    it = visible_.erase(it);
  }
}

void PendingView::OpenGap(size_t index, std::vector<size_t>* unpark) {
  const auto shape = shape_of_.find(index);
  if (shape == shape_of_.end()) return;
  const Shape& s = shapes_[shape->second];
  const auto r = s.records.find(index);
  if (r == s.records.end() || !Covered(s.need)) return;
  const auto next = std::next(r);
  const size_t end = next == s.records.end() ? SIZE_MAX : *next;
  for (auto m = s.members.upper_bound(index); m != s.members.end() && m->first < end; ++m)
    if (parked_.count(m->first)) Unpark(m->first, unpark);
}

}  // namespace mlsched::sim
