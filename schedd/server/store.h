// Durable state of schedd in SQLite (WAL mode). All writes go through one writer thread that groups
// concurrent requests into one transaction (group commit): a write is durable when its future is
// ready. Reads use a separate read-only connection. Thread-safe.
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

class Store {
 public:
  /// Opens (creating if needed) DIR/state.db and applies schema migrations; the files are made
  /// private first (SecureStateFiles). Throws StoreError.
  explicit Store(const std::string& state_dir) : Store(state_dir, false) {}
  /// Opens DIR/state.db for reading only (no migrations, no writer; safe beside a running schedd
  /// thanks to WAL). Every write then throws StoreError. Throws StoreError when the file is missing.
  static std::unique_ptr<Store> OpenReadOnly(const std::string& state_dir) {
    return std::unique_ptr<Store>(new Store(state_dir, true));
  }
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  /// Inserts a new job; the id is assigned by the database (monotonic). Ready once durable. With
  /// row.submission_key set, the key is recorded in the same transaction, and a key the same user
  /// already used (within kSubmissionKeyTtl) inserts nothing and gives the existing id.
  std::future<InsertedJob> InsertJob(JobRow row);
  /// Inserts `count` jobs in one transaction with consecutive ids (a job array); row i is `row` with
  /// spec `spec_of(first_id, i)`. `spec_of` runs on the writer thread. Ready with the first id once
  /// durable.
  std::future<InsertedJob> InsertJobArray(JobRow row, size_t count,
                                      std::function<std::string(int64_t first_id, size_t i)> spec_of);
  /// Writes every mutable column of an existing job (state, times, placement, ...) and, when
  /// `event_kind` is not empty, an event row in the same transaction. Ready once durable.
  std::future<void> UpdateJob(const JobRow& row, std::string event_kind = "", std::string detail = "");
  /// Records an event (job_id 0 for node-only events).
  std::future<void> AppendEvent(int64_t job_id, std::string node, std::string kind, std::string detail);
  /// Inserts or replaces an attempt's accounting row.
  std::future<void> SaveAttempt(AttemptRow row);
  /// Attempts that overlap [start, end) (running ones included), by job id then attempt.
  std::vector<AttemptRow> LoadAttempts(int64_t start, int64_t end);
  /// Replaces the stored fairshare usage (association key -> decayed billing-weighted
  /// resource-seconds) and the time it was accrued up to (seconds since epoch).
  std::future<void> SaveUsage(std::map<std::string, double> usage, int64_t accrued_until);
  /// Loads the stored usage into `usage`; returns its accrued-until time (0 when never saved).
  int64_t LoadUsage(std::map<std::string, double>* usage);
  /// Replaces `user`'s stored run-time history ([prediction]): run times in seconds, oldest first.
  std::future<void> SaveRuntimes(std::string user, std::vector<int64_t> runs);
  /// Every user's stored run-time history (reader connection).
  std::map<std::string, std::vector<int64_t>> LoadRuntimes();
  /// Upserts a node row.
  std::future<void> SaveNode(NodeRow row);

  /// Jobs not in a final state, plus final jobs that ended at or after `finished_since`.
  std::vector<JobRow> LoadJobs(int64_t finished_since);
  /// The job a (user, uid, key) submission created, if remembered (reader connection).
  std::optional<int64_t> LookupSubmission(const std::string& user, uint32_t uid, const std::string& key);
  /// One job by id from disk, if present.
  std::optional<JobRow> LoadJob(int64_t id);
  /// Every job that ended in [start, end), for reports.
  std::vector<JobRow> LoadFinishedJobs(int64_t start, int64_t end);
  std::vector<NodeRow> LoadNodes();
  /// The stored JobSpec blob of a job (kept out of memory for pending jobs).
  std::optional<std::string> LoadSpec(int64_t id);

  /// Schema version after migrations.
  int SchemaVersion();

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
  Store(const std::string& state_dir, bool read_only);
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
