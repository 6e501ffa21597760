#include "cli/allocate.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <iostream>
#include <thread>

#include "cli/exit_codes.h"
#include "cli/run_args.h"
#include "common/safe_text.h"

extern char** environ;

namespace mlsched::cli {

SubmitContext ThisProcessContext(std::error_code* cwd_error) {
  SubmitContext ctx;
  std::error_code ec;
  ctx.cwd = std::filesystem::current_path(ec).string();
  if (cwd_error) *cwd_error = ec;
  const mode_t mask = ::umask(022);  // read it (there is no getter) and put it back
  ::umask(mask);
  ctx.umask = static_cast<uint32_t>(mask);
  ctx.env = EnvironmentFrom(environ);
  return ctx;
}

std::optional<v1::JobInfo> AllocateAndWait(SchedClient& client, const v1::JobSpec& spec, const std::string& tool,
                                           bool quiet, const std::atomic<bool>& cancel, int* code,
                                           const std::string& submission_key) {
  int64_t job_id = 0;
  const std::string key = submission_key.empty() ? NewSubmissionKey() : submission_key;
  RpcStatus st = client.SubmitJob(spec, &job_id, RetryBudgetFromEnv(), [&](const RpcStatus& failed, double wait_s) {
    std::cerr << tool << ": " << SafeText(failed.message) << "; retrying in " << wait_s << " s\n";
  }, key);
  if (!st.ok()) {
    std::cerr << tool << ": " << SafeText(st.message) << "\n";
    if (IsUnconfirmed(st.code)) std::cerr << UnconfirmedAllocationHelp(tool, key) << "\n";
    *code = ExitCodeForRpc(st.code);
    return std::nullopt;
  }
  // Bound to this process: if it dies, schedd cancels the job after its grace.
  // Idle warnings arrive on the watch's thread, maybe while a session holds the terminal raw:
  // "\r\n" keeps them on lines of their own either way.
  auto on_event = [tool](const v1::WatchAllocationEvent& ev) {
    const std::string text = ev.idle_warning().empty() ? "the allocation is in use again" : "warning: " + SafeText(ev.idle_warning());
    // A terminal may be in raw mode (a session's pty): "\r\n" there; plain lines elsewhere.
    const std::string line = isatty(2) ? "\r\n" + tool + ": " + text + "\r\n" : tool + ": " + text + "\n";
    [[maybe_unused]] ssize_t n = ::write(2, line.data(), line.size());
  };
  if (auto err = client.WatchAllocation(job_id, on_event); !err.empty())
    std::cerr << tool << ": warning: job " << job_id << " is not bound to this client (" << SafeText(err)
              << "): if " << tool << " is killed, cancel it with mlcancel " << job_id << "\n";
  std::string last;
  for (;;) {
    v1::JobInfo job;
    st = client.GetJob(job_id, &job);
    if (cancel) {
      v1::CancelJobsRequest req;
      req.add_job_ids(job_id);
      v1::CancelJobsResponse resp;
      client.CancelJobs(req, &resp, RetryBudgetFromEnv());
      std::cerr << "\n" << tool << ": job " << job_id << " cancelled while it waited\n";
      *code = 130;
      return std::nullopt;
    }
    if (st.ok() && job.state() == v1::RUNNING) return job;
    if (st.ok() && job.state() != v1::PENDING && job.state() != v1::JOB_STATE_UNSPECIFIED) {
      std::cerr << tool << ": job " << job_id << " ended " << v1::JobState_Name(job.state()) << " before it ran"
                << (job.reason().empty() ? "" : " (" + SafeText(job.reason()) + ")") << "\n";
      *code = kExitRefused;
      return std::nullopt;
    }
    if (st.ok() && !quiet) {
      const std::string line = PendingLine(job);
      if (line != last) std::cerr << tool << ": " << SafeText(line) << "\n";
      last = line;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
}

void ReleaseAllocation(SchedClient& client, int64_t job_id) {
  v1::CancelJobsRequest req;
  req.add_job_ids(job_id);
  req.set_signal(SIGTERM);
  v1::CancelJobsResponse resp;
  client.CancelJobs(req, &resp, RetryBudgetFromEnv());
}

}  // namespace mlsched::cli
