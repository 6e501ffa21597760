#include "schedd/server/store.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <utility>

#include "schedd/server/store_schema.h"

namespace mlsched::server {
namespace {

void Check(sqlite3* db, int rc, const char* what) {
  if (rc != SQLITE_OK && rc != SQLITE_DONE && rc != SQLITE_ROW)
    throw StoreError(std::string("sqlite: ") + what + ": " + sqlite3_errmsg(db));
}

void Exec(sqlite3* db, const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    throw StoreError(std::string("sqlite: ") + msg + " in: " + sql);
  }
}

// A prepared statement with RAII finalization and typed binding helpers.
// Prepared statements kept per connection and SQL literal (its address), so a hot statement is
// compiled once, not on every write: preparing took ~18% of schedd's CPU with 20,000 starts on
// 1,000 nodes (issue 30). A connection is used by one thread at a time; the map's own lock only
// guards lookups. A statement already in use (nested) gets a fresh one, finalized after use.
struct CachedStmt {
  sqlite3_stmt* st = nullptr;
  bool in_use = false;
};
std::mutex g_stmt_mu;
std::map<std::pair<sqlite3*, const char*>, CachedStmt> g_stmts;

// Finalizes the cached statements of `db`; before sqlite3_close.
void FinalizeCached(sqlite3* db) {
  std::lock_guard lk(g_stmt_mu);
  for (auto it = g_stmts.begin(); it != g_stmts.end();) {
    if (it->first.first == db) {
      sqlite3_finalize(it->second.st);
      it = g_stmts.erase(it);
    } else {
      ++it;
    }
  }
}

/// Stmt's second argument: keep the compiled statement for the next use. Only for SQL given as
/// a string literal: the cache is keyed by the text's address.
constexpr bool kCache = true;

class Stmt {
 public:
  Stmt(sqlite3* db, const char* sql, bool cache = false) : db_(db) {
    if (cache) {
      std::lock_guard lk(g_stmt_mu);
      auto& c = g_stmts[{db, sql}];
      if (c.st && !c.in_use) {
        c.in_use = true;
        cached_ = &c;
        st_ = c.st;
        return;
      }
      if (!c.st) {
        Check(db, sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &c.st, nullptr), sql);
        c.in_use = true;
        cached_ = &c;
        st_ = c.st;
        return;
      }
    }
    Check(db, sqlite3_prepare_v2(db, sql, -1, &st_, nullptr), sql);  // nested use of the same SQL
  }
  ~Stmt() {
    if (!cached_) {
      sqlite3_finalize(st_);
      return;
    }
    sqlite3_reset(st_);
    sqlite3_clear_bindings(st_);
    std::lock_guard lk(g_stmt_mu);
    cached_->in_use = false;
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  Stmt& Bind(int i, int64_t v) { Check(db_, sqlite3_bind_int64(st_, i, v), "bind"); return *this; }
  Stmt& Bind(int i, const std::string& v) {
    Check(db_, sqlite3_bind_blob(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT), "bind");
    return *this;
  }
  Stmt& BindText(int i, const std::string& v) {
    Check(db_, sqlite3_bind_text(st_, i, v.data(), static_cast<int>(v.size()), SQLITE_TRANSIENT), "bind");
    return *this;
  }
  Stmt& BindDouble(int i, double v) { Check(db_, sqlite3_bind_double(st_, i, v), "bind"); return *this; }
  /// Makes the statement ready to run again (bindings are replaced by the next Bind calls).
  void Reset() { sqlite3_reset(st_); }
  bool Step() {
    int rc = sqlite3_step(st_);
    Check(db_, rc, sqlite3_sql(st_));
    return rc == SQLITE_ROW;
  }
  int64_t Int(int c) { return sqlite3_column_int64(st_, c); }
  double Double(int c) { return sqlite3_column_double(st_, c); }
  std::string Blob(int c) {
    const void* p = sqlite3_column_blob(st_, c);
    return p ? std::string(static_cast<const char*>(p), sqlite3_column_bytes(st_, c)) : std::string();
  }

 private:
  sqlite3* db_;
  sqlite3_stmt* st_ = nullptr;
  CachedStmt* cached_ = nullptr;  // from g_stmts (std::map: its address is stable)
};

constexpr const char* kJobColumns =
    "id, spec, user, uid, gid, state, reason, submit_time, start_time, end_time, exit_code, attempt, "
    "requeue_count, placement, preempt_count, evictions, image_digest, usage";

JobRow ReadJob(Stmt& s) {
  JobRow r;
  r.id = s.Int(0);
  r.spec = s.Blob(1);
  r.user = s.Blob(2);
  r.uid = static_cast<uint32_t>(s.Int(3));
  r.gid = static_cast<uint32_t>(s.Int(4));
  r.state = s.Blob(5);
  r.reason = s.Blob(6);
  r.submit_time = s.Int(7);
  r.start_time = s.Int(8);
  r.end_time = s.Int(9);
  r.exit_code = static_cast<int32_t>(s.Int(10));
  r.attempt = static_cast<int32_t>(s.Int(11));
  r.requeue_count = static_cast<int32_t>(s.Int(12));
  r.placement = s.Blob(13);
  r.preempt_count = static_cast<int32_t>(s.Int(14));
  r.evictions = static_cast<int32_t>(s.Int(15));
  r.image_digest = s.Blob(16);
  r.usage = s.Blob(17);
  return r;
}


// In the writer's transaction: the job an earlier submission with row's key created, if any; else
// records `id` for the key (and forgets keys older than kSubmissionKeyTtl).
std::optional<int64_t> ExistingSubmission(sqlite3* db, const JobRow& row) {
  if (row.submission_key.empty()) return std::nullopt;
  Stmt q(db, "SELECT job_id FROM submissions WHERE user=? AND uid=? AND key=?");
  q.BindText(1, row.user).Bind(2, row.uid).BindText(3, row.submission_key);
  if (q.Step()) return q.Int(0);
  return std::nullopt;
}

void RecordSubmission(sqlite3* db, const JobRow& row, int64_t id) {
  if (row.submission_key.empty()) return;
  Stmt prune(db, "DELETE FROM submissions WHERE time < ?");
  prune.Bind(1, row.submit_time - kSubmissionKeyTtl).Step();
  Stmt ins(db, "INSERT INTO submissions(user, uid, key, job_id, time) VALUES (?,?,?,?,?)");
  ins.BindText(1, row.user).Bind(2, row.uid).BindText(3, row.submission_key).Bind(4, id).Bind(5, row.submit_time).Step();
}

}  // namespace

