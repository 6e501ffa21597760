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
#pragma once

#include <compare>
#include <cstdint>
#include <map>
#include <set>
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

  /// A job became pending (submitted or requeued); it is visible until Arrange parks it. O(log n).
  void AddPending(size_t index, Need need);
  /// A visible pending job started, holding `held` (the sum of its tasks' resources). O(log n).
  void Started(size_t index, Need held);
  /// A running job stopped (finished, requeued or cancelled) and gave back `held`. O(1).
  void Stopped(Need held);
  /// False when every pending job's need exceeds the free total in some dimension: no pass can
  /// start anything now. O(distinct needs whose CPUs fit).
  bool AnyMayStart() const;
  /// Chooses what the core sees in the next pass: the first `prefix` pending jobs in index order,
  /// plus (when `covered_too`) every pending job whose need fits the free total; every other
  /// pending job is parked. Fills `unpark` (parked -> visible) and `park` (visible -> parked).
  /// O((visible + moved + needs) log n).
  void Arrange(bool covered_too, std::vector<size_t>* unpark, std::vector<size_t>* park);
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

  Need capacity_, held_;
  size_t base_prefix_, prefix_;
  std::map<Need, int64_t> pending_needs_;           // every pending job: need -> count
  std::map<size_t, Need> visible_;                  // pending jobs the core sees
  std::set<size_t> parked_;                         // pending jobs it does not see
  std::map<Need, std::set<size_t>> parked_by_need_;
  std::map<size_t, Need> need_of_;                  // every pending job's need
};

}  // namespace mlsched::sim
