#include "schedd/server/etcd_archive.h"

#include <spdlog/spdlog.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include "schedd/server/stored_rows.h"

namespace mlsched::server {

namespace {

constexpr int64_t kPage = 500;  // keys per read while copying or scanning events

std::string Pad(int64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%020" PRId64, v);
  return buf;
}

bool IsFinal(const std::string& state) {
  return state == "COMPLETED" || state == "FAILED" || state == "CANCELLED" || state == "TIMEOUT";
}

etcdpb::RequestOp Put(std::string key, std::string value, int64_t lease) {
  etcdpb::RequestOp op;
  auto* put = op.mutable_request_put();
  put->set_key(std::move(key));
  put->set_value(std::move(value));
  put->set_lease(lease);
  return op;
}

etcdpb::RequestOp Delete(std::string key, std::string range_end = "") {
  etcdpb::RequestOp op;
  auto* del = op.mutable_request_delete_range();
  del->set_key(std::move(key));
  if (!range_end.empty()) del->set_range_end(std::move(range_end));
  return op;
}

/// Builds the archive's transactions: each entry's operations go whole into one transaction with
/// the sequence counter, within etcd's limits; Flush commits (fenced) and waits.
class ArchiveWriter {
 public:
  ArchiveWriter(EtcdClient& etcd, EtcdStore& store, int64_t retention_s)
      : etcd_(etcd), store_(store), retention_s_(retention_s) {
    etcdpb::RangeRequest req;
    req.set_key(store.prefix() + "meta/archive_seq");
    auto resp = etcd.Range(req);
    if (resp.kvs_size() == 1) seq_ = std::strtoll(resp.kvs(0).value().c_str(), nullptr, 10);
  }
  /// Adds one entry: `value` under archive/<kind>/<next sequence>, plus `deletes` of its originals.
  void Add(const std::string& kind, std::string value, std::vector<etcdpb::RequestOp> deletes) {
    size_t bytes = value.size() + 64;
    for (const auto& d : deletes) bytes += d.ByteSizeLong();
    if (!ops_.empty() && (ops_.size() + deletes.size() + 2 > store_.max_txn_ops() ||
                          bytes_ + bytes + 4096 > kEtcdMaxRequestBytes))
      Flush();
    if (lease_ == 0) lease_ = etcd_.LeaseGrant(retention_s_);  // one per pass that moves something
    ops_.push_back(Put(store_.prefix() + "archive/" + kind + "/" + Pad(++seq_), std::move(value), lease_));
    for (auto& d : deletes) ops_.push_back(std::move(d));
    bytes_ += bytes;
  }
  /// Commits what was added (throws StoreError when refused: fenced, or over etcd's limits).
  void Flush() {
    if (ops_.empty()) return;
    ops_.push_back(Put(store_.prefix() + "meta/archive_seq", std::to_string(seq_), 0));
    store_.WriteAlone(std::move(ops_)).get();
    ops_.clear();
    bytes_ = 0;
  }

