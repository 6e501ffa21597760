// Which pending jobs the simulator shows the core in a pass, and a cheap proof that no pending job
// can start now: what makes a pass cost O(jobs that matter) instead of O(queue) when long queues
// cannot start (issue 15, point 4). Pure bookkeeping over trace indices; the simulator moves the
// core::Job objects.
//
// The bound: a gang needs `ntasks x per_task` resources in total (its smallest size when elastic),
// and a start now takes them from free resources, so a job whose total exceeds the sum of free
// resources over all nodes (capacity minus what running jobs hold) in some dimension cannot start,
// whatever the core's placement rules. Jobs are grouped by that total ("need"); the test is
// O(needs with cpu <= free cpu), not O(queue).
//
// Under EASY, jobs whose need fits the free total may still be unable to start (they would delay
// the reservation). Jobs of one "shape" (a key the simulator builds from everything the core's
// shape key reads: partition, per-task demand, tasks, topology, spot, features, GPU types) fail
// alike within a pass: once a job of that shape with planned run time L failed to start, every
// later one with a run time >= L fails too (the core's Planner::KnownNotToFit memo; resources only
// shrink within a pass). So of a shape's pending jobs in queue order, the core only needs the
// "records" (each with a shorter planned run time than every earlier one of its shape): every
// other job comes after a record with a run time at most its own. When a record did not fail for
// lack of resources (it started, or a limit held it), the jobs it covered ("its gap": up to the
// next record) are shown and the pass is run again (OpenGap).
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "schedd/core/types.h"
#include "schedd/sim/fleet.h"

namespace mlsched::sim {

/// Total resources a job needs to start (ntasks x per-task demand; GPUs of any type).
struct Need {
  int64_t cpu_millis = 0;
  int64_t memory_bytes = 0;
  int64_t gpus = 0;
  auto operator<=>(const Need&) const = default;
};

/// The fleet's total CPUs, memory and GPUs. O(nodes).
Need FleetCapacity(const Fleet& fleet);
/// The sum of an allocation's task resources (what a running job holds).
Need Held(const core::Allocation& allocation);

/// The need of `spec` at its smallest gang size. Jobs whose demand can change while they wait
/// (accelerator fallback tiers) need {0, 0, 0}: they never count as unable to start.
Need NeedOf(const core::JobSpec& spec);

/// The pending jobs by need and which of them the core sees. Parked jobs are pending jobs left out
/// of the core's ClusterState because the pass's decisions do not depend on them (see Arrange).
class PendingView {
 public:
  /// `capacity`: the fleet's total resources. `prefix`: how many pending jobs, first in queue
  /// order (trace index order under FIFO), the core always sees when parking.
  PendingView(Need capacity, size_t prefix) : capacity_(capacity), base_prefix_(prefix), prefix_(prefix) {}

  /// A job became pending (submitted or requeued); it is visible until Arrange parks it. `shape`:
  /// its shape key (nullopt: the job is never parked while its need fits, e.g. held or with
  /// fallback tiers); `planned_s`: the seconds the core plans it to run (core::PlannedRuntime),
  /// fixed while it waits. O(log n), plus the records it supersedes.
  void AddPending(size_t index, Need need, std::optional<std::string> shape = std::nullopt,
                  int64_t planned_s = 0);
  /// A visible pending job started, holding `held` (the sum of its tasks' resources). O(log n).
  void Started(size_t index, Need held);
  /// A running job stopped (finished, requeued or cancelled) and gave back `held`. O(1).
  void Stopped(Need held);
  /// False when every pending job's need exceeds the free total in some dimension: no pass can
  /// start anything now. O(distinct needs whose CPUs fit).
  bool AnyMayStart() const;
  /// Chooses what the core sees in the next pass: the first `prefix` pending jobs in index order,
  /// plus (when `covered_too`, i.e. EASY) every pending job whose need fits the free total and
  /// which has no shape or is a record of its shape; every other pending job is parked. Fills
  /// `unpark` (parked -> visible) and `park` (visible -> parked).
  /// O((visible + moved + needs + shapes) log n).
  void Arrange(bool covered_too, std::vector<size_t>* unpark, std::vector<size_t>* park);
  /// After a pass in which visible job `index` did not fail for lack of resources (it started, or a
  /// limit or admission held it): when it is a record of a shape whose need fits the free total,
  /// appends the parked jobs of its gap to `unpark` and makes them visible (the caller moves them
  /// into the core's state and runs the pass again). O(gap log n).
  void OpenGap(size_t index, std::vector<size_t>* unpark);
  /// Parks nothing until the next Arrange with a larger prefix: doubles the prefix (after a pass
  /// whose decisions turned out to depend on parked jobs).
  void Widen() { prefix_ *= 2; }
  /// After a pass that needed `used` of the prefix (its starts, plus the blocking job): halves a
  /// widened prefix while it is over 4x what passes use, so one burst of starts does not make
  /// every later pass see a long queue.
  void Settle(size_t used) {
    if (prefix_ > base_prefix_ && used * 4 < prefix_) prefix_ /= 2;
  }
  /// The smallest parked index, or SIZE_MAX when nothing is parked.
  size_t FirstParked() const { return parked_.empty() ? SIZE_MAX : *parked_.begin(); }
  bool IsParked(size_t index) const { return parked_.count(index) > 0; }
  size_t prefix() const { return prefix_; }

 private:
  bool Covered(const Need& n) const;
  Need Free() const {
    return {capacity_.cpu_millis - held_.cpu_millis, capacity_.memory_bytes - held_.memory_bytes,
            capacity_.gpus - held_.gpus};
  }

  /// The pending jobs of one shape key (all with the same need).
  struct Shape {
    Need need;
    std::map<size_t, int64_t> members;  // index -> planned run time, seconds
    std::set<size_t> records;           // members with a shorter run time than every earlier one
  };
  void Unpark(size_t index, std::vector<size_t>* unpark);
  /// Record bookkeeping when `index` joins or leaves shape `s`.
  static void Join(Shape& s, size_t index, int64_t planned_s);
  static void Leave(Shape& s, size_t index);

  Need capacity_, held_;
  size_t base_prefix_, prefix_;
  std::map<Need, int64_t> pending_needs_;           // every pending job: need -> count
  std::map<size_t, Need> visible_;                  // pending jobs the core sees
  std::set<size_t> parked_;                         // pending jobs it does not see
  std::map<Need, std::set<size_t>> parked_by_need_;  // parked jobs without a shape
  std::map<size_t, Need> need_of_;                  // every pending job's need
  std::map<std::string, size_t> shape_ids_;         // shape key -> index in shapes_
  std::vector<Shape> shapes_;
  std::set<std::pair<Need, size_t>> live_shapes_;   // shapes with pending jobs, by need
  std::map<size_t, size_t> shape_of_;               // pending jobs with a shape -> shapes_ index
};

}  // namespace mlsched::sim
