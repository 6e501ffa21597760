// The client side of an allocation (mlrun, mlalloc): submit it, wait while it is pending with a
// status line, cancel it on Ctrl-C, release it at the end.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <system_error>

#include "cli/rpc.h"
#include "cli/submission.h"
#include "mlsched/v1/types.pb.h"

namespace mlsched::cli {

/// The submitting side of this process: its working directory, umask and environment (mlsub,
/// mlrun, mlalloc). `cwd_error` (optional) says why the working directory could not be read
/// (cwd is then empty).
SubmitContext ThisProcessContext(std::error_code* cwd_error = nullptr);

/// Submits `spec` (retrying transient failures with one submission key), binds it to this process
/// (SchedClient::WatchAllocation: schedd cancels it a grace period after this process is gone),
/// and polls it every
/// 250 ms until it runs; while it is pending prints PendingLine to stderr on each change (not
/// when `quiet`), each line prefixed "TOOL: ". When `cancel` turns true the job is cancelled and
/// nullopt returned with *code 130; also nullopt when the submission fails (*code from the RPC)
/// or the job ends before it runs (*code 1), with the reason printed. `submission_key` is the
/// user's --submission-key (empty: a new one): given again after an unconfirmed try, schedd answers
/// with the allocation that try stored, and this process binds to it.
std::optional<v1::JobInfo> AllocateAndWait(SchedClient& client, const v1::JobSpec& spec, const std::string& tool,
                                           bool quiet, const std::atomic<bool>& cancel, int* code,
                                           const std::string& submission_key = "");

/// Releases an allocation: SIGTERM to its tasks, whose hold command then exits 0 (COMPLETED).
void ReleaseAllocation(SchedClient& client, int64_t job_id);

}  // namespace mlsched::cli