void SecureStateFiles(const std::string& state_dir) {
  namespace fs = std::filesystem;
  const fs::path dir(state_dir), db = dir / "state.db";
  const bool created = fs::create_directories(dir);
  // Tighten the directory only when it is evidently schedd's own (never e.g. /tmp or $HOME given
  // by mistake); the files below are 0600 either way.
  std::error_code ec;
  if (created || fs::is_empty(dir, ec) || fs::exists(db)) {
    if (::chmod(dir.c_str(), 0700) != 0)
      throw StoreError("cannot make " + dir.string() + " private (chmod 0700): " + std::strerror(errno));
  } else if (struct stat st {}; ::stat(dir.c_str(), &st) == 0 && (st.st_mode & 0077)) {
    spdlog::warn("state directory {} is accessible to other users (mode {:o}) and holds other files; "
                 "state.db is 0600, but consider a private directory (0700)",
                 dir.string(), st.st_mode & 0777);
  }
  // SQLite creates the -wal and -shm files with the database file's mode.
  int fd = ::open(db.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) throw StoreError("cannot create " + db.string() + ": " + std::strerror(errno));
  const int rc = ::fchmod(fd, 0600);
  ::close(fd);
  if (rc != 0) throw StoreError("cannot make " + db.string() + " private (chmod 0600): " + std::strerror(errno));
  for (const char* suffix : {"-wal", "-shm", "-journal"}) {
    const std::string f = db.string() + suffix;
    if (::chmod(f.c_str(), 0600) != 0 && errno != ENOENT)
      throw StoreError("cannot make " + f + " private (chmod 0600): " + std::strerror(errno));
  }
}