 private:
  EtcdClient& etcd_;
  EtcdStore& store_;
  const int64_t retention_s_;
  int64_t seq_ = 0;
  int64_t lease_ = 0;
  std::vector<etcdpb::RequestOp> ops_;
  size_t bytes_ = 0;
};

int64_t ArchiveJobs(EtcdClient& etcd, EtcdStore& store, ArchiveWriter& w, const ArchiveConfig& cfg, int64_t now) {
  const std::string& p = store.prefix();
  std::vector<v1::StoredJob> due;
  for (const auto& kv : etcd.RangePrefix(p + "jobs/")) {
    v1::StoredJob job;
    if (!job.ParseFromString(kv.value())) throw StoreError("etcd: cannot parse the value of " + kv.key());
    if (IsFinal(job.state()) && job.end_time() < now - cfg.after_s) due.push_back(std::move(job));
    if (due.size() >= cfg.max_jobs_per_pass) break;
  }
  for (const auto& job : due) {
    const std::string id = Pad(job.id());
    v1::StoredArchivedJob entry;
    *entry.mutable_job() = job;
    etcdpb::RangeRequest spec;
    spec.set_key(p + "specs/" + id);
    if (auto r = etcd.Range(spec); r.kvs_size() == 1) entry.set_spec(r.kvs(0).value());
    const std::string attempts = p + "attempts/" + id + "/";
    for (const auto& kv : etcd.RangePrefix(attempts))
      if (!entry.add_attempts()->ParseFromString(kv.value())) throw StoreError("etcd: cannot parse the value of " + kv.key());
    const std::string steps = p + "steps/" + id + "/";
    for (const auto& kv : etcd.RangePrefix(steps))
      if (!entry.add_steps()->ParseFromString(kv.value())) throw StoreError("etcd: cannot parse the value of " + kv.key());
    std::vector<etcdpb::RequestOp> deletes;
    deletes.push_back(Delete(p + "jobs/" + id));
    deletes.push_back(Delete(p + "specs/" + id));
    deletes.push_back(Delete(attempts, PrefixEnd(attempts)));
    deletes.push_back(Delete(steps, PrefixEnd(steps)));
    w.Add("jobs", entry.SerializeAsString(), std::move(deletes));
  }
  return static_cast<int64_t>(due.size());
}

/// Events are keyed by (epoch, sequence), so in time order: the scan stops at the first one
/// that is not yet due.
int64_t ArchiveEvents(EtcdClient& etcd, EtcdStore& store, ArchiveWriter& w, const ArchiveConfig& cfg, int64_t now) {
  const std::string events = store.prefix() + "events/";
  int64_t moved = 0;
  std::string from = events;
  for (;;) {
    etcdpb::RangeRequest req;
    req.set_key(from);
    req.set_range_end(PrefixEnd(events));
    req.set_limit(kPage);
    auto resp = etcd.Range(req);
    for (const auto& kv : resp.kvs()) {
      v1::StoredEvent e;
      if (!e.ParseFromString(kv.value())) throw StoreError("etcd: cannot parse the value of " + kv.key());
      if (e.time() >= now - cfg.after_s || moved >= static_cast<int64_t>(cfg.max_events_per_pass)) return moved;
      w.Add("events", kv.value(), {Delete(kv.key())});
      ++moved;
    }
    if (!resp.more() || resp.kvs_size() == 0) return moved;
    from = resp.kvs(resp.kvs_size() - 1).key() + std::string(1, '\0');
  }
}

/// The sequence number at the end of an archive key ("" -> 0).
int64_t SeqOf(const std::string& key) {
  const auto slash = key.rfind('/');
  return key.empty() || slash == std::string::npos ? 0 : std::strtoll(key.c_str() + slash + 1, nullptr, 10);
}

/// Copies one stream (jobs or events) page by page; `kind` names it in the cursor table too.
int64_t CopyStream(EtcdClient& etcd, const std::string& prefix, SqliteStore& history, const std::string& kind) {
  const std::string base = prefix + "archive/" + kind + "/";
  std::string cursor = history.HistoryCursor(kind);
  int64_t copied = 0;
  for (;;) {
    etcdpb::RangeRequest req;
    req.set_key(cursor.empty() ? base : cursor + std::string(1, '\0'));
    req.set_range_end(PrefixEnd(base));
    req.set_limit(kPage);
    auto resp = etcd.Range(req);
    if (resp.kvs_size() == 0) return copied;
    if (const int64_t first = SeqOf(resp.kvs(0).key()), last = SeqOf(cursor); first > last + 1 && !cursor.empty())
      spdlog::error("history: archived {} {}..{} expired from etcd before this replica copied them (down longer than "
                    "the archive's retention?); they are missing from this replica's history",
                    kind, last + 1, first - 1);
    std::vector<ArchivedJob> jobs;
    std::vector<EventRow> events;
    for (const auto& kv : resp.kvs()) {
      if (kind == "jobs") {
        v1::StoredArchivedJob a;
        if (!a.ParseFromString(kv.value())) throw StoreError("etcd: cannot parse the value of " + kv.key());
        ArchivedJob j{FromStored(a.job()), {}, {}};
        j.row.spec = a.spec();
        for (const auto& x : a.attempts()) j.attempts.push_back(FromStored(x));
        for (const auto& x : a.steps()) j.steps.push_back(FromStored(x));
        jobs.push_back(std::move(j));
      } else {
        v1::StoredEvent e;
        if (!e.ParseFromString(kv.value())) throw StoreError("etcd: cannot parse the value of " + kv.key());
        events.push_back(EventRow{e.time(), e.job_id(), e.node(), e.kind(), e.detail()});
      }
    }
    cursor = resp.kvs(resp.kvs_size() - 1).key();
    copied += resp.kvs_size();
    history.ImportHistory(std::move(jobs), std::move(events), kind, cursor).get();
    if (!resp.more()) return copied;
  }
}

}  // namespace

ArchiveCounts ArchiveHistory(EtcdClient& etcd, EtcdStore& store, const ArchiveConfig& cfg, int64_t now) {
  ArchiveWriter w(etcd, store, cfg.retention_s);
  ArchiveCounts c;
  c.jobs = ArchiveJobs(etcd, store, w, cfg, now);
  c.events = ArchiveEvents(etcd, store, w, cfg, now);
  w.Flush();
  return c;
}

ArchiveCounts CopyArchive(EtcdClient& etcd, const std::string& prefix, SqliteStore& history) {
  ArchiveCounts c;
  c.jobs = CopyStream(etcd, prefix, history, "jobs");
  c.events = CopyStream(etcd, prefix, history, "events");
  return c;
}

HistoryArchiver::HistoryArchiver(EtcdClient& etcd, EtcdStore& store, SqliteStore& history, ArchiveConfig cfg,
                                 std::function<bool()> leading)
    : etcd_(etcd), store_(store), history_(history), cfg_(cfg), leading_(std::move(leading)) {
  thread_ = std::thread([this] { Loop(); });
}

HistoryArchiver::~HistoryArchiver() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void HistoryArchiver::Loop() {
  auto next_pass = std::chrono::steady_clock::now() + cfg_.copy_interval;  // let a new leader settle first
  std::unique_lock lk(mu_);
  while (!stop_) {
    lk.unlock();
    try {
      if (leading_() && std::chrono::steady_clock::now() >= next_pass) {
        next_pass = std::chrono::steady_clock::now() + cfg_.archive_interval;
        const auto now = std::chrono::duration_cast<std::chrono::seconds>(
                             std::chrono::system_clock::now().time_since_epoch()).count();
        const ArchiveCounts moved = ArchiveHistory(etcd_, store_, cfg_, now);
        if (moved.jobs || moved.events)
          spdlog::info("history: moved {} finished job(s) and {} event(s) out of etcd into the archive", moved.jobs,
                       moved.events);
      }
      const ArchiveCounts copied = CopyArchive(etcd_, store_.prefix(), history_);
      if (copied.jobs || copied.events)
        spdlog::info("history: copied {} job(s) and {} event(s) into this replica's history", copied.jobs, copied.events);
    } catch (const std::exception& e) {
      spdlog::warn("history: {}; retrying in {} s", e.what(), cfg_.copy_interval.count());
    }
    lk.lock();
    cv_.wait_for(lk, cfg_.copy_interval, [&] { return stop_; });
  }
}

}  // namespace mlsched::server
