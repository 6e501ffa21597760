#include "schedd/server/etcd_store.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <future>
#include <set>

#include "schedd/server/stored_rows.h"

namespace mlsched::server {

namespace {

std::string Pad(int64_t v, int width) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%0*" PRId64, width, v);
  return buf;
}

bool IsFinal(const std::string& state) {
  return state == "COMPLETED" || state == "FAILED" || state == "CANCELLED" || state == "TIMEOUT";
}

template <typename Msg>
Msg Parse(const std::string& bytes, const std::string& key) {
  Msg m;
  if (!m.ParseFromString(bytes)) throw StoreError("etcd: cannot parse the value of " + key);
  return m;
}

etcdpb::RequestOp PutOp(std::string key, std::string value, int64_t lease = 0) {
  etcdpb::RequestOp op;
  auto* put = op.mutable_request_put();
  put->set_key(std::move(key));
  put->set_value(std::move(value));
  if (lease) put->set_lease(lease);
  return op;
}

etcdpb::RequestOp RangeOp(std::string key) {
  etcdpb::RequestOp op;
  op.mutable_request_range()->set_key(std::move(key));
  return op;
}

std::string SubmissionSuffix(const std::string& user, uint32_t uid, const std::string& key) {
  return "submissions/" + std::to_string(uid) + "/" + user + "/" + key;
}

}  // namespace

std::string LeaderKey(const std::string& prefix) { return prefix + "leader"; }

namespace {
// The key an outer put or single-key delete touches; nullptr for other operations (nested
// transactions, whose keys are new job ids and submission keys: `keyed` guards those; ranged
// deletes come only through WriteAlone, whose items commit alone).
const std::string* TouchedKey(const etcdpb::RequestOp& op) {
  if (op.has_request_put()) return &op.request_put().key();
  if (op.has_request_delete_range() && op.request_delete_range().range_end().empty())
    return &op.request_delete_range().key();
  return nullptr;
}
}  // namespace

/// The operations of one transaction being built, and what its inserts with a submission key
/// learn once it commits.
struct EtcdStore::Batch {
  std::vector<etcdpb::RequestOp> ops;
  size_t bytes = 0;
  size_t base = 0;        // where this item's first op lands in the transaction
  size_t max_nested = 0;  // operations of the largest nested transaction (etcd: <= max - outer ops)
  /// Submission key suffix -> the result of the insert that claims it earlier in this transaction.
  std::map<std::string, std::shared_ptr<InsertedJob>>* keyed = nullptr;
  std::vector<std::pair<std::string, std::shared_ptr<InsertedJob>>> added;  // keys this item claims
  /// Run in order once the transaction committed (its response); a throw fails the item.
  std::vector<std::function<void(const etcdpb::TxnResponse&)>> resolve;
  void Put(std::string key, std::string value, int64_t lease = 0) {
    bytes += key.size() + value.size() + 16;
    ops.push_back(PutOp(std::move(key), std::move(value), lease));
  }
  void Delete(std::string key) {
    bytes += key.size() + 16;
    etcdpb::RequestOp op;
    op.mutable_request_delete_range()->set_key(std::move(key));
    ops.push_back(std::move(op));
  }
};

EtcdStore::EtcdStore(EtcdClient& etcd, std::string prefix, size_t max_txn_ops, GroupCommit gather)
    : etcd_(etcd), prefix_(std::move(prefix)), max_txn_ops_(std::max<size_t>(8, max_txn_ops)), gather_(gather) {
  writer_ = std::thread([this] { WriterLoop(); });
}

EtcdStore::~EtcdStore() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  writer_.join();
}

std::string EtcdStore::JobKey(int64_t id) const { return Key("jobs/" + Pad(id, 20)); }
std::string EtcdStore::SpecKey(int64_t id) const { return Key("specs/" + Pad(id, 20)); }

void EtcdStore::BecomeLeader(int64_t epoch, int64_t lease, std::string leader_value) {
  etcdpb::RangeRequest req;
  req.set_key(Key("meta/next_job_id"));
  auto resp = etcd_.Range(req);
  int64_t next = 1;
  if (resp.kvs_size() == 1) next = std::max<int64_t>(1, std::strtoll(resp.kvs(0).value().c_str(), nullptr, 10));
  const int64_t submission_lease = etcd_.LeaseGrant(kSubmissionKeyTtl + 3600);
  std::lock_guard lk(mu_);
  leader_lease_ = lease;
  leader_value_ = std::move(leader_value);
  next_job_id_ = next;
  next_event_ = 0;
  submission_lease_ = submission_lease;
  submission_lease_granted_ = std::time(nullptr);
  epoch_ = epoch;
  spdlog::info("etcd store: writing as the leader of epoch {}; next job id {}", epoch, next);
}

