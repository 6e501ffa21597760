#include "agentd/launcher.h"

#include <fcntl.h>
#include <grp.h>
#include <linux/close_range.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

namespace mlsched::agent {
namespace {

// Steps of the child's set-up, reported with errno through the error pipe.
enum class Step : int {
  kCgroup = 1, kSetsid, kGroups, kGid, kUid, kPdeathsig, kStdin, kChdir, kStdout, kStderr, kInheritFd, kExec, kSearch,
  kStdio, kTty
};

struct ChildError {
  int step;
  int err;
};

const char* StepName(Step s) {
  switch (s) {
    case Step::kCgroup: return "join the task's cgroup";
    case Step::kSetsid: return "setsid";
    case Step::kGroups: return "setgroups";
    case Step::kGid: return "setgid";
    case Step::kUid: return "setuid";
    case Step::kPdeathsig: return "prctl(PR_SET_PDEATHSIG)";
    case Step::kStdin: return "open /dev/null";
    case Step::kStdio: return "take the session's terminal or pipes";
    case Step::kTty: return "make the terminal the session's controlling terminal";
    case Step::kStdout: return "open stdout file";
    case Step::kStderr: return "open stderr file";
    case Step::kChdir: return "chdir to working directory";
    case Step::kInheritFd: return "keep the rendezvous socket open";
    case Step::kExec: return "exec";
    case Step::kSearch: return "exec";
  }
  return "launch";
}

[[noreturn]] void ChildFail(int fd, Step step) {
  ChildError e{static_cast<int>(step), errno};
  ssize_t n = write(fd, &e, sizeof e);
  (void)n;
  const bool exec = step == Step::kExec || step == Step::kSearch;
  _exit(exec && (e.err == EACCES || e.err == ENOEXEC) ? 126 : 127);
}

// Opens `path` for appending and moves it onto `target` (1 or 2).
bool RedirectTo(const char* path, int target) {
  int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOCTTY, 0666);  // the umask applies
  if (fd < 0) return false;
  if (fd != target) {
    if (dup2(fd, target) < 0) return false;
    close(fd);
  } else {
    fcntl(fd, F_SETFD, 0);
  }
  return true;
}

void MarkDescriptorsCloseOnExec() {
  if (syscall(SYS_close_range, 3U, ~0U, CLOSE_RANGE_CLOEXEC) == 0) return;
  struct rlimit rl{};
  rlim_t max = (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) ? rl.rlim_cur : 65536;
  for (int fd = 3; fd < static_cast<int>(max); ++fd) fcntl(fd, F_SETFD, FD_CLOEXEC);
}

// execvp's search over `candidates` ("DIR/NAME" for every PATH entry), as the task's user: the
// first that execs wins; a candidate that is missing (or not a directory, or a loop) is skipped;
// EACCES is kept and reported when nothing else is found (exit 126), else ENOENT (exit 127).
[[noreturn]] void ExecSearch(char* const* candidates, char* const* argv, char* const* envp, int err_fd) {
  bool denied = false;
  for (char* const* c = candidates; *c != nullptr; ++c) {
    execve(*c, argv, envp);
    if (errno == EACCES) denied = true;
    else if (errno != ENOENT && errno != ENOTDIR && errno != ELOOP && errno != ENAMETOOLONG && errno != ESTALE)
      ChildFail(err_fd, Step::kSearch);  // found but unusable (ENOEXEC, E2BIG, ...)
  }
  errno = denied ? EACCES : ENOENT;
  ChildFail(err_fd, Step::kSearch);
}

// Runs in the forked child: async-signal-safe calls only, no allocation.
[[noreturn]] void ChildMain(const LaunchRequest& req, std::span<const int> cgroup_fds, char* const* argv,
                            char* const* envp, char* const* candidates, int err_fd, pid_t parent) {
  for (int fd : cgroup_fds)  // before anything else, and while still root: "0" is the writer itself
    if (write(fd, "0", 1) != 1) ChildFail(err_fd, Step::kCgroup);
  if (setsid() < 0) ChildFail(err_fd, Step::kSetsid);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  struct sigaction dfl{};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) sigaction(s, &dfl, nullptr);  // fails harmlessly for SIGKILL/SIGSTOP
  if (req.exec_as_root && req.stdio[0] >= 0) {  // runc exec of a session: its pty or pipes, root's
    for (int i = 0; i < 3; ++i)
      if (dup2(req.stdio[i], i) < 0) ChildFail(err_fd, Step::kStdio);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) ChildFail(err_fd, Step::kPdeathsig);
    if (getppid() != parent) _exit(127);
    if (chdir("/") < 0) ChildFail(err_fd, Step::kChdir);
    MarkDescriptorsCloseOnExec();
    execve(req.executable.c_str(), argv, envp);
    ChildFail(err_fd, Step::kExec);
  }
  if (req.exec_as_root) {  // runc: only the output files as the user, the rest stays root's
    if (req.switch_user) {
      if (setgroups(req.groups.size(), req.groups.data()) < 0) ChildFail(err_fd, Step::kGroups);
      if (setresgid(req.gid, req.gid, 0) < 0) ChildFail(err_fd, Step::kGid);
      if (setresuid(req.uid, req.uid, 0) < 0) ChildFail(err_fd, Step::kUid);
    }
    if (!RedirectTo(req.stdout_path.c_str(), 1)) ChildFail(err_fd, Step::kStdout);
    if (req.stderr_path == req.stdout_path) {
      if (dup2(1, 2) < 0) ChildFail(err_fd, Step::kStderr);
    } else if (!RedirectTo(req.stderr_path.c_str(), 2)) {
      ChildFail(err_fd, Step::kStderr);
    }
    if (req.switch_user) {
      if (setresuid(0, 0, 0) < 0) ChildFail(err_fd, Step::kUid);
      if (setresgid(0, 0, 0) < 0 || setgroups(0, nullptr) < 0) ChildFail(err_fd, Step::kGid);
    }
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) ChildFail(err_fd, Step::kPdeathsig);
    if (getppid() != parent) _exit(127);
    int in = open("/dev/null", O_RDONLY);
    if (in < 0 || (in != 0 && (dup2(in, 0) < 0 || close(in) < 0))) ChildFail(err_fd, Step::kStdin);
    if (chdir("/") < 0) ChildFail(err_fd, Step::kChdir);
    MarkDescriptorsCloseOnExec();
    if (req.inherit_fd) {  // at 3 for runc --preserve-fds 1
      if (err_fd == 3 && (err_fd = fcntl(3, F_DUPFD_CLOEXEC, 4)) < 0) ChildFail(3, Step::kInheritFd);
      if (req.inherit_fd->get() != 3 && dup2(req.inherit_fd->get(), 3) < 0) ChildFail(err_fd, Step::kInheritFd);
      if (fcntl(3, F_SETFD, 0) < 0) ChildFail(err_fd, Step::kInheritFd);
    }
    execve(req.executable.c_str(), argv, envp);
    ChildFail(err_fd, Step::kExec);
  }
  if (req.switch_user) {
    if (setgroups(req.groups.size(), req.groups.data()) < 0) ChildFail(err_fd, Step::kGroups);
    if (setgid(req.gid) < 0) ChildFail(err_fd, Step::kGid);
    if (setuid(req.uid) < 0) ChildFail(err_fd, Step::kUid);
  }
  // After the credential change: changing uid/gid clears the parent-death signal.
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0) ChildFail(err_fd, Step::kPdeathsig);
  if (getppid() != parent) _exit(127);  // the agent died between fork and prctl
  umask(req.umask & 0777);
  if (req.stdio[0] >= 0) {  // a session: its terminal or pipes, taken as the user
    for (int i = 0; i < 3; ++i)
      if (dup2(req.stdio[i], i) < 0) ChildFail(err_fd, Step::kStdio);
    // As the user, in the new session: no root process ever has this terminal as its own.
    if (req.controlling_tty && ioctl(0, TIOCSCTTY, 0) < 0) ChildFail(err_fd, Step::kTty);
    if (chdir(req.workdir.c_str()) < 0) ChildFail(err_fd, Step::kChdir);
  } else {
    int in = open("/dev/null", O_RDONLY);
    if (in < 0 || (in != 0 && (dup2(in, 0) < 0 || close(in) < 0))) ChildFail(err_fd, Step::kStdin);
    // The user's paths, as the user: the working directory first (its failure names it), then the
    // output files in it.
    if (chdir(req.workdir.c_str()) < 0) ChildFail(err_fd, Step::kChdir);
    if (!RedirectTo(req.stdout_path.c_str(), 1)) ChildFail(err_fd, Step::kStdout);
    if (req.stderr_path == req.stdout_path) {
      if (dup2(1, 2) < 0) ChildFail(err_fd, Step::kStderr);
    } else if (!RedirectTo(req.stderr_path.c_str(), 2)) {
      ChildFail(err_fd, Step::kStderr);
    }
  }
  MarkDescriptorsCloseOnExec();
  if (req.inherit_fd && fcntl(req.inherit_fd->get(), F_SETFD, 0) < 0) ChildFail(err_fd, Step::kInheritFd);
  if (candidates != nullptr) ExecSearch(candidates, argv, envp, err_fd);
  execve(req.executable.c_str(), argv, envp);
  ChildFail(err_fd, Step::kExec);
}

