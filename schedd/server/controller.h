// The daemon's state machine: jobs, nodes, two-phase gang launch, timeouts and the scheduling
// cycle. It owns no sockets and no clock: every entry point takes `now` (seconds since epoch), agent
// messages go out through an AgentSink, and durable state goes through the Store. The gRPC layer,
// the daemon's loop and the unit tests drive it the same way. Thread-safe (one mutex).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "mlsched/v1/agent.pb.h"
#include "mlsched/v1/admin.pb.h"
#include "mlsched/v1/jobs.pb.h"
#include "schedd/core/dependency.h"
#include "schedd/core/pools.h"
#include "schedd/core/predictor.h"
#include "schedd/core/provisioning.h"
#include "schedd/core/priority.h"
#include "schedd/core/types.h"
#include "schedd/server/admission.h"
#include "schedd/server/attempt_usage.h"
#include "schedd/server/gang_watchdog.h"
#include "schedd/server/idle_gpus.h"
#include "schedd/server/metrics.h"
#include "schedd/server/provision_runner.h"
#include "schedd/server/inventory.h"
#include "schedd/server/store.h"
#include "schedd/server/write_batch.h"

namespace mlsched::server {

namespace v1 = ::mlsched::v1;

/// Where messages for agents go (the gRPC gateway in the daemon, a recorder in tests).
class AgentSink {
 public:
  virtual ~AgentSink() = default;
  /// Queues `msg` for the agent of `node`; false when that agent is not connected. By value: a
  /// prepare carries the job's whole spec, and copies of it cost 11% of schedd's CPU (issue 30).
  virtual bool Send(const std::string& node, v1::SchedulerMessage msg) = 0;
  /// The wall time (s) the agent of `node` was last heard from on its stream, `now` while its
  /// messages wait to be handled (the controller is behind, not the node); 0 when unknown. The
  /// heartbeat timeout counts from the later of this and the last heartbeat handled, so a busy
  /// controller does not mark live nodes DOWN (issue 30).
  virtual int64_t LastHeard(const std::string& /*node*/, int64_t /*now*/) { return 0; }
};

/// Released created nodes whose suspend program has not finished: name -> pool.
using ReleasingNodes = std::map<std::string, core::Pool>;

/// The provisioner's ledger and its releasing nodes as a serialized StoredProvisionLedger
/// (Store::SaveProvisionLedger).
std::string SerializeProvisionLedger(const core::ProvisionLedger& ledger, const ReleasingNodes& releasing = {});
/// Parses what SerializeProvisionLedger wrote; nullopt with `error` set when the bytes are over
/// kMaxProvisionLedgerBytes, not a StoredProvisionLedger, or name an unknown pool, an empty node
/// name or one over RegistrationLimits::kMaxNodeName bytes, or a name index outside 0..2^40.
/// The releasing nodes go to `releasing` when given (same checks).
std::optional<core::ProvisionLedger> ParseProvisionLedger(const std::string& bytes, std::string* error,
                                                          ReleasingNodes* releasing = nullptr);

/// Who is calling: resolved from SO_PEERCRED (Unix socket) or the token + user header (TCP).
struct Caller {
  std::string user;
  uint32_t uid = 0;
  uint32_t gid = 0;
  bool privileged = false;  // root, schedd's own user, or an operator named in the policy
};

/// Whether `c` submitted the job of `uid` and `user` (both must match: TCP callers unknown to the
/// host all share uid 65534).
bool IsOwner(const Caller& c, uint32_t uid, const std::string& user);
/// Whether `c` may see a job's private details (environment, script, argv): its owner or a
/// privileged caller. Everyone else gets the public fields only (RedactJobDetails).
bool MaySeeDetails(const Caller& c, uint32_t uid, const std::string& user);

/// Outcome of a request; codes map one-to-one onto gRPC status codes.
struct Status {
  enum Code { kOk, kInvalidArgument, kNotFound, kPermissionDenied, kFailedPrecondition, kInternal, kResourceExhausted };
  Code code = kOk;
  std::string message;
  bool ok() const { return code == kOk; }
};

/// Timing knobs of the daemon (seconds).
struct ControllerConfig {
  int heartbeat_interval_s = 5;   // agents send a heartbeat this often
  int heartbeat_timeout_s = 30;   // no heartbeat for this long: node DOWN, its jobs requeued
  int launch_timeout_s = 30;      // prepare -> all prepared; commit -> started
  int image_pull_timeout_s = 900; // added to a container job's prepare: its nodes pull the image then
  int kill_grace_s = 10;          // SIGTERM to SIGKILL on cancel and time limit
  int min_job_age_s = 300;        // finished jobs stay in memory (and in mlq) this long
  int requeue_backoff_s = 5;      // a failed launch waits this long before the next try
  int max_array_size = 10000;     // most elements of one job array (Slurm MaxArraySize - 1)
  /// The controller host's user name of a uid, which a stored job row must match (Recover);
  /// empty = auth.h UserName (the user database). Tests with made-up users set their own.
  std::function<std::string(uint32_t)> user_of_uid;
};

/// Seconds schedd waits beyond an agent's RegisterNode.cutoff_timeout_s (the time after its last
/// heartbeat by which a cut-off agent has stopped its tasks, its keepalive detection included)
/// before it declares the node's tasks lost: delays of the last heartbeat and clock rates.
inline constexpr int64_t kCutoffMargin = 10;

class Controller {
 public:
  Controller(Store& store, AgentSink& sink, core::PolicySet policy, ControllerConfig config);

