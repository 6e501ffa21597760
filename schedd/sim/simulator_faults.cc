// Simulation: node failures and hangs (SimOptions::faults), and what health checks and the gang
// watchdog do about them. Ordinary nodes fail rarely; bad nodes often. Blind retry (drain_after
// 0): a crashed node comes back after its reboot unrepaired, and a hung gang holds its nodes until
// its time limit. With drain_after: a node that failed drain_after times within the suspect
// window is drained and repaired (healthy after repair_s), and a hang is found after
// hang_detect_s (the watchdog's stall_after plus its diagnosis) and the gang requeued.
#include <algorithm>
#include <cmath>

#include "schedd/sim/simulation.h"

namespace mlsched::sim::detail {

Duration Simulation::FailureDelay(double rate_per_hour) {
  const double u = static_cast<double>((fault_rng_() >> 11) + 1) * 0x1.0p-53;  // (0, 1]
  return std::max<Duration>(1, static_cast<Duration>(std::ceil(-std::log(u) / (rate_per_hour / 3600.0))));
}

void Simulation::InitFaults() {
  const FaultModel& f = options_.faults;
  if (!f.Any()) return;
  for (size_t n = 0; n < node_info_.size(); ++n) {
    NodeInfo& info = node_info_[n];
    if (info.provisioned) continue;
    const double u = static_cast<double>(fault_rng_() >> 11) * 0x1.0p-53;  // [0, 1)
    info.bad = u < f.bad_fraction;
    info.failure_rate_per_hour = info.bad ? f.bad_rate_per_node_hour : f.rate_per_node_hour;
    if (info.failure_rate_per_hour > 0)
      Push(now_ + FailureDelay(info.failure_rate_per_hour), EventKind::kNodeFailure, info.id, info.failure_generation);
  }
}

void Simulation::FailNode(int64_t id, int32_t generation) {
  const int64_t at = NodeIndex(id);
  if (at < 0) return;
  const auto node = static_cast<size_t>(at);
  NodeInfo& info = node_info_[node];
  if (generation != info.failure_generation) return;  // drawn before a repair changed its rate
  Push(now_ + FailureDelay(info.failure_rate_per_hour), EventKind::kNodeFailure, id, generation);
  if (state_.nodes[node].health != core::NodeHealth::kUp) return;  // down or drained: nothing to break
  const FaultModel& f = options_.faults;
  ++result_.node_failures;
  const bool hang = static_cast<double>(fault_rng_() >> 11) * 0x1.0p-53 < f.hang_fraction;
  const std::string& name = state_.nodes[node].name;
  bool held = false;  // some gang is still on the node (hung)
  for (size_t i = 0; i < live_.size(); ++i) {
    if (!live_[i].running) continue;
    const auto& alloc = JobOf(i).allocation;
    if (!alloc || std::none_of(alloc->tasks.begin(), alloc->tasks.end(), [&](const core::TaskPlacement& t) { return t.node == name; }))
      continue;
    if (!hang) {
      ++result_.jobs[i].failures;
      Requeue(i, StopCause::kFailure);
      continue;
    }
    held = true;
    if (live_[i].hung_since != 0) continue;
    live_[i].hung_since = now_;
    ++result_.hangs;
    // Without the watchdog the gang holds its nodes until its time limit ends the attempt.
    const Timestamp limit = live_[i].attempt_start + std::max<Duration>(JobOf(i).spec.time_limit, now_ - live_[i].attempt_start + 1);
    Push(f.drain_after > 0 ? std::min(limit, now_ + f.hang_detect_s) : limit, EventKind::kHangEnd, static_cast<int64_t>(i),
         result_.jobs[i].attempts);
  }
  dirty_ = true;
  if (f.drain_after > 0) {
    info.failures.push_back(now_);
    std::erase_if(info.failures, [&](Timestamp t) { return t <= now_ - f.suspect_window_s; });
    if (static_cast<int32_t>(info.failures.size()) >= f.drain_after) {
      // Drained (a hung gang keeps it until the watchdog requeues it) and repaired: back healthy.
      ++result_.health_drains;
      info.failures.clear();
      info.bad = false;
      info.failure_rate_per_hour = f.rate_per_node_hour;
      ++info.failure_generation;
      info.repairing = true;
      state_.nodes[node].health = held ? core::NodeHealth::kDraining : core::NodeHealth::kDown;
      Push(now_ + f.repair_s, EventKind::kFailureRecovery, id);
      return;
    }
  }
  if (hang) return;  // the node itself stays up
  state_.nodes[node].health = core::NodeHealth::kDown;
  Push(now_ + f.reboot_s, EventKind::kFailureRecovery, id);
}

void Simulation::EndHang(size_t index) {
  ++result_.jobs[index].failures;
  Requeue(index, StopCause::kFailure);
  dirty_ = true;
}

void Simulation::RecoverFailedNode(int64_t id) {
  const int64_t at = NodeIndex(id);
  if (at < 0) return;
  NodeInfo& info = node_info_[static_cast<size_t>(at)];
  state_.nodes[static_cast<size_t>(at)].health = core::NodeHealth::kUp;
  dirty_ = true;
  if (!info.repairing) return;
  info.repairing = false;
  if (info.failure_rate_per_hour > 0)
    Push(now_ + FailureDelay(info.failure_rate_per_hour), EventKind::kNodeFailure, id, info.failure_generation);
}

}  // namespace mlsched::sim::detail
