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

#include "schedd/server/sqlite_stmt.h"
#include "schedd/server/store_schema.h"

namespace mlsched::server {
namespace {

using namespace sqlite;  // Check, Exec, Stmt, ReadJob (sqlite_stmt.h)

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

}  // namespace mlsched::server
