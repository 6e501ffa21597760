// The planner of one cycle: walks the ordered queue, starts what fits now and, under EASY or
// conservative backfill, reserves the earliest start for blocked jobs on the availability timeline
// so that a lower job starts now only if it delays no reservation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <map>
#include <memory_resource>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "schedd/core/fit_index.h"
#include "schedd/core/ledger.h"
#include "schedd/core/limits.h"
#include "schedd/core/placement.h"
#include "schedd/core/pools.h"
#include "schedd/core/timeline.h"
#include "schedd/core/types.h"

namespace mlsched::core {

/// A pending job that passed admission, in queue order.
struct QueuedJob {
  const Job* job = nullptr;
  const PartitionPolicy* partition = nullptr;
  int64_t priority = 0;
  int32_t tier = 0;  // QoS preemption tier (QosTiers): higher tiers are ordered first
  /// Pools/regions to try in order for a start now (PlacementTiers); null = any eligible node.
  const std::vector<NodeFilter>* placement = nullptr;
};

/// A planned start: when, and on which nodes (ledger index, tasks).
struct PlannedStart {
  Timestamp time = 0;
  NodeChoice nodes;
};

class Planner {
 public:
  Planner(NodeLedger& ledger, AvailabilityTimeline& timeline, LimitTracker& limits,
          const PolicySet& policy, Timestamp now);
  /// Decides every job of `queue` (already ordered), appending starts and pending updates.
  void Run(const std::vector<QueuedJob>& queue, CyclePlan& plan);

