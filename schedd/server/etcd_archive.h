// HA mode's history archive. etcd holds the live state, and its quota (2 GB by default) would fill
// with finished jobs and events, so history moves out of etcd into every replica's own SQLite
// database, which mlreport reads (like Slurm's slurmdbd keeping what slurmctld forgets):
//  - the leader, every pass, moves each finished job that ended more than `after_s` ago (its row,
//    spec and attempts) and each event older than that into PREFIX/archive/, in fenced
//    transactions that put the archive entry and delete the originals together, so nothing is
//    ever in neither place. Entries are numbered by one counter (PREFIX/meta/archive_seq, written
//    in the same transactions) and leased for `retention_s`, after which etcd drops them;
//  - every replica (the leader too) copies the entries after its cursor into its SQLite state,
//    recording the cursor in the same SQLite transaction, so a copy repeated after a crash changes
//    nothing. A replica that was down longer than the retention reports the gap in its log.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "schedd/server/etcd_client.h"
#include "schedd/server/etcd_store.h"
#include "schedd/server/store.h"

namespace mlsched::server {

/// When history leaves etcd, and how long the archive keeps it for the replicas to copy.
struct ArchiveConfig {
  int64_t after_s = 24 * 3600;          // seconds after a job's end (an event's time) it moves out
  int64_t retention_s = 7 * 24 * 3600;  // seconds an archive entry stays in etcd (its lease's TTL)
  size_t max_jobs_per_pass = 10000;     // jobs moved in one pass (the next pass goes on)
  size_t max_events_per_pass = 100000;  // events moved in one pass
  std::chrono::seconds archive_interval{300};  // between the leader's passes
  std::chrono::seconds copy_interval{10};      // between each replica's copies
};

/// What one pass moved or copied.
struct ArchiveCounts {
  int64_t jobs = 0;
  int64_t events = 0;
};

/// Leader only: one archive pass at `now` (seconds since epoch) through `store`'s fenced writes.
/// Jobs in a final state with end_time < now - after_s and events with time < now - after_s move
/// to PREFIX/archive/{jobs,events}/<sequence, 20 digits>. Throws EtcdError or StoreError (fenced:
/// this replica no longer leads); whatever was committed before stays moved.
ArchiveCounts ArchiveHistory(EtcdClient& etcd, EtcdStore& store, const ArchiveConfig& cfg, int64_t now);

/// Every replica: copies the archive entries after `history`'s cursors into it (in pages, each one
/// SQLite transaction). Returns what was copied. Throws EtcdError, or StoreError when an entry
/// cannot be parsed (the cursor stays before it).
ArchiveCounts CopyArchive(EtcdClient& etcd, const std::string& prefix, SqliteStore& history);

/// An HA replica's archive thread: every copy_interval it copies new entries into `history`;
/// while `leading()` is true, every archive_interval it also runs an ArchiveHistory pass. Errors
/// are logged and retried at the next turn (a fenced pass also makes the store step down).
class HistoryArchiver {
 public:
  HistoryArchiver(EtcdClient& etcd, EtcdStore& store, SqliteStore& history, ArchiveConfig cfg,
                  std::function<bool()> leading);
  /// Stops the thread (waits for a pass in progress).
  ~HistoryArchiver();
  HistoryArchiver(const HistoryArchiver&) = delete;
  HistoryArchiver& operator=(const HistoryArchiver&) = delete;

 private:
  void Loop();
  EtcdClient& etcd_;
  EtcdStore& store_;
  SqliteStore& history_;
  const ArchiveConfig cfg_;
  std::function<bool()> leading_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mlsched::server
