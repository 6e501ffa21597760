#include "schedd/core/backfill.h"

#include <algorithm>
#include <tuple>
#include <limits>

namespace mlsched::core {
namespace {

// Appends each of `v` followed by ','.
void Append(std::string& out, const std::vector<std::string>& v) {
  for (const auto& s : v) {
    out += s;
    out += ',';
  }
}

bool Covers(const TaskDemand& have, const TaskDemand& per_task, int64_t n) {
  return have.cpu_millis >= per_task.cpu_millis * n && have.memory_bytes >= per_task.memory_bytes * n &&
         have.gpus >= per_task.gpus * n;
}

}  // namespace

Planner::Planner(NodeLedger& ledger, AvailabilityTimeline& timeline, LimitTracker& limits,
                 const PolicySet& policy, Timestamp now)
    : ledger_(ledger), timeline_(timeline), limits_(limits), policy_(policy), now_(now) {}

std::optional<Planner::PlainKey> Planner::PlainKeyOf(const QueuedJob& q) const {
  const JobSpec& spec = q.job->spec;
  if (!spec.features.empty() || !spec.gpu_types.empty() || !spec.exclude_nodes.empty() || (spec.region_strict && !spec.data_region.empty()) ||
      !policy_.warm_pools.empty() || spec.per_task.gpus.size() > 1)
    return std::nullopt;
  PlainKey key{q.partition, spec.per_task.cpu_millis, spec.per_task.memory_bytes, 0, spec.ntasks, spec.topology, spec.spot};
  if (!spec.per_task.gpus.empty()) {
    const auto& [type, count] = *spec.per_task.gpus.begin();
    if (!type.empty()) return std::nullopt;
    key.gpus = count;
  }
  return key;
}

const Planner::Shape& Planner::ShapeOf(const QueuedJob& q) {
  if (q.job == last_job_) return *last_shape_;
  last_job_ = q.job;
  // A plain job's shape is found from its key (a few field reads), with no entry per job.
  if (const auto key = PlainKeyOf(q)) {
    auto [plain, made] = plain_shapes_.try_emplace(*key);
    if (made) plain->second = MakePlainShape(q);
    return *(last_shape_ = &plain->second);
  }
  auto [it, fresh] = shapes_.try_emplace(q.job, nullptr);
  if (fresh) it->second = &own_shapes_.emplace_back(MakeShape(q, nullptr));
  return *(last_shape_ = it->second);
}

const Planner::Shape& Planner::ShapeOf(const QueuedJob& q, size_t tier) {
  auto found = tier_shapes_.find({q.job, tier});
  if (found != tier_shapes_.end()) return found->second;
  return tier_shapes_.emplace(std::pair{q.job, tier}, MakeShape(q, &(*q.placement)[tier])).first->second;
}

std::string Planner::ClassOf(const QueuedJob& q, const NodeFilter* filter, const std::vector<size_t>& warm,
                             char* needs) const {
  const JobSpec& spec = q.job->spec;
  // The node class: everything that decides which nodes are eligible. Built by appending into one
  // buffer.
  std::string klass;
  klass.reserve(64);
  klass += q.partition->name;
  klass += '|';
  Append(klass, spec.features);
  klass += '|';
  Append(klass, spec.exclude_nodes);
  klass += '|';
  Append(klass, spec.gpu_types);
  klass += '|';
  bool named = false;
  for (const auto& [type, count] : spec.per_task.gpus)
    if (count > 0) {
      klass += type;
      klass += ',';
      named = true;
    }
  *needs = named ? 'G' : spec.per_task.cpu_millis > 0 ? 'C' : 'N';
  klass += '|';
  klass += *needs;
  if (spec.spot != SpotPreference::kAllow && spec.spot != SpotPreference::kPrefer) {
    klass += "|spot:";
    klass += SpotPreferenceName(spec.spot);
  }
  if (spec.region_strict && !spec.data_region.empty()) {
    klass += "|in:";
    klass += spec.data_region;
  }
  if (filter) {
    klass += "|tier:";
    klass += filter->pool ? PoolName(*filter->pool) : "*";
    klass += '@';
    klass += filter->region;
  }
  for (size_t w : warm) {
    klass += "|warm:";
    klass += std::to_string(w);
  }
  return klass;
}

Planner::NodeClass& Planner::ClassNodes(const QueuedJob& q, const NodeFilter* filter) {
  const JobSpec& spec = q.job->spec;
  const std::vector<size_t> warm = WarmExcluded(spec);
  char needs = 'N';
  std::string klass = ClassOf(q, filter, warm, &needs);
  auto [it, inserted] = classes_.try_emplace(klass);
  NodeClass& c = it->second;
  if (inserted) {
    c.klass = std::move(klass);
    c.needs = needs;
    for (size_t i = 0; i < ledger_.size(); ++i) {
      if (!NodeEligible(ledger_.slot(i), spec, q.partition)) continue;
      if (filter && !PassesFilter(*ledger_.slot(i).node, *filter)) continue;
      if (std::any_of(warm.begin(), warm.end(), [&](size_t w) { return warm_nodes_[w][i]; })) continue;
      c.eligible.push_back(i);
    }
    c.open = c.eligible;
  }
  return c;
}

Planner::Shape Planner::MakeShape(const QueuedJob& q, const NodeFilter* filter) {
  return ShapeIn(q, ClassNodes(q, filter));
}

Planner::Shape Planner::MakePlainShape(const QueuedJob& q) {
  // A plain job's class is decided by its partition, whether it asks for GPUs or CPUs and its spot
  // preference (ClassOf), so it is looked up once per such triple, not built per shape.
  const JobSpec& spec = q.job->spec;
  const bool gpus = !spec.per_task.gpus.empty() && spec.per_task.gpus.begin()->second > 0;
  const auto key = std::tuple{q.partition, gpus, spec.per_task.cpu_millis > 0, spec.spot};
  auto it = plain_classes_.find(key);
  if (it == plain_classes_.end()) it = plain_classes_.emplace(key, &ClassNodes(q, nullptr)).first;
  return ShapeIn(q, *it->second);
}

Planner::Shape Planner::ShapeIn(const QueuedJob& q, NodeClass& c) {
  const JobSpec& spec = q.job->spec;
  Shape s;
  s.eligible = &c.eligible;
  s.needs = c.needs;
  s.open_now = &c.open;
  s.demand = c.eligible.empty() ? TaskDemand{spec.per_task.cpu_millis, spec.per_task.memory_bytes,
                                             spec.per_task.GpuCount()}
                                : *ResolveTaskDemand(spec, *ledger_.slot(c.eligible.front()).node);
  // The key (class, demand, tasks, topology) stands for the string klass|cpu|memory|gpus|tasks|topology:
  // the class object is one per class string, and the fields after it hold no '|'.
  const auto [id, fresh_key] = key_ids_.try_emplace(
      ShapeKey{&c, s.demand.cpu_millis, s.demand.memory_bytes, s.demand.gpus, spec.ntasks, spec.topology},
      key_ids_.size());
  if (fresh_key) {
    failed_now_.push_back(kNeverFailed);
    first_fit_.push_back({});
  }
  s.key_id = id->second;
  return s;
}

const std::vector<NodeCandidate>& Planner::Candidates(const QueuedJob& q, const Shape& s,
                                               const std::string& type, Timestamp from,
                                               bool prefer_late_free) {
  const JobSpec& spec = q.job->spec;
  const Timestamp to = from + PlannedRuntime(*q.job);
  if (from == now_) {  // drop nodes that are full for the whole class
    std::erase_if(*s.open_now, [&](size_t i) {
      return (s.needs == 'G' && ledger_.FreeGpus(i) <= 0) ||
             (s.needs == 'C' && ledger_.slot(i).free.cpu_millis <= 0);
    });
  }
  const std::vector<size_t>& nodes = from == now_ ? *s.open_now : *s.eligible;
  const int32_t type_id = ledger_.GpuTypeId(type);
  std::vector<NodeCandidate>& out = scratch_;
  out.clear();
  for (size_t i : nodes) {
    const NodeSlot& slot = ledger_.slot(i);
    if (s.demand.gpus > 0 && slot.gpu_type_id != type_id) continue;
    int64_t k = spec.ntasks;
    if (from == now_) {  // now: device indices count too; O(1), so it goes first
      TaskDemand free = slot.free;
      free.gpus = ledger_.FreeGpus(i);
      k = TasksThatFit(free, s.demand, k);
      if (k <= 0) continue;
    }
    if (from != now_ || !timeline_.NonDecreasing(i)) {
      k = TasksThatFit(timeline_.MinFree(i, from, to), s.demand, k);
      if (k <= 0) continue;
    }
    // For a reservation prefer nodes that become free last, keeping the ones free sooner (and now)
    // for backfill: this makes a reservation on interchangeable nodes behave like one pool.
    // Only an order among candidates: one candidate node needs none.
    int64_t tiebreak = prefer_late_free && nodes.size() > 1 ? -timeline_.LastChange(i, from) : 0;
    out.push_back({i, k, slot.domain_id, slot.zone_id, slot.region_id, tiebreak});
  }
  return out;
}

std::optional<NodeChoice> Planner::ChooseNow(const QueuedJob& q, const Shape& s, const std::string& type) {
  const JobSpec& spec = q.job->spec;
  if ((spec.topology == Topology::kNone || spec.topology == Topology::kSameDomain) && kept_.empty()) {
    auto it = fit_now_.find(std::pair{s.key_id, type});
    if (it == fit_now_.end())
      it = fit_now_.try_emplace(std::pair{s.key_id, type}, ledger_, *s.eligible, ledger_.GpuTypeId(type), s.demand,
                                spec.ntasks).first;
    it->second.Update(ledger_, touched_);
    if (auto decided = it->second.Choose(ledger_, timeline_, now_, now_ + PlannedRuntime(*q.job), spec.topology))
      return *decided;
  }
  return ChooseNodes(Candidates(q, s, type, now_, false), spec.ntasks, spec.topology);
}

std::vector<size_t> Planner::WarmExcluded(const JobSpec& spec) {
  std::vector<size_t> out;
  if (policy_.warm_pools.empty()) return out;
  if (warm_nodes_.empty())
    for (const WarmPool& wp : policy_.warm_pools) {
      std::vector<bool> held(ledger_.size(), false);
      int32_t left = wp.nodes;
      for (size_t i = 0; i < ledger_.size() && left > 0; ++i) {
        const Node& n = *ledger_.slot(i).node;
        if (PoolName(n.pool) != wp.pool || n.health != NodeHealth::kUp) continue;
        held[i] = true;
        --left;
      }
      warm_nodes_.push_back(std::move(held));
    }
  const std::string& qos = spec.qos.empty() ? policy_.default_qos : spec.qos;
  for (size_t w = 0; w < policy_.warm_pools.size(); ++w) {
    const WarmPool& wp = policy_.warm_pools[w];
    if (qos != wp.qos && spec.time_limit > wp.borrow_limit) out.push_back(w);
  }
  return out;
}

const std::vector<std::string>& Planner::TypeChoices(const JobSpec& spec, const TaskDemand& demand) {
  static const std::vector<std::string> kAnyType{""};
  if (demand.gpus <= 0) return kAnyType;  // GpuTypeChoices' answer, without allocating
  type_choices_ = GpuTypeChoices(ledger_, spec, demand);
  return type_choices_;
}

bool Planner::KnownNotToFit(const Shape& s, Duration time_limit) const {
  // The memo is void once a kept plan is released (resources then grow within the cycle).
  return kept_.empty() && failed_now_[s.key_id] != kNeverFailed && failed_now_[s.key_id] <= time_limit;
}

QueuedJob Planner::SizedAs(const QueuedJob& q, int32_t ntasks) {
  if (ntasks == q.job->spec.ntasks) return q;
  auto [it, fresh] = sized_.try_emplace({q.job, ntasks}, nullptr);
  if (fresh) {
    Job& j = sized_jobs_.emplace_back(*q.job);
    j.spec.ntasks = ntasks;
    it->second = &j;
  }
  QueuedJob out = q;
  out.job = it->second;
  return out;
}

bool Planner::TryStartNow(const QueuedJob& q, CyclePlan& plan) {
  if (!IsElastic(q.job->spec)) return TryStartSized(q, plan);
  const std::vector<int32_t> sizes = GangSizes(q.job->spec);
  const bool earliest_finish = policy_.elastic.start == ElasticStart::kEarliestFinish;
  std::optional<std::optional<Timestamp>> finish_at_max;  // computed at the first smaller size tried
  for (int32_t n : sizes) {
    const QueuedJob sized = SizedAs(q, n);
    if (earliest_finish && n < sizes.front()) {
      if (KnownNotToFit(ShapeOf(sized), PlannedRuntime(*sized.job))) continue;  // cheap: no plan needed
      if (!finish_at_max) finish_at_max = FinishAtLargest(q);
      // Smaller sizes finish later still: waiting for the largest size wins over all of them.
      if (*finish_at_max && **finish_at_max <= now_ + ElasticRuntime(*q.job, n)) return false;
    }
    if (TryStartSized(sized, plan)) return true;
  }
  return false;
}

std::optional<Timestamp> Planner::FinishAtLargest(const QueuedJob& q) {
  const BackfillPolicy& bf = policy_.backfill;
  const Timestamp until = bf.window > 0 ? now_ + bf.window : std::numeric_limits<Timestamp>::max() / 4;
  const auto start = FindEarliest(q, until);  // q is the job at its largest size
  if (!start) return std::nullopt;
  return start->time + ElasticRuntime(*q.job, q.job->spec.ntasks);
}

std::optional<std::pair<QueuedJob, const PlannedStart*>> Planner::PlanReservation(const QueuedJob& q,
                                                                                  Timestamp until) {
  if (!IsElastic(q.job->spec)) {  // one size: GangSizes would be {ntasks} and SizedAs q itself
    if (const PlannedStart* start = FindEarliest(q, until)) return std::pair{q, start};
    return std::nullopt;
  }
  for (int32_t n : GangSizes(q.job->spec)) {
    QueuedJob sized = SizedAs(q, n);
    if (const PlannedStart* start = FindEarliest(sized, until)) return std::pair{sized, start};
  }
  return std::nullopt;
}

bool Planner::TryStartSized(const QueuedJob& q, CyclePlan& plan) {
  const Shape& all = ShapeOf(q);
  // Tiers are subsets of the job's allowed nodes: when those cannot hold it, no tier can.
  if (KnownNotToFit(all, PlannedRuntime(*q.job))) return false;
  if (q.placement)  // preferred pools/regions first; then any allowed node (a gang may span pools)
    for (size_t t = 0; t < q.placement->size(); ++t)
      if (TryStartOn(q, ShapeOf(q, t), plan)) return true;
  return TryStartOn(q, all, plan);
}

bool Planner::TryStartOn(const QueuedJob& q, const Shape& s, CyclePlan& plan) {
  const JobSpec& spec = q.job->spec;
  const Duration planned = PlannedRuntime(*q.job);
  if (KnownNotToFit(s, planned)) return false;
  bool started = false;
  // Cheap rejection first: the sum of free resources now, then over the job's whole window. When
  // a job that does not start gets a reservation next (its own shape, no kept plan) and the
  // profiles are built, the window is the aggregate search's question at now: its answer
  // (memoized per shape) is where FindEarliest starts. Else the minimum over the window (free
  // now while the timeline is lazy).
  auto window_covers = [&] {
    if (!reserve_on_fail_ || !timeline_.Built() || !kept_.empty() || &s != &ShapeOf(q))
      return Covers(timeline_.AggregateMinFree(now_, now_ + planned), s.demand, spec.ntasks);
    const std::optional<Timestamp> fit = FirstAggregateFit(s, spec.ntasks, planned);
    return fit && *fit == now_;
  };
  if (!s.eligible->empty() && Covers(timeline_.AggregateMinFree(now_, now_ + 1), s.demand, spec.ntasks) &&
      window_covers()) {
    for (const std::string& type : TypeChoices(spec, s.demand)) {
      auto choice = ChooseNow(q, s, type);
      if (!choice) continue;
      AllocationTxn txn(ledger_);
      if (!TakeChoice(txn, *choice, s.demand)) continue;
      plan.starts.push_back({q.job->id, txn.Commit()});
      for (auto [node, count] : *choice) touched_.push_back(node);
      for (auto [node, count] : *choice)
        timeline_.Reserve(node, s.demand, count, now_, now_ + planned);
      limits_.Charge(*q.job);
      started = true;
      break;
    }
  }
  if (!started) {
    Duration& d = failed_now_[s.key_id];
    d = std::min(d, planned);
  }
  return started;
}

const PlannedStart* Planner::FindEarliest(const QueuedJob& q, Timestamp until) {
  const Shape& s = ShapeOf(q);
  const JobSpec& spec = q.job->spec;
  const Duration planned = PlannedRuntime(*q.job);
  if (s.eligible->empty()) return nullptr;
  const Duration res = std::max<Duration>(policy_.backfill.resolution, 1);
  Timestamp from = now_;
  for (bool first = true;; first = false) {
    auto fit = first ? FirstAggregateFit(s, spec.ntasks, planned)
                     : timeline_.NextAggregateFit(from, planned, s.demand, spec.ntasks);
    if (!fit) return nullptr;
    Timestamp t = *fit;
    if (t > now_ && res > 1) t = now_ + (t - now_ + res - 1) / res * res;
    if (t > until) return nullptr;
    if (t == *fit || Covers(timeline_.AggregateMinFree(t, t + planned), s.demand, spec.ntasks)) {
      // The aggregate covers the job over [t, t + planned): on a lone node that is the node's fit.
      if (t > now_ && OneNodeHoldsAll(s, spec)) {
        found_.time = t;
        found_.nodes.assign(1, {s.eligible->front(), spec.ntasks});  // keeps its capacity: no allocation
        return &found_;
      }
      for (const std::string& type : TypeChoices(spec, s.demand)) {
        auto choice = ChooseNodes(Candidates(q, s, type, t, t > now_), spec.ntasks, spec.topology);
        if (choice) {
          found_ = PlannedStart{t, std::move(*choice)};
          return &found_;
        }
      }
    }
    // Per-node fit only changes where some node's free resources change.
    auto next = timeline_.NextChange(t);
    if (!next) return nullptr;
    from = *next;
  }
}

std::optional<Timestamp> Planner::FirstAggregateFit(const Shape& s, int32_t ntasks, Duration planned) {
  if (!kept_.empty()) return timeline_.NextAggregateFit(now_, planned, s.demand, ntasks);
  FitMemo& m = first_fit_[s.key_id];
  Timestamp from = now_;
  if (m.duration >= 0 && m.duration <= planned) {
    if (!m.fit) return std::nullopt;
    from = *m.fit;
  }
  m = {planned, timeline_.NextAggregateFit(from, planned, s.demand, ntasks)};
  return m.fit;
}

bool Planner::OneNodeHoldsAll(const Shape& s, const JobSpec& spec) const {
  // One node, up: the timeline's aggregate is that node's profile (a node that is down has none,
  // while its running jobs' releases still enter the aggregate).
  return ledger_.size() == 1 && ledger_.slot(0).node->health == NodeHealth::kUp && s.eligible->size() == 1 &&
         s.demand.gpus == 0 && spec.ntasks > 0 && (spec.topology != Topology::kSpread || spec.ntasks == 1);
}

void Planner::Reserve(const QueuedJob& q, const PlannedStart& start, int64_t sign) {
  const Shape& s = ShapeOf(q);
  for (auto [node, count] : start.nodes)
    timeline_.Reserve(node, s.demand, sign * count, start.time, start.time + PlannedRuntime(*q.job));
}

void Planner::KeepPreviousPlans(const std::vector<QueuedJob>& queue) {
  for (const QueuedJob& q : queue) {
    const std::optional<Timestamp>& t = q.job->expected_start;
    if (!t || *t < now_) continue;
    const Shape& s = ShapeOf(q);
    if (s.eligible->empty()) continue;
    for (const std::string& type : TypeChoices(q.job->spec, s.demand)) {
      auto choice = ChooseNodes(Candidates(q, s, type, *t, *t > now_), q.job->spec.ntasks,
                                q.job->spec.topology);
      if (!choice) continue;
      PlannedStart start{*t, std::move(*choice)};
      Reserve(q, start);
      kept_.emplace(q.job, std::move(start));
      break;
    }
  }
}

std::string Planner::NeedDetail(const QueuedJob& q) {
  const Shape& s = ShapeOf(q);
  const JobSpec& spec = q.job->spec;
  // An elastic gang needs at least its smallest size: "needs 2-4x8 GPUs".
  const std::string n = (IsElastic(spec) ? std::to_string(GangSizes(spec).back()) + "-" : "") + std::to_string(spec.ntasks);
  if (s.eligible->empty()) return "no eligible node is up";
  const TaskDemand free = timeline_.AggregateMinFree(now_, now_ + 1);
  if (s.demand.gpus > 0)
    return "needs " + n + "x" + std::to_string(s.demand.gpus) + " GPUs, " +
           std::to_string(free.gpus) + " free now";
  return "needs " + n + "x" + std::to_string(s.demand.cpu_millis) +
         " CPU millicores, " + std::to_string(free.cpu_millis) + " free now";
}

void Planner::Pend(const QueuedJob& q, PendingReason reason, std::optional<Timestamp> start,
                   std::string detail, CyclePlan& plan) const {
  plan.pending.push_back({q.job->id, reason, start, std::move(detail), q.priority});
}

bool Planner::Starved(const QueuedJob& q) {
  const BackfillPolicy& bf = policy_.backfill;
  const Duration waited = now_ - q.job->submit_time;
  if (waited >= bf.reserve_after) return true;
  if (bf.reserve_after_wide <= 0 || waited < bf.reserve_after_wide) return false;
  const Shape& s = ShapeOf(q);
  auto [it, fresh] = eligible_capacity_.try_emplace(s.eligible);
  if (fresh)
    for (size_t n : *s.eligible) {
      it->second.cpu_millis += ledger_.slot(n).capacity.cpu_millis;
      it->second.gpus += ledger_.slot(n).capacity.gpus;
    }
  const auto [need, have] = s.demand.gpus > 0 ? std::pair{s.demand.gpus, it->second.gpus}
                                              : std::pair{s.demand.cpu_millis, it->second.cpu_millis};
  return static_cast<double>(need) * q.job->spec.ntasks > bf.wide_fraction * static_cast<double>(have);
}

std::vector<QueuedJob> Planner::PlanStarved(const std::vector<QueuedJob>& queue, Timestamp until, size_t& examined,
                                            size_t max_test, CyclePlan& plan) {
  std::vector<const QueuedJob*> starved;
  std::vector<QueuedJob> others;
  for (const QueuedJob& q : queue) {
    if (Starved(q)) starved.push_back(&q);
    else others.push_back(q);
  }
  std::stable_sort(starved.begin(), starved.end(), [](const QueuedJob* a, const QueuedJob* b) {
    return a->job->submit_time < b->job->submit_time;
  });
  for (const QueuedJob* q : starved) {
    if (examined++ >= max_test) { Pend(*q, PendingReason::kPriority, std::nullopt, "not examined (max_job_test)", plan); continue; }
    if (auto hit = limits_.Check(*q->job)) { Pend(*q, hit->reason, std::nullopt, hit->detail, plan); continue; }
    reserve_on_fail_ = true;
    const bool started = TryStartNow(*q, plan);
    reserve_on_fail_ = false;
    if (started) continue;
    const std::string detail = NeedDetail(*q) + " (waited past reserve_after: planned first)";
    if (auto planned = PlanReservation(*q, until)) {
      Reserve(planned->first, *planned->second);
      Pend(*q, PendingReason::kResources, planned->second->time, detail, plan);
    } else {
      Pend(*q, PendingReason::kResources, std::nullopt, "no start within the backfill window", plan);
    }
  }
  return others;
}

void Planner::Run(const std::vector<QueuedJob>& queue, CyclePlan& plan) {
  const BackfillPolicy& bf = policy_.backfill;
  const size_t max_test = bf.max_job_test > 0 ? static_cast<size_t>(bf.max_job_test) : queue.size();
  const int64_t depth = bf.mode == BackfillMode::kNone   ? 0
                        : bf.mode == BackfillMode::kEasy ? 1
                        : bf.depth > 0                   ? bf.depth
                                                         : std::numeric_limits<int64_t>::max();
  const Timestamp until = bf.window > 0 ? now_ + bf.window : std::numeric_limits<Timestamp>::max() / 4;
  const bool keep = bf.mode == BackfillMode::kConservative && bf.keep_plans;
  failed_now_.reserve(queue.size());  // at most one shape key per job but for sizes and tiers
  first_fit_.reserve(queue.size());
  if (keep) KeepPreviousPlans(queue);
  size_t examined = 0;
  // reserve_after: jobs that waited that long are planned first, each with a reservation; the
  // rest of the queue then runs as usual around them.
  std::vector<QueuedJob> younger;
  const bool guard = bf.reserve_after > 0 && bf.mode != BackfillMode::kNone && !keep;
  if (guard) younger = PlanStarved(queue, until, examined, max_test, plan);
  const std::vector<QueuedJob>& q_in = guard ? younger : queue;
  bool blocked = false;
  int64_t reserved = 0;
  size_t i = 0;
  // Main pass: queue order, until the reservations are used up (or the first block without backfill).
  for (; i < q_in.size(); ++i) {
    const QueuedJob& q = q_in[i];
    if (bf.mode != BackfillMode::kNone && reserved >= depth && !keep) break;
    if (examined++ >= max_test) { Pend(q, blocked ? PendingReason::kPriority : PendingReason::kResources, std::nullopt, "not examined (max_job_test)", plan); continue; }
    if (auto hit = limits_.Check(*q.job)) { Pend(q, hit->reason, std::nullopt, hit->detail, plan); continue; }
    if (bf.mode == BackfillMode::kNone && blocked) { Pend(q, PendingReason::kPriority, std::nullopt, "", plan); continue; }
    // keep_plans: free the job's own previous slot; everything else keeps its plan, so the job
    // can only move earlier.
    if (auto kept = kept_.find(q.job); kept != kept_.end()) Reserve(q, kept->second, -1);
    reserve_on_fail_ = bf.mode != BackfillMode::kNone;
    const bool started = TryStartNow(q, plan);
    reserve_on_fail_ = false;
    if (started) continue;
    const PendingReason reason = blocked ? PendingReason::kPriority : PendingReason::kResources;
    const std::string detail = blocked ? "" : NeedDetail(q);
    blocked = true;
    if (bf.mode == BackfillMode::kNone) { Pend(q, reason, std::nullopt, detail, plan); continue; }
    if (auto planned = PlanReservation(q, until)) {
      Reserve(planned->first, *planned->second);
      ++reserved;
      Pend(q, reason, planned->second->time, detail, plan);
    } else {
      Pend(q, reason, std::nullopt, "no start within the backfill window", plan);
    }
  }
  // Backfill pass: the rest start now only where they delay no reservation.
  std::vector<const QueuedJob*> rest;
  for (; i < q_in.size(); ++i) rest.push_back(&q_in[i]);
  if (bf.order == BackfillOrder::kShortestFirst)
    std::stable_sort(rest.begin(), rest.end(), [](const QueuedJob* a, const QueuedJob* b) {
      return PlannedRuntime(*a->job) < PlannedRuntime(*b->job);
    });
  for (const QueuedJob* q : rest) {
    if (examined++ >= max_test) { Pend(*q, PendingReason::kPriority, std::nullopt, "not examined (max_job_test)", plan); continue; }
    if (auto hit = limits_.Check(*q->job)) { Pend(*q, hit->reason, std::nullopt, hit->detail, plan); continue; }
    if (!TryStartNow(*q, plan)) Pend(*q, PendingReason::kPriority, std::nullopt, "", plan);
  }
}

}  // namespace mlsched::core