void EtcdStore::SetOnFenced(std::function<void()> f) {
  std::lock_guard lk(mu_);
  on_fenced_ = std::move(f);
}

void EtcdStore::Drain() {
  std::unique_lock lk(mu_);
  cv_.wait(lk, [&] { return queue_.empty() && in_flight_ == 0; });
}

void EtcdStore::Enqueue(Item item) {
  item.caller = std::this_thread::get_id();
  {
    std::lock_guard lk(mu_);
    if (item.submission) ++queued_by_[item.caller];
    queue_.push_back(std::move(item));
  }
  cv_.notify_all();
}

void EtcdStore::GatherLocked(std::unique_lock<std::mutex>& lk) {
  const size_t writers = *std::max_element(recent_callers_.begin(), recent_callers_.end());
  // One submitter at a time, or no submission waiting (a controller write): commit at once.
  if (writers < 2 || queued_by_.empty()) return;
  const auto deadline = std::chrono::steady_clock::now() + gather_.delay;
  size_t seen = queue_.size();
  while (!stop_ && queued_by_.size() < writers && queue_.size() < kMaxItemsPerCommit) {
    const auto wake = std::min(deadline, std::chrono::steady_clock::now() + gather_.quiet);
    cv_.wait_until(lk, wake, [&] { return stop_ || queue_.size() != seen; });
    if (queue_.size() == seen || std::chrono::steady_clock::now() >= deadline) return;
    seen = queue_.size();
  }
}

void EtcdStore::WriterLoop() {
  for (;;) {
    std::vector<Item> items;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty() && stop_) return;
      GatherLocked(lk);
      std::set<std::thread::id> callers;
      while (!queue_.empty() && items.size() < kMaxItemsPerCommit) {
        items.push_back(std::move(queue_.front()));
        queue_.pop_front();
        if (!items.back().submission) continue;
        const std::thread::id caller = items.back().caller;
        callers.insert(caller);
        if (auto it = queued_by_.find(caller); it != queued_by_.end() && --it->second == 0) queued_by_.erase(it);
      }
      recent_callers_[next_take_++ % recent_callers_.size()] = callers.size();
      in_flight_ = items.size();
    }
    CommitItems(items);
    {
      std::lock_guard lk(mu_);
      in_flight_ = 0;
    }
    cv_.notify_all();
  }
}

