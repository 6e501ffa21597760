// Agent: the node side of AgentService. It keeps one bidirectional stream to schedd (reconnecting
// with backoff), registers the node, heartbeats, and carries out the two-phase launch protocol:
// prepare (validate, reserve devices, start nothing), commit (start), abort / signal (terminate),
// with fencing of stale attempts on every (re-)registration. Tasks outlive a broken stream, never
// the agent.
#pragma once

#include "common/tls.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "agentd/attempts.h"
#include "agentd/cgroups.h"
#include "agentd/eviction.h"
#include "agentd/node_info.h"
#include "agentd/metrics.h"
#include "agentd/outbox.h"
#include "agentd/supervisor.h"
#include "agentd/task_progress.h"

namespace grpc {
class Channel;
}

namespace mlsched::agent {

/// Settings of one agent; durations are wall-clock.
struct AgentConfig {
  std::string server;                             // "unix:/path" or "host:port"
  TlsFiles tls;                                   // on TCP: the node certificate and key, the cluster CA
  NodeIdentity node;
  std::string work_dir;                           // per-agent; attempts live in <work_dir>/jobs
  std::string version = "0.1.0";
  std::string eviction_url;                       // empty = no polling
  std::chrono::milliseconds eviction_interval{5000};
  std::chrono::milliseconds kill_grace{10000};    // abort, kill with grace_s 0, shutdown
  std::chrono::milliseconds fence_grace{3000};    // stale tasks found at registration
  std::chrono::milliseconds backoff_initial{200};  // reconnect backoff, doubling ...
  std::chrono::milliseconds backoff_max{5000};     // ... up to this
  CgroupMode cgroups = CgroupMode::kAuto;          // task isolation (agentd/cgroups.h)
  int64_t task_pids_max = 16384;                   // pids.max of every task cgroup; 0 = none
};

class Agent {
 public:
  explicit Agent(AgentConfig config);
  /// Shutdown() if still running.
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  /// Prepares the work directory (locked with flock: one agent per directory; leftovers of a
  /// previous run are removed), sets up the task cgroups (config.cgroups; logs what is enforced),
  /// then starts the supervisor, the stream and the eviction poller. Throws std::runtime_error
  /// naming the path on failure, or what is missing with CgroupMode::kRequired.
  void Start();
  /// Terminates every task (SIGTERM, kill_grace, SIGKILL), reports their exits, closes the stream
  /// and stops all threads. Idempotent.
  void Shutdown();
  /// True while registered on a live stream.
  bool Connected() const { return connected_; }
  /// The isolation registered with schedd: CgroupLayout::Summary() ("v1:memory,cpu,pids,devices,freezer"),
  /// "none" when the kernel offers no cgroup, "off" with CgroupMode::kOff. Set by Start().
  const std::string& Isolation() const { return isolation_; }
  /// Tasks running now.
  std::vector<RunningTaskInfo> Running() const { return supervisor_.Running(); }
  /// Counts task starts, exits and eviction notices here from now on (optional; not owned; set
  /// before Start()).
  void SetMetrics(AgentMetrics* m) { metrics_ = m; }

 private:
  struct Connection;
  // Protocol handlers (agent.cc); they run on the session thread.
  void HandleMessage(const v1::SchedulerMessage& msg);
  void HandleRegistered(const v1::Registered& reg);
  void HandlePrepare(const v1::Prepare& p);
  void HandleCommit(const v1::Commit& c);
  void HandleAbort(const v1::Abort& a);
  void HandleSignal(const v1::Signal& s);
  void Terminate(const AttemptKey& key, std::chrono::milliseconds grace, const std::string& why);
  void DropPrepared(const AttemptKey& key, const std::string& why);
  // Supervisor callbacks (supervisor thread).
  void OnTaskStarted(const TaskKey& key, pid_t pid);
  void OnTaskExited(const TaskKey& key, const ExitReport& report);
  void OnEviction(const EvictionNoticeInfo& notice);
  std::vector<TaskKey> RunningKeys() const;
  v1::AgentMessage MakeRegister() const;
  v1::AgentMessage MakeHeartbeat() const;
  void PrepareWorkDir();
  void SetUpCgroups();
  // The stream (session.cc).
  void SessionLoop();
  bool RunConnection(const std::shared_ptr<grpc::Channel>& channel, int failures);
  void WriterLoop(Connection& conn, const std::atomic<bool>& closed);
  void CancelCurrent();  // requires mu_

  AgentConfig cfg_;
  PlanContext plan_ctx_;
  AttemptTable attempts_;
  Outbox outbox_;
  std::unique_ptr<Cgroups> cgroups_;  // before supervisor_: it outlives the supervisor's use
  std::string isolation_ = "none";
  ProcessSupervisor supervisor_;
  TaskProgressCache progress_;  // status files, read off the heartbeat thread
  std::unique_ptr<EvictionPoller> eviction_;
  AgentMetrics* metrics_ = nullptr;
  std::atomic<bool> connected_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> draining_{false};     // shutdown: send what is queued, then close the stream
  std::atomic<int> heartbeat_interval_s_{5};
  std::mutex mu_;                          // guards current_, session_done_
  std::condition_variable cv_;             // backoff sleep, session end
  std::shared_ptr<Connection> current_;
  bool session_done_ = false;
  bool started_ = false;
  int lock_fd_ = -1;
  std::thread session_;
};

}  // namespace mlsched::agent
