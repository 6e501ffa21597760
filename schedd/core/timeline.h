// The availability timeline backfill plans on: every node's free resources as a step function of
// time, from now on. Built from the ledger (free now) and the running jobs' expected ends
// (start_time + time_limit), then reduced by reservations and by jobs started during the cycle.
//
// The profiles are built lazily: while every question is about now (free now, the minimum free
// from now on, starts reserved from now) the timeline answers from the ledger's free resources,
// since running jobs' releases only add resources after now and a start reserved from now only
// takes them. The first question about a later time (a reservation for a blocked job, the next
// change, "free since") builds the profiles and replays the starts reserved so far, giving
// exactly what an eager build would. A cycle in which every job starts (no queue) never sorts
// the running jobs' releases.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "schedd/core/ledger.h"
#include "schedd/core/types.h"

namespace mlsched::core {

class AvailabilityTimeline {
 public:
  /// When the profiles are built: on the first question about a later time, or now.
  enum class Build { kLazily, kNow };
  /// A running job whose expected end is not after `now` (overran its limit) is expected to end at
  /// now + 1. O(N) for N nodes; building the profiles costs O(T log T) for T running tasks.
  /// `ledger` and `jobs` must outlive the timeline. The ledger's free resources are read at
  /// construction (later changes to them, e.g. by AllocationTxn, are not seen); `jobs`, node health
  /// and the ledger's node index are read when the profiles are built, so they must not change
  /// before that. Not thread-safe, const methods included (they may build the profiles).
  AvailabilityTimeline(const NodeLedger& ledger, const std::vector<Job>& jobs, Timestamp now,
                       Build build = Build::kLazily);

  Timestamp now() const { return now_; }
  /// Component-wise minimum free resources of node `node` over [from, to) (to > from).
  TaskDemand MinFree(size_t node, Timestamp from, Timestamp to) const;
  /// The same over the sum of all nodes (a necessary condition for any placement).
  TaskDemand AggregateMinFree(Timestamp from, Timestamp to) const;
  /// True while nothing was reserved on the node for a future start: its free resources then
  /// never decrease after now, so MinFree(node, now, t) is its free resources now.
  bool NonDecreasing(size_t node) const { return lazy_ || !future_reserved_[node]; }
  /// The nodes for which NonDecreasing is false, in the order they got their first reservation.
  const std::vector<size_t>& FutureReservedNodes() const { return future_nodes_; }
  /// True once the profiles were built (tests; Build::kNow builds them at construction).
  bool Built() const { return !lazy_; }
  /// The time the node's free resources last changed at or before `t` (its "free since").
  Timestamp LastChange(size_t node, Timestamp t) const;
  /// Takes `count` tasks of `per_task` from node `node` over [from, to).
  void Reserve(size_t node, const TaskDemand& per_task, int64_t count, Timestamp from, Timestamp to);
  /// The earliest t >= from, either `from` or a time at which free resources change, such that the
  /// sum over all nodes covers `count` x `per_task` throughout [t, t + duration); nullopt if none.
  /// One pass over the aggregate profile (a necessary condition for a gang to fit at t).
  std::optional<Timestamp> NextAggregateFit(Timestamp from, Duration duration,
                                            const TaskDemand& per_task, int64_t count) const;
  /// The first time after `t` at which some node's free resources change, or nullopt.
  std::optional<Timestamp> NextChange(Timestamp t) const;
  /// The sum over all nodes of free resources from now on, one step per change (CyclePlan::free_after).
  std::vector<FreeStep> AggregateSteps() const;

 private:
  struct Step {
    Timestamp time;
    TaskDemand free;  // from `time` until the next step
  };
  using Profile = std::vector<Step>;
  static TaskDemand MinOver(std::span<const Step> p, Timestamp from, Timestamp to);
  /// Takes `amount` from `p` over [from, to); `hint` is a step index to start looking for `from`
  /// (any value: checked before use).
  static void Subtract(Profile& p, const TaskDemand& amount, Timestamp from, Timestamp to, size_t hint);
  /// Index of the step starting at `t` (>= now), inserting one that carries the free resources in
  /// force at `t` if none starts there; searches from index `first` on (every step before it starts
  /// before `t`).
  static size_t SplitAt(Profile& p, Timestamp t, size_t first);
  /// Node `node`'s steps: its own profile once something was reserved on it, else its built range.
  std::span<const Step> ProfileOf(size_t node) const;
  /// The node's own (copied-on-first-write) profile.
  Profile& MutableProfile(size_t node) const;
  /// Builds the profiles from the free resources at construction and replays the starts deferred
  /// while lazy. No-op once built.
  void Materialize() const;
  /// Subtracts `amount` over [from, to) from the node's profile and the aggregate (built only).
  void SubtractBuilt(size_t node, const TaskDemand& amount, Timestamp from, Timestamp to) const;

  /// A start reserved from now while lazy, replayed by Materialize.
  struct DeferredStart {
    size_t node;
    TaskDemand amount;
    Timestamp to;
  };

  Timestamp now_;
  const NodeLedger& ledger_;
  const std::vector<Job>& jobs_;
  bool single_ = false;  // one node, up: the aggregate is ProfileOf(0)
  // While lazy: every node's free resources now (starts deferred so far subtracted; nothing for
  // a node that is not up), their sum, and the deferred starts in order.
  mutable bool lazy_ = true;
  mutable std::vector<TaskDemand> free_now_;
  mutable TaskDemand total_now_{};
  mutable std::vector<DeferredStart> deferred_;
  // Built profiles of all nodes, back to back (one allocation per cycle, not one per node):
  // node i's steps are built_[built_begin_[i] .. built_begin_[i + 1]).
  mutable std::vector<Step> built_;
  mutable std::vector<uint32_t> built_begin_;
  mutable std::vector<int32_t> own_;  // index into owned_, or -1 while the node still uses built_
  mutable std::vector<Profile> owned_;
  mutable std::vector<bool> future_reserved_;
  std::vector<size_t> future_nodes_;
  mutable Profile aggregate_;  // the sum over all nodes; unused when single_
  mutable size_t fit_step_ = 0;  // the aggregate step of NextAggregateFit's last non-null answer (a hint)
  std::span<const Step> Aggregate() const;
};

}  // namespace mlsched::core
