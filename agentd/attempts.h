// AttemptTable: the agent's record of every attempt it prepared, which devices each rank holds,
// which ranks are still alive, and which attempts already finished (so repeated messages stay
// idempotent). Thread-safe; pure bookkeeping (no processes, no files).
#pragma once

#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "agentd/launch_plan.h"
#include "agentd/task_key.h"

namespace mlsched::agent {

class AttemptTable {
 public:
  enum class Phase { kPrepared, kCommitted };

  /// Outcome of Commit.
  struct CommitResult {
    bool known = false;               // the attempt was prepared here (or already finished)
    std::vector<PlannedRank> launch;  // ranks to start now; empty when already committed
    /// Rank 0's reserved rendezvous socket, handed out with the launch (the table keeps no copy,
    /// so the agent's descriptor closes once the launch is done with it); null when none.
    std::shared_ptr<const OwnedFd> rendezvous;
    int32_t rendezvous_port = 0;
  };

  /// True when the attempt is prepared, committed or recently finished here.
  bool Known(const AttemptKey& key) const;
  /// Reserves the plan's devices. Error when a device is held by another attempt, e.g.
  /// "GPU 3 is held by job 12 attempt 1 rank 0". A known attempt is accepted again (idempotent).
  std::string Reserve(PlannedAttempt plan);
  /// Marks a prepared attempt committed and hands out its ranks once.
  CommitResult Commit(const AttemptKey& key);
  /// The rendezvous port reserved for a live attempt here (PlannedAttempt::rendezvous_port); 0 when
  /// none or not live. A repeated prepare answers with it again.
  int32_t RendezvousPort(const AttemptKey& key) const;
  /// Phase of a live attempt.
  std::optional<Phase> PhaseOf(const AttemptKey& key) const;
  /// Drops a prepared (uncommitted) attempt, releasing its devices and its rendezvous socket; returns its directory, or
  /// nullopt when the attempt is not in the prepared phase.
  std::optional<std::string> DropPrepared(const AttemptKey& key);
  /// Ranks of a committed attempt that have not exited.
  std::vector<TaskKey> LiveTasks(const AttemptKey& key) const;
  /// The launch request of a committed rank that has not exited (its user, environment, working
  /// directory, container); nullopt otherwise. For interactive sessions (session_host.h).
  std::optional<LaunchRequest> LiveRequest(const TaskKey& task) const;
  /// The MASTER_PORT the commit gave a live attempt (LiveRequest's environment then has it).
  void SetMasterPort(const AttemptKey& key, int32_t port);
  /// A rank ended: frees its devices. When it was the attempt's last live rank the attempt is
  /// finished and its directory is returned for clean-up.
  std::optional<std::string> RankExited(const TaskKey& task);
  /// Fencing: the prepared attempts none of whose ranks are in `keep`.
  std::vector<AttemptKey> PreparedNotIn(const std::set<TaskKey>& keep) const;
  /// Every live attempt's directory (for shutdown clean-up).
  std::vector<std::string> Directories() const;
  /// Devices currently reserved, as index -> holder.
  std::map<int32_t, TaskKey> HeldGpus() const;

  /// A committed attempt as a reload in place hands it over (reload_state.h).
  struct Committed {
    AttemptKey key;
    std::string prepare;     // PlannedAttempt::prepare
    int32_t master_port = 0;
    std::set<int32_t> live;  // ranks not yet exited
    bool container = false;  // its ranks run in an image
    std::string image_digest;  // that image's digest ("" when bare, or not pinned yet)
  };
  /// Every committed attempt with a live rank.
  std::vector<Committed> CommittedAttempts() const;
  /// True while a prepared (not yet committed) attempt is here.
  bool AnyPrepared() const;
  /// Puts a committed attempt back after a reload in place: `plan` is planned again from its
  /// Prepare; only the `live` ranks count as alive and hold their devices; `master_port` as its
  /// commit gave. Error when the attempt is known or a device is held by another.
  std::string Restore(PlannedAttempt plan, const std::set<int32_t>& live, int32_t master_port);

 private:
  struct Entry {
    PlannedAttempt plan;
    Phase phase = Phase::kPrepared;
    std::set<int32_t> live;  // committed ranks not yet exited
    int32_t master_port = 0;  // from the commit
  };
  void ReleaseGpus(const TaskKey& task);  // requires mu_
  void RememberFinished(const AttemptKey& key);  // requires mu_

  static constexpr size_t kFinishedMemory = 4096;
  mutable std::mutex mu_;
  std::map<AttemptKey, Entry> attempts_;
  std::map<int32_t, TaskKey> gpu_holder_;
  std::set<AttemptKey> finished_;
  std::deque<AttemptKey> finished_order_;
};

}  // namespace mlsched::agent