void EtcdStore::CommitItems(std::vector<Item>& items) {
  auto fail_all = [&](size_t from, size_t to, const std::string& why) {
    for (size_t i = from; i < to; ++i) items[i].done(std::make_exception_ptr(StoreError(why)));
  };
  const int64_t epoch = epoch_.load();
  if (epoch == 0) return fail_all(0, items.size(), "etcd store: this schedd is not the leader");
  if (fenced_) {
    fenced_writes_ += static_cast<int64_t>(items.size());
    return fail_all(0, items.size(), "etcd store: fenced: epoch " + std::to_string(epoch) + " no longer holds the leader key");
  }
  try {
    if (std::time(nullptr) - submission_lease_granted_ > 3600) {  // keys expire 7 days + at most 1 h after use
      submission_lease_ = etcd_.LeaseGrant(kSubmissionKeyTtl + 3600);
      submission_lease_granted_ = std::time(nullptr);
    }
  } catch (const std::exception& e) {
    return fail_all(0, items.size(), e.what());
  }
  size_t i = 0;
  while (i < items.size()) {
    Batch batch;
    std::set<std::string> touched;  // keys put or deleted so far: etcd refuses a key touched twice
    std::map<std::string, std::shared_ptr<InsertedJob>> keyed;
    const int64_t next_id_before = next_job_id_;
    std::vector<size_t> accepted;
    std::vector<std::pair<size_t, std::function<void(const etcdpb::TxnResponse&)>>> resolve;  // item, step
    // Items are added whole while the transaction stays within etcd's limits: one op is kept for
    // the id counter, and a nested transaction may hold at most max_txn_ops_ minus the outer ops
    // (etcd's checkTxnRequest).
    while (i < items.size()) {
      Batch one;
      one.keyed = &keyed;
      one.base = batch.ops.size();
      const int64_t next_id_here = next_job_id_;
      try {
        items[i].build(one);
      } catch (const std::exception& e) {
        next_job_id_ = next_id_here;
        fail_all(i, i + 1, e.what());
        ++i;
        continue;
      }
      if (items[i].alone && !batch.ops.empty()) {  // it waits for the next transaction, alone
        next_job_id_ = next_id_here;
        break;
      }
      const bool again = std::any_of(one.ops.begin(), one.ops.end(), [&](const etcdpb::RequestOp& op) {
        const std::string* key = TouchedKey(op);
        return key != nullptr && touched.count(*key) > 0;
      });
      if (again && !batch.ops.empty()) {  // a key this transaction already writes: the next one
        next_job_id_ = next_id_here;
        break;
      }
      const size_t outer = batch.ops.size() + one.ops.size() + 1;
      const bool fits = outer <= max_txn_ops_ && std::max(batch.max_nested, one.max_nested) <= max_txn_ops_ - outer &&
                        batch.bytes + one.bytes + 4096 <= kEtcdMaxRequestBytes;
      if (!fits) {
        next_job_id_ = next_id_here;  // built again for the next transaction
        if (!batch.ops.empty()) break;
        fail_all(i, i + 1, "etcd store: one request needs " + std::to_string(one.ops.size() + 1 + one.max_nested) +
                               " operations and " + std::to_string(one.bytes) + " bytes; etcd allows " +
                               std::to_string(max_txn_ops_) + " and " + std::to_string(kEtcdMaxRequestBytes) +
                               " per transaction");
        ++i;
        continue;
      }
      for (auto& op : one.ops) {
        if (const std::string* key = TouchedKey(op)) touched.insert(*key);
        batch.ops.push_back(std::move(op));
      }
      batch.bytes += one.bytes;
      batch.max_nested = std::max(batch.max_nested, one.max_nested);
      for (auto& [key, result] : one.added) keyed[key] = result;  // a retry later in this transaction follows it
      for (auto& r : one.resolve) resolve.emplace_back(i, std::move(r));
      accepted.push_back(i++);
      if (items[i - 1].alone) break;
    }
    if (accepted.empty()) continue;
    auto fail_accepted = [&](const std::string& why) {
      for (size_t k : accepted) items[k].done(std::make_exception_ptr(StoreError(why)));
    };
    etcdpb::TxnRequest txn;
    auto* cmp = txn.add_compare();
    cmp->set_key(LeaderKey(prefix_));
    cmp->set_target(etcdpb::Compare::CREATE);
    cmp->set_result(etcdpb::Compare::EQUAL);
    cmp->set_create_revision(epoch);
    // Also the key's lease and value (set by BecomeLeader before the first write): a key rewritten
    // in place keeps its create revision.
    if (leader_lease_ != 0) {
      auto* same_lease = txn.add_compare();
      same_lease->set_key(LeaderKey(prefix_));
      same_lease->set_target(etcdpb::Compare::LEASE);
      same_lease->set_result(etcdpb::Compare::EQUAL);
      same_lease->set_lease(leader_lease_);
    }
    if (!leader_value_.empty()) {
      auto* same_value = txn.add_compare();
      same_value->set_key(LeaderKey(prefix_));
      same_value->set_target(etcdpb::Compare::VALUE);
      same_value->set_result(etcdpb::Compare::EQUAL);
      same_value->set_value(leader_value_);
    }
    if (next_job_id_ != next_id_before) batch.Put(Key("meta/next_job_id"), std::to_string(next_job_id_));
    for (auto& op : batch.ops) *txn.add_success() = std::move(op);
    try {
      auto resp = etcd_.Txn(txn);
      if (!resp.succeeded()) {
        fenced_ = true;
        const size_t refused = accepted.size() + (items.size() - i);
        fenced_writes_ += static_cast<int64_t>(refused);
        spdlog::error("etcd store: fenced: a transaction of epoch {} was refused (another replica leads now); "
                      "{} write(s) refused",
                      epoch, refused);
        const std::string why = "etcd store: fenced: epoch " + std::to_string(epoch) + " no longer holds the leader key";
        fail_accepted(why);
        fail_all(i, items.size(), why);
        std::function<void()> cb;
        {
          std::lock_guard lk(mu_);
          cb = on_fenced_;
        }
        if (cb) cb();
        return;
      }
      ++commits_;
      std::set<size_t> failed;
      for (auto& [k, step] : resolve) {
        if (failed.count(k)) continue;
        try {
          step(resp);
        } catch (const std::exception& e) {
          failed.insert(k);
          items[k].done(std::make_exception_ptr(StoreError(e.what())));
        }
      }
      for (size_t k : accepted)
        if (!failed.count(k)) items[k].done(nullptr);
    } catch (const std::exception& e) {
      fail_accepted(e.what());
    }
  }
}