SqliteStore::SqliteStore(const std::string& state_dir, bool read_only) {
  path_ = (std::filesystem::path(state_dir) / "state.db").string();
  if (read_only) {
    if (!std::filesystem::exists(path_)) throw StoreError(path_ + ": no such file (is --state-dir right?)");
    if (sqlite3_open_v2(path_.c_str(), &rdb_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK)
      throw StoreError("sqlite: cannot open " + path_ + " read-only");
    sqlite3_busy_timeout(rdb_, 5000);
    return;
  }
  SecureStateFiles(state_dir);
  Check(nullptr, sqlite3_open_v2(path_.c_str(), &wdb_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr) == SQLITE_OK ? SQLITE_OK : SQLITE_ERROR, "open");
  sqlite3_busy_timeout(wdb_, 5000);
  Exec(wdb_, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;");
  Migrate();
  if (sqlite3_open_v2(path_.c_str(), &rdb_, SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK)
    throw StoreError("sqlite: cannot open " + path_ + " read-only");
  sqlite3_busy_timeout(rdb_, 5000);
  writer_ = std::thread([this] { WriterLoop(); });
}

SqliteStore::~SqliteStore() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (writer_.joinable()) writer_.join();
  FinalizeCached(rdb_);
  sqlite3_close(rdb_);
  if (wdb_) {
    FinalizeCached(wdb_);
    sqlite3_close(wdb_);
  }
}

void SqliteStore::Migrate() {
  Exec(wdb_, "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);");
  int version = SchemaVersion();
  const std::span<const char* const> migrations = SchemaMigrations();
  const int target = static_cast<int>(migrations.size());
  if (version > target)
    throw StoreError(path_ + ": schema version " + std::to_string(version) + " is newer than this schedd (" +
                     std::to_string(target) + ")");
  for (int v = version; v < target; ++v) {
    Exec(wdb_, "BEGIN IMMEDIATE;");
    try {
      Exec(wdb_, migrations[static_cast<size_t>(v)]);
      Exec(wdb_, "DELETE FROM schema_version;");
      Stmt(wdb_, "INSERT INTO schema_version(version) VALUES (?)").Bind(1, v + 1).Step();
      Exec(wdb_, "COMMIT;");
    } catch (...) {
      Exec(wdb_, "ROLLBACK;");
      throw;
    }
  }
}

int SqliteStore::SchemaVersion() {
  Stmt s(wdb_ ? wdb_ : rdb_, "SELECT COALESCE(MAX(version), 0) FROM schema_version");
  s.Step();
  return static_cast<int>(s.Int(0));
}

void SqliteStore::Enqueue(Work work, std::function<void(std::exception_ptr)> done) {
  if (!writer_.joinable()) {
    done(std::make_exception_ptr(StoreError(path_ + " is open read-only")));
    return;
  }
  {
    std::lock_guard lk(mu_);
    queue_.push_back(Item{std::move(work), std::move(done)});
  }
  cv_.notify_one();
}

void SqliteStore::WriterLoop() {
  for (;;) {
    std::deque<Item> batch;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty() && stop_) return;
      batch.swap(queue_);
    }
    if (const bool refuse = refuse_writes_; refuse != refusing_) {
      Exec(wdb_, refuse ? "PRAGMA query_only = 1;" : "PRAGMA query_only = 0;");
      refusing_ = refuse;
    }
    // One transaction for the whole batch (group commit); on failure, retry items one by one so
    // one bad write cannot fail its neighbours.
    std::exception_ptr batch_error;
    try {
      Exec(wdb_, "BEGIN IMMEDIATE;");
      for (auto& it : batch) it.work(wdb_);
      Exec(wdb_, "COMMIT;");
    } catch (...) {
      batch_error = std::current_exception();
      sqlite3_exec(wdb_, "ROLLBACK;", nullptr, nullptr, nullptr);
    }
    if (!batch_error) {
      for (auto& it : batch) it.done(nullptr);
      continue;
    }
    for (auto& it : batch) {
      std::exception_ptr err;
      try {
        Exec(wdb_, "BEGIN IMMEDIATE;");
        it.work(wdb_);
        Exec(wdb_, "COMMIT;");
      } catch (...) {
        err = std::current_exception();
        sqlite3_exec(wdb_, "ROLLBACK;", nullptr, nullptr, nullptr);
      }
      it.done(err);
    }
  }
}

std::future<InsertedJob> SqliteStore::InsertJob(JobRow row) {
  auto p = std::make_shared<std::promise<InsertedJob>>();
  auto out = std::make_shared<InsertedJob>();
  Enqueue(
      [row = std::move(row), out](sqlite3* db) {
        if (auto existing = ExistingSubmission(db, row)) {
          *out = InsertedJob{*existing, true};
          return;
        }
        Stmt s(db,
               "INSERT INTO jobs(spec, user, uid, gid, state, reason, submit_time, attempt, requeue_count) "
               "VALUES (?,?,?,?,?,?,?,?,?)");
        s.Bind(1, row.spec).BindText(2, row.user).Bind(3, row.uid).Bind(4, row.gid).BindText(5, row.state)
            .BindText(6, row.reason).Bind(7, row.submit_time).Bind(8, row.attempt).Bind(9, row.requeue_count);
        s.Step();
        *out = InsertedJob{sqlite3_last_insert_rowid(db), false};
        RecordSubmission(db, row, out->id);
      },
      [p, out](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(*out); });
  return p->get_future();
}

