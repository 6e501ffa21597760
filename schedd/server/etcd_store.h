// HA mode's durable state: the Store rows kept in etcd, one key per row under a prefix
// (mlsched/v1/stored.proto names the keys). Writes go through one writer thread that groups
// concurrent requests into etcd transactions (group commit, at most --max-txn-ops operations and
// kEtcdMaxRequestBytes each). Every transaction is fenced: it succeeds only while PREFIX/leader
// still has the create revision this replica won it at (its epoch), so a deposed leader's late
// writes are refused by etcd itself (Kubernetes' leader election plus Jepsen's advice on etcd
// locks: a lease alone is not a fence). A write is durable, and its future ready, once etcd has
// committed the transaction. Thread-safe.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "schedd/server/etcd_client.h"
#include "schedd/server/store.h"

namespace mlsched::server {

/// Group commit (EtcdStore::GatherLocked): the longest the writer waits for more submissions to
/// share a transaction, and the quiet gap after which it stops waiting. Defaults measured on the
/// loopback HA cluster with 8 clients: ~3 -> ~7-8 submissions per transaction, ~1,800 -> ~2,750
/// per second.
struct GroupCommit {
  std::chrono::microseconds delay{2000};
  std::chrono::microseconds quiet{500};
};
/// Writes taken from the queue at once (then split into transactions within etcd's limits).
inline constexpr size_t kMaxItemsPerCommit = 4096;

/// The key of the leader (leased by it; its create revision is the epoch) under `prefix`.
std::string LeaderKey(const std::string& prefix);

class EtcdStore final : public Store {
 public:
  /// `prefix`: where the rows live (e.g. "/mlsched/"); `max_txn_ops`: etcd's --max-txn-ops.
  /// Writes fail (StoreError) until BecomeLeader.
  EtcdStore(EtcdClient& etcd, std::string prefix, size_t max_txn_ops = kEtcdMaxTxnOps, GroupCommit gather = {});
  ~EtcdStore() override;
  EtcdStore(const EtcdStore&) = delete;
  EtcdStore& operator=(const EtcdStore&) = delete;

  /// Starts writing as the leader of `epoch` (the create revision of LeaderKey): loads the next
  /// job id, and grants the lease that makes submission keys expire. Every later transaction is
  /// fenced on the leader key's create revision == epoch and, when given, its lease == `lease`
  /// and value == `leader_value` (Leadership::KeyValue). Throws EtcdError.
  void BecomeLeader(int64_t epoch, int64_t lease = 0, std::string leader_value = "");
  /// Called once, on the writer thread, when etcd refuses a transaction because the epoch no longer
  /// holds the leader key; every later write fails at once.
  void SetOnFenced(std::function<void()> f);
  /// Writes refused by the fence so far (each counted once per request).
  int64_t FencedWrites() const { return fenced_writes_.load(); }
  /// Transactions committed so far.
  int64_t Commits() const { return commits_.load(); }
  /// Blocks until every write queued before the call has finished.
  void Drain();
  /// Commits `ops` (puts and deletes built by the caller, e.g. the history archive) as one fenced
  /// transaction of their own, never grouped with other writes: etcd refuses a transaction that
  /// puts and deletes the same key. Ready once committed; StoreError when refused or over etcd's
  /// limits (max_txn_ops operations, kEtcdMaxRequestBytes).
  std::future<void> WriteAlone(std::vector<etcdpb::RequestOp> ops);
  /// The key prefix the rows live under.
  const std::string& prefix() const { return prefix_; }
  /// Operations per transaction (etcd's --max-txn-ops).
  size_t max_txn_ops() const { return max_txn_ops_; }

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
  std::vector<std::pair<std::string, std::vector<int64_t>>> LoadRuntimes() override;
  std::future<void> SavePredictorModel(std::string state) override;
  std::string LoadPredictorModel() override;
  std::future<void> SaveProvisionLedger(std::string ledger) override;
  std::string LoadProvisionLedger() override;
  std::future<void> SaveNode(NodeRow row) override;
  std::vector<JobRow> LoadJobs(int64_t finished_since) override;
  std::optional<int64_t> LookupSubmission(const std::string& user, uint32_t uid, const std::string& key) override;
  std::optional<JobRow> LoadJob(int64_t id) override;
  std::vector<JobRow> LoadFinishedJobs(int64_t start, int64_t end) override;
  std::vector<JobRow> LoadFinishedJobsPage(int64_t since, int64_t after_id, size_t limit,
                                           const FinishedFilter& filter) override;
  std::vector<NodeRow> LoadNodes() override;
  std::optional<std::string> LoadSpec(int64_t id) override;
  /// One job's spec must fit one etcd request with room for its row: 1 MiB.
  size_t MaxSpecBytes() const override { return 1 << 20; }
  /// An array is one transaction (so a failover never leaves half of one): a nested transaction
  /// of one op per job, one per spec and one for the submission key, which etcd allows only
  /// max_txn_ops minus the outer ops (the nested one and the id counter).
  size_t MaxArrayJobs() const override { return (max_txn_ops_ - 3) / 2; }