std::future<void> EtcdStore::WriteAlone(std::vector<etcdpb::RequestOp> ops) {
  auto p = std::make_shared<std::promise<void>>();
  Item item;
  item.alone = true;
  item.build = [ops = std::move(ops)](Batch& b) {
    for (const auto& op : ops) {
      b.bytes += op.ByteSizeLong() + 16;
      b.ops.push_back(op);
    }
  };
  item.done = [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); };
  Enqueue(std::move(item));
  return p->get_future();
}

std::future<InsertedJob> EtcdStore::InsertJob(JobRow row) {
  return InsertJobArray(row, 1, [spec = row.spec](int64_t, size_t) { return spec; });
}

std::future<InsertedJob> EtcdStore::InsertJobArray(JobRow row, size_t count,
                                                   std::function<std::string(int64_t, size_t)> spec_of) {
  auto p = std::make_shared<std::promise<InsertedJob>>();
  auto out = std::make_shared<InsertedJob>();
  Item item;
  const std::string sub = row.submission_key.empty() ? "" : SubmissionSuffix(row.user, row.uid, row.submission_key);
  item.build = [this, row = std::move(row), count, spec_of = std::move(spec_of), sub, out](Batch& b) {
    if (!sub.empty())
      if (auto it = b.keyed->find(sub); it != b.keyed->end()) {  // a retry within one transaction
        b.resolve.push_back([out, lead = it->second](const etcdpb::TxnResponse&) {
          if (lead->id == 0) throw StoreError("etcd store: the submission this retry repeats was not stored");
          *out = InsertedJob{lead->id, true};
        });
        return;
      }
    const int64_t first = next_job_id_;
    next_job_id_ += static_cast<int64_t>(count);
    auto put_jobs = [&](auto&& put) {
      for (size_t i = 0; i < count; ++i) {
        JobRow r = row;
        r.id = first + static_cast<int64_t>(i);
        put(JobKey(r.id), ToStored(r).SerializeAsString());
        put(SpecKey(r.id), spec_of(first, i));
      }
    };
    if (sub.empty()) {
      put_jobs([&](std::string k, std::string v) { b.Put(std::move(k), std::move(v)); });
      *out = InsertedJob{first, false};
      return;
    }
    // With a submission key: a nested transaction creates the jobs and claims the key only while
    // the key is absent, else reads it (a retry of a stored submission: its job, nothing new; the
    // ids taken here stay unused). Nothing is read first: one round trip per group commit.
    etcdpb::RequestOp op;
    auto* t = op.mutable_request_txn();
    auto* absent = t->add_compare();
    absent->set_key(Key(sub));
    absent->set_target(etcdpb::Compare::VERSION);
    absent->set_result(etcdpb::Compare::EQUAL);
    absent->set_version(0);
    put_jobs([&](std::string k, std::string v) {
      b.bytes += k.size() + v.size() + 16;
      *t->add_success() = PutOp(std::move(k), std::move(v));
    });
    v1::StoredSubmission s;
    s.set_job_id(first);
    s.set_time(row.submit_time);
    b.bytes += 3 * Key(sub).size() + s.ByteSizeLong() + 64;
    *t->add_success() = PutOp(Key(sub), s.SerializeAsString(), submission_lease_);
    *t->add_failure() = RangeOp(Key(sub));
    const size_t at = b.base + b.ops.size();
    b.max_nested = std::max<size_t>(b.max_nested, static_cast<size_t>(t->success_size()));
    b.ops.push_back(std::move(op));
    b.added.emplace_back(sub, out);
    b.resolve.push_back([at, first, out, key = Key(sub)](const etcdpb::TxnResponse& resp) {
      if (at >= static_cast<size_t>(resp.responses_size())) throw StoreError("etcd: no answer for submission " + key);
      const auto& nested = resp.responses(static_cast<int>(at)).response_txn();
      if (nested.succeeded()) {
        *out = InsertedJob{first, false};
        return;
      }
      if (nested.responses_size() != 1 || nested.responses(0).response_range().kvs_size() != 1)
        throw StoreError("etcd: submission " + key + " exists but could not be read");
      const auto& kv = nested.responses(0).response_range().kvs(0);
      const int64_t stored = Parse<v1::StoredSubmission>(kv.value(), key).job_id();
      // The key names the very ids this insert took: the client library sent the transaction
      // again after losing the first answer (EtcdClient fails over), and the first one committed.
      *out = InsertedJob{stored, stored != first};
    });
  };
  item.done = [p, out](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(*out); };
  item.submission = true;
  Enqueue(std::move(item));
  return p->get_future();
}