std::future<InsertedJob> SqliteStore::InsertJobArray(JobRow row, size_t count,
                                               std::function<std::string(int64_t, size_t)> spec_of) {
  auto p = std::make_shared<std::promise<InsertedJob>>();
  auto first = std::make_shared<int64_t>(0);
  auto existed = std::make_shared<bool>(false);
  Enqueue(
      [row = std::move(row), count, spec_of = std::move(spec_of), first, existed](sqlite3* db) {
        if (auto existing = ExistingSubmission(db, row)) {
          *first = *existing;
          *existed = true;
          return;
        }
        Stmt s(db,
               "INSERT INTO jobs(id, spec, user, uid, gid, state, reason, submit_time, attempt, requeue_count) "
               "VALUES (?,?,?,?,?,?,?,?,?,?)");
        for (size_t i = 0; i < count; ++i) {
          // The first row takes the next AUTOINCREMENT id; the others follow it, so the ids of
          // one array are consecutive even when other inserts share the group commit.
          if (i == 0) {
            Stmt n(db, "SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name='jobs'), 0) + 1");
            n.Step();
            *first = n.Int(0);
          }
          const int64_t id = *first + static_cast<int64_t>(i);
          s.Reset();
          s.Bind(1, id).Bind(2, spec_of(*first, i)).BindText(3, row.user).Bind(4, row.uid).Bind(5, row.gid)
              .BindText(6, row.state).BindText(7, row.reason).Bind(8, row.submit_time).Bind(9, row.attempt)
              .Bind(10, row.requeue_count);
          s.Step();
        }
        RecordSubmission(db, row, *first);
      },
      [p, first, existed](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(InsertedJob{*first, *existed}); });
  return p->get_future();
}

std::future<void> SqliteStore::UpdateJob(const JobRow& row, std::string event_kind, std::string detail) {
  auto p = std::make_shared<std::promise<void>>();
  Enqueue(
      [row, event_kind = std::move(event_kind), detail = std::move(detail)](sqlite3* db) {
        Stmt s(db,
               "UPDATE jobs SET state=?, reason=?, start_time=?, end_time=?, exit_code=?, attempt=?, "
               "requeue_count=?, placement=?, spec=CASE WHEN length(?)>0 THEN ? ELSE spec END, "
               "preempt_count=?, evictions=?, image_digest=?, usage=? WHERE id=?",
               kCache);
        s.BindText(1, row.state).BindText(2, row.reason).Bind(3, row.start_time).Bind(4, row.end_time)
            .Bind(5, row.exit_code).Bind(6, row.attempt).Bind(7, row.requeue_count).Bind(8, row.placement)
            .Bind(9, row.spec).Bind(10, row.spec).Bind(11, row.preempt_count).Bind(12, row.evictions)
            .BindText(13, row.image_digest).Bind(14, row.usage).Bind(15, row.id);
        s.Step();
        if (!event_kind.empty()) {
          Stmt e(db, "INSERT INTO events(time, job_id, node, kind, detail) VALUES (strftime('%s','now'),?,'',?,?)", kCache);
          e.Bind(1, row.id).BindText(2, event_kind).BindText(3, detail).Step();
        }
      },
      [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); });
  return p->get_future();
}

std::future<void> SqliteStore::AppendEvent(int64_t job_id, std::string node, std::string kind, std::string detail) {
  auto p = std::make_shared<std::promise<void>>();
  Enqueue(
      [=](sqlite3* db) {
        Stmt e(db, "INSERT INTO events(time, job_id, node, kind, detail) VALUES (strftime('%s','now'),?,?,?,?)", kCache);
        e.Bind(1, job_id).BindText(2, node).BindText(3, kind).BindText(4, detail).Step();
      },
      [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); });
  return p->get_future();
}

std::future<void> SqliteStore::SavePredictorModel(std::string state) {
  auto p = std::make_shared<std::promise<void>>();
  if (state.size() > kMaxPredictorModelBytes) {
    p->set_exception(std::make_exception_ptr(StoreError("predictor state of " + std::to_string(state.size()) +
                                                        " bytes is over " + std::to_string(kMaxPredictorModelBytes))));
    return p->get_future();
  }
  Enqueue(
      [state = std::move(state)](sqlite3* db) {
        Stmt(db, "INSERT OR REPLACE INTO predictor_model(id, state) VALUES (1, ?)").Bind(1, state).Step();
      },
      [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); });
  return p->get_future();
}

std::string SqliteStore::LoadPredictorModel() {
  std::lock_guard lk(rmu_);
  Stmt s(rdb_, "SELECT state FROM predictor_model WHERE id = 1");
  return s.Step() ? s.Blob(0) : std::string();
}

