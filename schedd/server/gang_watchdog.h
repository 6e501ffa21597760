// The gang watchdog's bookkeeping ([watchdog]; core::WatchdogPolicy): the training step each rank
// of a running gang last reported (RunningTask.step, from its MLSCHED_STATUS_FILE) and when it last
// advanced, which gangs stalled (no rank advanced for stall_after), which ranks are behind, and
// how often each node was suspected. Pure: no clock, threads or I/O; the Controller feeds it from
// heartbeats (controller_watchdog.cc) and acts on what it says. A gang whose ranks never report a
// step above 0 is never watched (the status file is how a job opts in).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

namespace mlsched::server {

class GangWatchdog {
 public:
  /// Bounds: ranks tracked per gang, and suspicions kept per node.
  static constexpr size_t kMaxRanksPerGang = 100000;
  static constexpr size_t kMaxSuspicionsPerNode = 1000;

  /// Rank `rank` of attempt `attempt` of `job`, on `node`, reported `step` and `compute_ms` (its
  /// milliseconds outside collectives so far; -1 = not told) at `now` (schedd's clock, seconds). An
  /// earlier attempt's reports are dropped; a later one starts afresh.
  void Observe(int64_t job, int32_t attempt, int32_t rank, const std::string& node, int64_t step, int64_t compute_ms,
               int64_t now);
  /// The job ended or left its attempt: forgotten.
  void Forget(int64_t job);

  /// A gang with no progress for `stall_after` seconds at `now`.
  struct Stall {
    int64_t job = 0;
    int32_t attempt = 0;
    int64_t step = 0;       // the highest step any rank reached
    int64_t since = 0;      // when a rank last advanced (schedd's clock)
  };
  /// Gangs stalled at `now` that were not reported before (each stall is reported once per attempt).
  std::vector<Stall> TakeStalls(int64_t stall_after, int64_t now);

  /// A rank of a stalled gang that is behind the others: its step is below the gang's highest.
  struct Behind {
    int32_t rank = 0;
    std::string node;
    int64_t step = 0;
  };
  /// The ranks of `job` behind the gang's highest step (empty when all are level or it is unknown).
  std::vector<Behind> BehindRanks(int64_t job) const;

  /// A node of a gang computing slower than the rest: its ranks' compute seconds per step over the
  /// window, against the median of the gang's other nodes.
  struct Straggler {
    int64_t job = 0;
    int32_t attempt = 0;
    std::string node;
    double seconds_per_step = 0;   // the node's ranks' mean
    double others_per_step = 0;    // the median of the other nodes' means
  };
  /// Nodes whose step rate by compute time is below `ratio` x the other nodes' median over the last
  /// `window` seconds (each rank's samples must span at least half of it); each (job, node) is
  /// reported at most once per window. Gangs on one node have none.
  std::vector<Straggler> TakeStragglers(double ratio, int64_t window, int64_t now);
  /// True when TakeStragglers named `node` a straggler of `job` at or after `since`.
  bool StragglingOn(int64_t job, const std::string& node, int64_t since) const;

  /// Records that a job of user `uid` suspected `node` at `now`; returns how many different users'
  /// jobs suspected it within the last `window` seconds (this one included). Users, not times: the
  /// evidence (steps, compute times, stack frames) comes from the users' own processes, so one
  /// user's jobs alone can never make a node look bad enough to drain it.
  int Suspect(const std::string& node, int64_t now, int64_t window, uint32_t uid);

 private:
  struct Sample {
    int64_t at = 0, step = 0, compute_ms = 0;
  };
  static constexpr size_t kMaxSamples = 128;  // per rank: thinned to one per window / 64
  struct Rank {
    std::string node;
    int64_t step = 0;
    int64_t advanced_at = 0;  // when its step last rose
    std::deque<Sample> samples;  // with compute_ms, oldest first
  };
  struct Gang {
    int32_t attempt = 0;
    std::map<int32_t, Rank> ranks;
    bool reported = false;  // this attempt's stall went out through TakeStalls
    std::map<std::string, int64_t> straggler_reported;  // node -> when TakeStragglers last named it
  };
  /// A rank's compute seconds per step over [now - window, now]; negative when unknown.
  static double SecondsPerStep(const Rank& r, int64_t window, int64_t now);
  std::map<int64_t, Gang> gangs_;
  std::map<std::string, std::deque<std::pair<int64_t, uint32_t>>> suspicions_;  // node -> (time, uid), oldest first
};

}  // namespace mlsched::server
