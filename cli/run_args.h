// mlrun's and mlalloc's command lines: their own options, mlsub's options for a new allocation
// (cli/submit_options.h), then the command; and the allocation ("hold") job they submit.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "cli/submission.h"
#include "cli/submit_options.h"
#include "common/units.h"
#include "mlsched/v1/types.pb.h"

namespace mlsched::cli {

/// mlrun's own options (srun's names where srun has them).
struct RunOptions {
  int64_t job_id = 0;       // --jobid N: run in that running job
  std::optional<int32_t> rank;  // --rank R: one session on that rank (attach)
  bool overlap = false;     // --overlap
  bool pty = false;         // --pty: rank 0 gets a terminal
  bool label = false;       // -l/--label
  bool quiet = false;       // -Q/--quiet: no status lines while pending
  std::string input = "0";  // -i/--input 0|all|none|RANK: whose stdin is this one (srun's --input)
};

/// mlrun's (or mlalloc's, with `mlalloc`) arguments split: its own options (`own`), the mlsub
/// options and the command (`submit`, as ParseSubmitArgs reads them: options end at the first
/// word that is not one, or at "--"). mlrun's options may sit anywhere before the command.
/// Errors: "option --jobid needs a value", "--rank: 'x' is not a rank", "--input: 'x' is not
/// 0|all|none|RANK".
struct RunArgs {
  RunOptions own;
  SubmitArgs submit;
  std::vector<std::string> command;  // the command and its arguments (may be empty)
};
Parsed<RunArgs> ParseRunArgs(const std::vector<std::string>& args, bool mlalloc = false);

/// The allocation job mlrun and mlalloc submit: mlsub's options over a hold command that keeps
/// the tasks (and their devices) while running no user code and exits 0 on SIGTERM (the release:
/// the job ends COMPLETED). Refused:
/// elastic sizes, arrays, --wrap, --hold, a script. Job name default `default_name`, output
/// /dev/null unless -o names a file.
Parsed<v1::JobSpec> BuildAllocationSpec(const SubmitArgs& submit, const SubmitContext& ctx, const std::string& default_name);

/// The hold command's argv (documented in cli/README.md).
const std::vector<std::string>& AllocationHoldCommand();

/// The environment of a step's rank `i` of `n` placed like `task` among `all` (RANK, WORLD_SIZE,
/// LOCAL_RANK, LOCAL_WORLD_SIZE, MLSCHED_STEP_NTASKS), set over the task's own by the session.
std::vector<std::string> StepEnv(int32_t i, int32_t n, const std::vector<v1::TaskPlacement>& step_tasks);

/// The variables mlalloc gives its command: MLSCHED_JOB_ID, MLSCHED_NODELIST (compressed),
/// MLSCHED_NTASKS, and Slurm's names for scripts written for salloc (SLURM_JOB_ID, SLURM_JOBID,
/// SLURM_JOB_NODELIST, SLURM_NODELIST, SLURM_NTASKS, SLURM_NPROCS).
std::vector<std::string> AllocationEnv(const v1::JobInfo& job);

/// A one-line status of a pending job for the terminal: "job 12 pending (Resources: needs 16
/// h100, 8 free), expected start 14:05:00" (expected start in local time when known).
std::string PendingLine(const v1::JobInfo& job);

}  // namespace mlsched::cli
