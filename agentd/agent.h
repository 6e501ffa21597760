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
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "agentd/attempts.h"
#include "agentd/cgroups.h"
#include "agentd/epoch_file.h"
#include "agentd/eviction.h"
#include "agentd/health.h"
#include "agentd/image_cache.h"
#include "agentd/node_info.h"
#include "agentd/metrics.h"
#include "agentd/outbox.h"
#include "agentd/reload_state.h"
#include "agentd/stacks.h"
#include "agentd/supervisor.h"
#include "agentd/task_driver.h"
#include "agentd/nvml.h"
#include "agentd/task_progress.h"

namespace grpc {
class Channel;
}

namespace mlsched::agent {

class ContainerDriver;
class SessionHost;

/// Settings of one agent; durations are wall-clock.
struct AgentConfig {
  /// schedd replicas, tried in order: "unix:/path" or "host:port" (several: high availability; the
  /// agent follows the leader a follower names, else moves to the next member).
  std::vector<std::string> servers;
  TlsFiles tls;                                   // on TCP: the node certificate and key, the cluster CA
  NodeIdentity node;
  std::string work_dir;                           // per-agent; attempts live in <work_dir>/jobs
  std::string version = "0.2.0";
  std::string eviction_url;                       // empty = no polling
  std::chrono::milliseconds eviction_interval{5000};
  std::chrono::milliseconds kill_grace{10000};    // abort, kill with grace_s 0, shutdown
  std::chrono::milliseconds fence_grace{3000};    // stale tasks found at registration
  /// Reconnect backoff, doubling up to backoff_max; each wait is drawn uniformly from
  /// [backoff/2, backoff] so that nodes cut off together do not come back in lockstep
  /// ("equal jitter", AWS Architecture Blog, "Exponential Backoff And Jitter", 2015).
  std::chrono::milliseconds backoff_initial{200};
  std::chrono::milliseconds backoff_max{5000};
  CgroupMode cgroups = CgroupMode::kAuto;          // task isolation (agentd/cgroups.h)
  int64_t task_pids_max = 16384;                   // pids.max of every task cgroup; 0 = none
  /// Cut off from every controller this long while tasks run: checkpoint and stop them (SIGTERM,
  /// kill_grace, SIGKILL) as in a preemption. 0 = never (agentd --cutoff-timeout, in seconds).
  std::chrono::milliseconds cutoff_timeout{0};
  /// HTTP/2 ping interval on the stream's channel (agentd --keepalive-time).
  std::chrono::milliseconds keepalive_time{5000};
  /// No ping answer this long: the connection is dead (agentd --keepalive-timeout). 10 s, not the
  /// 2 s it was: a schedd busy with 1,000 nodes answered pings late and 600 healthy streams were
  /// closed at once, each reconnect adding load (issue 30). gRPC's default is 20 s.
  std::chrono::milliseconds keepalive_timeout{10000};
  std::chrono::seconds registration_timeout{30};      // no `registered` this long: try another member
  /// With several servers: how long a connection may take to come up (TCP/Unix connect, TLS,
  /// HTTP/2 settings) before the agent tries the next member (a stopped replica still accepts
  /// connections through its kernel). One server: gRPC's default (20 s).
  std::chrono::milliseconds connect_timeout{5000};
  /// Jobs of uid 0 run here (agentd --allow-root-jobs); off by default, as Slurm's DisableRootJobs.
  /// Registered as RegisterNode.root_jobs.
  bool allow_root_jobs = false;
  /// An agent that is not root runs every job as its own user (agentd --single-user: a one-user
  /// cluster); without it such an agent refuses jobs of any other uid. Ignored when root.
  bool single_user = false;
  /// Read each running task's status file (its last checkpoint and step, sent in heartbeats) on a
  /// thread of its own, once a second. Off only for hollow agents (bench/server/hollow_agents),
  /// whose tasks write none and where 10,000 such threads in one process would exhaust pid_max.
  bool read_task_progress = true;
  /// Jobs in OCI images (agentd --containers): when agentd is root and finds runc, skopeo and umoci,
  /// container jobs run here (ContainerDriver) and the node registers its runtime; off: refused.
  bool containers = true;
  /// The node's image cache (agentd --image-cache, --image-cache-size, --image-cert-dir); dir ""
  /// = <work_dir>/images.
  ImageCacheConfig image_cache;
  /// Image pulls running at once (more wait).
  int max_concurrent_pulls = 4;
  /// Directories of CDI specs (agentd --cdi-spec-dirs; CDI's defaults, the later one first for a
  /// device both have): a spec of kind nvidia.com/gpu there decides what a container holding GPUs
  /// gets (cdi_plan.h); none: the driver files found through ldconfig (gpu_driver_files.h).
  std::vector<std::string> cdi_spec_dirs = {"/var/run/cdi", "/etc/cdi"};
  /// NVML (agentd --nvml-library): loaded with dlopen on a node with GPUs, for their utilization
  /// and memory per task in heartbeats; "none" = not used.
  std::string nvml_library = "libnvidia-ml.so.1";
  /// Node health checks (agentd --health-*; health.h); interval 0 = none (hollow agents). The
  /// work and image-cache directories and the registered GPUs are added by the agent.
  HealthConfig health;
  /// The task driver's loop runs on the thread that calls RunTasks() (agentd: its main thread)
  /// instead of one of its own; a reload in place (Reload()) needs it.
  bool tasks_on_caller = false;
};

class Agent {
 public:
  /// Makes the agent's task driver, given the callbacks it must call (task_driver.h).
  using DriverFactory = std::function<std::unique_ptr<TaskDriver>(TaskDriver::StartedFn, TaskDriver::ExitedFn)>;
  /// Runs tasks as processes (ProcessSupervisor, adopting orphans: agentd).
  explicit Agent(AgentConfig config);
  /// Runs tasks with the driver `make_driver` returns (hollow agents: bench/server/hollow_agents).
  Agent(AgentConfig config, const DriverFactory& make_driver) : Agent(std::move(config), make_driver, false) {}
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
  /// With AgentConfig::tasks_on_caller: runs the task driver's loop on this thread until
  /// Shutdown() or Reload() ends it. Otherwise returns at once.
  void RunTasks() { driver_->Run(); }
  /// Prepares a reload in place (agentd's SIGHUP): ends the stream and every thread but leaves
  /// the tasks running, writes what the new image needs (<work_dir>/reload.state, reload_state.h)
  /// and ends RunTasks(); the caller then execve()s agentd with kReloadStateEnv set, and the new
  /// image's Start() adopts the tasks (a container task with its bundle, runtime state and cached
  /// image). Returns "" or why not, the agent then running on as before: not tasks_on_caller,
  /// stopping, or an interactive session running (agentd holds its terminal); or, past the point
  /// of no return (ReloadPending()), the state file not written.
  std::string Reload();
  /// True once Reload() passed its point of no return (the threads ended): the caller must exec.
  bool ReloadPending() const { return reload_pending_; }
  /// True while registered on a live stream.
  bool Connected() const { return connected_; }
  /// The isolation registered with schedd: CgroupLayout::Summary() ("v1:memory,cpu,pids,devices,freezer"),
  /// "none" when the kernel offers no cgroup, "off" with CgroupMode::kOff. Set by Start().
  const std::string& Isolation() const { return isolation_; }
  /// Tasks running now.
  std::vector<RunningTaskInfo> Running() const { return driver_->Running(); }
  /// Counts task starts, exits and eviction notices here from now on (optional; not owned; set
  /// before Start()).
  void SetMetrics(AgentMetrics* m) { metrics_ = m; }
  /// The highest controller epoch seen (Registered.epoch, SchedulerMessage.epoch), also across
  /// restarts (<work_dir>/epoch). Messages with a lower epoch are refused.
  int64_t Epoch() const { return epoch_; }
  /// The replica of the current or last stream.
  std::string Server() const;
  /// Whether this agent runs jobs of uid 0 (RegisterNode.root_jobs): --allow-root-jobs, and it is
  /// root or --single-user.
  bool RunsRootJobs() const { return cfg_.allow_root_jobs && (plan_ctx_.agent_is_root || cfg_.single_user); }
  /// The container runtime registered ("runc 1.1.5+ds1"), "" when this node runs no containers.
  std::string ContainerRuntime() const { return plan_ctx_.containers ? tools_.runtime : ""; }
  /// The image cache (nullptr without containers).
  const ImageCache* Images() const { return images_.get(); }
  /// The node's health checks (nullptr before Start()).
  const HealthMonitor* Health() const { return health_.get(); }

