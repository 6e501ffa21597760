// Starting one task process: its own session and process group, a parent-death signal, the
// submitting user's credentials, stdin from /dev/null and stdout/stderr appended to files.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace mlsched::agent {

/// The resources one task may use, enforced through its cgroup when agentd has one (cgroups.h).
struct TaskLimits {
  int64_t memory_bytes = 0;               // memory, swap included; 0 = no limit
  int64_t cpu_millis = 0;                 // CPU weight and quota in millicores; 0 = neither
  int64_t pids_max = 0;                   // processes and threads; 0 = no limit
  std::vector<std::string> deny_devices;  // device nodes it may not open (other ranks' GPUs)
};

/// A descriptor the agent owns: closed when the last holder (a shared_ptr) lets it go.
class OwnedFd {
 public:
  explicit OwnedFd(int fd) : fd_(fd) {}
  ~OwnedFd();
  OwnedFd(const OwnedFd&) = delete;
  OwnedFd& operator=(const OwnedFd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

struct CachedImage;
struct UserFds;

/// A task that runs in an OCI image (container_driver.h turns it into a runc invocation). Planned
/// from the job's ContainerSpec; `image` is set once the node's cache holds it (at prepare).
struct ContainerLaunch {
  std::string image_ref;                   // canonical (ImageRef::Canonical)
  std::shared_ptr<const CachedImage> image;  // pins the image in the cache while the task needs it
  std::string workdir;                     // in the container; "" = the image's WorkingDir
  std::vector<std::string> keep_env;       // --container-env: these job variables beat the image's
  bool writable = false;                   // a writable overlay instead of a read-only root
  struct Bind {
    std::string source, target;
    bool read_only = false;
    bool user_path = true;  // opened as the user (their mounts, home); false: agentd's own directory
    bool optional = false;  // skipped when the user cannot open it (a home that does not exist)
  };
  std::vector<Bind> binds;                 // the attempt directory, home, the user's mounts
  std::string shm_dir;                     // the job's /dev/shm on this node (<work>/jobs/<job>.<attempt>.shm)
  std::vector<std::string> gpu_devices;    // the rank's /dev/nvidiaN
};

/// Everything needed to exec one task; built by the launch planner, consumed by SpawnTask. The
/// planner never looks at the user's files: the working directory, the command and the output
/// files are resolved by the child after it has become the task's user.
struct LaunchRequest {
  std::string executable;          // path passed to execve, or a bare command name searched in search_path
  std::string search_path;         // for a bare name: colon-separated directories ("" entry = the workdir)
  std::vector<std::string> argv;   // argv[0] included
  std::vector<std::string> env;    // "KEY=VALUE"
  std::string workdir;             // absolute; the child chdirs here after switching user
  std::string stdout_path;         // absolute; opened by the task's user O_WRONLY|O_CREAT|O_APPEND, mode 0666 & ~umask
  std::string stderr_path;         // absolute; the same file as stdout when equal
  /// Left open across exec at its own number (rank 0's reserved rendezvous socket, named by
  /// MLSCHED_RENDEZVOUS_FD); every other descriptor of the agent is closed on exec. The agent's
  /// copy is closed when the last request holding it is dropped (after the fork).
  std::shared_ptr<const OwnedFd> inherit_fd;
  bool switch_user = false;        // agent runs as root and the task must not: setgroups/setgid/setuid
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;       // supplementary groups (getgrouplist of the user)
  mode_t umask = 022;              // the submitter's umask, set in the child before anything is created
  TaskLimits limits;               // applied by the supervisor when it has cgroups; ignored otherwise
  /// Runs in an image (the planner sets it; the container driver rewrites the request).
  std::shared_ptr<ContainerLaunch> container;
  /// The executable runs as root (runc, which becomes the task's user itself): only the output
  /// files are opened as the user (effective ids switched for that, then back). Set by the
  /// container driver, never by the planner.
  bool exec_as_root = false;
  /// An interactive session's descriptors (session_host.h), made the child's 0, 1 and 2 in place
  /// of /dev/null and the output files (-1: none). With exec_as_root (runc exec into a container)
  /// they are root's and never its controlling terminal.
  std::array<int, 3> stdio = {-1, -1, -1};
  /// stdio[0] is a pty's slave: the child, as the user and after setsid, makes it its controlling
  /// terminal (TIOCSCTTY).
  bool controlling_tty = false;
};

/// How a task ended, in the protocol's terms.
struct ExitReport {
  ExitReport() = default;
  ExitReport(int code, bool sig, std::string err) : exit_code(code), signaled(sig), error(std::move(err)) {}
  int exit_code = 0;   // exit status, or 128 + signal number
  bool signaled = false;
  std::string error;   // launch failure ("exec /x: No such file or directory"); empty otherwise
  /// What the task used in all (sacct's TotalCPU, MaxRSS): CPU microseconds (nullopt = unknown),
  /// the most anonymous memory seen at any sample or at the end and the kernel's peak of all
  /// charged memory (bytes; -1 = unknown), and the kernel's OOM kills in its cgroup.
  std::optional<int64_t> cpu_usec;
  int64_t max_rss_bytes = -1, memory_peak_bytes = -1;
  int64_t oom_kills = 0;
};

/// Result of SpawnTask: a pid (> 0) of a running process group leader, or a launch error.
struct SpawnResult {
  pid_t pid = -1;
  ExitReport failure;  // meaningful when pid <= 0: exit code 126/127 like a shell, and the error
};

/// Forks and execs `req`. The child first joins the cgroups whose cgroup.procs files are open in
/// `cgroup_fds` (writing "0", while still root), so every process it ever forks is a member; then
/// it calls setsid(), resets signal mask and dispositions, switches
/// user, sets PR_SET_PDEATHSIG=SIGKILL (after the user switch, which would clear it), chdirs to the
/// working directory, opens the output files, and execs (searching `search_path` for a bare
/// command name, as execvp does). Everything that touches the user's paths runs as the user, so a
/// path the user cannot reach fails with the user's own errno (EACCES whether or not it exists
/// behind a directory the user cannot search), never with what root could see. Every step's
/// failure comes back through a close-on-exec pipe, so a returned pid has really exec'd.
/// PDEATHSIG follows the calling thread: call it from a thread that lives as long as the tasks
/// should. The child performs only async-signal-safe calls.
SpawnResult SpawnTask(const LaunchRequest& req, std::span<const int> cgroup_fds = {});

/// execve's view of `v`: pointers into its strings plus a terminating nullptr (valid while `v` is).
std::vector<char*> CStrings(const std::vector<std::string>& v);

/// Searches `path_list` (colon-separated) for an executable regular file named `name`; "" if none.
std::string FindOnPath(const std::string& name, const std::string& path_list);

/// Translates a waitpid status: exit status, or 128 + signal with signaled = true.
ExitReport DecodeWaitStatus(int status);

}  // namespace mlsched::agent