// "DIR/NAME" for every entry of `path_list` (an empty entry is the working directory, as in execvp).
std::vector<std::string> SearchCandidates(const std::string& name, const std::string& path_list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= path_list.size()) {
    size_t end = path_list.find(':', start);
    if (end == std::string::npos) end = path_list.size();
    std::string dir = path_list.substr(start, end - start);
    out.push_back((dir.empty() ? "." : dir) + "/" + name);
    start = end + 1;
  }
  return out;
}

bool IsExecutable(const std::string& path) {
  struct stat st{};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(path.c_str(), X_OK) == 0;
}

std::string DescribeFailure(const LaunchRequest& req, const ChildError& e) {
  auto step = static_cast<Step>(e.step);
  if (step == Step::kSearch && e.err == ENOENT)
    return "command '" + req.executable + "' not found on PATH (" + req.search_path + ")";
  std::string what = StepName(step);
  if (step == Step::kSearch) what += " " + req.executable + " (on PATH " + req.search_path + ")";
  if (step == Step::kExec) what += " " + req.executable;
  if (step == Step::kStdout) what += " " + req.stdout_path;
  if (step == Step::kStderr) what += " " + req.stderr_path;
  if (step == Step::kChdir) what += " " + req.workdir;
  if (step == Step::kUid) what += " " + std::to_string(req.uid);
  return what + ": " + std::strerror(e.err);
}

}  // namespace