 private:
  /// With `containers`, container support is detected (AgentConfig::containers) and the driver
  /// made by `make_driver` is wrapped in a ContainerDriver.
  Agent(AgentConfig config, const DriverFactory& make_driver, bool containers);
  /// The image pull of a container job's prepare (own thread); sends the PrepareResult.
  void PullForAttempt(const AttemptKey& key, const std::string& image, const std::string& auth_file,
                      const ToolUser& user);
  struct Connection;
  /// How one stream ended (session.cc).
  struct ConnectionEnd {
    bool registered = false;   // the member answered the registration (with an acceptable epoch)
    std::string leader_hint;   // x-mlsched-leader of a follower's answer ("" = none)
  };
  // Protocol handlers (agent.cc); they run on the session thread.
  void HandleMessage(const v1::SchedulerMessage& msg, Connection& conn);
  /// Fencing: false (logged once per stream, counted) when `epoch` is below the highest seen;
  /// a higher one is stored first (<work_dir>/epoch).
  bool AcceptEpoch(int64_t epoch, Connection& conn);
  /// The answer to the registration: a `registered` with an acceptable epoch (else logged).
  bool AcceptRegistration(const v1::SchedulerMessage& msg, Connection& conn);
  void HandleRegistered(const v1::Registered& reg);
  void HandlePrepare(const v1::Prepare& p);
  void HandleCommit(const v1::Commit& c);
  void HandleAbort(const v1::Abort& a);
  void HandleSignal(const v1::Signal& s);
  /// The gang watchdog's request (stacks.h): traces taken on a thread of their own, answered with
  /// StacksCollected.
  void HandleCollectStacks(const v1::CollectStacks& c);
  /// schedd's Notice (the idle-GPU policy's warning): the line appended, as each task's user, to
  /// the stderr file of every live task of the attempt here (agent_stacks.cc).
  void HandleNotice(const v1::Notice& n);
  /// Runs `work` on a thread of its own (stack traces, notices: slow file systems and tracers must
  /// not hold the stream); at most kMaxHelperThreads at once, false (not run) beyond or stopping.
  bool RunOnHelperThread(std::function<void()> work);
  static constexpr size_t kMaxHelperThreads = 8;
  void AppendNotice(const v1::Notice& n);
  void CollectStacks(const v1::CollectStacks& c);
  void Terminate(const AttemptKey& key, std::chrono::milliseconds grace, const std::string& why);
  void DropPrepared(const AttemptKey& key, const std::string& why);
  // Supervisor callbacks (supervisor thread).
  void OnTaskStarted(const TaskKey& key, pid_t pid);
  void OnTaskExited(const TaskKey& key, const ExitReport& report);
  void OnEviction(const EvictionNoticeInfo& notice);
  std::vector<TaskKey> RunningKeys() const;
  /// A task's status file and, with NVML, its GPUs' use (the progress thread's read).
  std::optional<TaskProgress> ReadProgress(const TaskKey& key) const;
  v1::AgentMessage MakeRegister() const;
  v1::AgentMessage MakeHeartbeat() const;
  void PrepareWorkDir();
  /// The state a reload left (kReloadStateEnv names it), read and removed; nullopt on a plain start
  /// (a stale file is removed) or when it cannot be read (logged: the tasks then die with the
  /// previous image, as after a crash).
  std::optional<ReloadState> TakeReloadState();
  /// Plans the reloaded attempts again and hands their tasks to the driver (agent_reload.cc).
  void AdoptReloaded(const ReloadState& state);
  /// Reload()'s second half: every thread but the driver's ended, the driver detached; writes the
  /// state file.
  std::string WriteReloadState();
  /// How containers holding GPUs get them: the node's CDI specs when there are some of GPUs,
  /// else the driver's files found through ldconfig.
  void PassGpus(ContainerDriver* driver) const;
  /// Makes sessions_ (interactive sessions in this node's running tasks).
  void StartSessionHost();
  void SetUpCgroups();
  /// Cut-off bound: stops the tasks once no controller was registered for cfg_.cutoff_timeout.
  void CutoffLoop();
  // The stream (session.cc).
  void SessionLoop();
  ConnectionEnd RunConnection(const std::string& server, int failures);
  /// The member to try after one whose stream ended as `end` (index into cfg_.servers).
  size_t NextServer(size_t current, const ConnectionEnd& end) const;
  /// The stream's second thread: first the registration watchdog (cancels the call when no answer
  /// comes in cfg_.registration_timeout), then, once registered, the writer (outbox and heartbeats).
  void WriterThread(Connection& conn, const std::atomic<bool>& closed);
  void WriterLoop(Connection& conn, const std::atomic<bool>& closed);
  void CancelCurrent();  // requires mu_
  /// A new channel to the schedd of the current stream (interactive sessions), its address in
  /// `*server`; nullptr when not connected.
  std::shared_ptr<grpc::Channel> SessionChannel(std::string* server);