std::future<void> EtcdStore::Write(std::function<void(Batch&)> build) {
  auto p = std::make_shared<std::promise<void>>();
  Item item;
  item.build = std::move(build);
  item.done = [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); };
  Enqueue(std::move(item));
  return p->get_future();
}

std::future<void> EtcdStore::UpdateJob(const JobRow& row, std::string event_kind, std::string detail) {
  return Write([this, row, kind = std::move(event_kind), detail = std::move(detail)](Batch& b) {
    b.Put(JobKey(row.id), ToStored(row).SerializeAsString());
    if (!kind.empty()) PutEvent(b, row.id, "", kind, detail);
  });
}

std::future<void> EtcdStore::AppendEvent(int64_t job_id, std::string node, std::string kind, std::string detail) {
  return Write([this, job_id, node = std::move(node), kind = std::move(kind), detail = std::move(detail)](Batch& b) {
    PutEvent(b, job_id, node, kind, detail);
  });
}

void EtcdStore::PutEvent(Batch& b, int64_t job_id, const std::string& node, const std::string& kind,
                         const std::string& detail) {
  v1::StoredEvent e;
  e.set_time(std::time(nullptr));
  e.set_job_id(job_id);
  e.set_node(node);
  e.set_kind(kind);
  e.set_detail(detail);
  b.Put(Key("events/" + Pad(epoch_, 20) + "-" + Pad(next_event_++, 12)), e.SerializeAsString());
}

std::future<void> EtcdStore::SaveAttempt(AttemptRow r) {
  return Write([this, r = std::move(r)](Batch& b) {
    v1::StoredAttempt s = ToStored(r);
    b.Put(Key("attempts/" + Pad(r.job_id, 20) + "/" + Pad(r.attempt, 10)), s.SerializeAsString());
  });
}

std::vector<AttemptRow> EtcdStore::LoadAttempts(int64_t start, int64_t end) {
  std::vector<AttemptRow> out;
  for (const auto& kv : etcd_.RangePrefix(Key("attempts/"))) {
    auto s = Parse<v1::StoredAttempt>(kv.value(), kv.key());
    const bool overlaps = s.start_time() < end && (s.end_time() == 0 || s.end_time() >= start);
    if (!overlaps) continue;
    out.push_back(FromStored(s));
  }
  return out;
}

std::future<void> EtcdStore::SaveStep(StepRow r) {
  return Write([this, r = std::move(r)](Batch& b) {
    b.Put(Key("steps/" + Pad(r.job_id, 20) + "/" + Pad(r.step_id, 10)), ToStored(r).SerializeAsString());
  });
}

std::vector<StepRow> EtcdStore::LoadSteps(const std::vector<int64_t>& job_ids, size_t limit) {
  std::vector<StepRow> out;
  for (int64_t id : job_ids)
    for (const auto& kv : etcd_.RangePrefix(Key("steps/" + Pad(id, 20) + "/"))) {
      if (out.size() >= limit) return out;
      out.push_back(FromStored(Parse<v1::StoredStep>(kv.value(), kv.key())));
    }
  return out;
}

std::future<void> EtcdStore::SaveUsage(std::map<std::string, double> usage, int64_t accrued_until) {
  return Write([this, usage = std::move(usage), accrued_until](Batch& b) {
    v1::StoredUsage s;
    for (const auto& [k, v] : usage) (*s.mutable_usage())[k] = v;
    s.set_accrued_until(accrued_until);
    b.Put(Key("usage"), s.SerializeAsString());
  });
}