  /// Loads jobs and nodes from the store after a restart. Running jobs keep their placement; their
  /// tasks are confirmed (or found lost) when the agents re-register. Nodes count as silent from `now`.
  void Recover(int64_t now);

  // ---- JobService ----
  /// Validates and durably stores a job; returns its id, or INVALID_ARGUMENT naming the field, or
  /// PERMISSION_DENIED naming the association rule (and policy line) that refuses it. With a
  /// `submission_key` (at most 64 bytes of [A-Za-z0-9._-]) the call is idempotent: a key this user
  /// already used (Store::kSubmissionKeyTtl) returns that job's id and creates nothing.
  Status Submit(const Caller& caller, v1::JobSpec spec, int64_t now, int64_t* job_id,
                const std::string& submission_key = "");
  /// Cancels (or signals) the selected jobs; per-job errors in the response.
  /// `reason`: the cancelled jobs' end reason ("Cancelled"; schedd's own: "IdleTimeout",
  /// "ClientGone").
  v1::CancelJobsResponse Cancel(const Caller& caller, const v1::CancelJobsRequest& req, int64_t now,
                                const std::string& reason = "Cancelled");
  /// One page of the jobs matching the filters (listing.h): live ones plus recently finished;
  /// explicit ids also from disk; with include_all_finished also those that ended since
  /// finished_since (default: kDefaultFinishedWindowS before `now`). Summaries: no script,
  /// environment or argv (GetJob has them). INVALID_ARGUMENT for a malformed page token.
  Status List(const Caller& caller, const v1::ListJobsRequest& req, int64_t now, v1::ListJobsResponse* resp);
  /// One job with its full spec (`show job`); redacted as in List unless MaySeeDetails.
  Status Get(const Caller& caller, int64_t job_id, v1::JobInfo* out);
  Status Hold(const Caller& caller, int64_t job_id, bool release, int64_t now);

  // ---- AdminService ----
  std::vector<v1::NodeInfo> Nodes();
  Status Drain(const Caller& caller, const std::string& node, const std::string& reason, bool resume);
  /// Spot eviction of `node` at `deadline` (an agent's notice, or `mladmin node evict`): the node is
  /// drained, and every gang with a task on it gets SIGTERM with the time left as grace, so it can
  /// checkpoint and exit 75; it is then requeued keeping its submit time (queue position).
  Status Evict(const Caller& caller, const std::string& node, int64_t deadline, const std::string& source, int64_t now);

  // ---- AgentService ----
  /// Checks a registration against the policy's node inventory (inventory.h); a node a
  /// provisioned pool asked for is declared by the pool's shape. `declared_only`: the node must be
  /// named by [[nodes]] (an operator registering on the Unix socket).
  InventoryVerdict AdmitNode(const v1::RegisterNode& reg, bool declared_only);
  /// A (re-)registration (admitted by AdmitNode): updates the node, returns what the agent may
  /// keep running. A node whose capacity differs from its last registration is drained with the
  /// change as the reason; declared features ([[nodes]] features) are added.
  v1::Registered OnRegister(const v1::RegisterNode& reg, int64_t now);
  /// One agent report or heartbeat. Returns once its effect is durable; throws when the store
  /// fails (the memory state is then written again by FlushUnpersisted or the next Tick).
  /// False when `node` is DOWN: the message is ignored (its tasks were requeued) and the caller
  /// closes the stream, so the agent registers again and reconciles what still runs there.
  bool OnAgentMessage(const std::string& node, const v1::AgentMessage& msg, int64_t now);
  /// OnAgentMessage in two halves, so that a node's next message need not wait for the store:
  /// ApplyAgentMessage changes memory and starts the writes (lock held, no waiting; `keep` as
  /// OnAgentMessage's result); CompleteBatch, called once per batch in the order they were
  /// applied, waits for the writes without the lock, then sends what had to wait for them (the
  /// prepares and commits, re-checked). CompleteBatch rethrows a failed write (the state is then
  /// written again by FlushUnpersisted or the next Tick).
  struct AppliedMessage {
    bool keep = true;
    std::unique_ptr<WriteBatch> batch;
  };
  AppliedMessage ApplyAgentMessage(const std::string& node, const v1::AgentMessage& msg, int64_t now);
  void CompleteBatch(WriteBatch& b) { FinishBatch(b); }
  /// Writes job rows and attempt rows whose write failed earlier (a full disk): after it returns,
  /// the store agrees with memory. Throws the store's error when it still fails. The agent
  /// gateway calls it before acknowledging a report, so an acknowledged report's effect is on disk
  /// even if an earlier attempt to write it failed.
  void FlushUnpersisted();
  void OnDisconnect(const std::string& node, int64_t now);