std::future<void> SqliteStore::SaveProvisionLedger(std::string ledger) {
  auto p = std::make_shared<std::promise<void>>();
  if (ledger.size() > kMaxProvisionLedgerBytes) {
    p->set_exception(std::make_exception_ptr(StoreError("provisioning ledger of " + std::to_string(ledger.size()) +
                                                        " bytes is over " + std::to_string(kMaxProvisionLedgerBytes))));
    return p->get_future();
  }
  Enqueue(
      [ledger = std::move(ledger)](sqlite3* db) {
        Stmt(db, "INSERT OR REPLACE INTO provision_ledger(id, ledger) VALUES (1, ?)").Bind(1, ledger).Step();
      },
      [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); });
  return p->get_future();
}

std::string SqliteStore::LoadProvisionLedger() {
  std::lock_guard lk(rmu_);
  Stmt s(rdb_, "SELECT ledger FROM provision_ledger WHERE id = 1");
  return s.Step() ? s.Blob(0) : std::string();
}

std::future<void> SqliteStore::SaveNode(NodeRow row) {
  auto p = std::make_shared<std::promise<void>>();
  Enqueue(
      [row = std::move(row)](sqlite3* db) {
        Stmt s(db,
               "INSERT INTO nodes(name, info, drained, reason) VALUES (?,?,?,?) ON CONFLICT(name) DO UPDATE "
               "SET info=excluded.info, drained=excluded.drained, reason=excluded.reason",
               kCache);
        s.BindText(1, row.name).Bind(2, row.info).Bind(3, row.drained ? 1 : 0).BindText(4, row.reason).Step();
      },
      [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); });
  return p->get_future();
}

namespace {
const char* const kInsertAttempt =
    "INSERT OR REPLACE INTO attempts(job_id, attempt, start_time, end_time, outcome, ntasks, cpu_millis, gpus, gpu_type,"
    " pool, nodes, lost_work_s, cpu_usec, max_rss_bytes, gpu_seconds, gpu_busy_seconds, gpu_energy_joules, oom_kills,"
    " gpu_util_max, gpu_memory_max_bytes)"
    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)";
void BindAttempt(Stmt& s, const AttemptRow& a) {
  s.Bind(1, a.job_id).Bind(2, a.attempt).Bind(3, a.start_time).Bind(4, a.end_time).BindText(5, a.outcome)
      .Bind(6, a.ntasks).Bind(7, a.cpu_millis).Bind(8, a.gpus).BindText(9, a.gpu_type).BindText(10, a.pool)
      .BindText(11, a.nodes).Bind(12, a.lost_work_s).Bind(13, a.cpu_usec).Bind(14, a.max_rss_bytes)
      .BindDouble(15, a.gpu_seconds).BindDouble(16, a.gpu_busy_seconds).BindDouble(17, a.gpu_energy_joules)
      .Bind(18, a.oom_kills).Bind(19, a.gpu_util_max_percent).Bind(20, a.gpu_memory_max_bytes);
}
}  // namespace

std::future<void> SqliteStore::SaveAttempt(AttemptRow a) {
  auto p = std::make_shared<std::promise<void>>();
  Enqueue(
      [a = std::move(a)](sqlite3* db) {
        Stmt s(db, kInsertAttempt, kCache);
        BindAttempt(s, a);
        s.Step();
      },
      [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); });
  return p->get_future();
}

namespace {
const char* const kInsertStep =
    "INSERT OR REPLACE INTO steps(job_id, step_id, name, ntasks, nodes, uid, user, state, exit_code, start_time,"
    " end_time, cpu_usec, max_rss_bytes) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)";
void BindStep(Stmt& s, const StepRow& r) {
  s.Bind(1, r.job_id).Bind(2, r.step_id).BindText(3, r.name).Bind(4, r.ntasks).BindText(5, r.nodes).Bind(6, r.uid)
      .BindText(7, r.user).BindText(8, r.state).Bind(9, r.exit_code).Bind(10, r.start_time).Bind(11, r.end_time)
      .Bind(12, r.cpu_usec).Bind(13, r.max_rss_bytes);
}
}  // namespace

std::future<void> SqliteStore::SaveStep(StepRow r) {
  auto p = std::make_shared<std::promise<void>>();
  Enqueue(
      [r = std::move(r)](sqlite3* db) {
        Stmt s(db, kInsertStep, kCache);
        BindStep(s, r);
        s.Step();
      },
      [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); });
  return p->get_future();
}

