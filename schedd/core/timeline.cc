#include "schedd/core/timeline.h"

#include <algorithm>
#include <limits>

namespace mlsched::core {
namespace {

void Add(TaskDemand& a, const TaskDemand& b, int64_t sign = 1) {
  a.cpu_millis += sign * b.cpu_millis;
  a.memory_bytes += sign * b.memory_bytes;
  a.gpus += sign * b.gpus;
}

TaskDemand Min(const TaskDemand& a, const TaskDemand& b) {
  return {std::min(a.cpu_millis, b.cpu_millis), std::min(a.memory_bytes, b.memory_bytes),
          std::min(a.gpus, b.gpus)};
}

}  // namespace

AvailabilityTimeline::AvailabilityTimeline(const NodeLedger& ledger, const std::vector<Job>& jobs,
                                           Timestamp now, Build build)
    : now_(now), ledger_(ledger), jobs_(jobs) {
  single_ = ledger.size() == 1 && ledger.slot(0).node->health == NodeHealth::kUp;
  free_now_.resize(ledger.size());
  for (size_t i = 0; i < ledger.size(); ++i) {
    if (ledger.slot(i).node->health != NodeHealth::kUp) continue;  // no new work, ever (for now)
    TaskDemand& free = free_now_[i];
    free = ledger.slot(i).free;
    free.gpus = ledger.FreeGpus(i);
    Add(total_now_, free);
  }
  // Answering "from now on" with the free resources now needs releases that only add resources.
  if (build == Build::kNow || ledger.NegativeAllocation()) Materialize();
}

void AvailabilityTimeline::Materialize() const {
  if (!lazy_) return;
  lazy_ = false;
  // The free resources at construction: the deferred starts given back.
  for (const DeferredStart& d : deferred_) Add(free_now_[d.node], d.amount);
  own_.assign(ledger_.size(), -1);
  future_reserved_.assign(ledger_.size(), false);
  // Every running task's release (node, expected end, resources), sorted by node then time.
  struct Release {
    size_t node;
    Timestamp time;
    TaskDemand freed;
  };
  std::vector<Release> releases;
  releases.reserve(jobs_.size());  // one task per job is the common case; gangs grow it
  for (const Job& job : jobs_) {
    if (job.state == JobState::kPending || IsFinal(job.state) || !job.allocation) continue;
    const Timestamp end = std::max(job.start_time + PlannedRuntime(job), now_ + 1);
    for (const TaskPlacement& t : job.allocation->tasks) {
      int64_t i = ledger_.Find(t);
      if (i < 0) continue;
      releases.push_back({static_cast<size_t>(i), end,
                          {t.resources.cpu_millis, t.resources.memory_bytes, t.resources.GpuCount()}});
    }
  }
  std::sort(releases.begin(), releases.end(), [](const Release& a, const Release& b) {
    return a.node != b.node ? a.node < b.node : a.time < b.time;
  });
  TaskDemand total{};
  size_t r = 0;
  built_.reserve(ledger_.size() + releases.size());
  built_begin_.reserve(ledger_.size() + 1);
  for (size_t i = 0; i < ledger_.size(); ++i) {
    const bool up = ledger_.slot(i).node->health == NodeHealth::kUp;
    TaskDemand free = free_now_[i];  // {} when not up
    built_begin_.push_back(static_cast<uint32_t>(built_.size()));
    built_.push_back({now_, free});
    Add(total, free);
    for (; r < releases.size() && releases[r].node == i; ++r) {
      if (!up) continue;
      Add(free, releases[r].freed);
      if (built_.back().time == releases[r].time) {
        built_.back().free = free;
      } else {
        built_.push_back({releases[r].time, free});
      }
    }
  }
  built_begin_.push_back(static_cast<uint32_t>(built_.size()));
  if (!single_) {
    std::sort(releases.begin(), releases.end(),
              [](const Release& a, const Release& b) { return a.time < b.time; });
    aggregate_.push_back({now_, total});
    for (const Release& rel : releases) {
      Add(total, rel.freed);
      if (aggregate_.back().time == rel.time) {
        aggregate_.back().free = total;
      } else {
        aggregate_.push_back({rel.time, total});
      }
    }
  }
  for (const DeferredStart& d : deferred_) SubtractBuilt(d.node, d.amount, now_, d.to);
  deferred_.clear();
  free_now_.clear();
}

std::span<const AvailabilityTimeline::Step> AvailabilityTimeline::Aggregate() const {
  return single_ ? ProfileOf(0) : std::span<const Step>(aggregate_);
}

std::span<const AvailabilityTimeline::Step> AvailabilityTimeline::ProfileOf(size_t node) const {
  if (own_[node] >= 0) return owned_[static_cast<size_t>(own_[node])];
  return std::span<const Step>(built_).subspan(built_begin_[node], built_begin_[node + 1] - built_begin_[node]);
}

AvailabilityTimeline::Profile& AvailabilityTimeline::MutableProfile(size_t node) const {
  if (own_[node] < 0) {
    const std::span<const Step> built = ProfileOf(node);
    own_[node] = static_cast<int32_t>(owned_.size());
    Profile& p = owned_.emplace_back();
    p.reserve(2 * built.size() + 16);  // each reservation adds up to two steps
    p.assign(built.begin(), built.end());
  }
  return owned_[static_cast<size_t>(own_[node])];
}

TaskDemand AvailabilityTimeline::MinOver(std::span<const Step> p, Timestamp from, Timestamp to) {
  // The step in force at `from` is the last one with time <= from.
  auto it = std::upper_bound(p.begin(), p.end(), from,
                             [](Timestamp t, const Step& s) { return t < s.time; });
  if (it != p.begin()) --it;
  TaskDemand m = it->free;
  for (++it; it != p.end() && it->time < to; ++it) m = Min(m, it->free);
  return m;
}

TaskDemand AvailabilityTimeline::MinFree(size_t node, Timestamp from, Timestamp to) const {
  if (lazy_ && from <= now_) return free_now_[node];  // releases after now only add resources
  Materialize();
  return MinOver(ProfileOf(node), from, to);
}

TaskDemand AvailabilityTimeline::AggregateMinFree(Timestamp from, Timestamp to) const {
  if (lazy_ && from <= now_) return total_now_;
  Materialize();
  return MinOver(Aggregate(), from, to);
}

Timestamp AvailabilityTimeline::LastChange(size_t node, Timestamp t) const {
  Materialize();
  const std::span<const Step> p = ProfileOf(node);
  auto it = std::upper_bound(p.begin(), p.end(), t,
                             [](Timestamp x, const Step& s) { return x < s.time; });
  return it == p.begin() ? now_ : std::prev(it)->time;
}

size_t AvailabilityTimeline::SplitAt(Profile& p, Timestamp t, size_t first) {
  // The step is most often at or just after `first` (a reservation starts where the search that
  // found it stopped): probe a few steps, then search the rest.
  size_t k = first;
  for (const size_t probe_end = std::min(first + 4, p.size()); k < probe_end && p[k].time < t;) ++k;
  auto it = p.begin() + static_cast<std::ptrdiff_t>(k);
  if (k == first + 4)
    it = std::lower_bound(it, p.end(), t, [](const Step& s, Timestamp x) { return s.time < x; });
  if (it != p.end() && it->time == t) return static_cast<size_t>(it - p.begin());
  // Steps start at now_ and t >= now_, so a previous step exists.
  TaskDemand carried = std::prev(it)->free;
  it = p.insert(it, Step{t, carried});
  return static_cast<size_t>(it - p.begin());
}

void AvailabilityTimeline::Subtract(Profile& p, const TaskDemand& amount, Timestamp from,
                                    Timestamp to, size_t hint) {
  // Every step before `hint` starts before `from` when the hint's own step does not start after it.
  const size_t first = hint < p.size() && p[hint].time <= from ? hint : 0;
  size_t begin = SplitAt(p, from, first);
  size_t end = to == std::numeric_limits<Timestamp>::max() ? p.size() : SplitAt(p, to, begin + 1);
  for (size_t k = begin; k < end; ++k) Add(p[k].free, amount, -1);
}

void AvailabilityTimeline::Reserve(size_t node, const TaskDemand& per_task, int64_t count,
                                   Timestamp from, Timestamp to) {
  TaskDemand amount{per_task.cpu_millis * count, per_task.memory_bytes * count,
                    per_task.gpus * count};
  from = std::max(from, now_);
  if (to <= from) return;
  if (lazy_ && from == now_ && amount.cpu_millis >= 0 && amount.memory_bytes >= 0 && amount.gpus >= 0) {
    // A start from now only lowers free now, and the minimum from now on with it.
    Add(free_now_[node], amount, -1);
    Add(total_now_, amount, -1);
    deferred_.push_back({node, amount, to});
    return;
  }
  Materialize();
  if (from > now_ && count > 0 && !future_reserved_[node]) {
    future_reserved_[node] = true;
    future_nodes_.push_back(node);
  }
  SubtractBuilt(node, amount, from, to);
}

void AvailabilityTimeline::SubtractBuilt(size_t node, const TaskDemand& amount, Timestamp from,
                                         Timestamp to) const {
  // The last aggregate search's step is a hint into the aggregate (the node's profile when single_).
  Subtract(MutableProfile(node), amount, from, to, single_ ? fit_step_ : 0);
  if (!single_) Subtract(aggregate_, amount, from, to, fit_step_);
}

std::optional<Timestamp> AvailabilityTimeline::NextAggregateFit(Timestamp from, Duration duration,
                                                                const TaskDemand& per_task,
                                                                int64_t count) const {
  const TaskDemand need{per_task.cpu_millis * count, per_task.memory_bytes * count,
                        per_task.gpus * count};
  auto covers = [&need](const TaskDemand& f) {
    return f.cpu_millis >= need.cpu_millis && f.memory_bytes >= need.memory_bytes && f.gpus >= need.gpus;
  };
  Materialize();
  const std::span<const Step> p = Aggregate();
  size_t i = 0;  // the step in force at `from` (most searches start now, at step 0)
  if (from > p[0].time) {
    auto it = std::upper_bound(p.begin(), p.end(), from,
                               [](Timestamp t, const Step& s) { return t < s.time; });
    i = static_cast<size_t>(it - p.begin()) - 1;
  }
  Timestamp t = std::max(from, p[i].time);
  while (i < p.size()) {
    if (!covers(p[i].free)) {  // no window containing step i fits: restart after it
      if (++i == p.size()) return std::nullopt;
      t = p[i].time;
      continue;
    }
    size_t j = i;
    while (j + 1 < p.size() && p[j + 1].time < t + duration && covers(p[j + 1].free)) ++j;
    if (j + 1 == p.size() || p[j + 1].time >= t + duration) {
      fit_step_ = i;
      return t;
    }
    // p[j + 1] does not cover: no window containing it fits; restart after it.
    i = j + 2;
    if (i >= p.size()) return std::nullopt;
    t = p[i].time;
  }
  return std::nullopt;
}

std::optional<Timestamp> AvailabilityTimeline::NextChange(Timestamp t) const {
  Materialize();
  const std::span<const Step> aggregate = Aggregate();
  auto it = std::upper_bound(aggregate.begin(), aggregate.end(), t,
                             [](Timestamp x, const Step& s) { return x < s.time; });
  if (it == aggregate.end()) return std::nullopt;
  return it->time;
}

std::vector<FreeStep> AvailabilityTimeline::AggregateSteps() const {
  Materialize();
  const std::span<const Step> p = Aggregate();
  std::vector<FreeStep> out;
  out.reserve(p.size());
  for (const Step& s : p) out.push_back({s.time, s.free.cpu_millis, s.free.memory_bytes, s.free.gpus});
  return out;
}

}  // namespace mlsched::core