  AgentConfig cfg_;
  PlanContext plan_ctx_;
  AttemptTable attempts_;
  Outbox outbox_;
  std::unique_ptr<Cgroups> cgroups_;  // before driver_: it outlives the driver's use
  std::string isolation_ = "none";
  std::unique_ptr<TaskDriver> driver_;
  ContainerTools tools_;                 // found at construction (containers)
  std::unique_ptr<ImageCache> images_;   // set when containers run here
  std::mutex pull_mu_;                   // guards pulling_, pulled_, pull_threads_, pulls_running_
  std::condition_variable pull_cv_;
  std::set<AttemptKey> pulling_;         // container prepares waiting for their image
  std::map<AttemptKey, std::shared_ptr<const CachedImage>> pulled_;  // prepared attempts' images
  std::vector<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>> pull_threads_;  // with their done flags
  int pulls_running_ = 0;
  // CollectStacks in progress or done, with their done flags; guarded by pull_mu_, the finished
  // ones joined at the next request, the rest at Shutdown.
  std::vector<std::pair<std::thread, std::shared_ptr<std::atomic<bool>>>> stack_threads_;
  StackTools stack_tools_;                   // found at construction
  std::unique_ptr<Nvml> nvml_;  // before progress_, which reads it; null without GPUs or NVML
  std::string nvml_error_;      // why NVML failed on a GPU node whose driver library is there
  std::unique_ptr<HealthMonitor> health_;  // made by Start()
  TaskProgressCache progress_;  // status files and GPU use, read off the heartbeat thread
  std::unique_ptr<EvictionPoller> eviction_;
  AgentMetrics* metrics_ = nullptr;
  std::atomic<bool> connected_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<bool> draining_{false};     // shutdown: send what is queued, then close the stream
  std::atomic<int> heartbeat_interval_s_{5};
  std::atomic<int64_t> epoch_{0};          // highest epoch seen; written by the session thread
  std::unique_ptr<EpochFile> epoch_file_;
  std::chrono::steady_clock::time_point disconnected_since_;  // guarded by mu_; start or last stream end
  bool cutoff_done_ = false;               // guarded by mu_: tasks stopped for this disconnection
  std::atomic<size_t> server_index_{0};    // the member of the current / last stream
  std::mutex mu_;                          // guards current_, session_done_
  std::condition_variable cv_;             // backoff sleep, session end
  std::shared_ptr<Connection> current_;
  bool session_done_ = false;
  bool started_ = false;
  std::atomic<bool> reload_pending_{false};
  std::optional<ReloadState> reloaded_;    // Start(): what a reload handed over, until adopted
  int lock_fd_ = -1;
  std::thread session_;
  std::thread cutoff_;
  std::unique_ptr<SessionHost> sessions_;  // last: its threads end before anything they use
};

}  // namespace mlsched::agent