std::vector<StepRow> SqliteStore::LoadSteps(const std::vector<int64_t>& job_ids, size_t limit) {
  std::lock_guard lk(rmu_);
  Stmt s(rdb_,
         "SELECT job_id, step_id, name, ntasks, nodes, uid, user, state, exit_code, start_time, end_time, cpu_usec,"
         " max_rss_bytes FROM steps"
         " WHERE job_id=? ORDER BY step_id");
  std::vector<StepRow> out;
  for (int64_t id : job_ids) {
    s.Reset();
    s.Bind(1, id);
    while (out.size() < limit && s.Step()) {
      StepRow r;
      r.job_id = s.Int(0);
      r.step_id = static_cast<int32_t>(s.Int(1));
      r.name = s.Blob(2);
      r.ntasks = static_cast<int32_t>(s.Int(3));
      r.nodes = s.Blob(4);
      r.uid = static_cast<uint32_t>(s.Int(5));
      r.user = s.Blob(6);
      r.state = s.Blob(7);
      r.exit_code = static_cast<int32_t>(s.Int(8));
      r.start_time = s.Int(9);
      r.end_time = s.Int(10);
      r.cpu_usec = s.Int(11);
      r.max_rss_bytes = s.Int(12);
      out.push_back(std::move(r));
    }
  }
  return out;
}

std::future<int64_t> SqliteStore::PurgeFinished(int64_t cutoff, int64_t max_jobs) {
  auto p = std::make_shared<std::promise<int64_t>>();
  auto purged = std::make_shared<int64_t>(0);
  Enqueue(
      [cutoff, max_jobs, purged](sqlite3* db) {
        Exec(db, "CREATE TEMP TABLE IF NOT EXISTS purge_ids (id INTEGER PRIMARY KEY); DELETE FROM purge_ids;");
        Stmt pick(db,
                  "INSERT INTO purge_ids SELECT id FROM jobs WHERE end_time > 0 AND end_time < ? AND state IN "
                  "('COMPLETED','FAILED','CANCELLED','TIMEOUT') ORDER BY end_time LIMIT ?");
        pick.Bind(1, cutoff).Bind(2, max_jobs).Step();
        Exec(db,
             "DELETE FROM attempts WHERE job_id IN (SELECT id FROM purge_ids);"
             "DELETE FROM events WHERE job_id IN (SELECT id FROM purge_ids);"
             "DELETE FROM steps WHERE job_id IN (SELECT id FROM purge_ids);"
             "DELETE FROM jobs WHERE id IN (SELECT id FROM purge_ids);");
        *purged = sqlite3_changes(db);
        Exec(db, "DELETE FROM purge_ids;");
      },
      [p, purged](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(*purged); });
  return p->get_future();
}

std::future<void> SqliteStore::SaveUsage(std::map<std::string, double> usage, int64_t accrued_until) {
  auto p = std::make_shared<std::promise<void>>();
  Enqueue(
      [usage = std::move(usage), accrued_until](sqlite3* db) {
        Exec(db, "DELETE FROM usage; DELETE FROM usage_clock;");
        Stmt ins(db, "INSERT INTO usage(key, value) VALUES (?, ?)");
        for (const auto& [k, v] : usage) {
          ins.Reset();
          ins.BindText(1, k).BindDouble(2, v);
          ins.Step();
        }
        Stmt(db, "INSERT INTO usage_clock(accrued_until) VALUES (?)").Bind(1, accrued_until).Step();
      },
      [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); });
  return p->get_future();
}

int64_t SqliteStore::LoadUsage(std::map<std::string, double>* usage) {
  std::lock_guard lk(rmu_);
  usage->clear();
  Stmt s(rdb_, "SELECT key, value FROM usage");
  while (s.Step()) (*usage)[s.Blob(0)] = s.Double(1);
  Stmt c(rdb_, "SELECT COALESCE(MAX(accrued_until), 0) FROM usage_clock");
  c.Step();
  return c.Int(0);
}

std::future<void> SqliteStore::SaveRuntimes(std::string key, std::vector<int64_t> runs) {
  std::string text;
  for (int64_t r : runs) text += (text.empty() ? "" : ",") + std::to_string(r);
  auto p = std::make_shared<std::promise<void>>();
  Enqueue(
      [key = std::move(key), text = std::move(text)](sqlite3* db) {
        if (text.empty()) Stmt(db, "DELETE FROM runtime_history WHERE user = ?").BindText(1, key).Step();
        else
          Stmt(db, "INSERT OR REPLACE INTO runtime_history(user, runs) VALUES (?, ?)")
              .BindText(1, key).BindText(2, text).Step();
      },
      [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); });
  return p->get_future();
}

std::vector<std::pair<std::string, std::vector<int64_t>>> SqliteStore::LoadRuntimes() {
  std::lock_guard lk(rmu_);
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  // INSERT OR REPLACE gives a saved row a new, largest rowid: rowid order is the order of saves.
  Stmt s(rdb_, "SELECT user, runs FROM runtime_history ORDER BY rowid");
  while (s.Step()) {
    out.emplace_back(s.Blob(0), std::vector<int64_t>{});
    std::vector<int64_t>& runs = out.back().second;
    const std::string text = s.Blob(1);
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = text.find(',', pos);
      if (end == std::string::npos) end = text.size();
      try {
        runs.push_back(std::stoll(text.substr(pos, end - pos)));
      } catch (const std::exception&) {  // a damaged entry is skipped: the history is advisory
      }
      pos = end + 1;
    }
  }
  return out;
}

