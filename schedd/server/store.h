// Durable state of schedd: the Store interface the Controller writes through, and its embedded
// default, SqliteStore (SQLite in WAL mode). HA mode stores the same rows in etcd (etcd_store.h).
// All writes go through one writer thread that groups concurrent requests into one transaction
// (group commit): a write is durable when its future is ready. Thread-safe.
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace mlsched::server {

/// One row of the jobs table. `spec` and `placement` are serialized protobufs
/// (mlsched.v1.JobSpec and mlsched.v1.Placement).
struct JobRow {
  int64_t id = 0;
  std::string spec;
  std::string user;
  uint32_t uid = 0, gid = 0;
  std::string state = "PENDING";
  std::string reason;
  int64_t submit_time = 0, start_time = 0, end_time = 0;
  int32_t exit_code = 0;
  int32_t attempt = 0;
  int32_t requeue_count = 0;
  std::string placement;
  int32_t preempt_count = 0;  // QoS preemptions so far
  int32_t evictions = 0;      // spot evictions so far
  std::string image_digest;   // containers: "sha256:<hex>" the last attempt ran ("" = none yet)
  std::string usage;          // serialized mlsched.v1.JobUsage: what its ended attempts used in all ("" = nothing measured)
  std::string submission_key;  // insert only: the client's idempotency key ("" = none)
};

/// What an insert did: the job's id (an array's first), and whether a job with the same
/// (user, uid, submission_key) existed already, in which case nothing was inserted.
struct InsertedJob {
  int64_t id = 0;
  bool existed = false;
};

/// How long submission keys are remembered (seconds): a retry after that creates a new job.
inline constexpr int64_t kSubmissionKeyTtl = 7 * 86400;

/// One launch attempt of a job: the accounting record (like a sacct step). Written when the
/// attempt starts (end_time 0) and completed when it ends.
struct AttemptRow {
  int64_t job_id = 0;
  int32_t attempt = 0;
  int64_t start_time = 0, end_time = 0;  // seconds since epoch
  std::string outcome;                   // "" while running; COMPLETED, FAILED, CANCELLED, TIMEOUT, Preempted, Evicted, NodeFail, LaunchFailedRequeue
  int32_t ntasks = 0;
  int64_t cpu_millis = 0;                // whole gang
  int64_t gpus = 0;                      // whole gang
  std::string gpu_type;                  // "" for CPU-only
  std::string pool;                      // pool of rank 0's node (on-demand, spot, reserved)
  std::string nodes;                     // comma-separated
  int64_t lost_work_s = 0;               // seconds of work lost to a requeue (since the last checkpoint)
  // What it used (accounting; AttemptUsage): CPU microseconds over its ranks and the largest rank's
  // MaxRSS (bytes; -1 = unknown), GPU-seconds sampled and busy (utilization-weighted), the GPUs'
  // energy (joules), OOM kills.
  int64_t cpu_usec = -1;
  int64_t max_rss_bytes = -1;
  double gpu_seconds = 0, gpu_busy_seconds = 0, gpu_energy_joules = 0;
  int64_t oom_kills = 0;
  int32_t gpu_util_max_percent = 0;      // the highest NVML utilization a rank's GPUs reported
  int64_t gpu_memory_max_bytes = 0;      // the most GPU memory a rank's GPUs held (bytes)
};

/// One step of a job (srun's JOB.STEP, mlrun inside a running job): written when it starts
/// (state RUNNING, end_time 0) and when it ends (StepBook, step_book.h).
struct StepRow {
  int64_t job_id = 0;
  int32_t step_id = 0;
  std::string name;                      // its command's first word (base name)
  int32_t ntasks = 0;
  std::string nodes;                     // comma-separated, in task order
  uint32_t uid = 0;                      // who started it
  std::string user;
  std::string state;                     // RUNNING, COMPLETED, FAILED, CANCELLED, NODE_FAIL
  int32_t exit_code = 0;                 // the highest of its tasks' (128 + signal when killed)
  int64_t start_time = 0, end_time = 0;  // seconds since epoch; end 0 while running
  int64_t cpu_usec = -1;                 // its tasks' processes' CPU time, summed (getrusage); -1 = unknown
  int64_t max_rss_bytes = -1;            // the largest task's MaxRSS (bytes); -1 = unknown
};

/// A finished job moved out of HA mode's etcd into a replica's history (etcd_archive.h), with its
/// launch attempts and steps.
struct ArchivedJob {
  JobRow row;  // with its id and spec
  std::vector<AttemptRow> attempts;
  std::vector<StepRow> steps;
};

/// One event row as archived (time: seconds since epoch; job_id 0 for node-only events).
struct EventRow {
  int64_t time = 0;
  int64_t job_id = 0;
  std::string node, kind, detail;
};

/// Operator-set node state that survives restarts (drain).
struct NodeRow {
  std::string name;
  std::string info;    // serialized mlsched.v1.NodeInfo (last registration)
  bool drained = false;
  std::string reason;
};

/// Error from SQLite, with the statement that failed.
struct StoreError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Creates STATE_DIR if needed and makes the state private, since jobs' environments and scripts
/// live in it: the directory 0700 (when schedd created it, it is empty, or it already holds
/// state.db; otherwise only a warning), state.db and any -wal/-shm/-journal 0600 (state.db is
/// created 0600 first, so SQLite creates the others with that mode). Throws StoreError.
void SecureStateFiles(const std::string& state_dir);

/// Most bytes of a stored provisioning ledger: 4,096 nodes per pool of about 40 bytes, three pools.
inline constexpr size_t kMaxProvisionLedgerBytes = 1 << 20;
/// Largest stored state of a learned run-time predictor (bytes; OnlineLinearPredictor's is ~1.4 KiB).
inline constexpr size_t kMaxPredictorModelBytes = 4096;

/// What the Controller needs of durable storage. Every write returns a future that is ready once
/// the write is durable (or carries the StoreError that refused it); reads are synchronous.
class Store {
 public:
  virtual ~Store() = default;
  /// Inserts a new job; the id is assigned by the store (monotonic). With row.submission_key set,
  /// the key is recorded in the same transaction, and a key the same user already used (within
  /// kSubmissionKeyTtl) inserts nothing and gives the existing id.
  virtual std::future<InsertedJob> InsertJob(JobRow row) = 0;
  /// Inserts `count` jobs in one transaction with consecutive ids (a job array); row i is `row`
  /// with spec `spec_of(first_id, i)`, which runs on the writer thread. Ready with the first id.
  virtual std::future<InsertedJob> InsertJobArray(JobRow row, size_t count,
                                                  std::function<std::string(int64_t first_id, size_t i)> spec_of) = 0;
  /// Writes every mutable column of an existing job (state, times, placement, ...; not the spec)
  /// and, when `event_kind` is not empty, an event in the same transaction.
  virtual std::future<void> UpdateJob(const JobRow& row, std::string event_kind = "", std::string detail = "") = 0;
  /// Records an event (job_id 0 for node-only events).
  virtual std::future<void> AppendEvent(int64_t job_id, std::string node, std::string kind, std::string detail) = 0;
  /// Inserts or replaces an attempt's accounting row.
  virtual std::future<void> SaveAttempt(AttemptRow row) = 0;
  /// Attempts that overlap [start, end) (running ones included), by job id then attempt.
  virtual std::vector<AttemptRow> LoadAttempts(int64_t start, int64_t end) = 0;
  /// Writes a step (insert or replace by job and step id).
  virtual std::future<void> SaveStep(StepRow row) = 0;
  /// The steps of these jobs, by job then step id, at most `limit` of them (the first).
  virtual std::vector<StepRow> LoadSteps(const std::vector<int64_t>& job_ids, size_t limit) = 0;
  /// Replaces the stored fairshare usage (association key -> decayed billing-weighted
  /// resource-seconds) and the time it was accrued up to (seconds since epoch).
  virtual std::future<void> SaveUsage(std::map<std::string, double> usage, int64_t accrued_until) = 0;
  /// Loads the stored usage into `usage`; returns its accrued-until time (0 when never saved).
  virtual int64_t LoadUsage(std::map<std::string, double>* usage) = 0;
  /// Replaces the stored run-time history ([prediction]) of `key` (a user, or a user's request
  /// template: core::RequestTemplateKey): run times in seconds, oldest first; no runs deletes it.
  virtual std::future<void> SaveRuntimes(std::string key, std::vector<int64_t> runs) = 0;
  /// Every stored run-time history: (key, run times), least recently saved first (the order in
  /// which the predictor last observed its request templates).
  virtual std::vector<std::pair<std::string, std::vector<int64_t>>> LoadRuntimes() = 0;
  /// Replaces the stored state of a learned run-time predictor (core::RuntimePredictor::ModelState,
  /// text of at most kMaxPredictorModelBytes; StoreError beyond).
  virtual std::future<void> SavePredictorModel(std::string state) = 0;
  /// The stored predictor state, or "" when never saved.
  virtual std::string LoadPredictorModel() = 0;
  /// Replaces the provisioner's ledger (a serialized StoredProvisionLedger, at most
  /// kMaxProvisionLedgerBytes).
  virtual std::future<void> SaveProvisionLedger(std::string ledger) = 0;
  /// The stored ledger, or "" when never saved.
  virtual std::string LoadProvisionLedger() = 0;
  /// Upserts a node row.
  virtual std::future<void> SaveNode(NodeRow row) = 0;
  /// Jobs not in a final state, plus final jobs that ended at or after `finished_since`.
  virtual std::vector<JobRow> LoadJobs(int64_t finished_since) = 0;
  /// The job a (user, uid, key) submission created, if remembered.
  virtual std::optional<int64_t> LookupSubmission(const std::string& user, uint32_t uid, const std::string& key) = 0;
  /// One job by id, if present.
  virtual std::optional<JobRow> LoadJob(int64_t id) = 0;
  /// Every job that ended in [start, end), for reports.
  virtual std::vector<JobRow> LoadFinishedJobs(int64_t start, int64_t end) = 0;
  /// Which finished jobs a page holds (ListJobs' filters the store can apply): their users and
  /// their final states ("COMPLETED", ...); empty = any. Longer lists than kMaxFilterNames are not
  /// applied by the store (the caller filters anyway).
  struct FinishedFilter {
    std::vector<std::string> users, states;
    static constexpr size_t kMaxFilterNames = 64;
  };
  /// One page of finished jobs (final states) that ended at or after `since` (seconds since
  /// epoch), with ids above `after_id`, in id order, at most `limit` of them (mlq -a, mlacct),
  /// of `filter`'s users and states.
  virtual std::vector<JobRow> LoadFinishedJobsPage(int64_t since, int64_t after_id, size_t limit,
                                                   const FinishedFilter& filter) = 0;
  virtual std::vector<NodeRow> LoadNodes() = 0;
  /// The stored JobSpec blob of a job (kept out of memory for pending jobs).
  virtual std::optional<std::string> LoadSpec(int64_t id) = 0;
  /// The most bytes one job's spec may take in this store (0 = no limit beyond the policy's), and
  /// the most jobs one array submission may create; submissions over them are refused.
  virtual size_t MaxSpecBytes() const { return 0; }
  virtual size_t MaxArrayJobs() const { return 0; }
};

class SqliteStore final : public Store {
 public:
  /// Opens (creating if needed) DIR/state.db and applies schema migrations; the files are made
  /// private first (SecureStateFiles). Throws StoreError.
  explicit SqliteStore(const std::string& state_dir) : SqliteStore(state_dir, false) {}
  /// Opens DIR/state.db for reading only (no migrations, no writer; safe beside a running schedd
  /// thanks to WAL). Every write then throws StoreError. Throws StoreError when the file is missing.
  static std::unique_ptr<SqliteStore> OpenReadOnly(const std::string& state_dir) {
    return std::unique_ptr<SqliteStore>(new SqliteStore(state_dir, true));
  }
  ~SqliteStore() override;
  SqliteStore(const SqliteStore&) = delete;
  SqliteStore& operator=(const SqliteStore&) = delete;

  std::future<InsertedJob> InsertJob(JobRow row) override;
  std::future<InsertedJob> InsertJobArray(JobRow row, size_t count,
                                          std::function<std::string(int64_t first_id, size_t i)> spec_of) override;
  std::future<void> UpdateJob(const JobRow& row, std::string event_kind = "", std::string detail = "") override;
  std::future<void> AppendEvent(int64_t job_id, std::string node, std::string kind, std::string detail) override;
  std::future<void> SaveAttempt(AttemptRow row) override;
  std::vector<AttemptRow> LoadAttempts(int64_t start, int64_t end) override;
  std::future<void> SaveStep(StepRow row) override;
  std::vector<StepRow> LoadSteps(const std::vector<int64_t>& job_ids, size_t limit) override;
  std::future<void> SaveUsage(std::map<std::string, double> usage, int64_t accrued_until) override;
  int64_t LoadUsage(std::map<std::string, double>* usage) override;
  std::future<void> SaveRuntimes(std::string key, std::vector<int64_t> runs) override;
  /// (reader connection)
  std::vector<std::pair<std::string, std::vector<int64_t>>> LoadRuntimes() override;
  std::future<void> SavePredictorModel(std::string state) override;
  std::string LoadPredictorModel() override;
  std::future<void> SaveProvisionLedger(std::string ledger) override;
  std::string LoadProvisionLedger() override;
  std::future<void> SaveNode(NodeRow row) override;
  std::vector<JobRow> LoadJobs(int64_t finished_since) override;
  /// (reader connection)
  std::optional<int64_t> LookupSubmission(const std::string& user, uint32_t uid, const std::string& key) override;
  std::optional<JobRow> LoadJob(int64_t id) override;
  std::vector<JobRow> LoadFinishedJobs(int64_t start, int64_t end) override;
  std::vector<JobRow> LoadFinishedJobsPage(int64_t since, int64_t after_id, size_t limit,
                                           const FinishedFilter& filter) override;
  std::vector<NodeRow> LoadNodes() override;
  std::optional<std::string> LoadSpec(int64_t id) override;

  /// Schema version after migrations.
  int SchemaVersion();

  /// HA mode: copies history archived out of etcd into this replica's database in one
  /// transaction: `jobs` with their ids (INSERT OR REPLACE, so a copy repeated after a crash
  /// changes nothing), their attempts, `events`, and `cursor` as the position reached in `stream`.
  /// Ready once durable; mlreport then reads them like any finished job.
  std::future<void> ImportHistory(std::vector<ArchivedJob> jobs, std::vector<EventRow> events, std::string stream,
                                  std::string cursor);
  /// The position ImportHistory last recorded for `stream` ("" = none). (reader connection)
  std::string HistoryCursor(const std::string& stream);

  /// Accounting retention (slurmdbd's PurgeJobAfter): deletes at most `max_jobs` finished jobs
  /// (final states) that ended before `cutoff` (seconds since epoch), oldest first, with their
  /// attempts, events and steps, in one transaction. The future gives how many jobs went.
  std::future<int64_t> PurgeFinished(int64_t cutoff, int64_t max_jobs);

  /// While `refuse` is true, SQLite itself refuses every write on the writer connection (PRAGMA
  /// query_only: "attempt to write a readonly database"), and each write's future carries that
  /// StoreError. It is how tests play a full or read-only disk; reads keep working. Applied before
  /// the next batch of writes.
  void RefuseWrites(bool refuse) { refuse_writes_ = refuse; }

 private:
  using Work = std::function<void(sqlite3*)>;
  struct Item {
    Work work;
    std::function<void(std::exception_ptr)> done;
  };
  SqliteStore(const std::string& state_dir, bool read_only);
  void Enqueue(Work work, std::function<void(std::exception_ptr)> done);
  void WriterLoop();
  void Migrate();

  std::string path_;
  sqlite3* wdb_ = nullptr;  // writer connection (writer thread only, after construction)
  sqlite3* rdb_ = nullptr;  // reader connection (guarded by rmu_)
  std::mutex rmu_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  std::atomic<bool> refuse_writes_{false};
  bool refusing_ = false;  // the writer connection's query_only (writer thread)
  std::thread writer_;
};

}  // namespace mlsched::server