  // ---- the loop ----
  /// Timeouts: heartbeats, launches, time limits, memory expiry of finished jobs.
  void Tick(int64_t now);
  /// One scheduling pass: snapshot -> core::SchedulingCycle::Run (outside the lock) -> apply.
  void RunCycle(int64_t now);
  /// Blocks until something changed that may let a job start, or `timeout_ms` elapsed.
  void WaitForWork(int timeout_ms);
  /// Wakes WaitForWork.
  void Trigger();

  /// Fairshare usage per association key (decayed billing-weighted resource-seconds).
  std::map<std::string, double> Usage();
  /// Priority factors of every pending job (like Slurm's sprio).
  std::vector<core::PriorityBreakdown> ExplainPriorities(int64_t now);
  /// For a pending job: what its expected start rests on, e.g. "predicted run times ([prediction]
  /// user-mean of the last 2) of 3 running job(s) (2 predicted, 1 by time limit) and 1 pending job(s)
  /// ahead"; "" when the job is not pending.
  std::string StartBasis(int64_t job_id, int64_t now);
  /// Replaces the policy (live reload); already accepted jobs are kept.
  void SetPolicy(core::PolicySet policy);
  core::PolicySet Policy();
  /// The policy's [interactive] in force now (a copy, cheaper than Policy()).
  core::InteractivePolicy Interactive();
  bool IsOperator(const std::string& user);

  /// Number of jobs held in memory (for metrics and tests).
  size_t JobsInMemory();
  /// Counters and histograms are updated here from now on (optional; not owned).
  void SetMetrics(SchedMetrics* m) { metrics_ = m; }
  /// The policy's input limits ([limits]) in force now.
  core::InputLimits Limits();
  /// Counts a request that failed inside schedd (mlsched_internal_errors_total), when metrics are on.
  void CountInternalError();
  /// Counts a refused request (mlsched_rejected_requests_total{reason}), when metrics are on.
  void CountRejected(const std::string& reason);
  /// Provisioning ([provisioning.POOL]) runs its programs through `r` from now on (optional; not
  /// owned); without one no node is requested or released.
  void SetProvisionRunner(ProvisionRunner* r);
  /// The nodes schedd created and has not released (tests, mladmin).
  core::ProvisionLedger ProvisionedNodes();
  /// The runner's completion callback: a finished suspend program (whatever its exit) takes its
  /// nodes out of the releasing list, stored at the next provisioning step. Thread-safe.
  void OnProgramDone(const ProgramCall& call, const ProgramResult& result);
  /// Released created nodes whose suspend program has not finished.
  ReleasingNodes ReleasingProvisionedNodes();
  /// The gauges of a scrape: jobs by state and partition, GPUs by pool, nodes by state.
  SchedMetrics::Gauges CollectGauges();