 private:
  struct Shape {
    const std::vector<size_t>* eligible = nullptr;
    /// The eligible nodes that may still have room now: nodes whose free GPUs (GPU classes) or
    /// free CPUs (CPU classes) reach 0 are dropped for the rest of the cycle (the ledger only
    /// shrinks within a cycle). Shared by the class; compacted as it is scanned.
    std::vector<size_t>* open_now = nullptr;
    char needs = 'N';  // 'G': GPUs, 'C': CPUs only, 'N': neither
    TaskDemand demand;
    /// Dense id of the shape's key (class, per-task demand, tasks, topology) within the cycle:
    /// identical keys, identical fit behaviour. Indexes failed_now_ and fit_now_.
    size_t key_id = 0;
  };
  /// The job's shape on all its allowed nodes, made once per cycle per job and shared by jobs
  /// with the same PlainKey.
  const Shape& ShapeOf(const QueuedJob& q);
  /// A node class: the eligible nodes of every job whose ClassOf string is `klass`.
  struct NodeClass {
    std::string klass;
    char needs = 'N';
    std::vector<size_t> eligible;  // ledger indices, ascending
    std::vector<size_t> open;      // Shape::open_now of the class
  };
  /// The class string of `q` restricted to `filter` (null: none) and without warm pools `warm`;
  /// sets `needs` ('G', 'C' or 'N').
  std::string ClassOf(const QueuedJob& q, const NodeFilter* filter, const std::vector<size_t>& warm,
                      char* needs) const;
  /// The class of `q` (restricted to `filter`), made on first use in the cycle.
  NodeClass& ClassNodes(const QueuedJob& q, const NodeFilter* filter);
  Shape MakeShape(const QueuedJob& q, const NodeFilter* filter);
  /// MakeShape(q, nullptr) for a job with a PlainKey, finding its class without building its string.
  Shape MakePlainShape(const QueuedJob& q);
  /// The shape of `q` on the nodes of class `c` (demand, key and key_id).
  Shape ShapeIn(const QueuedJob& q, NodeClass& c);
  /// Everything MakeShape reads from a "plain" job (no features, GPU types or named GPU types, no
  /// strict data region; the policy has no warm pools): jobs with equal keys have equal shapes,
  /// so the shape is made once per key, not once per job (the key is built without allocating).
  struct PlainKey {
    const PartitionPolicy* partition = nullptr;
    int64_t cpu_millis = 0, memory_bytes = 0, gpus = 0;
    int32_t ntasks = 0;
    Topology topology = Topology::kNone;
    SpotPreference spot = SpotPreference::kAllow;
    auto operator<=>(const PlainKey&) const = default;
  };
  /// The job's PlainKey, or nullopt when it is not plain.
  std::optional<PlainKey> PlainKeyOf(const QueuedJob& q) const;
  /// Indexes of the warm pools whose nodes `spec` may not use (other QoS, too long to borrow).
  std::vector<size_t> WarmExcluded(const JobSpec& spec);
  /// The job's shape restricted to the nodes passing q.placement[tier].
  const Shape& ShapeOf(const QueuedJob& q, size_t tier);
  /// Starts the job now if it fits around every reservation (and its limits allow); true if started.
  /// An elastic job tries its sizes largest first (GangSizes): it starts with the largest size that
  /// fits now, and since every size is checked against the reservations on the timeline, a smaller
  /// size never delays a reservation.
  /// With [elastic] start = "earliest-finish", a size below the largest starts only when
  /// now + ElasticRuntime(size) is before FinishAtLargest; else the job waits at its largest size.
  bool TryStartNow(const QueuedJob& q, CyclePlan& plan);
  /// When elastic `q` would finish at its largest size: its earliest start on the timeline (within
  /// the backfill window) plus ElasticRuntime at that size; nullopt when it has no start there.
  std::optional<Timestamp> FinishAtLargest(const QueuedJob& q);
  /// TryStartNow for one gang size; with placement tiers, tries each in order.
  bool TryStartSized(const QueuedJob& q, CyclePlan& plan);
  /// `q` as a gang of `ntasks` tasks: q itself for its largest size, else a copy of its job with
  /// spec.ntasks = ntasks (kept for the cycle, so shapes and memos stay per size).
  QueuedJob SizedAs(const QueuedJob& q, int32_t ntasks);
  /// A blocked job's reservation: the earliest start in [now, until] at its largest size that has
  /// one (an elastic job is planned at MAX unless MAX never fits within the window). Returns the
  /// sized job it planned and the start, or nullopt.
  /// The start is FindEarliest's (valid until its next call).
  std::optional<std::pair<QueuedJob, const PlannedStart*>> PlanReservation(const QueuedJob& q, Timestamp until);
  /// BackfillPolicy::reserve_after: the jobs of `queue` that waited that long start now or get a
  /// reservation (before `until`), oldest first, ahead of everything else. Returns the others, in
  /// queue order.
  /// The guard applies to `q`: it waited reserve_after, or reserve_after_wide and it is wide
  /// (BackfillPolicy::wide_fraction of its eligible nodes' capacity).
  bool Starved(const QueuedJob& q);
  std::vector<QueuedJob> PlanStarved(const std::vector<QueuedJob>& queue, Timestamp until, size_t& examined,
                                     size_t max_test, CyclePlan& plan);
  /// True when a job of shape `s` with this time limit already failed to fit now in this cycle
  /// (resources only shrink within a cycle, so it still does not).
  bool KnownNotToFit(const Shape& s, Duration time_limit) const;
  /// GpuTypeChoices(ledger_, spec, demand), valid until the next call (no allocation for jobs
  /// without GPUs).
  const std::vector<std::string>& TypeChoices(const JobSpec& spec, const TaskDemand& demand);
  /// TryStartNow on the nodes of one shape.
  bool TryStartOn(const QueuedJob& q, const Shape& s, CyclePlan& plan);
  /// timeline_.NextAggregateFit(now, planned, s.demand, ntasks), searched from the shape key's last
  /// answer in the cycle when that was for a run time <= `planned`. Same answer: within a cycle (no
  /// kept plan released) the timeline only loses resources, so a window that fits now fitted the
  /// shorter run then, and its earliest fit then (a step start or now) is no later than any such
  /// window; no step between now and that fit can then be an answer either.
  std::optional<Timestamp> FirstAggregateFit(const Shape& s, int32_t ntasks, Duration planned);
  /// Earliest start in [now, until] on the timeline, without reserving; null when none. Points to
  /// found_, valid until the next call.
  const PlannedStart* FindEarliest(const QueuedJob& q, Timestamp until);
  /// Node candidates for the job's window [from, from+limit) restricted to GPU type `type`
  /// (a reference to a buffer reused by the next call).
  const std::vector<NodeCandidate>& Candidates(const QueuedJob& q, const Shape& s, const std::string& type,
                                        Timestamp from, bool prefer_late_free);
  /// Nodes for a start now on GPU type `type`: from the shape's NowFitIndex when it can decide
  /// (topology none or same-domain, one domain holds the gang), else by scanning Candidates.
  /// Both give the same answer (ChooseInGroup's rule).
  std::optional<NodeChoice> ChooseNow(const QueuedJob& q, const Shape& s, const std::string& type);
  /// True when FindEarliest may place `spec` (shape `s`) from the aggregate fit alone: the fleet is
  /// one node, up, and the job's only eligible node; the job asks for no GPUs (no type to match)
  /// and is not a spread gang of several tasks. Where the aggregate covers the whole gang over its
  /// window after now, Candidates then lists that node with every task and ChooseNodes puts the
  /// whole gang there.
  bool OneNodeHoldsAll(const Shape& s, const JobSpec& spec) const;
  /// Adds (sign 1) or removes (sign -1) a planned start on the timeline.
  void Reserve(const QueuedJob& q, const PlannedStart& start, int64_t sign = 1);
  /// keep_plans: re-reserves every queued job's previous planned start that still fits.
  void KeepPreviousPlans(const std::vector<QueuedJob>& queue);
  /// Short explanation for the first blocked job, e.g. "needs 4x8 GPUs, 12 free now".
  std::string NeedDetail(const QueuedJob& q);
  void Pend(const QueuedJob& q, PendingReason reason, std::optional<Timestamp> start,
            std::string detail, CyclePlan& plan) const;