int64_t EtcdStore::LoadUsage(std::map<std::string, double>* usage) {
  etcdpb::RangeRequest req;
  req.set_key(Key("usage"));
  auto resp = etcd_.Range(req);
  if (resp.kvs_size() == 0) return 0;
  auto s = Parse<v1::StoredUsage>(resp.kvs(0).value(), req.key());
  usage->clear();
  for (const auto& [k, v] : s.usage()) (*usage)[k] = v;
  return s.accrued_until();
}

std::future<void> EtcdStore::SaveRuntimes(std::string key, std::vector<int64_t> runs) {
  return Write([this, key = std::move(key), runs = std::move(runs)](Batch& b) {
    if (runs.empty()) return b.Delete(Key("runtimes/" + key));
    v1::StoredRuntimes s;
    for (int64_t r : runs) s.add_runs(r);
    b.Put(Key("runtimes/" + key), s.SerializeAsString());
  });
}

std::vector<std::pair<std::string, std::vector<int64_t>>> EtcdStore::LoadRuntimes() {
  const std::string prefix = Key("runtimes/");
  auto kvs = etcd_.RangePrefix(prefix);
  // The order of saves: each save is a new mod revision.
  // Keys saved in one transaction share a revision: they stay in key order (a user before its templates).
  std::stable_sort(kvs.begin(), kvs.end(),
                   [](const auto& a, const auto& b) { return a.mod_revision() < b.mod_revision(); });
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  for (const auto& kv : kvs) {
    auto s = Parse<v1::StoredRuntimes>(kv.value(), kv.key());
    out.emplace_back(kv.key().substr(prefix.size()), std::vector<int64_t>(s.runs().begin(), s.runs().end()));
  }
  return out;
}

std::future<void> EtcdStore::SavePredictorModel(std::string state) {
  if (state.size() > kMaxPredictorModelBytes) {
    std::promise<void> p;
    p.set_exception(std::make_exception_ptr(StoreError("predictor state of " + std::to_string(state.size()) +
                                                       " bytes is over " + std::to_string(kMaxPredictorModelBytes))));
    return p.get_future();
  }
  return Write([this, state = std::move(state)](Batch& b) { b.Put(Key("predictor"), state); });
}

std::string EtcdStore::LoadPredictorModel() {
  for (const auto& kv : etcd_.RangePrefix(Key("predictor")))
    if (kv.key() == Key("predictor")) return kv.value();
  return "";
}

std::future<void> EtcdStore::SaveProvisionLedger(std::string ledger) {
  if (ledger.size() > kMaxProvisionLedgerBytes) {
    std::promise<void> p;
    p.set_exception(std::make_exception_ptr(StoreError("provisioning ledger of " + std::to_string(ledger.size()) +
                                                       " bytes is over " + std::to_string(kMaxProvisionLedgerBytes))));
    return p.get_future();
  }
  return Write([this, ledger = std::move(ledger)](Batch& b) { b.Put(Key("provisioned"), ledger); });
}

std::string EtcdStore::LoadProvisionLedger() {
  for (const auto& kv : etcd_.RangePrefix(Key("provisioned")))
    if (kv.key() == Key("provisioned")) return kv.value();
  return "";
}

std::future<void> EtcdStore::SaveNode(NodeRow row) {
  return Write([this, row = std::move(row)](Batch& b) {
    v1::StoredNode s;
    s.set_name(row.name);
    s.set_info(row.info);
    s.set_drained(row.drained);
    s.set_reason(row.reason);
    b.Put(Key("nodes/" + row.name), s.SerializeAsString());
  });
}

std::vector<NodeRow> EtcdStore::LoadNodes() {
  std::vector<NodeRow> out;
  for (const auto& kv : etcd_.RangePrefix(Key("nodes/"))) {
    auto s = Parse<v1::StoredNode>(kv.value(), kv.key());
    out.push_back(NodeRow{s.name(), s.info(), s.drained(), s.reason()});
  }
  return out;
}