 private:
  enum class Phase { kPreparing, kPrepared, kCommitted, kRunning, kExited };
  struct TaskRt {
    Phase phase = Phase::kPreparing;
    int32_t exit_code = 0;
    int missed_heartbeats = 0;  // consecutive heartbeats of its node that did not list it
  };
  struct JobRec {
    int64_t id = 0;
    core::JobSpec spec;          // what the cycle needs; the full v1 spec stays on disk
    std::string user;
    uint32_t uid = 0, gid = 0;
    core::JobState state = core::JobState::kPending;
    std::string reason;
    int64_t submit_time = 0, start_time = 0, end_time = 0;
    int32_t exit_code = 0, attempt = 0, requeue_count = 0;
    v1::Placement placement;     // current or last attempt
    std::vector<TaskRt> tasks;   // runtime of the current attempt (empty when not running)
    int64_t launch_deadline = 0;
    int64_t eligible_after = 0;  // launch backoff
    int64_t expected_start = 0;
    int64_t priority = 0;        // multifactor priority from the last cycle
    std::string reason_detail;   // the last cycle's explanation of `reason`
    bool preempted = false;      // a task asked to be requeued (exit 75)
    bool clean_stop = false;     // the attempt ends with exit 75: its tasks checkpointed first
    int64_t last_checkpoint = 0; // latest checkpoint time its tasks reported in this attempt
    bool evicting = false;       // SIGTERM sent because a node of the gang is being evicted
    // SIGTERM sent to requeue it: "NodeHealth" (a node failed its health checks), "Stalled" (the
    // gang watchdog); any failed exit of a rank then requeues it with this reason. "" = none.
    std::string requeue_on_stop;
    int64_t stall_at = 0;        // the watchdog found it stalled and asked for stack traces then; 0 = no diagnosis open
    int64_t stall_step = 0;      // ... at this step, after this many seconds without progress:
    int64_t stall_seconds = 0;
    std::map<std::string, v1::StacksCollected> stacks;  // the diagnosis' answers, by node
    std::string stall_note;      // the watchdog's last verdict (JobInfo.stall; not stored: events keep it)
    // What its ended attempts used in all (JobInfo.usage with the running attempt's so far; stored
    // with the job, each attempt's in the attempts table); null until an agent reported a figure.
    std::shared_ptr<const v1::JobUsage> usage_total;
    bool preempting = false;     // SIGTERM sent for QoS preemption (PreemptDecision)
    bool preempt_cancel = false; // ... in mode CANCEL: the job ends CANCELLED instead of requeueing
    int32_t preempt_count = 0;   // QoS preemptions so far (stored with the job)
    int32_t evictions = 0;       // spot evictions so far (stored with the job)
    std::string stop_cause;      // why the current attempt is being stopped: "eviction of NODE", "preemption by job N"
    std::string image_digest;    // containers: the digest the last attempt's prepare reported (stored with the job)
    std::string resize;          // elastic: the latest size change, e.g. "shrunk 4->3 after eviction of n4 (attempt 2)"
    bool resizing = false;       // SIGTERM sent to restart at another size (core::ResizeDecision)
    int64_t stop_requested_at = 0;  // when a resize or eviction asked it to stop; 0 = none pending
    int64_t stop_seconds = -1;      // that stop: request to requeue (checkpoint, exit); -1 = none
    int64_t launched_at = 0;        // when the current attempt was launched
    int64_t running_since = 0;      // when every rank of the current attempt had started; 0 = not yet / unknown
    // Seconds a checkpoint-and-restart costs this job: its last stop plus launch to all ranks
    // running, without the time it waited in the queue; 0 = not measured yet.
    core::Duration restart_cost = 0;
    std::string provision_note;  // the latest provisioning decision for it: "requested 2 nodes from pool spot (...)"
    int32_t spec_bytes = 0;      // its stored spec's size ([limits] max_pending_bytes_per_user)
    // A rank failed while this node of the gang was silent (AwaitSilentPeerLocked): the verdict
    // waits for that node, and the job is requeued (NodeFail) when it is DOWN or speaks again,
    // never failed for a peer's partition. "" = no verdict waits. Memory only: recovery sets it
    // again from the stored failed exits.
    std::string awaiting_node;
  };
  /// One user's pending jobs, as admission counts them.
  struct PendingUse {
    int32_t jobs = 0;
    int64_t bytes = 0;  // their stored specs together
  };
  // Tasks of an ended attempt that are still alive: they keep their resources until they exit.
  struct Ghost {
    int64_t job = 0;
    int32_t attempt = 0;
    std::map<int32_t, std::string> alive;  // rank -> node
    core::ResourceVector per_task;
    std::map<int32_t, std::vector<int32_t>> gpus;  // rank -> device indices
    int64_t since = 0;
  };
  struct NodeRec {
    v1::NodeInfo info;
    core::Node node;
    bool connected = false;
    bool registered = false;       // its agent registered with this controller since it started
    bool down = false;
    bool drained = false;
    bool health_failing = false;   // its agent's last health verdict had failing checks
    int64_t last_heartbeat = 0;
    int64_t rejected_reports = 0;  // RejectAgentMessage count since start (mladmin nodes)
  };