std::vector<AttemptRow> SqliteStore::LoadAttempts(int64_t start, int64_t end) {
  std::lock_guard lk(rmu_);
  Stmt s(rdb_,
         "SELECT job_id, attempt, start_time, end_time, outcome, ntasks, cpu_millis, gpus, gpu_type, pool, nodes,"
         " lost_work_s, cpu_usec, max_rss_bytes, gpu_seconds, gpu_busy_seconds, gpu_energy_joules, oom_kills,"
         " gpu_util_max, gpu_memory_max_bytes FROM attempts WHERE start_time < ? AND (end_time = 0 OR end_time >= ?) ORDER BY job_id, attempt");
  s.Bind(1, end).Bind(2, start);
  std::vector<AttemptRow> out;
  while (s.Step()) {
    AttemptRow a;
    a.job_id = s.Int(0);
    a.attempt = static_cast<int32_t>(s.Int(1));
    a.start_time = s.Int(2);
    a.end_time = s.Int(3);
    a.outcome = s.Blob(4);
    a.ntasks = static_cast<int32_t>(s.Int(5));
    a.cpu_millis = s.Int(6);
    a.gpus = s.Int(7);
    a.gpu_type = s.Blob(8);
    a.pool = s.Blob(9);
    a.nodes = s.Blob(10);
    a.lost_work_s = s.Int(11);
    a.cpu_usec = s.Int(12);
    a.max_rss_bytes = s.Int(13);
    a.gpu_seconds = s.Double(14);
    a.gpu_busy_seconds = s.Double(15);
    a.gpu_energy_joules = s.Double(16);
    a.oom_kills = s.Int(17);
    a.gpu_util_max_percent = static_cast<int32_t>(s.Int(18));
    a.gpu_memory_max_bytes = s.Int(19);
    out.push_back(std::move(a));
  }
  return out;
}

std::vector<JobRow> SqliteStore::LoadJobs(int64_t finished_since) {
  std::lock_guard lk(rmu_);
  std::string sql = std::string("SELECT ") + kJobColumns +
                    " FROM jobs WHERE state NOT IN ('COMPLETED','FAILED','CANCELLED','TIMEOUT') OR end_time >= ? "
                    "ORDER BY id";
  Stmt s(rdb_, sql.c_str());
  s.Bind(1, finished_since);
  std::vector<JobRow> out;
  while (s.Step()) out.push_back(ReadJob(s));
  return out;
}

std::optional<int64_t> SqliteStore::LookupSubmission(const std::string& user, uint32_t uid, const std::string& key) {
  std::lock_guard lk(rmu_);
  Stmt s(rdb_, "SELECT job_id FROM submissions WHERE user=? AND uid=? AND key=?");
  s.BindText(1, user).Bind(2, uid).BindText(3, key);
  if (!s.Step()) return std::nullopt;
  return s.Int(0);
}

std::optional<JobRow> SqliteStore::LoadJob(int64_t id) {
  std::lock_guard lk(rmu_);
  std::string sql = std::string("SELECT ") + kJobColumns + " FROM jobs WHERE id=?";
  Stmt s(rdb_, sql.c_str());
  s.Bind(1, id);
  if (!s.Step()) return std::nullopt;
  return ReadJob(s);
}

std::vector<JobRow> SqliteStore::LoadFinishedJobs(int64_t start, int64_t end) {
  std::lock_guard lk(rmu_);
  std::string sql = std::string("SELECT ") + kJobColumns + " FROM jobs WHERE end_time >= ? AND end_time < ? ORDER BY id";
  Stmt s(rdb_, sql.c_str());
  s.Bind(1, start).Bind(2, end);
  std::vector<JobRow> out;
  while (s.Step()) out.push_back(ReadJob(s));
  return out;
}

