// mlalloc (salloc): allocates with mlsub's options, waits while the allocation is pending (Ctrl-C
// cancels it), then runs COMMAND, or the user's $SHELL, here with MLSCHED_JOB_ID,
// MLSCHED_NODELIST, MLSCHED_NTASKS (and Slurm's names); `mlrun CMD` in it runs a step on the
// allocation. When the command ends the allocation is released; mlalloc exits with its status.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "cli/allocate.h"
#include "cli/exit_codes.h"
#include "cli/rpc.h"
#include "cli/run_args.h"
#include "common/safe_text.h"


extern char** environ;

namespace {

using namespace mlsched;
using namespace mlsched::cli;

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

// Every 2 s until `done`: when job `job_id` (on schedd `server`, as --server) has ended, says so and hangs up `child` (SIGHUP, then
// SIGKILL 10 s later if it is still there), setting `revoked`. A client of its own (its thread).
void WatchRevocation(const std::string& server, int64_t job_id, pid_t child, const std::atomic<bool>& done,
                     std::atomic<bool>& revoked) {
  SchedClient client(server, 10);
  auto pause = [&](int ms) {
    for (int i = 0; i < ms / 100 && !done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  };
  while (!done) {
    pause(2000);
    if (done) return;
    v1::JobInfo job;
    if (!client.GetJob(job_id, &job).ok() || job.state() == v1::RUNNING || job.state() == v1::PENDING) continue;
    revoked = true;
    const char* eol = isatty(2) ? "\r\n" : "\n";  // the command may hold the terminal raw
    std::cerr << (isatty(2) ? "\r\n" : "") << "mlalloc: job allocation " << job_id << " has been revoked: "
              << v1::JobState_Name(job.state()) << (job.reason().empty() ? "" : " (" + SafeText(job.reason()) + ")") << eol;
    kill(child, SIGHUP);
    pause(10000);
    if (!done) kill(child, SIGKILL);
    return;
  }
}

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
  auto spec = BuildAllocationSpec(a.submit, ThisProcessContext(), "mlalloc");
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
  int code = 0;
  auto got = AllocateAndWait(client, *spec.value, "mlalloc", a.own.quiet, g_cancel, &code,
                             a.submit.options.submission_key.value_or(""));
  if (!got) ExitNow(code);
  const v1::JobInfo& job = *got;
  const int64_t job_id = job.job_id();
  const std::vector<std::string> env = AllocationEnv(job);
  std::cerr << "mlalloc: job allocation " << job_id << " granted on " << env[1].substr(env[1].find('=') + 1) << "\n";
  std::vector<std::string> command = a.command;
  if (command.empty()) {
    const char* shell = std::getenv("SHELL");
    command = {shell && *shell ? shell : "/bin/sh"};
  }
  // The command's environment, made before the fork (gRPC's threads: the child only execs).
  std::vector<std::string> child_env = env;
  // mlrun in the shell goes to the same schedd: --server when given, else the list it had, else
  // the replica that answered.
  const char* had = std::getenv("MLSCHED_SERVER");
  child_env.push_back("MLSCHED_SERVER=" + (a.submit.options.server ? *a.submit.options.server
                                           : had && *had               ? std::string(had)
                                                                       : client.Address()));
  for (char** e = environ; *e; ++e) {
    const std::string kv(*e), name = kv.substr(0, kv.find('=') + 1);
    if (std::none_of(child_env.begin(), child_env.end(), [&](const std::string& c) { return c.rfind(name, 0) == 0; }))
      child_env.push_back(kv);
  }
  std::vector<char*> cargv, cenv;
  for (auto& c : command) cargv.push_back(c.data());
  cargv.push_back(nullptr);
  for (auto& c : child_env) cenv.push_back(c.data());
  cenv.push_back(nullptr);
  const std::string exec_failed = "mlalloc: cannot run " + command[0] + "\n";
  const pid_t pid = fork();
  if (pid == 0) {
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    execvpe(cargv[0], cargv.data(), cenv.data());
    ssize_t n = write(2, exec_failed.data(), exec_failed.size());
    (void)n;
    _exit(127);
  }
  // Ctrl-C in the shell is the shell's: mlalloc only waits.
  signal(SIGINT, SIG_IGN);
  signal(SIGQUIT, SIG_IGN);
  // An allocation that ends under the command (its time limit, released idle, cancelled) is
  // revoked, as salloc does: the command is hung up.
  std::atomic<bool> done{false}, revoked{false};
  std::thread revoker;
  if (pid > 0) revoker = std::thread([&] { WatchRevocation(a.submit.options.server.value_or(""), job_id, pid, done, revoked); });
  int status = 0;
  while (pid > 0 && waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  done = true;
  if (revoker.joinable()) revoker.join();
  code = pid < 0 ? 127 : WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (revoked) ExitNow(code);
  std::cerr << "mlalloc: relinquishing job allocation " << job_id << "\n";
  ReleaseAllocation(client, job_id);
  ExitNow(code);
}