 private:
  struct Batch;  // the operations of one transaction being built
  struct Item {
    /// Appends the item's operations; runs on the writer thread (ids are allocated there).
    std::function<void(Batch&)> build;
    std::function<void(std::exception_ptr)> done;
    bool alone = false;  // committed in a transaction of its own (WriteAlone)
    std::thread::id caller;  // the thread that queued it (GatherLocked counts callers)
    bool submission = false;  // a job insert (InsertJob/InsertJobArray): the writes gathering waits for
  };
  void Enqueue(Item item);
  /// Queues a write whose operations `build` appends; ready once committed.
  std::future<void> Write(std::function<void(Batch&)> build);
  /// Appends an event row (writer thread: numbers it within this epoch).
  void PutEvent(Batch& b, int64_t job_id, const std::string& node, const std::string& kind, const std::string& detail);
  void WriterLoop();
  /// Group commit (writer thread, `lk` held on mu_), for submissions only: when one of the last 16
  /// takes from the queue held submissions of W >= 2 callers (request threads) and a submission
  /// is queued, waits until submissions of W callers are queued, none has arrived for
  /// gather_.quiet, or gather_.delay has passed. Other writes (the controller's, often made under
  /// its lock) never wait unless queued behind a submission; a lone submitter commits at once. Fewer,
  /// larger transactions cost etcd less (each is replicated, written and applied by every
  /// member); PostgreSQL's commit_delay / commit_siblings is the same trade.
  void GatherLocked(std::unique_lock<std::mutex>& lk);
  /// Builds and commits `items` in as few fenced transactions as the limits allow.
  void CommitItems(std::vector<Item>& items);
  std::string Key(const std::string& suffix) const { return prefix_ + suffix; }
  std::string JobKey(int64_t id) const;
  std::string SpecKey(int64_t id) const;

  EtcdClient& etcd_;
  const std::string prefix_;
  const size_t max_txn_ops_;
  const GroupCommit gather_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> queue_;
  size_t in_flight_ = 0;  // items taken by the writer and not yet done
  std::array<size_t, 16> recent_callers_{};  // callers whose submissions the writer took, last 16 times
  size_t next_take_ = 0;
  std::map<std::thread::id, size_t> queued_by_;  // submissions in queue_ per caller
  bool stop_ = false;
  // Writer-thread state (set by BecomeLeader before any write can succeed).
  std::atomic<int64_t> epoch_{0};
  int64_t next_job_id_ = 1;
  int64_t next_event_ = 0;
  int64_t submission_lease_ = 0;
  int64_t submission_lease_granted_ = 0;  // seconds since epoch
  int64_t leader_lease_ = 0;       // the leader key's lease the writes are fenced on (0 = not checked)
  std::string leader_value_;       // the leader key's value the writes are fenced on ("" = not checked)
  std::atomic<bool> fenced_{false};
  std::atomic<int64_t> fenced_writes_{0};
  std::atomic<int64_t> commits_{0};
  std::function<void()> on_fenced_;
  std::thread writer_;
};

}  // namespace mlsched::server
