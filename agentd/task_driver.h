// TaskDriver: how agentd runs the tasks of a node, after Nomad's task drivers (one small interface
// that every way of running a task implements). ProcessSupervisor (supervisor.h) runs them as
// processes in their own process groups and cgroups; HollowDriver (bench/server) only pretends,
// so one process can stand in for thousands of nodes (Kubernetes' kubemark). The Agent above it
// (agent.h) keeps the protocol: registration, heartbeats, the outbox, prepare/commit/abort.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <optional>
#include <vector>

#include "agentd/launcher.h"
#include "agentd/task_key.h"

namespace mlsched::agent {

class Cgroups;

/// A running task as reported to schedd.
struct RunningTaskInfo {
  TaskKey key;
  pid_t pid = 0;
  /// CPU time the task used so far (microseconds; Nomad's driver stats); nullopt when unknown.
  std::optional<int64_t> cpu_usec;
  /// Its cgroup's anonymous memory now and the most seen at any sample of this task (bytes), and
  /// its processes; -1 = unknown (no memory controller, no cgroup).
  int64_t rss_bytes = -1, max_rss_bytes = -1;
  int32_t processes = -1;
};

/// A process to run in a running task's context: an interactive session (session_host.h),
/// Nomad's exec.
struct ExecRequest {
  LaunchRequest session;          // as it would run on the node: the task's request with the session's
                                  // argv, variables, stdio (pipes, or a pty's slave) and credentials
  bool pty = false;               // the session wants a terminal
  uint32_t rows = 0, cols = 0;    // its size (0: unknown)
  std::vector<std::string> env;   // NAME=VALUE set over the task's environment (TERM included)
};
/// How to run it (TaskDriver::PrepareExec).
struct ExecPlan {
  LaunchRequest request;          // what to spawn
  std::function<void()> cleanup;  // after the session's process was reaped (removes its files)
};

class TaskDriver {
 public:
  /// Called (on the driver's thread) once a task has started; `pid` identifies it on the node.
  using StartedFn = std::function<void(const TaskKey&, pid_t)>;
  /// Called (on the driver's thread) when a task ended or could not be launched; `pid` is 0 when
  /// the task never started.
  using ExitedFn = std::function<void(const TaskKey&, pid_t, const ExitReport&)>;

  virtual ~TaskDriver() = default;
  /// Where tasks get their own cgroup (not owned; before Start()); drivers without processes ignore it.
  virtual void UseCgroups(Cgroups* cgroups) = 0;
  /// Starts the driver's threads. Throws std::system_error when it cannot.
  virtual void Start() = 0;
  /// Queues a launch. A key that is already running or queued is ignored (false).
  virtual bool Spawn(const TaskKey& key, LaunchRequest request) = 0;
  /// SIGTERM now, SIGKILL after `grace`; a queued launch is dropped and reported as exited by
  /// SIGTERM. An earlier deadline is kept. False when the key is unknown.
  virtual bool Terminate(const TaskKey& key, std::chrono::milliseconds grace) = 0;
  /// Delivers `signal` to the task. False when the key is not running.
  virtual bool Signal(const TaskKey& key, int signal) = 0;
  /// Terminate() for every task.
  virtual void TerminateAll(std::chrono::milliseconds grace) = 0;
  /// Running tasks (started and not yet ended), in key order.
  virtual std::vector<RunningTaskInfo> Running() const = 0;
  /// Number of running plus queued tasks.
  virtual size_t Size() const = 0;
  /// Waits until no task is running or queued; false on timeout.
  virtual bool WaitIdle(std::chrono::milliseconds timeout) = 0;
  /// Ends every task at once (reporting the exits) and joins the driver's threads. Idempotent.
  virtual void Stop() = 0;
  /// Runs the driver's loop on the calling thread until Stop() or Detach(), for drivers told to
  /// (ProcessSupervisor::RunOnCaller); the others return at once.
  virtual void Run() {}
  /// Takes over a task that a previous image of this agentd started (a reload in place,
  /// reload_state.h): `pid` must be a child of this process; `max_rss_bytes` the most memory seen
  /// so far (-1 unknown); `container` its image (the cached image pinned), null for a bare task.
  /// Before Start(). Returns "" or why not.
  virtual std::string Adopt(const TaskKey& key, pid_t pid, int64_t max_rss_bytes,
                            std::shared_ptr<ContainerLaunch> container) {
    (void)key, (void)pid, (void)max_rss_bytes, (void)container;
    return "this task driver cannot adopt tasks";
  }
  /// Ends the driver's loop and leaves every task running (a reload in place follows): nothing is
  /// signalled, reaped or reported from now on, and Running() still lists the tasks. Idempotent.
  virtual void Detach() {}
  /// How to run `want` inside running task `key` (Nomad's exec): "" and `*plan`, or why not. The
  /// default runs the session's process as it is, on the node (the task's cgroup is joined by the
  /// caller); the container driver makes it a runtime's exec into the task's container.
  virtual std::string PrepareExec(const TaskKey& key, ExecRequest want, ExecPlan* plan) {
    (void)key;
    plan->request = std::move(want.session);
    return "";
  }
};

}  // namespace mlsched::agent