  NodeLedger& ledger_;
  AvailabilityTimeline& timeline_;
  LimitTracker& limits_;
  const PolicySet& policy_;
  Timestamp now_;
  /// Memory for the per-cycle shape tables below (one block on the stack for a typical cycle, freed
  /// at once): a cycle makes a few dozen shapes and would otherwise allocate a node for each.
  alignas(std::max_align_t) std::byte arena_buffer_[16384];
  std::pmr::monotonic_buffer_resource arena_{arena_buffer_, sizeof arena_buffer_};
  std::unordered_map<std::string, NodeClass> classes_;  // by class string; stable addresses
  /// Plain jobs' classes by (partition, asks for GPUs, asks for CPUs, spot preference).
  std::pmr::map<std::tuple<const PartitionPolicy*, bool, bool, SpotPreference>, NodeClass*> plain_classes_{&arena_};
  std::pmr::unordered_map<const Job*, const Shape*> shapes_{&arena_};  // jobs that are not plain: into own_shapes_
  const Job* last_job_ = nullptr;  // ShapeOf's last answer (it is asked several times per job)
  const Shape* last_shape_ = nullptr;
  std::pmr::map<PlainKey, Shape> plain_shapes_{&arena_};
  std::deque<Shape> own_shapes_;
  std::map<std::pair<const Job*, size_t>, Shape> tier_shapes_;
  /// A shape's key: its node class (one object per class string), per-task demand, tasks, topology.
  struct ShapeKey {
    const NodeClass* klass = nullptr;
    int64_t cpu_millis = 0, memory_bytes = 0, gpus = 0;
    int32_t ntasks = 0;
    Topology topology = Topology::kNone;
    auto operator<=>(const ShapeKey&) const = default;
  };
  /// Shape key -> its key_id, one per distinct key.
  std::pmr::map<ShapeKey, size_t> key_ids_{&arena_};
  /// By key_id: the shortest time limit that did not fit now (resources only shrink in a cycle);
  /// kNeverFailed while none failed.
  std::pmr::vector<Duration> failed_now_{&arena_};
  /// By key_id: FirstAggregateFit's last answer and the run time it was for (-1: none yet).
  struct FitMemo {
    Duration duration = -1;
    std::optional<Timestamp> fit;
  };
  std::pmr::vector<FitMemo> first_fit_{&arena_};
  static constexpr Duration kNeverFailed = INT64_MAX;
  /// Summed capacity of each eligible node set (Starved), made once per cycle per set.
  std::unordered_map<const std::vector<size_t>*, TaskDemand> eligible_capacity_;
  /// keep_plans: previous planned starts re-reserved at the start of the cycle.
  std::unordered_map<const Job*, PlannedStart> kept_;
  std::vector<NodeCandidate> scratch_;
  PlannedStart found_;  // FindEarliest's answer
  /// True while TryStartNow runs for a job that gets a reservation if it does not start.
  bool reserve_on_fail_ = false;
  std::vector<std::string> type_choices_;  // TypeChoices' answer for jobs with GPUs
  /// Elastic jobs at a size below their largest (SizedAs); stable addresses for shapes_.
  std::map<std::pair<const Job*, int32_t>, const Job*> sized_;
  std::deque<Job> sized_jobs_;
  /// (key_id, GPU type) -> where that shape fits now, kept current through touched_.
  std::map<std::pair<size_t, std::string>, NowFitIndex> fit_now_;
  /// Warm pools: for each, which ledger nodes it holds (computed on first use).
  std::vector<std::vector<bool>> warm_nodes_;
  /// Ledger nodes changed by this cycle's starts, in order (NowFitIndex::Update replays them).
  std::vector<size_t> touched_;
};

}  // namespace mlsched::core
