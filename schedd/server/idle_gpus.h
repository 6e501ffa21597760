// IdleGpus: the idle-GPU policy's detector ([idle]; core::IdlePolicy). Each heartbeat's NVML
// sample of a rank's GPUs (RunningTask.gpu_util_percent, with the GPUs its placement holds) updates
// its attempt's GPU-weighted mean utilization over the ranks' latest samples; an attempt is idle
// from the first sample whose mean is below the job's threshold until one is not. A component
// beside the Controller, owned and locked by it (as AttemptUsage); no clock: `now` (seconds) comes
// with each call. The Controller acts on what it finds (controller_idle.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "schedd/core/types.h"

namespace mlsched::server {

class IdleGpus {
 public:
  /// Records rank `rank` of attempt `attempt` of job `job`, holding `gpus` GPUs, at `util_percent`
  /// (clamped to 0..100) at `now`; `below_percent` is the job's threshold (<= 0: the policy is off
  /// for it, and the attempt is never idle). Ranks without GPUs are ignored.
  void OnSample(int64_t job, int32_t attempt, int32_t rank, int32_t gpus, int32_t util_percent, double below_percent,
                int64_t now);
  /// The attempt's GPU-weighted mean utilization (percent) over its ranks' samples taken within
  /// kMaxGapS of `now`; nullopt when none is.
  std::optional<double> MeanUtil(int64_t job, int32_t attempt, int64_t now) const;
  /// The latest utilization (percent) a rank reported; nullopt when none (or it is stale at `now`).
  std::optional<int32_t> RankUtil(int64_t job, int32_t attempt, int32_t rank, int64_t now) const;

  /// An attempt below its threshold since `since` (seconds), mean `util` (percent) at its latest
  /// sample, over `gpus` GPUs; `flagged`: the Controller acted on this idle period already.
  struct Idle {
    int64_t job = 0;
    int32_t attempt = 0;
    int64_t since = 0;
    double util = 0;
    int32_t gpus = 0;
    bool flagged = false;
  };
  /// The attempts idle now (their latest sample fresh at `now`), by job id.
  std::vector<Idle> IdleNow(int64_t now) const;
  /// The idle period of an attempt, if it is in one now.
  std::optional<Idle> IdleOf(int64_t job, int32_t attempt, int64_t now) const;
  /// The attempt's idle period when the Controller acted on it (Flag) and no sample since said
  /// busy: mlq's IDLE flag.
  std::optional<Idle> Flagged(int64_t job, int32_t attempt) const;
  /// Marks the attempt's current idle period as acted upon (cleared when it is busy again).
  void Flag(int64_t job, int32_t attempt);

  /// An idle period whose rule's time has come: what to do and the words for the event, the
  /// metric's label and the job's stderr ("2 GPU(s) 3.0 % busy (below 5.0 %) for 10m; policy
  /// [idle] action notify").
  struct Due {
    Idle idle;
    core::IdleRule rule;
    std::string what;
  };
  /// The attempts idle at `now` for at least their rule's `after` and not acted on in this idle
  /// period, each flagged as acted on. `rule_of(job, attempt)` gives the job's rule, or nullopt
  /// when it is not to be judged now (exempt, no longer running that attempt, being stopped).
  std::vector<Due> TakeDue(int64_t now, const std::function<std::optional<core::IdleRule>(int64_t, int32_t)>& rule_of);
  /// Forgets an attempt (it ended).
  void Forget(int64_t job, int32_t attempt);
  size_t Attempts() const { return attempts_.size(); }

  /// A rank's sample older than this (seconds) no longer counts: a silent agent says nothing.
  static constexpr int64_t kMaxGapS = 120;
  /// Ranks kept per attempt (beyond: not counted).
  static constexpr size_t kMaxRanks = 65536;

 private:
  struct Rank {
    int32_t gpus = 0, util = 0;
    int64_t at = -1;
  };
  struct Attempt {
    std::map<int32_t, Rank> ranks;
    int64_t below_since = -1;  // -1 = busy (or not measured)
    int64_t last_at = -1;      // the latest sample of any rank
    double util = -1;          // mean at the latest sample
    bool flagged = false;
  };
  std::optional<Idle> IdleOf(int64_t job, int32_t attempt, const Attempt& a, int64_t now) const;
  std::map<std::pair<int64_t, int32_t>, Attempt> attempts_;
};

}  // namespace mlsched::server
