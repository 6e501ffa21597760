// ProcessSupervisor: one long-lived thread that forks every task (so PR_SET_PDEATHSIG ties the
// tasks to the agent's lifetime), waits for them through pidfds, and escalates terminations from
// SIGTERM to SIGKILL after a grace period. Signals go to the task's whole process group; with
// cgroups, SIGKILL also goes to every process in the task's cgroup, wherever it moved.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "agentd/cgroups.h"
#include "agentd/launcher.h"
#include "agentd/task_driver.h"
#include "agentd/task_key.h"

namespace mlsched::agent {

/// The TaskDriver of real nodes: every task a process (group) of its own.
class ProcessSupervisor final : public TaskDriver {
 public:
  /// StartedFn is called once a task has exec'd (with its pid).

  /// With `adopt_orphans`, Start() makes this process a child subreaper (PR_SET_CHILD_SUBREAPER):
  /// descendants of tasks that lose their parent are re-parented here, and the supervisor kills
  /// and reaps each one whose task is no longer running (checked at least every 500 ms). Only for
  /// processes whose sole children are the supervisor's tasks (agentd).
  ProcessSupervisor(StartedFn on_started, ExitedFn on_exited, bool adopt_orphans = false);
  /// Stops: kills every task with SIGKILL and joins the thread.
  ~ProcessSupervisor() override;
  ProcessSupervisor(const ProcessSupervisor&) = delete;
  ProcessSupervisor& operator=(const ProcessSupervisor&) = delete;

  /// Runs every task in its own cgroup from `cgroups` (not owned; set before Start()): created with
  /// the request's limits before the fork, joined by the child before exec, killed as a whole when
  /// the task's leader exits or is SIGKILLed, and removed once empty. A task whose cgroup cannot be
  /// made is reported as a launch failure. An exit after the kernel's OOM killer struck in the
  /// cgroup is reported with OutOfMemoryError(). Orphans are then attributed by cgroup membership
  /// instead of their environment (which a process can forge).
  void UseCgroups(Cgroups* cgroups) override { cgroups_ = cgroups; }
  /// Runs the loop on the thread that calls Run() instead of a thread of its own (before Start()).
  /// The tasks are then children of that thread, and a child's parent-death signal follows the
  /// thread that forked it: agentd runs the loop on its main thread, the one thread that survives
  /// its execve, so a reload in place keeps the tasks (reload_state.h).
  void RunOnCaller() { on_caller_ = true; }
  /// Starts the supervisor thread (or, with RunOnCaller, only what Run() needs); throws
  /// std::system_error if the wake-up eventfd fails.
  void Start() override;
  /// With RunOnCaller: the loop, until Stop() or Detach(). Otherwise returns at once.
  void Run() override;
  /// Takes over `pid`, a child of this process (checked in /proc/PID/stat: its pid cannot be
  /// reused before this process reaps it), and its cgroup when it has one.
  std::string Adopt(const TaskKey& key, pid_t pid, int64_t max_rss_bytes,
                    std::shared_ptr<ContainerLaunch> container = nullptr) override;
  /// Ends the loop once queued launches are done; the tasks keep running, their cgroups stay.
  void Detach() override;
  /// Queues a launch. A key that is already running or queued is ignored (false).
  bool Spawn(const TaskKey& key, LaunchRequest request) override;
  /// SIGTERM to the task's process group now, SIGKILL after `grace`. A queued launch is dropped and
  /// reported as exited by SIGTERM. An earlier deadline is kept. False when the key is unknown.
  bool Terminate(const TaskKey& key, std::chrono::milliseconds grace) override;
  /// Sends `signal` to the task's process group. False when the key is not running.
  bool Signal(const TaskKey& key, int signal) override;
  /// Terminate() for every task.
  void TerminateAll(std::chrono::milliseconds grace) override;
  /// Running tasks (exec'd and not yet reaped), in key order.
  std::vector<RunningTaskInfo> Running() const override;
  /// Number of running plus queued tasks.
  size_t Size() const override;
  /// Waits until no task is running or queued; false on timeout.
  bool WaitIdle(std::chrono::milliseconds timeout) override;
  /// SIGKILLs every task, reaps them (reporting exits) and joins the thread. Idempotent.
  void Stop() override;

 private:
  using Clock = std::chrono::steady_clock;
  struct Child {
    pid_t pid = 0;
    int pidfd = -1;
    std::optional<Clock::time_point> kill_at;  // SIGKILL deadline after a SIGTERM
    std::unique_ptr<TaskCgroup> cgroup;        // with UseCgroups
    mutable int64_t max_rss = -1;              // the most anonymous memory Running() sampled (bytes)
  };
  struct Queued {
    TaskKey key;
    LaunchRequest request;
  };

  void Loop();
  /// Waits until the loop has ended (joins its thread, or waits for Run() to return).
  void WaitLoop();
  void Wake();
  void LaunchQueued(std::deque<Queued> batch);
  SpawnResult LaunchOne(const Queued& q, std::unique_ptr<TaskCgroup>* cgroup, int* pidfd);
  void FinishCgroup(const TaskKey& key, std::unique_ptr<TaskCgroup> cgroup, ExitReport* report);
  void RetryCgroupRemovals();
  void ReapReady(const std::vector<TaskKey>& ready);
  void EscalateDue();
  int PollTimeoutMs() const;  // requires mu_
  void ReapOrphans();

  StartedFn on_started_;
  ExitedFn on_exited_;
  mutable std::mutex mu_;
  std::condition_variable idle_cv_;
  std::map<TaskKey, Child> children_;
  // Orphans whose owner could not be read at the last scan (Loop thread only): /proc/PID/environ
  // reads empty while a process is inside execve, so one unknown sighting is not enough to kill.
  std::set<pid_t> unknown_orphans_;
  std::deque<Queued> queue_;
  size_t launching_ = 0;  // taken off the queue, not yet in children_ or reported
  // Reaped, exit callback still running (its cgroup being removed, a container's bundle torn down,
  // the exit report not queued yet): still listed by Running(), so no heartbeat in between omits a
  // task whose exit schedd has not heard of (two such heartbeats make schedd requeue the job).
  std::map<TaskKey, pid_t> reporting_;
  bool stopping_ = false;
  bool stopped_ = false;    // Stop() ran
  bool started_ = false;    // Start() ran
  bool detaching_ = false;  // Detach(): the loop ends, the tasks stay
  bool on_caller_ = false;  // RunOnCaller()
  bool loop_done_ = false;  // Run() returned
  std::condition_variable loop_cv_;
  bool adopt_orphans_ = false;
  Cgroups* cgroups_ = nullptr;
  std::vector<std::unique_ptr<TaskCgroup>> unremoved_;  // ended tasks' cgroups not yet empty; supervisor thread
  int wake_fd_ = -1;
  std::thread thread_;
};

}  // namespace mlsched::agent