std::vector<char*> CStrings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

OwnedFd::~OwnedFd() {
  if (fd_ >= 0) close(fd_);
}

std::string FindOnPath(const std::string& name, const std::string& path_list) {
  size_t start = 0;
  while (start <= path_list.size()) {
    size_t end = path_list.find(':', start);
    if (end == std::string::npos) end = path_list.size();
    std::string dir = path_list.substr(start, end - start);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    if (IsExecutable(candidate)) return candidate;
    start = end + 1;
  }
  return "";
}

ExitReport DecodeWaitStatus(int status) {
  ExitReport r;
  if (WIFEXITED(status)) {
    r.exit_code = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    r.exit_code = 128 + WTERMSIG(status);
    r.signaled = true;
  }
  return r;
}

SpawnResult SpawnTask(const LaunchRequest& req, std::span<const int> cgroup_fds) {
  SpawnResult result;
  if (req.argv.empty()) {
    result.failure = {127, false, "empty argv for " + req.executable};
    return result;
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) < 0) {
    result.failure = {127, false, std::string("pipe2: ") + std::strerror(errno)};
    return result;
  }
  // Keep the pipe off the standard descriptors the child overwrites.
  for (int& fd : pipe_fds) {
    if (fd > 2) continue;
    int moved = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    close(fd);
    fd = moved;
  }
  std::vector<char*> argv = CStrings(req.argv);
  std::vector<char*> envp = CStrings(req.env);
  const bool search = req.executable.find('/') == std::string::npos;
  const std::vector<std::string> candidate_paths = search ? SearchCandidates(req.executable, req.search_path)
                                                          : std::vector<std::string>{};
  std::vector<char*> candidates = CStrings(candidate_paths);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) {
    result.failure = {127, false, std::string("fork: ") + std::strerror(errno)};
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    return result;
  }
  if (pid == 0) {
    close(pipe_fds[0]);
    ChildMain(req, cgroup_fds, argv.data(), envp.data(), search ? candidates.data() : nullptr, pipe_fds[1], parent);
  }
  close(pipe_fds[1]);
  ChildError err{};
  ssize_t n;
  do {
    n = read(pipe_fds[0], &err, sizeof err);
  } while (n < 0 && errno == EINTR);
  close(pipe_fds[0]);
  if (n == static_cast<ssize_t>(sizeof err)) {
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    result.failure = DecodeWaitStatus(status);
    result.failure.error = DescribeFailure(req, err);
    return result;
  }
  result.pid = pid;  // EOF: the exec succeeded (the pipe closed on exec)
  return result;
}

}  // namespace mlsched::agent
