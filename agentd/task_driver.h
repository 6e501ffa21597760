// TaskDriver: how agentd runs the tasks of a node, after Nomad's task drivers (one small interface
// that every way of running a task implements). ProcessSupervisor (supervisor.h) runs them as
// processes in their own process groups and cgroups; HollowDriver (bench/server) only pretends,
// so one process can stand in for thousands of nodes (Kubernetes' kubemark). The Agent above it
// (agent.h) keeps the protocol: registration, heartbeats, the outbox, prepare/commit/abort.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <vector>

#include "agentd/launcher.h"
#include "agentd/task_key.h"

namespace mlsched::agent {

class Cgroups;

/// A running task as reported to schedd.
struct RunningTaskInfo {
  TaskKey key;
  pid_t pid = 0;
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
};

}  // namespace mlsched::agent