std::vector<JobRow> EtcdStore::LoadJobs(int64_t finished_since) {
  // One linearizable read fixes the revision; the rows and the specs are then read at it in
  // parallel (a takeover waits for this: 100,000 jobs in about a second).
  etcdpb::RangeRequest head;
  head.set_key(Key("jobs/"));
  head.set_range_end(PrefixEnd(Key("jobs/")));
  head.set_count_only(true);
  int64_t rev = etcd_.Range(head).header().revision();
  const std::string specs = Key("specs/");
  auto spec_kvs = std::async(std::launch::async, [&] {
    int64_t at = rev;
    return etcd_.RangePrefix(specs, &at);
  });
  std::map<int64_t, JobRow> rows;
  int64_t at = rev;
  for (const auto& kv : etcd_.RangePrefix(Key("jobs/"), &at)) {
    JobRow r = FromStored(Parse<v1::StoredJob>(kv.value(), kv.key()));
    if (!IsFinal(r.state) || r.end_time >= finished_since) rows.emplace(r.id, std::move(r));
  }
  for (auto& kv : spec_kvs.get()) {
    const int64_t id = std::strtoll(kv.key().c_str() + specs.size(), nullptr, 10);
    if (auto it = rows.find(id); it != rows.end()) it->second.spec = std::move(*kv.mutable_value());
  }
  std::vector<JobRow> out;
  out.reserve(rows.size());
  for (auto& [id, r] : rows) out.push_back(std::move(r));
  return out;
}

std::optional<int64_t> EtcdStore::LookupSubmission(const std::string& user, uint32_t uid, const std::string& key) {
  etcdpb::RangeRequest req;
  req.set_key(Key(SubmissionSuffix(user, uid, key)));
  auto resp = etcd_.Range(req);
  if (resp.kvs_size() == 0) return std::nullopt;
  return Parse<v1::StoredSubmission>(resp.kvs(0).value(), req.key()).job_id();
}

std::optional<JobRow> EtcdStore::LoadJob(int64_t id) {
  etcdpb::TxnRequest txn;  // no compare: both reads at one revision
  *txn.add_success() = RangeOp(JobKey(id));
  *txn.add_success() = RangeOp(SpecKey(id));
  auto resp = etcd_.Txn(txn);
  if (resp.responses_size() != 2 || resp.responses(0).response_range().kvs_size() == 0) return std::nullopt;
  const auto& kv = resp.responses(0).response_range().kvs(0);
  JobRow r = FromStored(Parse<v1::StoredJob>(kv.value(), kv.key()));
  if (resp.responses(1).response_range().kvs_size() == 1) r.spec = resp.responses(1).response_range().kvs(0).value();
  return r;
}

std::optional<std::string> EtcdStore::LoadSpec(int64_t id) {
  etcdpb::RangeRequest req;
  req.set_key(SpecKey(id));
  auto resp = etcd_.Range(req);
  if (resp.kvs_size() == 0) return std::nullopt;
  return resp.kvs(0).value();
}

std::vector<JobRow> EtcdStore::LoadFinishedJobs(int64_t start, int64_t end) {
  std::vector<JobRow> out;
  for (const auto& kv : etcd_.RangePrefix(Key("jobs/"))) {
    JobRow r = FromStored(Parse<v1::StoredJob>(kv.value(), kv.key()));
    if (IsFinal(r.state) && r.end_time >= start && r.end_time < end) out.push_back(std::move(r));
  }
  for (auto& r : out)
    if (auto spec = LoadSpec(r.id)) r.spec = std::move(*spec);
  return out;
}

std::vector<JobRow> EtcdStore::LoadFinishedJobsPage(int64_t since, int64_t after_id, size_t limit,
                                                    const FinishedFilter& filter) {
  auto in = [](const std::vector<std::string>& names, const std::string& name) {
    return names.empty() || names.size() > FinishedFilter::kMaxFilterNames ||
           std::find(names.begin(), names.end(), name) != names.end();
  };
  std::vector<JobRow> out;
  etcdpb::RangeRequest req;
  req.set_key(JobKey(after_id + 1));
  req.set_range_end(PrefixEnd(Key("jobs/")));
  req.set_limit(1000);
  while (out.size() < limit) {
    auto resp = etcd_.Range(req);
    for (const auto& kv : resp.kvs()) {
      JobRow r = FromStored(Parse<v1::StoredJob>(kv.value(), kv.key()));
      if (IsFinal(r.state) && r.end_time >= since && in(filter.users, r.user) && in(filter.states, r.state))
        out.push_back(std::move(r));
      if (out.size() == limit) break;
    }
    if (!resp.more() || resp.kvs_size() == 0) break;
    req.set_key(resp.kvs(resp.kvs_size() - 1).key() + std::string(1, '\0'));
  }
  for (auto& r : out)
    if (auto spec = LoadSpec(r.id)) r.spec = std::move(*spec);
  return out;
}

}  // namespace mlsched::server
