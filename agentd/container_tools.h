// The external tools containers need, all from Debian: runc (the OCI runtime), skopeo (fetching
// images, verifying every blob against its digest) and umoci (unpacking an OCI image's layers with
// its own path-escape guards). This module finds them and runs the image tools as helper
// processes: a clean environment, stdin from /dev/null, a time limit (SIGKILL to the helper's
// process group) and a bounded capture of what they print.
#pragma once

#include <sys/resource.h>
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace mlsched::agent {

/// Where agentd looks for the tools: the system directories only, never the caller's PATH.
inline constexpr const char* kContainerToolPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The tools found on this node.
struct ContainerTools {
  std::string runc, skopeo, umoci;  // absolute paths; "" when missing
  std::string init;                 // tini-static: PID 1 of every container (signals, zombies); "" when missing
  std::string runtime;              // "runc 1.1.5+ds1" (RegisterNode.container_runtime); "" when unusable
  std::string missing;              // "" when every tool is there, else e.g. "skopeo, umoci"
  bool Usable() const { return missing.empty() && !runtime.empty(); }
};

/// Looks the tools up in `path_list` (and Debian's tini-static, the containers' init: a shell or
/// python as PID 1 of a PID namespace would ignore SIGTERM) and asks runc for its version ("runc version 1.1.5+ds1").
/// Why runc and not crun: Debian 12's crun 1.8.1 refuses hybrid cgroup v1/v2 hosts ("cgroups in
/// hybrid mode not supported"), while runc 1.1.5 runs on v1, hybrid and v2.
ContainerTools DetectContainerTools(const std::string& path_list = kContainerToolPath);

/// How a helper ended.
struct ToolResult {
  int exit_code = -1;      // exit status, or 128 + signal
  bool timed_out = false;  // killed after the time limit
  std::string output;      // stdout and stderr interleaved, at most max_output bytes (the rest is read and dropped)
  std::string error;       // the helper could not be started ("fork: ...", "exec /usr/bin/skopeo: ...")
  bool Ok() const { return error.empty() && !timed_out && exit_code == 0; }
  /// The last line of the output that says something (tools print the reason last), at most 512 bytes.
  std::string Reason() const;
};

/// Who a helper runs as when not root: a user's credentials (setgroups, setgid, setuid in the
/// child before exec).
struct ToolUser {
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
};

/// Runs `argv` (argv[0] absolute) with exactly `env`, in its own process group, as root (or as
/// `as_user`), and waits for it at most `timeout`, or until `*cancel` turns true (checked every
/// second; agentd's shutdown): then it is killed and reported as timed out. The helper's pid is registered
/// (IsHelperProcess) while it runs, so the supervisor's orphan reaper leaves it alone.
ToolResult RunTool(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                   std::chrono::milliseconds timeout, size_t max_output = 64 * 1024, const ToolUser* as_user = nullptr,
                   const std::atomic<bool>* cancel = nullptr);

/// True while `pid` is a helper RunTool started and has not reaped (orphans.h's reaper skips it).
bool IsHelperProcess(pid_t pid);

/// fork() for a short-lived helper child of agentd: the child's pid is registered (IsHelperProcess)
/// before the orphan reaper can see it. Reap it with WaitHelper. Returns fork()'s result.
pid_t ForkHelper();
/// Runs `spawn` (which forks one child and returns its pid, or <= 0 when it could not) with the
/// helper registry locked, and registers the pid before the orphan reaper can see it (an
/// interactive session's process). Reap it with WaitHelper.
pid_t SpawnRegistered(const std::function<pid_t()>& spawn);
/// wait4() for a ForkHelper child, then unregisters it. Returns the wait status; `usage` (when
/// given) gets what the child and the descendants it waited for used.
int WaitHelper(pid_t pid, struct rusage* usage = nullptr);

}  // namespace mlsched::agent