  // controller.cc: jobs
  JobRow ToRow(const JobRec& j, bool with_spec = false) const;
  v1::JobInfo ToInfo(const JobRec& j) const;
  /// Writes j's row (and an event); on failure remembers j as unpersisted and rethrows.
  void Persist(const JobRec& j, const std::string& event = "", const std::string& detail = "");
  // The bodies of OnRegister, OnAgentMessage, Tick and RunCycle's apply step: lock held, inside a
  // batch (Batched).
  v1::Registered OnRegisterLocked(const v1::RegisterNode& reg, int64_t now);
  bool OnAgentMessageLocked(const std::string& node, const v1::AgentMessage& msg, int64_t now);
  void TickLocked(int64_t now);
  void ApplyPlanLocked(const core::CyclePlan& plan, const core::ClusterState& snap, const core::PolicySet& policy,
                       int64_t now, int64_t us);
  /// Waits for a store write now, or, inside a batched operation (batch_ set), adds it to the
  /// batch (`job`/`attempt`: what to write again should it fail).
  void Await(std::future<void> write, int64_t job = 0, std::optional<AttemptRow> attempt = std::nullopt);
  /// sink_.Send now, or queued in the batch until its writes are durable (then true when the
  /// node is connected now).
  bool SendLocked(const std::string& node, v1::SchedulerMessage msg);
  /// Runs `op` under the lock with a fresh batch, then, with the lock released, waits for the
  /// batch's writes and sends its messages (FinishBatch). Returns what `op` returned.
  template <typename F>
  auto Batched(F&& op);
  /// Runs `op` under the lock with `batch` as the batch in progress and returns what it returned;
  /// the caller completes the batch (FinishBatch). Should `op` throw, the batch is finished here.
  template <typename F>
  auto Collect(WriteBatch& batch, F&& op);
  /// Waits for `b`'s writes (lock not held); a failed write marks its job and attempt for
  /// writing again and is rethrown after the messages that need no durable write (aborts,
  /// signals) went out; prepares and commits go only when every write is durable and their
  /// attempt is still the job's current one.
  void FinishBatch(WriteBatch& b);
  void FlushUnpersistedLocked();
  /// Adds j to running_on_ under each node of its placement.
  void IndexRunningLocked(const JobRec& j);
  bool CanControl(const Caller& c, const JobRec& j) const;
  /// Where jobs no longer in memory are looked up: the store, or rows loaded beforehand.
  using RowLookup = std::function<std::optional<JobRow>(int64_t)>;
  /// Checks and completes a submitted spec (defaults from the partition, resolved dependencies);
  /// jobs no longer in memory are looked up in `rows` (rows loaded beforehand, never the store
  /// under the lock). INVALID_ARGUMENT / PERMISSION_DENIED naming the field.
  Status ValidateSpec(v1::JobSpec& spec, const Caller& caller, const RowLookup& rows);
  /// The policy's [limits] on a submitted spec, before anything else looks at it: every field's
  /// size, and an array's elements x spec size. `jobs` gets the number of jobs it would create.
  Status CheckSizesLocked(const v1::JobSpec& spec, int64_t* jobs);
  /// For unprivileged callers: the submission rate, the pending-job count and the pending spec
  /// bytes ([limits]); on success the `jobs` (storing `bytes` of specs together) are counted as
  /// pending until the next cycle recounts.
  Status AdmitUserLocked(const Caller& caller, int64_t jobs, int64_t bytes, int64_t now);
  /// Takes back AdmitUserLocked's count of `jobs` and `bytes` (a retry whose job was already
  /// stored), unless a cycle recounted since `admitted_at` (pending_recounts_ then); the rate
  /// token stays spent.
  void UnadmitUserLocked(const Caller& caller, int64_t jobs, int64_t bytes, int64_t admitted_at);
  void CancelOne(JobRec& j, int64_t now, const std::string& reason);
  /// A new job's row (spec left to the caller) and in-memory record, PENDING (or held) at `now`.
  static JobRow NewRow(const Caller& caller, const v1::JobSpec& spec, int64_t now);
  static JobRec NewRec(int64_t id, const Caller& caller, const v1::JobSpec& spec, int64_t now);
  /// Checks a stored row of a job that could still run (CheckStoredJob) and quarantines it when it
  /// fails. True when quarantined. `user_cache` (uid -> name), when given, saves a passwd lookup
  /// per row (each one opens /etc/passwd: 100,000 rows took seconds of a restart).
  bool QuarantineIfForgedLocked(JobRec& j, const JobRow& row, int64_t now,
                                std::unordered_map<uint32_t, std::string>* user_cache = nullptr);
  /// A job whose stored state was refused (`why`): logged, counted
  /// (mlsched_store_rows_quarantined_total), FAILED with reason StoredRowRejected and stored so;
  /// never launched.
  void QuarantineLocked(JobRec& j, const std::string& why, int64_t now);
  /// A job as stored (Recover): interrupted states read as PENDING, RUNNING until agents say not.
  static JobRec RecFromRow(const JobRow& row);
  /// A retry found job `first` (an array: its elements after it) stored: adds those that are
  /// unfinished and missing from memory (their submission committed but its answer was lost, so
  /// nobody added them). Takes the lock itself; reads the store without it.
  void AdoptStored(int64_t first, int64_t now);
  // controller_launch.cc: attempts
  void StartAttempt(JobRec& j, const core::Allocation& alloc, int64_t now);
  /// Elastic jobs: records a size change from the last attempt (`prev_size` tasks, 0 = none) to
  /// `size` as an event ("shrink"/"grow": "shrunk 4->3 after eviction of n4") and in JobInfo.resize;
  /// consumes `stop_cause` either way (`requeue_reason`, e.g. "NodeFail", names the cause when it is empty).
  void NoteResizeLocked(JobRec& j, int prev_size, int size, const std::string& requeue_reason);
  /// True when `node` holds a task of `j`'s current placement (of `rank`, or any rank when rank < 0).
  bool PlacedOn(const JobRec& j, const std::string& node, int32_t rank) const;
  /// Whether `node` (record `n`) was heard, by heartbeat or any message, within two heartbeat
  /// intervals plus a second.
  bool HeardLatelyLocked(const std::string& node, const NodeRec& n, int64_t now);
  /// Whether `node` has said nothing for more than two heartbeat intervals (plus a second), or
  /// its stream went down: its ranks may be cut off behind a partition. A node recovered from the
  /// store that has not registered yet counts from the recovery (a restart is not a silence).
  bool SilentLocked(const std::string& node, int64_t now);
  /// Whether `node`'s agent is registered with this controller, connected and heard within two
  /// heartbeat intervals (plus a second): a verdict waiting on it can be given (not merely "not
  /// silent": a recovered node that has not registered again is neither).
  bool SpeaksLocked(const std::string& node, int64_t now);
  /// A node other than `except` holding a still-running rank of j's attempt that is silent now
  /// (SilentLocked); "" when none.
  std::string SilentPeerLocked(const JobRec& j, const std::string& except, int64_t now);
  /// Called for rank `idx` of j failing on `node` (`why`: "rank 1 exited 76"): when another node
  /// of the gang is silent (or a verdict already waits on one), keeps the exit, records
  /// AWAIT_NODE and returns true; false when the failure is the rank's own (every peer speaks).
  bool AwaitSilentPeerLocked(JobRec& j, const std::string& node, int idx, const std::string& why, int64_t now);
  /// Ends j's attempt as NodeFail (requeued) because a rank failed while `j.awaiting_node` was
  /// silent; `why` says what happened since.
  void RequeueForSilentNodeLocked(JobRec& j, const std::string& why, int64_t now);
  /// Logs and counts (mlsched_rejected_requests_total{reason="agent_message"}) a report from an
  /// agent about a task that is not placed on its node; the report changes nothing.
  void RejectAgentMessage(const std::string& node, const std::string& what);
  void OnPrepareResult(const std::string& node, const v1::PrepareResult& r, int64_t now);
  void OnTaskStarted(const std::string& node, const v1::TaskStarted& t, int64_t now);
  void OnTaskExited(const std::string& node, const v1::TaskExited& t, int64_t now);
  void OnHeartbeat(const std::string& node, const v1::Heartbeat& hb, int64_t now);
  /// Ends the current attempt: live tasks get terminated and become a Ghost. `final_state` kPending
  /// requeues the job; a final state ends it.
  void EndAttempt(JobRec& j, core::JobState final_state, const std::string& reason, int32_t exit_code,
                  int64_t now, const std::string& event);
  void SendToNodes(const JobRec& j, const v1::SchedulerMessage& msg);
  void MarkNodeDown(NodeRec& n, const std::string& why, int64_t now);
  /// The running jobs with a task on `node`, from running_on_ (not every job in the cluster: a
  /// thousand nodes going DOWN or evicted together, issue 30); ids, as EndAttempt updates the set.
  std::vector<int64_t> RunningOnLocked(const std::string& node);
  void EvictLocked(NodeRec& n, int64_t deadline, const std::string& source, int64_t now);
  // controller_health.cc: a heartbeat's health verdict (agentd/health.h) against the [health]
  // policy: drain on failing, requeue its jobs (drain-and-requeue), resume when it passes again.
  void ApplyHealthLocked(NodeRec& n, const v1::NodeHealth& h, int64_t now);
  void RequeueFromFailingNodeLocked(NodeRec& n, const std::string& summary, int64_t now);
  /// Signals every rank of `j` to checkpoint and stop (SIGTERM, `grace_s`, SIGKILL; trainer stop
  /// reason `signal_reason`); a failed exit then requeues it with `requeue_reason`.
  void StopToRequeueLocked(JobRec& j, const std::string& requeue_reason, const std::string& signal_reason,
                           const std::string& cause, int grace_s, int64_t now);
  // controller_watchdog.cc: the gang watchdog ([watchdog]; gang_watchdog.h) finds stalled gangs,
  // asks their agents for stack traces, suspects and drains the node at fault, requeues the gang.
  void WatchGangsLocked(int64_t now);
  void OnStacksLocked(const std::string& node, const v1::StacksCollected& s, int64_t now);
  void ConcludeStallLocked(JobRec& j, int64_t now);
  /// A node suspected by the watchdog at `now` for `why` in job `j`: drained once suspected
  /// drain_after times within suspect_window (its reason "watchdog: WHY of job J in N ..."); true
  /// when this drained it.
  bool SuspectNodeLocked(const std::string& node, const std::string& why, const JobRec& j, int64_t now);
  /// Adds `node` to j's exclude_nodes (in memory: a schedd restart forgets it).
  void ExcludeNodeLocked(JobRec& j, const std::string& node);
  void CheckStragglersLocked(int64_t now);
  // controller_idle.cc: the idle-GPU policy ([idle]; idle_gpus.h).
  /// Feeds a heartbeat's GPU sample of a rank of `j` holding `gpus` GPUs to idle_gpus_.
  void ObserveGpuUtilLocked(JobRec& j, const v1::RunningTask& r, int32_t gpus, int64_t now);
  /// Runs the rule's action for every attempt idle for its `after`, once per idle period.
  void CheckIdleGpusLocked(int64_t now);
  /// Applies a core PreemptDecision: SIGTERM to every task of the victim with the QoS grace time.
  void PreemptLocked(const core::PreemptDecision& d, int64_t now);
  /// Applies a core ResizeDecision: SIGTERM to every task with the reason "resize" and the kill grace;
  /// the job exits 75, is requeued (not counted as a preemption) and restarts at the size that fits.
  void ResizeLocked(const core::ResizeDecision& d, int64_t now);
  /// The accounting row of the job's current attempt (end/outcome filled by the caller).
  AttemptRow AttemptOf(const JobRec& j) const;
  // controller_deps.cc: dependencies and arrays
  /// Looks rows up in the store (under the lock only for inputs of bounded size).
  RowLookup StoreRows();
  /// Ids of every element of array `array_job_id` (empty when it is not an array job id).
  std::vector<int64_t> ArrayElementsLocked(int64_t array_job_id, const RowLookup& rows);
  /// Job ids a reference names ("12": the job, or every element of array 12; "12_3": one element);
  /// empty with `*error` set when there is no such job.
  std::vector<int64_t> ResolveRefLocked(const core::JobRef& ref, std::string* error, const RowLookup& rows);
  /// Parses spec.dependency and fills spec.dependencies with resolved job ids; INVALID_ARGUMENT
  /// naming the term when the text is bad or a job does not exist.
  Status ResolveDependencyLocked(v1::JobSpec& spec, const RowLookup& rows);
  /// Stores one job per element of spec.array with consecutive ids; *job_id = the first.
  /// `admitted_at`: pending_recounts_ at admission (UnadmitUserLocked for a retry).
  Status SubmitArray(const Caller& caller, const v1::JobSpec& spec, int64_t now, int64_t* job_id,
                     const std::string& submission_key, int64_t admitted_at);
  /// Ids selected by explicit ids (array ids expanded) and references; bad references in `errors`.
  std::vector<int64_t> SelectJobsLocked(const google::protobuf::RepeatedField<int64_t>& ids,
                                        const google::protobuf::RepeatedPtrField<std::string>& refs,
                                        std::vector<std::string>* errors, const RowLookup& rows);
  /// What a caller's id list selects, and the rows of jobs no longer in memory that it needed.
  struct Selection {
    std::vector<int64_t> ids;
    std::vector<std::string> errors;
    std::map<int64_t, std::optional<JobRow>> rows;  // loaded from the store with the lock released
  };
  /// SelectJobsLocked for caller-supplied lists (at most [limits] max_ids_per_request, checked by
  /// the caller): takes the lock itself and reads the store only with the lock released.
  Selection SelectJobs(const google::protobuf::RepeatedField<int64_t>& ids,
                       const google::protobuf::RepeatedPtrField<std::string>& refs);
  /// Records the final state of job `id` (its row from `rows`) when it is not in memory.
  void RememberFinishedLocked(int64_t id, const RowLookup& rows);
  /// Drops `expired` final jobs from memory, keeping the states that pending jobs depend on.
  void ExpireLocked(const std::vector<int64_t>& expired);
  /// After Recover: the final states of jobs that recovered jobs depend on.
  void RecoverDependenciesLocked();
  // controller_cycle.cc
  /// Nodes, pending and running jobs and exiting tasks for one cycle (usage is left to the caller).
  core::ClusterState Snapshot(int64_t now) const;
  // controller_provision.cc
  /// Elastic capacity after a cycle: core::PlanProvisioning on the same snapshot and plan; runs the
  /// programs through runner_, records events, notes and metrics, and keeps the ledger.
  void ProvisionLocked(const core::ClusterState& snap, const core::CyclePlan& plan, const core::PolicySet& policy,
                       int64_t now);
  /// Recover: loads the provisioner's ledger from the store (an unreadable one is logged and
  /// dropped: its nodes stay as ordinary nodes).
  void RecoverProvisionedLocked();
  /// Submits the suspend program for every node of releasing_ not yet handed to the runner
  /// (suspend_unsent_): after Recover, and when the runner's queue was full.
  void ResubmitSuspendsLocked(const core::PolicySet& policy);
  /// True when tasks of an ended attempt of `job` are still exiting on a node that could run it.
  bool OwnTasksExitingLocked(int64_t job) const;
  /// Adds the running jobs' usage over [usage_until_, now) and saves it now and then.
  void AccrueUsageLocked(const core::ClusterState& snap, int64_t now);
  /// With [prediction] enabled: the seconds the core plans `j` to run (pending: the prediction;
  /// running: corrected for the time it has run by `now`); 0 = plan with the time limit.
  core::Duration PlannedRuntimeLocked(const JobRec& j, int64_t now) const;
  /// With [prediction] enabled: records the run time of an attempt that ended `final_state`
  /// (COMPLETED or TIMEOUT count, as in mlsim) in the history and the store.
  void ObserveRuntimeLocked(const JobRec& j, core::JobState final_state, int64_t now);
  /// Deletes from the store the history templates the predictor dropped (HistoryBook's cap).
  void SaveDroppedHistoryLocked();
  JobRec* Find(int64_t id);

