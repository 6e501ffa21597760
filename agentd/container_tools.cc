#include "agentd/container_tools.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <atomic>
#include <mutex>
#include <set>

#include "agentd/launcher.h"

namespace mlsched::agent {
namespace {

std::mutex helpers_mu;
std::set<pid_t> helpers;  // guarded by helpers_mu; fork and insert happen under it

[[noreturn]] void HelperChild(int out_fd, char* const* argv, char* const* envp, const ToolUser* user) {
  setsid();
  if (user && (setgroups(user->groups.size(), user->groups.data()) != 0 || setgid(user->gid) != 0 ||
               setuid(user->uid) != 0)) {
    const char msg[] = "cannot switch to the job's user\n";
    ssize_t n = write(out_fd, msg, sizeof msg - 1);
    (void)n;
    _exit(126);
  }
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  int in = open("/dev/null", O_RDONLY);
  if (in < 0 || dup2(in, 0) < 0 || dup2(out_fd, 1) < 0 || dup2(out_fd, 2) < 0) _exit(127);
  syscall(SYS_close_range, 3U, ~0U, 0U);
  execve(argv[0], argv, envp);
  const char msg[] = "exec failed\n";
  ssize_t n = write(2, msg, sizeof msg - 1);
  (void)n;
  _exit(127);
}

}  // namespace

pid_t ForkHelper() {
  std::lock_guard lk(helpers_mu);
  pid_t pid = fork();
  if (pid > 0) helpers.insert(pid);
  return pid;
}

pid_t SpawnRegistered(const std::function<pid_t()>& spawn) {
  std::lock_guard lk(helpers_mu);
  const pid_t pid = spawn();
  if (pid > 0) helpers.insert(pid);
  return pid;
}

int WaitHelper(pid_t pid, struct rusage* usage) {
  int status = 0;
  struct rusage ignored;
  while (wait4(pid, &status, 0, usage ? usage : &ignored) < 0 && errno == EINTR) {
  }
  std::lock_guard lk(helpers_mu);
  helpers.erase(pid);
  return status;
}

bool IsHelperProcess(pid_t pid) {
  std::lock_guard lk(helpers_mu);
  return helpers.count(pid) > 0;
}

std::string ToolResult::Reason() const {
  if (!error.empty()) return error;
  if (timed_out) return "timed out";
  size_t end = output.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) return "exit status " + std::to_string(exit_code);
  size_t start = output.rfind('\n', end);
  std::string line = output.substr(start == std::string::npos ? 0 : start + 1, end + 1 - (start == std::string::npos ? 0 : start + 1));
  // containers/image tools log as time="..." level=fatal msg="...": keep the message.
  if (auto m = line.find("msg=\""); m != std::string::npos) {
    line = line.substr(m + 5);
    if (!line.empty() && line.back() == '"') line.pop_back();
    for (size_t p; (p = line.find("\\\"")) != std::string::npos;) line.erase(p, 1);  // \" -> "
  }
  return line.substr(0, 512);
}

ToolResult RunTool(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                   std::chrono::milliseconds timeout, size_t max_output, const ToolUser* as_user,
                   const std::atomic<bool>* cancel) {
  ToolResult r;
  if (argv.empty() || argv[0].empty() || argv[0][0] != '/') {
    r.error = "helper path must be absolute";
    return r;
  }
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) < 0) {
    r.error = std::string("pipe2: ") + std::strerror(errno);
    return r;
  }
  std::vector<char*> cargv = CStrings(argv), cenv = CStrings(env);
  pid_t pid = ForkHelper();
  if (pid == 0) HelperChild(fds[1], cargv.data(), cenv.data(), as_user);
  close(fds[1]);
  if (pid < 0) {
    close(fds[0]);
    r.error = std::string("fork: ") + std::strerror(errno);
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[8192];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || (cancel && cancel->load())) {
      r.timed_out = true;
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    int n = poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;
    ssize_t got = read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // EOF: the helper (and whatever it forked with the pipe) is done
    if (r.output.size() < max_output) r.output.append(buf, std::min<size_t>(static_cast<size_t>(got), max_output - r.output.size()));
  }
  close(fds[0]);
  const int status = WaitHelper(pid);
  r.exit_code = DecodeWaitStatus(status).exit_code;
  return r;
}

ContainerTools DetectContainerTools(const std::string& path_list) {
  ContainerTools t;
  t.runc = FindOnPath("runc", path_list);
  t.skopeo = FindOnPath("skopeo", path_list);
  t.umoci = FindOnPath("umoci", path_list);
  t.init = FindOnPath("tini-static", path_list);
  for (const auto& [name, path] : {std::pair<const char*, const std::string*>{"runc", &t.runc},
                                   {"skopeo", &t.skopeo}, {"umoci", &t.umoci}, {"tini-static (tini)", &t.init}})
    if (path->empty()) t.missing += (t.missing.empty() ? "" : ", ") + std::string(name);
  if (!t.runc.empty()) {
    ToolResult v = RunTool({t.runc, "--version"}, {"PATH=" + path_list}, std::chrono::seconds(10), 4096);
    // "runc version 1.1.5+ds1\ncommit: ...": the first line, "version " dropped.
    if (v.Ok()) {
      std::string line = v.output.substr(0, v.output.find('\n'));
      if (auto p = line.find(" version "); p != std::string::npos) line = line.substr(0, p) + " " + line.substr(p + 9);
      t.runtime = line.substr(0, 64);
    } else {
      t.missing += (t.missing.empty() ? "" : ", ") + std::string("a working runc (") + v.Reason() + ")";
    }
  }
  return t;
}

}  // namespace mlsched::agent
