// The environment of one task: the submitter's exported environment, the scheduler's extra
// variables, then the rendezvous variables of torchrun's env:// contract, which always win.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace mlsched::agent {

/// What the agent knows about one rank when it builds its environment.
struct TaskEnvInput {
  std::map<std::string, std::string> spec_env;       // JobSpec.env (mlsub --export)
  std::map<std::string, std::string> scheduler_env;  // Prepare.env (MLSCHED_JOB_NAME, ...)
  int64_t job_id = 0;
  int32_t attempt = 0;
  int32_t rank = 0;
  int32_t local_rank = 0;
  int32_t world_size = 0;
  int32_t local_world_size = 0;
  std::string master_addr;
  int32_t master_port = 0;  // 0: MASTER_PORT unset (the agent adds it at commit, AddCommitEnvironment)
  std::vector<int32_t> gpu_indices;  // CUDA_VISIBLE_DEVICES, empty = no GPU
  std::string node;                  // MLSCHED_NODE
  std::string status_file;           // MLSCHED_STATUS_FILE
  std::string stop_reason_file;      // MLSCHED_STOP_REASON_FILE (StopReasonPath): why a SIGTERM came
  /// MLSCHED_RENDEZVOUS_TOKEN: the attempt's secret (Prepare.rendezvous_token). Never log it.
  std::string rendezvous_token;
  /// Job arrays (MLSCHED_ARRAY_JOB_ID, _TASK_ID, _TASK_COUNT, _TASK_MIN, _TASK_MAX, set only when
  /// array_job_id != 0; Slurm's SLURM_ARRAY_* names are set too, for unchanged scripts).
  int64_t array_job_id = 0;
  int32_t array_task_id = 0, array_task_count = 0, array_task_min = 0, array_task_max = 0;
  // The user the task runs as: fills USER, LOGNAME, HOME when the exported environment lacks them.
  std::string user;
  std::string home;
};

/// Default PATH for a task whose exported environment has none.
inline constexpr const char* kDefaultTaskPath = "/usr/local/bin:/usr/bin:/bin";

/// The variable naming rank 0's inherited rendezvous socket (a descriptor number): bound to
/// MASTER_ADDR:MASTER_PORT by the agent, not listening; mltrain listens on it at once.
inline constexpr const char* kRendezvousFdVar = "MLSCHED_RENDEZVOUS_FD";

/// Builds the environment. Precedence, lowest first: defaults (PATH, USER, LOGNAME, HOME), the
/// spec's env, the scheduler's env, then RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
/// MASTER_ADDR, MASTER_PORT (only when in.master_port > 0), CUDA_VISIBLE_DEVICES (comma-joined; ""
/// without GPUs), MLSCHED_JOB_ID, MLSCHED_TASK_ID (= rank), MLSCHED_ATTEMPT, MLSCHED_NODE,
/// MLSCHED_STATUS_FILE, and MLSCHED_RENDEZVOUS_TOKEN = in.rendezvous_token. Without a token from the
/// scheduler the variable is removed: a value exported with the job (which mlq shows) must not pass
/// for the secret. MASTER_PORT (when 0) and MLSCHED_RENDEZVOUS_FD exported with the job are removed
/// too: only the agent sets them.
std::map<std::string, std::string> BuildTaskEnvironment(const TaskEnvInput& in);

/// The commit's part of a rank's environment ("KEY=VALUE" strings): MASTER_PORT = `master_port`
/// (1-65535; removed when 0) and, for rank 0 holding the reserved socket, MLSCHED_RENDEZVOUS_FD =
/// `rendezvous_fd` (removed when < 0). Earlier values of both are replaced.
void AddCommitEnvironment(std::vector<std::string>* env, int32_t master_port, int rendezvous_fd);

/// "KEY=VALUE" strings in key order, as execve wants them. Keys with '=' or NUL are skipped.
std::vector<std::string> ToEnvStrings(const std::map<std::string, std::string>& env);

}  // namespace mlsched::agent
