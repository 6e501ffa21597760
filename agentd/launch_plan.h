// Turning a Prepare message into ready-to-exec launch requests, validating on the way everything
// that can be checked before anything starts without touching the user's files: who the tasks run
// as, the form of the paths, the command or script, the output patterns and the device indices.
// The working directory, the command's PATH search and the output files are left to the task
// itself, after it has become the user (launcher.h): root never stats or follows a path the user
// names, so a prepare neither tells a user what root can see nor fails (and requeues) for a
// directory the user got wrong; the task's launch fails instead, once, with the user's own errno.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "agentd/launcher.h"
#include "agentd/task_key.h"
#include "common/units.h"
#include "mlsched/v1/agent.pb.h"

namespace mlsched::agent {

/// What the planner needs to know about this node and agent.
struct PlanContext {
  std::string node;        // node name (%n, MLSCHED_NODE)
  std::string work_dir;    // agent work directory; attempts live in <work_dir>/jobs/<job>.<attempt>
  bool agent_is_root = false;
  int32_t gpu_count = 0;   // devices 0..gpu_count-1 exist on this node
  int64_t task_pids_max = 0;             // TaskLimits.pids_max of every task; 0 = none
  std::vector<std::string> gpu_devices;  // device node of each GPU index (/dev/nvidiaN); empty = none
  uid_t agent_uid = 0;           // the agent's effective uid: the only one a non-root agent runs jobs of ...
  bool single_user = false;      // ... unless --single-user: every job runs as agent_uid
  bool allow_root_jobs = false;  // --allow-root-jobs: jobs of uid 0 may run (as root when the agent is root)
  /// Jobs in images run here (agentd is root and has runc, skopeo and umoci); else
  /// `container_refusal` says why not.
  bool containers = false;
  std::string container_refusal = "it needs runc, skopeo and umoci";
};

/// One rank, ready for ProcessSupervisor::Spawn. Its request's limits are the job's per-task
/// memory and CPUs, the agent's pids limit, and every GPU device node of the node but its own.
struct PlannedRank {
  int32_t rank = 0;
  std::vector<int32_t> gpus;
  LaunchRequest request;
};

/// A validated attempt: its directory, the batch script to write there, and its ranks.
struct PlannedAttempt {
  AttemptKey key;
  std::string dir;             // <work_dir>/jobs/<job>.<attempt>
  std::string script;          // batch script contents (written to dir/script); empty with argv
  bool chown_dir = false;      // hand dir to the task user (agent is root)
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<PlannedRank> ranks;
  /// Set by the agent when rank 0 runs here: the rendezvous socket it reserved (rendezvous_port.h)
  /// and its port, reported in PrepareResult.master_port.
  std::shared_ptr<const OwnedFd> rendezvous;
  int32_t rendezvous_port = 0;
  /// The v1::Prepare it was planned from, serialized (set by the agent): a reload in place plans
  /// the attempt again from it (reload_state.h).
  std::string prepare;
  /// True when rank 0 is among this node's ranks.
  bool HasRank0() const;
};

/// The status file a task of `key` keeps (MLSCHED_STATUS_FILE):
/// <work_dir>/jobs/<job>.<attempt>/status-<rank>.json.
std::string StatusFilePath(const std::string& work_dir, const TaskKey& key);

/// Validates `prepare` and builds its launch requests; errors name the field and value, e.g.
/// "working directory 'data' is not an absolute path", or the flag a refused user needs
/// (--allow-root-jobs, --single-user). Reads the user database only, never the file system.
/// MASTER_PORT is not set here: it comes with the commit (AddCommitEnvironment in task_env.h).
Parsed<PlannedAttempt> PlanAttempt(const v1::Prepare& prepare, const PlanContext& ctx);

/// Creates the attempt directory (mode 0700, owned by the task user) and the script (mode 0700).
/// Returns "" or an error naming the path.
std::string WriteAttemptFiles(const PlannedAttempt& plan);

/// Largest stop reason agentd writes for an attempt (bytes); schedd sends "resize", "eviction" or
/// "preemption".
inline constexpr size_t kMaxStopReasonBytes = 32;

/// The file that tells an attempt's tasks why they are asked to stop (MLSCHED_STOP_REASON_FILE):
/// <work_dir>/jobs/<job>.<attempt>.stop-reason. It sits next to the user-owned attempt directory,
/// in the agent-only jobs directory, so writing it follows no path a user controls.
std::string StopReasonPath(const std::string& attempt_dir);

/// Writes `reason` (1 to kMaxStopReasonBytes characters of [a-z-]) to StopReasonPath(attempt_dir),
/// mode 0644, atomically (a temporary file renamed over it). Returns "" or the error.
std::string WriteStopReason(const std::string& attempt_dir, const std::string& reason);

/// Removes the attempt directory (status files included) and its stop-reason file; errors are
/// logged, not returned. Given a stop-reason file itself (a stale one), removes just that.
void RemoveAttemptFiles(const std::string& dir);

}  // namespace mlsched::agent