  Store& store_;
  AgentSink& sink_;
  SchedMetrics* metrics_ = nullptr;
  WriteBatch* batch_ = nullptr;  // guarded by mu_: the batched operation in progress (Batched)
  ControllerConfig cfg_;
  std::mutex mu_;
  core::PolicySet policy_;
  std::map<int64_t, JobRec> jobs_;         // live and recently finished, by id
  // By node: the jobs that entered RUNNING with a task there (StartAttempt, Recover), so a
  // node's heartbeat checks its own jobs, not every running job in the cluster (issue 30: that
  // scan cost ~0.4 us per running job per heartbeat); an entry whose job left RUNNING or moved
  // off the node is dropped when a heartbeat of that node meets it.
  std::unordered_map<std::string, std::set<int64_t>> running_on_;
  std::map<std::string, NodeRec> nodes_;   // by name
  std::map<std::pair<int64_t, int32_t>, Ghost> ghosts_;
  // Writes that failed (the store threw) after memory had changed: written again before the next
  // acknowledgement to an agent and on every Tick, so memory and disk converge.
  std::set<int64_t> unpersisted_jobs_;
  std::vector<AttemptRow> unpersisted_attempts_;
  // Admission ([limits]): submissions per user (token buckets), and PENDING jobs per user, recounted
  // every cycle and raised by each accepted submission in between (so it never undercounts).
  SubmitRateLimiter submit_rate_;
  std::map<std::string, PendingUse> pending_by_user_;
  int64_t pending_recounts_ = 0;  // cycles that recounted pending_by_user_
  std::map<int64_t, core::JobState> finished_;
  // Spot eviction rates learned from evictions per node-hour of up nodes (fed to the core).
  GangWatchdog watchdog_;  // running gangs' progress and suspected nodes ([watchdog])
  AttemptUsage attempt_usage_;  // what running attempts used so far (accounting, issue 34)
  IdleGpus idle_gpus_;          // running attempts' GPU utilization against [idle]
  int64_t last_tick_ = 0;       // `now` of the latest Tick (the gauges' freshness of samples)
  std::set<int64_t> stalls_open_;  // jobs whose stall diagnosis waits for stack traces (JobRec::stall_at)
  int64_t stragglers_checked_at_ = 0;  // the watchdog's straggler check runs every kStragglerCheckEvery s
  core::EvictionRateEstimator eviction_rates_;  // ended jobs, no longer in jobs_, that jobs depend on
  // Fairshare usage (core::ClusterState::usage), accrued each cycle up to usage_until_ and saved
  // to the store every kUsageSaveEvery seconds.
  std::map<std::string, double> usage_;
  // Run-time prediction ([prediction]): each user's recent run times, reloaded by Recover.
  std::unique_ptr<core::RuntimePredictor> predictor_;  // policy_.prediction's predictor; never null
  // Elastic capacity: the nodes schedd created, the programs' runner, each pool's cost per hour.
  core::ProvisionLedger provisioned_;
  ReleasingNodes releasing_;                 // suspend submitted (or due), not finished
  std::set<std::string> suspend_unsent_;     // in releasing_, not yet handed to the runner
  bool releasing_dirty_ = false;             // releasing_ shrank since the ledger was stored
  ProvisionRunner* runner_ = nullptr;
  std::map<std::string, double> provision_cost_;
  int64_t usage_until_ = 0;
  int64_t usage_saved_at_ = 0;
  static constexpr int64_t kUsageSaveEvery = 60;
  std::mutex wake_mu_;
  std::condition_variable wake_cv_;
  bool dirty_ = true;  // guarded by wake_mu_
};

/// Maps a controller Status onto the stable names used in logs ("INVALID_ARGUMENT", ...).
const char* StatusCodeName(Status::Code c);

template <typename F>
auto Controller::Collect(WriteBatch& batch, F&& op) {
  std::unique_lock lk(mu_);
  batch_ = &batch;
  try {
    if constexpr (std::is_void_v<decltype(op())>) {
      op();
      batch_ = nullptr;
    } else {
      auto result = op();
      batch_ = nullptr;
      return result;
    }
  } catch (...) {
    batch_ = nullptr;
    lk.unlock();
    try {
      FinishBatch(batch);  // what the operation wrote before it failed still completes
    } catch (...) {        // the operation's own error is the one to report
    }
    throw;
  }
}

template <typename F>
auto Controller::Batched(F&& op) {
  WriteBatch batch;
  if constexpr (std::is_void_v<decltype(op())>) {
    Collect(batch, op);
    FinishBatch(batch);
  } else {
    auto result = Collect(batch, op);
    FinishBatch(batch);
    return result;
  }
}

}  // namespace mlsched::server
