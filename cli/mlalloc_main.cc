// mlalloc (salloc): allocates with mlsub's options, waits while the allocation is pending (Ctrl-C
// cancels it), then runs COMMAND, or the user's $SHELL, here with MLSCHED_JOB_ID,
// MLSCHED_NODELIST, MLSCHED_NTASKS (and Slurm's names); `mlrun CMD` in it runs a step on the
// allocation. When the command ends the allocation is released; mlalloc exits with its status.
#include <sys/wait.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <thread>

#include "cli/exit_codes.h"
#include "cli/rpc.h"
#include "cli/run_args.h"
#include "common/safe_text.h"

extern char** environ;

namespace {

using namespace mlsched;
using namespace mlsched::cli;

constexpr int kExitInterrupted = 130;

constexpr const char* kUsage =
    "Usage: mlalloc [MLSUB OPTIONS] [-Q] [COMMAND [ARGS...]]\n"
    "Allocates like salloc: submits an allocation with mlsub's options (-n, -c, --gpus-per-task, -t, -p, -A,\n"
    "--qos, --spot, ...; not elastic sizes or arrays) whose tasks hold the nodes and devices without running\n"
    "anything of yours, waits while it is pending (a status line; Ctrl-C cancels it; -Q: quiet), then runs\n"
    "COMMAND, or $SHELL, here with MLSCHED_JOB_ID, MLSCHED_NODELIST, MLSCHED_NTASKS and SLURM_JOB_ID,\n"
    "SLURM_JOB_NODELIST, SLURM_NTASKS. In it, `mlrun COMMAND` runs a step on the allocation. When COMMAND\n"
    "ends the allocation is released, and mlalloc exits with COMMAND's status. Its own failures: 1 refused\n"
    "or the allocation ended before it ran, 2 usage, 3 schedd unreachable, 130 interrupted while pending.\n\n"
    "MLSUB OPTIONS:\n";

std::atomic<bool> g_cancel{false};
void OnInterrupt(int) { g_cancel = true; }

}  // namespace

int main(int argc, char** argv) {
  auto args = ParseRunArgs(std::vector<std::string>(argv + 1, argv + argc), /*mlalloc=*/true);
  if (!args) {
    std::cerr << "mlalloc: " << args.error << "\nTry 'mlalloc --help'.\n";
    return kExitUsage;
  }
  RunArgs& a = *args.value;
  if (a.submit.options.help) {
    std::cout << kUsage << SubmitOptionsHelp() << "\n" << ExitCodesHelp();
    return kExitOk;
  }
  if (std::getenv("MLSCHED_JOB_ID"))
    std::cerr << "mlalloc: warning: already inside job " << std::getenv("MLSCHED_JOB_ID") << "; allocating another\n";
  SubmitContext ctx;
  std::error_code ec;
  ctx.cwd = std::filesystem::current_path(ec).string();
  const mode_t mask = ::umask(022);
  ::umask(mask);
  ctx.umask = static_cast<uint32_t>(mask);
  ctx.env = EnvironmentFrom(environ);
  auto spec = BuildAllocationSpec(a.submit, ctx, "mlalloc");
  if (!spec) {
    std::cerr << "mlalloc: " << SafeText(spec.error) << "\n";
    return kExitUsage;
  }
  SchedClient client(a.submit.options.server.value_or(""));
  if (!client.ConfigError().empty()) {
    std::cerr << "mlalloc: " << client.ConfigError() << "\n";
    return kExitUsage;
  }
  struct sigaction sa{};
  sa.sa_handler = OnInterrupt;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
  int64_t job_id = 0;
  RpcStatus st = client.SubmitJob(*spec.value, &job_id, RetryBudgetFromEnv(), [](const RpcStatus& failed, double wait_s) {
    std::cerr << "mlalloc: " << SafeText(failed.message) << "; retrying in " << wait_s << " s\n";
  });
  if (!st.ok()) {
    std::cerr << "mlalloc: " << SafeText(st.message) << "\n";
    ExitNow(ExitCodeForRpc(st.code));
  }
  std::cerr << "mlalloc: pending job allocation " << job_id << "\n";
  v1::JobInfo job;
  std::string last;
  for (;;) {
    st = client.GetJob(job_id, &job);
    if (g_cancel) {
      v1::CancelJobsRequest req;
      req.add_job_ids(job_id);
      v1::CancelJobsResponse resp;
      client.CancelJobs(req, &resp, RetryBudgetFromEnv());
      std::cerr << "\nmlalloc: job allocation " << job_id << " cancelled while it waited\n";
      ExitNow(kExitInterrupted);
    }
    if (st.ok() && job.state() == v1::RUNNING) break;
    if (st.ok() && job.state() != v1::PENDING && job.state() != v1::JOB_STATE_UNSPECIFIED) {
      std::cerr << "mlalloc: job allocation " << job_id << " ended " << v1::JobState_Name(job.state()) << " before it ran\n";
      ExitNow(kExitRefused);
    }
    if (st.ok() && !a.own.quiet) {
      const std::string line = PendingLine(job);
      if (line != last) std::cerr << "mlalloc: " << SafeText(line) << "\n";
      last = line;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  const std::vector<std::string> env = AllocationEnv(job);
  std::cerr << "mlalloc: job allocation " << job_id << " granted on " << env[1].substr(env[1].find('=') + 1) << "\n";
  std::vector<std::string> command = a.command;
  if (command.empty()) {
    const char* shell = std::getenv("SHELL");
    command = {shell && *shell ? shell : "/bin/sh"};
  }
  const pid_t pid = fork();
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    for (const auto& kv : env) {
      const auto eq = kv.find('=');
      setenv(kv.substr(0, eq).c_str(), kv.substr(eq + 1).c_str(), 1);
    }
    // The replica that answered: mlrun in the shell goes to the same schedd.
    if (!a.submit.options.server) setenv("MLSCHED_SERVER", client.Address().c_str(), 0);
    std::vector<char*> cargv;
    for (auto& c : command) cargv.push_back(c.data());
    cargv.push_back(nullptr);
    execvp(cargv[0], cargv.data());
    std::cerr << "mlalloc: cannot run " << command[0] << ": " << std::strerror(errno) << "\n";
    _exit(127);
  }
  // Ctrl-C in the shell is the shell's: mlalloc only waits.
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  int status = 0;
  while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const int code = pid < 0 ? 127 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::cerr << "mlalloc: relinquishing job allocation " << job_id << "\n";
  v1::CancelJobsRequest req;
  req.add_job_ids(job_id);
  req.set_signal(SIGTERM);  // the hold command exits 0: the allocation ends COMPLETED
  v1::CancelJobsResponse resp;
  client.CancelJobs(req, &resp, RetryBudgetFromEnv());
  ExitNow(code);
}
