// ProvisionRunner: fork/exec of the resume and suspend programs (provision_runner.h).
#include "schedd/server/provision_runner.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

extern char** environ;

namespace mlsched::server {
namespace {

// Appends `n` bytes of `buf` to `out`, up to kMaxProgramOutput in all.
void Append(std::string& out, const char* buf, ssize_t n) {
  if (n > 0) out.append(buf, std::min<size_t>(static_cast<size_t>(n), kMaxProgramOutput - std::min(out.size(), kMaxProgramOutput)));
}

// Reads what is available on `fd` into `out`; false at EOF or error.
bool ReadSome(int fd, std::string& out) {
  char buf[4096];
  const ssize_t n = read(fd, buf, sizeof buf);
  Append(out, buf, n);
  return n > 0 || (n < 0 && (errno == EINTR || errno == EAGAIN));
}

}  // namespace

ProgramResult RunProgram(const ProgramCall& call) {
  ProgramResult r;
  if (call.program.empty() || call.program[0] != '/') {
    r.error = "not an absolute path: '" + call.program + "'";
    return r;
  }
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string s(*e);
    const std::string key = s.substr(0, s.find('='));
    if (!call.env.count(key)) env_strings.push_back(s);
  }
  for (const auto& [k, v] : call.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp, argv{const_cast<char*>(call.program.c_str()), const_cast<char*>(call.hostlist.c_str()), nullptr};
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    r.error = std::string("pipe: ") + std::strerror(errno);
    return r;
  }
  const int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    // schedd blocks the signals it sigwaits for and gRPC ignores SIGPIPE: the program starts clean.
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  if (devnull >= 0) close(devnull);
  if (pid < 0) {
    close(fds[0]);
    r.error = std::string("fork: ") + std::strerror(errno);
    return r;
  }
  setpgid(pid, pid);  // also from here: no race with the child's own call
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(call.timeout_s);
  bool open_pipe = true;
  int status = 0;
  for (;;) {
    // Children of the program (an agent it starts) may keep the pipe open: the program's own
    // exit ends the wait, not EOF.
    if (waitpid(pid, &status, WNOHANG) == pid) break;
    if (std::chrono::steady_clock::now() >= deadline) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    if (open_pipe && poll(&p, 1, 100) > 0) open_pipe = ReadSome(fds[0], r.output);
    else if (!open_pipe) usleep(100 * 1000);
  }
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  if (open_pipe) {
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof buf)) > 0) Append(r.output, buf, n);
  }
  close(fds[0]);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  if (r.exit_code == 127 && r.output.empty()) r.error = "could not execute " + call.program;
  return r;
}

ProvisionRunner::ProvisionRunner(std::function<void(const ProgramCall&, const ProgramResult&)> on_done)
    : on_done_(std::move(on_done)), worker_([this] { Loop(); }) {}

ProvisionRunner::~ProvisionRunner() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    queue_.clear();
  }
  cv_.notify_all();
  worker_.join();
}

bool ProvisionRunner::Submit(ProgramCall call) {
  {
    std::lock_guard lk(mu_);
    if (queue_.size() >= kMaxQueuedPrograms) return false;
    queue_.push_back(std::move(call));
  }
  cv_.notify_all();
  return true;
}

void ProvisionRunner::Drain() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return queue_.empty() && !running_; });
}

void ProvisionRunner::Loop() {
  std::unique_lock lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    ProgramCall call = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lk.unlock();
    const ProgramResult r = RunProgram(call);
    if (!r.error.empty())
      spdlog::error("provisioning: {} {} {}: {}", call.kind, call.program, call.hostlist, r.error);
    else
      spdlog::log(r.exit_code == 0 && !r.timed_out ? spdlog::level::info : spdlog::level::warn,
                  "provisioning: {} {} {}: {}{}; output: {}", call.kind, call.program, call.hostlist,
                  r.timed_out ? "killed after " + std::to_string(call.timeout_s) + " s, " : "",
                  "exit " + std::to_string(r.exit_code), r.output);
    if (on_done_) on_done_(call, r);
    lk.lock();
    running_ = false;
    cv_.notify_all();
  }
}

}  // namespace mlsched::server