std::vector<JobRow> SqliteStore::LoadFinishedJobsPage(int64_t since, int64_t after_id, size_t limit,
                                                      const FinishedFilter& filter) {
  std::lock_guard lk(rmu_);
  // end_time > 0 for every final state (EndAttempt sets it); live jobs have 0. A user filter
  // uses the index jobs_by_user_end (one user's month among a million jobs: milliseconds).
  auto applied = [](const std::vector<std::string>& names) {
    return !names.empty() && names.size() <= FinishedFilter::kMaxFilterNames;
  };
  auto marks = [](size_t n) {
    std::string m;
    for (size_t i = 0; i < n; ++i) m += i ? ",?" : "?";
    return m;
  };
  std::string sql = std::string("SELECT ") + kJobColumns +
                    " FROM jobs WHERE id > ? AND end_time > 0 AND end_time >= ? AND state IN "
                    "('COMPLETED','FAILED','CANCELLED','TIMEOUT')";
  if (applied(filter.users)) sql += " AND user IN (" + marks(filter.users.size()) + ")";
  // Unary +: the state is checked row by row, never chosen as the index (jobs_by_state would
  // walk every FAILED job of every user).
  if (applied(filter.states)) sql += " AND +state IN (" + marks(filter.states.size()) + ")";
  sql += " ORDER BY id LIMIT ?";
  Stmt s(rdb_, sql.c_str());
  s.Bind(1, after_id).Bind(2, since);
  int i = 3;
  if (applied(filter.users))
    for (const auto& u : filter.users) s.BindText(i++, u);
  if (applied(filter.states))
    for (const auto& st : filter.states) s.BindText(i++, st);
  s.Bind(i, static_cast<int64_t>(limit));
  std::vector<JobRow> out;
  while (s.Step()) out.push_back(ReadJob(s));
  return out;
}

std::vector<NodeRow> SqliteStore::LoadNodes() {
  std::lock_guard lk(rmu_);
  Stmt s(rdb_, "SELECT name, info, drained, reason FROM nodes ORDER BY name");
  std::vector<NodeRow> out;
  while (s.Step()) out.push_back(NodeRow{s.Blob(0), s.Blob(1), s.Int(2) != 0, s.Blob(3)});
  return out;
}

std::optional<std::string> SqliteStore::LoadSpec(int64_t id) {
  std::lock_guard lk(rmu_);
  Stmt s(rdb_, "SELECT spec FROM jobs WHERE id=?", kCache);
  s.Bind(1, id);
  if (!s.Step()) return std::nullopt;
  return s.Blob(0);
}

std::future<void> SqliteStore::ImportHistory(std::vector<ArchivedJob> jobs, std::vector<EventRow> events,
                                             std::string stream, std::string cursor) {
  auto p = std::make_shared<std::promise<void>>();
  Enqueue(
      [jobs = std::move(jobs), events = std::move(events), stream = std::move(stream),
       cursor = std::move(cursor)](sqlite3* db) {
        Stmt j(db,
               "INSERT OR REPLACE INTO jobs(id, spec, user, uid, gid, state, reason, submit_time, start_time, end_time,"
               " exit_code, attempt, requeue_count, placement, preempt_count, evictions, image_digest, usage)"
               " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)");
        Stmt a(db, kInsertAttempt);
        Stmt st(db, kInsertStep);
        for (const auto& [r, attempts, steps] : jobs) {
          for (const auto& x : steps) {
            st.Reset();
            BindStep(st, x);
            st.Step();
          }
          j.Reset();
          j.Bind(1, r.id).Bind(2, r.spec).BindText(3, r.user).Bind(4, r.uid).Bind(5, r.gid).BindText(6, r.state)
              .BindText(7, r.reason).Bind(8, r.submit_time).Bind(9, r.start_time).Bind(10, r.end_time)
              .Bind(11, r.exit_code).Bind(12, r.attempt).Bind(13, r.requeue_count).Bind(14, r.placement)
              .Bind(15, r.preempt_count).Bind(16, r.evictions).BindText(17, r.image_digest).Bind(18, r.usage);
          j.Step();
          for (const auto& x : attempts) {
            a.Reset();
            BindAttempt(a, x);
            a.Step();
          }
        }
        Stmt e(db, "INSERT INTO events(time, job_id, node, kind, detail) VALUES (?,?,?,?,?)");
        for (const auto& ev : events) {
          e.Reset();
          e.Bind(1, ev.time).Bind(2, ev.job_id).BindText(3, ev.node).BindText(4, ev.kind).BindText(5, ev.detail);
          e.Step();
        }
        Stmt c(db, "INSERT OR REPLACE INTO history_cursor(stream, cursor) VALUES (?,?)");
        c.BindText(1, stream).BindText(2, cursor).Step();
      },
      [p](std::exception_ptr e) { e ? p->set_exception(e) : p->set_value(); });
  return p->get_future();
}

std::string SqliteStore::HistoryCursor(const std::string& stream) {
  std::lock_guard lk(rmu_);
  Stmt s(rdb_, "SELECT cursor FROM history_cursor WHERE stream=?");
  s.BindText(1, stream);
  if (!s.Step()) return "";
  return s.Blob(0);
}

}  // namespace mlsched::server
